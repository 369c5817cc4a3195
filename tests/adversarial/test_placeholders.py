"""Issue 27 item 7, the review's findings (docs/shared-channels.md §7), as an
attacker inside — or a user whose launcher died — would meet them. Real
backends, the unprivileged test user.

- A placeholder made through a symlinked parent: `ln -s ~/tgt .claude` in the
  project, and the launcher made `.claude/settings.json` in `~/tgt`
  (firejail and landlock ran with it there; bwrap refused only afterwards).
- A sandbox that outlived its SIGKILLed launcher (killed after the spawn,
  before bwrap's init armed its parent-death signal): the next session of
  the project to end removed the placeholders mounted in it, detaching its
  read-only binds. strace holds bwrap's setup at its first prctl so the kill
  lands in that window every time.
- firejail: a project that is no repository became one (its `.git` of
  placeholders was writable) — on bwrap too while another session of the
  project ran; a submodule gitdir deeper than five levels
  (`.git/modules/a/b/c/d/e/f/config`, core.fsmonitor) went unreported.
- HOME_ACCESS=write: the entry point in ~/.local/bin is writable inside, and
  the report said self.protected: yes.
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


# ---------------------------------------------------------------- git
MAKE_REPOSITORY = ("mkdir .git/objects .git/refs && echo 'ref: refs/heads/main' > .git/HEAD "
                   "&& echo became-one")


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_project_that_is_no_repository_cannot_become_one(user, project, backend):
    """Its `.git` holds only the placeholders: read-only as a whole (firejail
    bound it writable, with read-only files in it)."""
    result = user.sandbox("/bin/sh", "-c", MAKE_REPOSITORY, options=("--backend", backend),
                          cwd=project)
    assert "became-one" not in result.stdout, result.stderr
    assert not (project / ".git" / "HEAD").exists()
    # Also while another session of the project runs: its placeholders make
    # the `.git` exist when this one starts (both backends bound it writable).
    first = subprocess.Popen([INSTALLED, "run", "--backend", backend, "--", "sleep", "60"],
                             user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                             cwd=str(project), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: (project / ".git" / "hooks").is_dir(), "the first session's placeholders")
        result = user.sandbox("/bin/sh", "-c", MAKE_REPOSITORY, options=("--backend", backend),
                              cwd=project)
        assert "became-one" not in result.stdout, result.stderr
        assert not (project / ".git" / "HEAD").exists()
    finally:
        first.terminate()
        first.wait(30)


DEEP_MODULE = ".git/modules/a/b/c/d/e/f"
PLANT_MODULE = (f"mkdir -p {DEEP_MODULE}/objects {DEEP_MODULE}/refs "
                f"&& echo 'ref: refs/heads/main' > {DEEP_MODULE}/HEAD "
                f"&& printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > {DEEP_MODULE}/config "
                "&& echo planted")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_submodule_gitdir_at_any_depth_is_reported(user, project, backend):
    """A submodule's name may hold any number of slashes: its gitdir
    `.git/modules/a/b/c/d/e/f/config` with core.fsmonitor runs for the user's
    `git submodule update` / `git status` later. The end check found module
    gitdirs only five levels deep."""
    init = user.run(["git", "init", "-q", str(project)], cwd=project)
    assert init.returncode == 0, init.stderr
    result = user.sandbox("/bin/sh", "-c", PLANT_MODULE, options=("--backend", backend),
                          cwd=project)
    assert "planted" in result.stdout, result.stderr
    assert f"{project}/{DEEP_MODULE}/config gained core.fsmonitor = touch /tmp/pwned" \
        in result.stderr


# ---------------------------------------------------------------- self.protected
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_user_install_in_the_writable_home_is_reported(user, project, backend):
    """HOME_ACCESS=write: the entry point a pipx / uv tool install leaves in
    ~/.local/bin is writable inside — a session can replace what the user's
    next `agent-sandbox` runs. The report said self.protected: yes."""
    entry = user.home / ".local" / "bin" / "agent-sandbox"
    entry.parent.mkdir(parents=True, exist_ok=True)
    _own(entry.parent, user)
    if entry.is_symlink() or entry.exists():
        entry.unlink()
    entry.symlink_to(INSTALLED)
    _own(entry, user)
    try:
        env = user.env(HOME_ACCESS="write", PATH=f"{entry.parent}:/usr/local/bin:/usr/bin:/bin")
        report = user.run([entry, "run", "--dry-run", "--backend", backend, "--", "true"],
                          env=env, cwd=project)
        assert report.returncode == 0, report.stderr
        row = next(line for line in report.stdout.splitlines() if "self.protected" in line)
        assert row.split()[0] == "partial", row
        assert f"{entry} (what your next `agent-sandbox` runs first) is writable" in row
        # … and it is: the session can put its own file in its place.
        swap = user.run([entry, "run", "--backend", backend, "--", "/bin/sh", "-c",
                         f"ln -sf /bin/true {entry}.new && mv -f {entry}.new {entry} "
                         "&& echo swapped"], env=env, cwd=project)
        assert "swapped" in swap.stdout, swap.stderr
    finally:
        if entry.is_symlink() or entry.exists():
            entry.unlink()
