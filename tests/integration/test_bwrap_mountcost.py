"""The cheaper bwrap plan (policy/mountcost.py), for real: what a left-out
or moved mount used to guarantee still holds inside, as the unprivileged test
user on this kernel.

- The install dir is no longer bound onto itself below the read-only /opt
  (when the install lies there): it is still read-only and nosuid inside.
- The user config tree granted twice in read mode is bound once: still
  read-only.
- /sys, moved to the end of the plan, still shows every one of its host
  submounts read-only.
- A project that is no repository gets one read-only `.git` (its
  placeholders), and an agent only the entries of its config directory its
  session copy links, the user's own CLAUDE.md bound once under the note.
The mount flags are read inside with statvfs and /proc/self/mountinfo: the
files are root's, so a failed write alone would prove nothing.
"""
from __future__ import annotations

import json
import os

from agent_sandbox.paths import is_within
from agent_sandbox.policy.agentstate import encode
from tests.support.install import PREFIX
from tests.support.agents import run_agent, standin_env

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


# ---------------------------------------------------------------- fewer binds (this round)
GIT_SCRIPT = """
import errno, json, os, subprocess, sys
def attempt(action):
    try:
        action()
        return "done"
    except OSError as exc:
        return errno.errorcode[exc.errno]
def write(path):
    with open(path, "w") as handle:
        handle.write("planted")
out = {
    "objects": attempt(lambda: os.mkdir(".git/objects")),
    "HEAD": attempt(lambda: write(".git/HEAD")),
    "hook": attempt(lambda: write(".git/hooks/pre-commit")),
    "config": attempt(lambda: write(".git/config")),
    "rename": attempt(lambda: os.rename(".git", ".git-moved")),
    "init": subprocess.run(["git", "init", "-q"], capture_output=True).returncode,
    "entries": sorted(os.listdir(".git")),
    "mounts": [line.split()[4] for line in open("/proc/self/mountinfo")
               if line.split()[4].startswith(os.getcwd() + "/.git")],
}
print(json.dumps(out))
"""


def test_a_project_without_a_repository_gets_one_read_only_git(user, project):
    """Its `.git` holds only the placeholders (git's control files): one
    read-only bind of it instead of the writable pin and four binds. Nothing
    can be made in it (before, `git init` left a `description` and a made
    `objects/` behind in the user's project after the session), it cannot be
    moved, and it is gone after the session. Fails on the code before
    (objects/ and HEAD were made)."""
    result = user.sandbox("/usr/bin/python3", "-c", GIT_SCRIPT, cwd=project,
                          env=user.env(SANDBOX_BACKEND="bwrap"))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    dotgit = str(project / ".git")
    assert seen["mounts"] == [dotgit], seen["mounts"]
    assert seen["entries"] == ["commondir", "config", "config.worktree", "hooks"]
    assert {seen[k] for k in ("objects", "HEAD", "hook", "config")} == {"EROFS"}, seen
    assert seen["rename"] == "EBUSY" and seen["init"] != 0, seen
    assert not os.path.lexists(dotgit), os.listdir(project)



AGENT_PROBE = """#!/usr/bin/python3
import errno, json, os
claude = os.environ["HOME"] + "/.claude"
# This project's entry of projects/ (Claude Code's dashed name of the directory):
# the only one the session copy links (issue 27: agent state of other projects).
this = "projects/" + "".join(c if c.isascii() and c.isalnum() else "-" for c in os.getcwd())
def attempt(path):
    try:
        with open(path, "a") as handle:
            handle.write("x")
        return "written"
    except OSError as exc:
        return errno.errorcode[exc.errno]
print(json.dumps({
    "exists": {name: os.path.lexists(f"{claude}/{name}") for name in
               ("settings.json", "statsig", "shell-snapshots", "CLAUDE.md", "projects",
                "notify.sh", "hooks")},
    "note": open(f"{claude}/CLAUDE.md").read(),
    "copy": open(os.environ["CLAUDE_CONFIG_DIR"] + "/settings.json").read(),
    "writes": {name.replace(this, "projects/THIS"): attempt(f"{claude}/{name}") for name in
               (this + "/new.txt", "notify.sh", "CLAUDE.md", "hooks/x.sh", "settings.json")},
    "mounts": [line.split()[4] for line in open("/proc/self/mountinfo")
               if line.split()[4].startswith(claude + "/")],
}))
"""


def test_an_agent_sees_only_the_config_entries_its_session_copy_links(user, project, home):
    """~/.claude as a user has it: the copy holds fresh scratch entries of
    its own, so the real ones are not bound (they do not exist inside:
    stricter, and a mount less each); the user's own CLAUDE.md is bound
    once, under the note. Kept entries stay writable, the rest (the real
    settings too) read-only. Fails on the code before (every entry was
    bound, CLAUDE.md twice)."""
    user.write(".claude/settings.json", '{"model": "mine"}\n', 0o600)
    user.write(".claude/statsig/cache", "s\n")
    user.write(".claude/shell-snapshots/snap.sh", "echo mine\n")
    user.write(".claude/CLAUDE.md", "# my rules\n")
    user.write(".claude/projects/old.jsonl", "{}\n")
    this = "projects/" + encode("path-dashed", str(project))
    user.write(f".claude/{this}/old.jsonl", "{}\n")
    user.write(".claude/notify.sh", "#!/bin/sh\n", 0o755)
    user.write(".claude/hooks/pre.sh", "#!/bin/sh\n", 0o755)
    user.write("tools/bin/claude", AGENT_PROBE, 0o755)
    result = run_agent(user, project, ["claude"],
                       standin_env(user, SANDBOX_BACKEND="bwrap"))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["exists"] == {"settings.json": True, "statsig": False, "shell-snapshots": False,
                              "CLAUDE.md": True, "projects": True, "notify.sh": True,
                              "hooks": True}
    assert seen["copy"] == '{"model": "mine"}\n'
    assert seen["note"].startswith("# my rules\n") and "agent-sandbox" in seen["note"]
    assert seen["writes"] == {"projects/THIS/new.txt": "written", "notify.sh": "EROFS",
                              "CLAUDE.md": "EACCES", "hooks/x.sh": "EROFS",   # the note: 0444
                              "settings.json": "EROFS"}
    claude = f"{home}/.claude"
    assert sorted(seen["mounts"]) == sorted(f"{claude}/{name}" for name in (
        "CLAUDE.md", "hooks", "notify.sh", this, "settings.json",
        "todos")), seen["mounts"]          # todos/: AGENT_STATE, made at the first launch
    assert (home / ".claude/shell-snapshots/snap.sh").read_text() == "echo mine\n"
    assert (home / ".claude/CLAUDE.md").read_text() == "# my rules\n"
    assert (home / f".claude/{this}/new.txt").read_text() == "x"
