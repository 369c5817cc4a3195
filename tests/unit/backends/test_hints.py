"""backends/hints.py: one row per observed probe failure, each naming its
cause and its fix (issue 30: the hint said "user namespaces are probably
disabled" whatever the failure was)."""
from __future__ import annotations

import pytest

from agent_sandbox.backends.hints import RULES, Facts, explain

BWRAP = Facts("bwrap", "/usr/bin/bwrap", "bubblewrap 0.4.1", "15000", "", "0")
FIREJAIL = Facts("firejail", "/usr/bin/firejail", "firejail version 0.9.64.4", "15000", "", "0")

ROWS = [
    # (rule, output, facts, words of the cause, words of the fix)
    ("missing-library",
     "firejail: error while loading shared libraries: libapparmor.so.1: cannot open shared "
     "object file: No such file or directory", FIREJAIL,
     ["/usr/bin/firejail cannot start", "libapparmor.so.1 is missing"],
     ["apt-get install libapparmor1", "the next launch probes again"]),
    ("unknown-option", "bwrap: Unknown option --disable-userns", BWRAP,
     ["bubblewrap 0.4.1 is too old for --disable-userns", "0.8.0 or newer has it"],
     ["BWRAP_PATH", "supports bubblewrap 0.4.0 and newer"]),
    ("unknown-option", "Error: invalid --restrict-namespaces command line option", FIREJAIL,
     ["firejail version 0.9.64.4 is too old for --restrict-namespaces", "0.9.72"],
     ["FIREJAIL_PATH", "firejail 0.9.64"]),
    ("unknown-option", "unshare: unrecognized option '--map-current-user'\n"
     "Try 'unshare --help' for more information.", BWRAP,
     ["util-linux's unshare is too old for --map-current-user", "2.35 or newer"],
     ["PRIVATE_MOUNTS=true needs", "util-linux 2.35"]),
    ("max-user-namespaces", "bwrap: No permissions to creating new namespace",
     BWRAP._replace(max_user_namespaces="0"),
     ["user.max_user_namespaces=0"], ["sysctl user.max_user_namespaces=15000"]),
    ("unprivileged-userns-clone", "bwrap: No permissions to creating new namespace",
     BWRAP._replace(unprivileged_userns_clone="0"),
     ["kernel.unprivileged_userns_clone=0"], ["kernel.unprivileged_userns_clone=1"]),
    ("apparmor-userns", "bwrap: setting up uid map: Permission denied",
     BWRAP._replace(apparmor_restrict="1"),
     ["AppArmor restricts unprivileged user namespaces", "/usr/bin/bwrap"],
     ["AppArmor profile", "bwrap-userns-restrict"]),
    ("firejail-users", "Error: the user is not allowed to use Firejail. Please add the user "
     "in /etc/firejail/firejail.users file, either by running \"sudo firecfg\", or by editing "
     "the file directly.\n", FIREJAIL,
     ["firejail does not allow this user"], ["/etc/firejail/firejail.users"]),
    ("no-permission-userns", "bwrap: No permissions to creating new namespace, likely because "
     "the kernel does not allow non-privileged user namespaces.", BWRAP,
     ["/usr/bin/bwrap may not make a user namespace here"],
     ["allow unprivileged user namespaces"]),
]


@pytest.mark.parametrize("rule, output, facts, cause_words, fix_words", ROWS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ROWS)])
def test_each_row_names_the_cause_and_the_fix(rule, output, facts, cause_words, fix_words):
    name, cause, fix = explain(output, facts)
    assert name == rule
    for words in cause_words:
        assert words in cause
    for words in fix_words:
        assert words in fix


def test_every_rule_has_a_row():
    assert {r.name for r in RULES} == {row[0] for row in ROWS}


def test_the_sysctl_rows_do_not_blame_userns_for_firejail():
    """firejail is setuid: the userns sysctls are not why it failed."""
    name, cause, _ = explain("Error: something else", FIREJAIL._replace(max_user_namespaces="0"))
    assert name == "" and cause == "Error: something else"


def test_an_unknown_failure_keeps_the_programs_last_line():
    assert explain("first\nbwrap: odd failure\n", BWRAP) == ("", "bwrap: odd failure", "")
