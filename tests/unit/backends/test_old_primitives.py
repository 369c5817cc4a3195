"""Issue 30: the plans compiled for the installed program's version —
bubblewrap 0.4.0 and newer, firejail 0.9.64 and newer (base.Features from
their --version and --help) — and the admin keys naming the program."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from agent_sandbox.backends import BACKENDS, Unavailable, bwrap, firejail, select
from agent_sandbox.backends.base import Features, PlanContext, parse_features
from agent_sandbox.errors import PolicyError
from agent_sandbox.policy.view import Data, Symlink
from tests.support.plans import PLAN_HOME, plan_for, policy_for, rows

pytestmark = pytest.mark.home(**PLAN_HOME)     # the `home` fixture's layout

BWRAP_041_HELP = """usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]

    --help                       Print this help
    --unshare-user               Create new user namespace (may be automatically implied if not setuid)
    --ro-bind-data FD DEST       Copy from FD to file which is readonly bind-mounted on DEST
    --json-status-fd FD          Write container status to FD as multiple JSON documents
    --die-with-parent            Kills with SIGKILL child process (COMMAND) when bwrap or bwrap's parent dies.
"""
BWRAP_041 = parse_features("bubblewrap 0.4.1\n", BWRAP_041_HELP)
BWRAP_080 = parse_features("bubblewrap 0.8.0\n", BWRAP_041_HELP
                           + "    --disable-userns  Disable further use of user namespaces\n"
                           + "    --perms OCTAL     Set permissions of next argument\n")
FIREJAIL_064 = parse_features("firejail version 0.9.64.4\n\nCompile time support:\n",
                              "    --keep-var-tmp - /var/tmp directory is untouched.\n")
FIREJAIL_072 = parse_features("firejail version 0.9.72\n", "")


def test_features_parse_the_version_and_the_options():
    assert BWRAP_041.version == (0, 4, 1) and BWRAP_041.text == "bubblewrap 0.4.1"
    assert "--ro-bind-data" in BWRAP_041.options and "--perms" not in BWRAP_041.options
    assert FIREJAIL_064.version == (0, 9, 64)
    assert "--keep-var-tmp" in FIREJAIL_064.options
    assert parse_features("", "") == Features((), frozenset(), "")


def test_an_option_is_there_by_help_or_by_version():
    assert not BWRAP_041.has("--perms", (0, 5, 0))
    assert BWRAP_080.has("--perms", (0, 5, 0))
    assert Features((0, 6, 1), frozenset(), "").has("--perms", (0, 5, 0))   # help left it out
    assert not Features((), frozenset(), "").has("--perms", (0, 5, 0))


@pytest.mark.parametrize("features, disable_userns, perms", [
    (None, True, True), (BWRAP_080, True, True), (BWRAP_041, False, False),
    (parse_features("bubblewrap 0.6.1", ""), False, True)])      # Ubuntu 22.04
def test_the_bwrap_plan_uses_only_what_the_installed_version_has(home, features,
                                                                 disable_userns, perms):
    plan = plan_for("bwrap", policy_for(home), features=features)
    argv = [a for a in plan.argv if isinstance(a, str)]
    assert ("--disable-userns" in argv) == disable_userns
    assert ("--perms" in argv) == perms
    assert ("--disable-userns" in bwrap.probe_argv("/b", features)) == disable_userns
    assert bwrap.needs_userns_filter(features) == (not disable_userns)
    assert any("no --perms (0.5.0)" in n for n in plan.notes) == (not perms)


def test_without_perms_the_stub_is_a_link_to_the_session_directorys(tmp_path):
    ops = bwrap._without_perms([Data("stub", "/run/agent-sandbox/bin/.stub", 0o755),
                                Data("marker", "/run/agent-sandbox/session", 0o444)])
    assert ops[0] == Symlink("/run/agent-sandbox/chaperon/bin/.stub",
                             "/run/agent-sandbox/bin/.stub")
    assert ops[1].kind == "ro-data"


def test_a_bwrap_without_disable_userns_says_so_when_seccomp_is_off(home):
    """The filter stands in for --disable-userns: without it nothing refuses
    nested user namespaces, and the report says so."""
    old = dict(plan_for("bwrap", policy_for(home, "SECCOMP=false\n"), features=BWRAP_041).cannot)
    assert "nested user namespaces are allowed" in old["seccomp"]
    assert "bubblewrap 0.4.1 has no --disable-userns" in old["seccomp"]
    new = dict(plan_for("bwrap", policy_for(home, "SECCOMP=false\n"), features=BWRAP_080).cannot)
    assert "nested" not in new["seccomp"]
    assert rows(plan_for("bwrap", policy_for(home), features=BWRAP_041))["seccomp"] == "yes"


def test_a_bwrap_older_than_0_4_is_refused_naming_the_version(home):
    features = parse_features("bubblewrap 0.3.3", "")
    with pytest.raises(PolicyError) as refusal:
        bwrap.refuse(policy_for(home), context=PlanContext("/opt/old/bwrap", features=features))
    assert "bubblewrap 0.3.3 is too old" in str(refusal.value)
    assert "0.4.0 or newer" in str(refusal.value) and "BWRAP_PATH" in str(refusal.value)


@pytest.mark.parametrize("features, missing", [
    (FIREJAIL_064, {"--tab", "--keep-fd=all", "--restrict-namespaces"}),
    (FIREJAIL_072, set()), (None, set())])
def test_the_firejail_plan_uses_only_what_the_installed_version_has(home, features, missing):
    plan = plan_for("firejail", policy_for(home, backend="firejail"), features=features)
    argv = {a for a in plan.argv if isinstance(a, str)}
    assert not missing & argv
    assert set(firejail.FIXED) - missing <= argv
    assert not missing & set(firejail.probe_argv("/f", features))
    assert firejail.needs_userns_filter(features) == bool(missing)


def test_a_firejail_older_than_0_9_64_is_refused_naming_the_version(home):
    with pytest.raises(PolicyError, match="firejail version 0.9.62 is too old.*0.9.64 or newer"):
        plan_for("firejail", policy_for(home, backend="firejail"),
                 features=parse_features("firejail version 0.9.62", ""))


def _program(directory, name="bwrap", mode=0o755):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n")
    os.chmod(path, mode)
    return path


def test_a_candidate_the_user_can_write_is_named(tmp_path):
    """Issue 30: a bwrap in ~/.local/bin was skipped silently and doctor said
    "not found on PATH"."""
    mine = _program(str(tmp_path / "bin"))
    path, why = BACKENDS["bwrap"].locate(str(tmp_path / "bin"))
    assert path is None
    assert mine in why and "you can write it" in why and "BWRAP_PATH" in why
    with pytest.raises(Unavailable, match="you can write it"):
        select("bwrap", ("bwrap",), find=lambda n: (None, why), probe=lambda n, p: (True, ""))


def test_the_admin_key_names_the_program_and_a_writable_one_is_refused(tmp_path):
    mine = _program(str(tmp_path / "mine"))
    path, why = BACKENDS["bwrap"].locate("/usr/bin", configured=mine)
    assert path is None and f"BWRAP_PATH={mine} is writable by you" in why
    path, why = BACKENDS["bwrap"].locate("/nowhere", configured="/bin/true")
    assert (path, why) == ("/bin/true", "")
    path, why = BACKENDS["firejail"].locate("/usr/bin", configured="/no/such/firejail")
    assert path is None and "FIREJAIL_PATH=/no/such/firejail" in why


def test_the_userns_rule_refuses_nested_user_namespaces_and_keeps_fork_and_threads():
    """USERNS_DENY, loaded for real: unshare(CLONE_NEWUSER) and
    clone(CLONE_NEWUSER) answer EPERM, clone3 ENOSYS (libc falls back to
    clone for threads and fork, which still work)."""
    from agent_sandbox.policy.seccomp import compile_filter, deny_list

    bpf = compile_filter(deny_list(no_user_namespaces=True))
    script = textwrap.dedent("""
        import ctypes, os, sys, threading
        sys.path.insert(0, sys.argv[1])
        from sandbox_exec import load_seccomp
        load_seccomp(open(sys.argv[2], "rb").read())
        libc = ctypes.CDLL(None, use_errno=True)
        out = []
        out.append(libc.unshare(0x10000000) == -1 and ctypes.get_errno())
        out.append(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0) == -1 and ctypes.get_errno())
        out.append(libc.syscall(435, 0, 0) == -1 and ctypes.get_errno())
        out.append(libc.unshare(0) == 0)                    # no CLONE_NEWUSER: allowed
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        out.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        print(out)
    """)
    import errno
    import tempfile

    with tempfile.NamedTemporaryFile() as handle:
        handle.write(bpf)
        handle.flush()
        from agent_sandbox.paths import HELPER_DIR

        result = subprocess.run([sys.executable, "-c", script, HELPER_DIR,
                                 handle.name], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([errno.EPERM, errno.EPERM, errno.ENOSYS, True, 7])


def test_a_cached_selections_features_answer_without_methods():
    """A plan-cache hit brings the selection's Features back as a record (no
    methods): a job step joining a held sandbox asked `features.has` of it and
    died with AttributeError (CI, tests/adversarial/test_chaperon_input_variables)."""
    from agent_sandbox.backends import bwrap, firejail
    from agent_sandbox.backends.base import Features
    from agent_sandbox.plancache.plans import _record

    stored = Features((0, 4, 1), frozenset({"--bind"}), "bubblewrap 0.4.1")
    record = _record("agent_sandbox.backends.base:Features", Features._fields)(stored)
    assert not hasattr(record, "has")
    assert bwrap.needs_userns_filter(record) is True
    assert bwrap.supports(record, "--perms") is False
    new = _record("agent_sandbox.backends.base:Features", Features._fields)(
        Features((0, 9, 72), frozenset(), "firejail version 0.9.72"))
    assert firejail.supports(new, "--keep-fd") and not firejail.needs_userns_filter(new)
