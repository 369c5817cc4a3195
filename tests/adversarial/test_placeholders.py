"""The placeholders the launcher makes for protected paths that do not exist
(docs/shared-channels.md §7), as an attacker inside — or a user whose
launcher died — would meet them. Real backends, the unprivileged test user.

- A placeholder made through a symlinked parent: `ln -s ~/tgt .claude` in the
  project, and the launcher made `.claude/settings.json` in `~/tgt`
  (firejail and landlock ran with it there; bwrap refused only afterwards).
- A sandbox that outlived its SIGKILLed launcher (killed after the spawn,
  before bwrap's init armed its parent-death signal): the next session of
  the project to end removed the placeholders mounted in it, detaching its
  read-only binds. strace holds bwrap's setup at its first prctl so the kill
  lands in that window every time.

The project's `.git` of placeholders is test_git_integrity.py's, the
self.protected report test_user_install_protection.py's.
"""
from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
from functools import partial
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.waiting import until

BACKENDS = ["bwrap", "firejail", "landlock"]
PRCTL = {"x86_64": "157", "aarch64": "167"}     # the syscall number /proc/PID/syscall shows


def _own(path: Path, user) -> None:
    os.lchown(path, user.uid, user.gid)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_placeholder_is_made_through_a_symlinked_parent(user, project, backend):
    target = user.home / f"tgt-{project.name}"
    target.mkdir()
    _own(target, user)
    (project / ".claude").symlink_to(target)
    _own(project / ".claude", user)
    user.set_config("PROTECTED_PATHS+=(.claude/settings.json)\n")
    try:
        result = user.sandbox("true", options=("--backend", backend), cwd=project)
        assert result.returncode == 125, result.stderr
        assert f"{project}/.claude is a symbolic link (to {target})" in result.stderr
        assert "Traceback" not in result.stderr
        assert list(target.iterdir()) == [], "a placeholder was made outside the project"
    finally:
        shutil.rmtree(target, ignore_errors=True)


# ---------------------------------------------------------------- the orphaned sandbox
def _stat(pid) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            data = handle.read()
    except OSError:
        return None
    return [data[data.index("(") + 1:data.rindex(")")]] + data[data.rindex(")") + 2:].split()


def _bwrap_child_in_prctl(uid: int, project: Path) -> int | None:
    """The sandbox's bwrap child (a bwrap whose parent is bwrap, working in
    `project`: not the backend's probe), held by strace at its first prctl —
    before it arms its parent-death signal."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat(name)
        try:
            if not fields or fields[0] != "bwrap" or os.stat(f"/proc/{name}").st_uid != uid:
                continue
            parent = _stat(fields[2])
            with open(f"/proc/{name}/syscall") as handle:
                call = handle.read().split()[0]
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                ours = os.fsencode(project) in handle.read().split(b"\0")
        except (OSError, IndexError):
            continue
        if parent and parent[0] == "bwrap" and ours and call == PRCTL[platform.machine()]:
            return int(name)
    return None


_wait = partial(until, timeout=20.0, interval=0.01)     # bwrap's setup passes quickly


def test_a_sandbox_outliving_its_killed_launcher_keeps_its_placeholders(user, project):
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is missing — apt-get install strace (it holds bwrap's setup "
                    "in the window this test needs)")
    hooks, envrc = project / ".git" / "hooks", project / ".envrc"
    traced = subprocess.Popen(
        [strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=prctl",
         "-e", "inject=prctl:delay_enter=800000:when=1", "-u", user.name, "--",
         INSTALLED, "run", "--backend", "bwrap", "--", "sleep", "120"],
        env=user.env(), cwd=str(project), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        child = _wait(lambda: _bwrap_child_in_prctl(user.uid, project), "bwrap's child in its setup")
        launcher = int(_stat(_stat(child)[2])[2])        # child → bwrap monitor → launcher
        assert _stat(launcher)[0] == "agent-sandbox"
        os.kill(launcher, signal.SIGKILL)
        _wait(lambda: any((_stat(n) or ["", "", "0"])[0] == "sleep"
                          and (_stat(n) or ["", "", "0"])[2] == str(child)
                          for n in os.listdir("/proc") if n.isdigit()),
              "the orphaned sandbox's command")
        assert hooks.is_dir() and envrc.exists()
        # Another session of the project starts and ends meanwhile.
        result = user.sandbox("true", options=("--backend", "bwrap"), cwd=project)
        assert result.returncode == 0, result.stderr
        assert hooks.is_dir() and envrc.exists(), \
            "the placeholders were removed under a sandbox that still runs"
    finally:
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)     # its init: the namespace goes with it
            except OSError:
                pass
        try:
            traced.wait(20)
        except subprocess.TimeoutExpired:
            traced.kill()
            traced.wait()
    # Once it is gone, the next session to end removes them as before.
    _wait(lambda: _stat(child) is None, "the orphaned sandbox to end")
    result = user.sandbox("true", options=("--backend", "bwrap"), cwd=project)
    assert result.returncode == 0, result.stderr
    assert not envrc.exists() and not hooks.exists()
