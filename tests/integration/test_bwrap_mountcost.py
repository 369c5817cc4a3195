"""The cheaper bwrap plan (policy/mountcost.py), for real: what a left-out
or moved mount used to guarantee still holds inside, as the unprivileged test
user on this kernel.

- The install dir is no longer bound onto itself below the read-only /opt
  (when the install lies there): it is still read-only and nosuid inside.
- The user config tree granted twice in read mode is bound once: still
  read-only.
- /sys, moved to the end of the plan, still shows every one of its host
  submounts read-only.
The mount flags are read inside with statvfs and /proc/self/mountinfo: the
files are root's, so a failed write alone would prove nothing.
"""
from __future__ import annotations

import json
import os

from agent_sandbox.paths import is_within
from tests.conftest import PREFIX

FLAGS_SCRIPT = """
import json, os, sys
out = {}
for path in sys.argv[1:]:
    flags = os.statvfs(path).f_flag
    out[path] = [bool(flags & os.ST_RDONLY), bool(flags & os.ST_NOSUID)]
mounts = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    mounts[fields[4]] = "ro" in fields[5].split(",")
out["mountinfo"] = mounts
print(json.dumps(out))
"""


def _mounts(dry_run: str) -> list[list[str]]:
    """The dry run's "mounts in order" section: [kind, rest of the line]."""
    mounts = []
    for line in dry_run.split("mounts in order", 1)[1].splitlines()[1:]:
        if not line.startswith("  "):
            break
        mounts.append(line.split(None, 1))
    return mounts


def _inside(user, project, *paths, **env) -> dict:
    result = user.sandbox("/usr/bin/python3", "-c", FLAGS_SCRIPT, *paths, cwd=project,
                          env=user.env(SANDBOX_BACKEND="bwrap", **env))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _dry_run(user, project, **env) -> list:
    result = user.sandbox("true", options=["--dry-run"], cwd=project,
                          env=user.env(SANDBOX_BACKEND="bwrap", **env))
    assert result.returncode == 0, result.stderr
    return _mounts(result.stdout)


def test_the_install_dir_stays_read_only_without_its_own_bind(user, project):
    mounts = _dry_run(user, project)
    venv = os.path.realpath(f"{PREFIX}/venv")
    parent = [m for m in mounts if m[0] == "ro-bind" and is_within(venv, m[1].split()[0])
              and "(from" not in m[1]]
    assert parent, mounts          # the install lies below a read-only system tree here
    assert not any(m[1].split()[0] in (venv, f"{PREFIX}/venv") for m in mounts), mounts
    package = f"{PREFIX}/venv/lib/python3.11/site-packages/agent_sandbox"
    flags = _inside(user, project, f"{PREFIX}/venv", package, f"{PREFIX}/venv/bin")
    for path in (f"{PREFIX}/venv", package, f"{PREFIX}/venv/bin"):
        assert flags[path] == [True, True], path


def test_the_user_config_tree_is_bound_once_and_read_only_in_read_mode(user, project):
    user.set_config("# mine\n")
    config = str(user.home / ".config" / "agent-sandbox")
    mounts = _dry_run(user, project, HOME_ACCESS="read")
    assert [m for m in mounts if m[1] == config] == [["ro-bind", config]]
    flags = _inside(user, project, config, f"{config}/sandbox.conf", HOME_ACCESS="read")
    assert flags[config] == [True, True] and flags[f"{config}/sandbox.conf"] == [True, True]
    result = user.sandbox("/bin/sh", "-c", f"echo HOME_ACCESS=write >> {config}/sandbox.conf",
                          cwd=project, env=user.env(SANDBOX_BACKEND="bwrap", HOME_ACCESS="read"))
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert (user.home / ".config/agent-sandbox/sandbox.conf").read_text() == "# mine\n"


def test_sys_moved_last_keeps_every_submount_read_only(user, project):
    host = [line.split()[4] for line in open("/proc/self/mountinfo")]
    below = [m for m in host if is_within(m, "/sys") and m != "/sys"]
    assert below, "this host's /sys has no submounts: nothing to move"
    mounts = _dry_run(user, project)
    kinds = [m[0] for m in mounts]
    last = max(i for i, kind in enumerate(kinds) if kind != "remount-ro")
    assert mounts[last] == ["ro-bind", "/sys"], mounts
    inside = _inside(user, project, "/sys", *below)
    for path in ["/sys", *below]:
        assert inside[path] == [True, True], path
    assert set(below) <= set(inside["mountinfo"])
    assert all(ro for m, ro in inside["mountinfo"].items() if is_within(m, "/sys"))
