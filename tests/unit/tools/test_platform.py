"""Unit tests of doctor's platform lines (tools/platform.py), the pip --user
refusal (tools/usersite.py), the join interpreter's rule (jobs/join.py)
and the entry script userinstall writes: os-release parsing, install kind and
what an install lacks, from injected facts."""
from __future__ import annotations

import pytest

from agent_sandbox.cli.userinstall import entry_script, join_mode
from agent_sandbox.jobs.join import join_python_usable
from agent_sandbox.tools.platform import (InstallFacts, distribution, install_kind, lacks,
                                          package_manager, parse_os_release)
from agent_sandbox.tools.usersite import user_site_refusal

ROCKY = '''NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
# a comment
BROKEN LINE
lower=ignored
'''
SLES = 'NAME="SLES"\nVERSION_ID="15.5"\nID="sles"\nID_LIKE="suse"\nPRETTY_NAME="SUSE Linux Enterprise Server 15 SP5"\n'
UBUNTU = "ID=ubuntu\nID_LIKE=debian\nVERSION_ID='24.04'\nNAME=\"Ubuntu\"\n"


def test_os_release_is_parsed_with_quotes_escapes_and_junk():
    release = parse_os_release(ROCKY + 'HOME_URL="https://x/\\"q\\""\n')
    assert release["ID"] == "rocky" and release["VERSION_ID"] == "9.4"
    assert release["ID_LIKE"] == "rhel centos fedora"
    assert release["HOME_URL"] == 'https://x/"q"'
    assert "lower" not in release and "BROKEN LINE" not in release
    assert parse_os_release(UBUNTU)["VERSION_ID"] == "24.04"


def test_the_distribution_line_and_its_package_manager():
    assert distribution(parse_os_release(ROCKY)) == \
        "Rocky Linux 9.4 (Blue Onyx) (rocky; like rhel centos fedora)"
    assert distribution({}) == "unknown (no /etc/os-release)"
    assert distribution({"NAME": "Foo", "VERSION_ID": "1"}) == "Foo 1"
    assert package_manager(parse_os_release(ROCKY)) == "dnf"
    assert package_manager(parse_os_release(SLES)) == "zypper"
    assert package_manager(parse_os_release(UBUNTU)) == "apt"
    assert package_manager({"ID": "gentoo"}) is None


def facts(package_dir="/home/u/venv/lib/python3.11/site-packages/agent_sandbox",
          prefix="/home/u/venv", base="/usr", prefix_uid=1000, pyvenv="home = /usr/bin\n",
          entry="#!/home/u/venv/bin/python", man=(), join=None, uid=1000,
          user_site="/home/u/.local/lib/python3.11/site-packages") -> InstallFacts:
    return InstallFacts(package_dir, prefix, base, prefix_uid, user_site, pyvenv, entry,
                        man, join, uid)


@pytest.mark.parametrize("kwargs, kind", [
    ({}, "venv"),
    ({"prefix": "/opt/agent-sandbox/venv", "prefix_uid": 0,
      "package_dir": "/opt/agent-sandbox/venv/lib/python3.11/site-packages/agent_sandbox"},
     "site"),
    ({"prefix": "/home/u/.local/share/pipx/venvs/agent-sandbox",
      "package_dir": "/home/u/.local/share/pipx/venvs/agent-sandbox/lib/python3.11/"
                     "site-packages/agent_sandbox"}, "pipx"),
    ({"prefix": "/home/u/.local/share/uv/tools/agent-sandbox",
      "package_dir": "/home/u/.local/share/uv/tools/agent-sandbox/lib/python3.11/"
                     "site-packages/agent_sandbox"}, "uv"),
    ({"pyvenv": "home = /usr/bin\nuv = 0.5.1\n"}, "uv"),       # a uv venv anywhere
    ({"prefix": "/usr", "package_dir": "/home/u/.local/lib/python3.11/site-packages/"
                                       "agent_sandbox"}, "user site"),
    ({"prefix": "/usr", "package_dir": "/usr/local/lib/python3.11/dist-packages/"
                                       "agent_sandbox"}, "system"),
    ({"package_dir": "/home/u/src/agent-sandbox/agent_sandbox"}, "source"),
])
def test_the_install_kind_from_where_the_package_lies(kwargs, kind):
    assert install_kind(facts(**kwargs)) == kind


def test_a_plain_venv_lacks_the_entry_the_man_page_and_the_join_interpreter():
    missing = lacks(facts(), "venv", "/home/u/venv/bin/python")
    assert [m.what.split(" (")[0] for m in missing] == [
        "the isolated entry script", "the man page",
        "the execute-only join interpreter"]
    assert all(m.fix == "/home/u/venv/bin/python -m agent_sandbox.cli.userinstall"
               for m in missing)
    assert "PYTHONPATH" in missing[0].consequence
    assert "firejail" in missing[2].consequence


def test_a_completed_install_lacks_nothing():
    done = facts(entry="#!/home/u/venv/bin/python -IS", man=("/x/man1/agent-sandbox.1",),
                 join=(1000, 0o100))
    assert lacks(done, "venv", "python") == []
    root = facts(entry="#!/opt/a/venv/bin/python -IS", man=("/m",), join=(0, 0o711),
                 prefix_uid=0)
    assert lacks(root, "site", "python") == []
    # A site install without its join interpreter is fixed by install.sh, not by the user.
    assert lacks(root._replace(join=None), "site", "python")[0].fix == \
        "scripts/install.sh (as root)"
    assert {m.fix for m in lacks(facts(prefix="/usr", entry=""), "system", "python")} == \
        {"scripts/install.sh (as root)"}


def test_a_user_site_install_lacks_a_usable_install():
    (missing,) = lacks(facts(), "user site", "/usr/bin/python3")
    assert "refused" in missing.consequence and "venv" in missing.fix


@pytest.mark.parametrize("owner, mode, usable", [
    (0, 0o711, True), (1000, 0o100, True),
    (0, 0o755, False),          # readable: dumpable from its exec
    (1000, 0o700, False),       # its owner can read it
    (1000, 0o111, False),       # only the shapes the installers write
    (1001, 0o100, False),       # another user's
    (0, 0o4711, False),         # setuid: never
])
def test_the_join_interpreter_rule(owner, mode, usable):
    assert join_python_usable(owner, mode, 1000) is usable


def test_userinstall_writes_what_the_rule_accepts():
    assert join_python_usable(1000, join_mode(1000), 1000)
    assert join_python_usable(0, join_mode(0), 1000)


def test_the_entry_script_is_isolated_and_names_its_site_packages():
    text = entry_script("/home/u/venv", "/home/u/venv/lib/python3.11/site-packages")
    lines = text.splitlines()
    assert lines[0] == "#!/home/u/venv/bin/python -IS"
    assert "sys.path.append('/home/u/venv/lib/python3.11/site-packages')" in lines
    assert lines[-1] == "exit_now(main())"
    assert lacks(facts(entry=lines[0], man=("m",), join=(1000, 0o100)), "venv", "p") == []


def test_a_launch_from_the_user_site_is_refused_with_what_why_and_fix():
    site = "/home/u/.local/lib/python3.11/site-packages"
    reason = user_site_refusal(f"{site}/agent_sandbox", site)
    assert reason.startswith("this agent-sandbox was installed with pip --user — ")
    assert "python -I" in reason and "venv" in reason and reason.endswith("not run.")
    assert user_site_refusal("/home/u/venv/lib/python3.11/site-packages/agent_sandbox",
                             site) is None
    assert user_site_refusal(f"{site}/agent_sandbox", "") is None      # no user site


def test_write_entry_finds_the_venvs_site_packages_on_every_python(tmp_path):
    """sysconfig's "venv" scheme is Python 3.11's: on 3.9 and 3.10 userinstall
    died with KeyError: 'venv' (Debian 11's user install; issue 30)."""
    import sys

    from agent_sandbox.cli.userinstall import write_entry
    (tmp_path / "bin").mkdir()
    text = open(write_entry(str(tmp_path))).read()
    version = "%d.%d" % sys.version_info[:2]
    assert f"sys.path.append({str(tmp_path / 'lib' / ('python' + version) / 'site-packages')!r})" \
        in text
