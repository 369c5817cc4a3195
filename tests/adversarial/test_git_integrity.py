"""Git integrity, for real (SPEC §8 "Git"): the installed agent-sandbox, run
by the unprivileged test user on each backend, with a session that tries
every route by which git would later run a command the session wrote.

On bwrap and firejail each attempt must fail inside; on landlock (no mount
namespace: detection only) each must be reported at the end, with a command
that removes it. Either way the user's own git commands outside, run after
the session (after the reported removals on landlock), must execute nothing
planted: every planted command would create its own marker file."""
from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.launcher import kill_launcher_when_ready
from tests.support.waiting import until

BACKENDS = ["bwrap", "firejail", "landlock"]
ROUTES = ("fsmonitor", "hook", "hookspath", "include", "filter", "commondir", "worktree",
          "replaced", "nested")

# Each route prints ROUTE=planted when the planting step succeeded inside.
PLANT = r"""
M="$1"
try() { name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$name=planted"; else echo "$name=refused"; fi; }
try fsmonitor git config core.fsmonitor "touch $M/fsmonitor"
try hook sh -c 'printf "#!/bin/sh\ntouch $0/hook\n" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit' "$M"
try hookspath git config core.hooksPath .githooks
try include sh -c 'printf "[core]\n\tpager = touch $0/include; cat\n" >> shared.gitconfig' "$M"
try filter sh -c 'echo "*.txt filter=evil" > .gitattributes && printf "[filter \"evil\"]\n\tclean = touch $0/filter; cat\n" >> shared.gitconfig' "$M"
echo changed >> a.txt
try commondir sh -c 'mkdir -p ag && cp -r .git/objects .git/refs .git/HEAD ag/ && printf "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch $0/commondir\n" > ag/config && echo ../ag > .git/commondir' "$M"
try worktree sh -c 'printf "[core]\n\tfsmonitor = touch $0/worktree\n" > .git/config.worktree' "$M"
try nested sh -c 'mkdir -p sub && cd sub && git init -q . && git config core.sshCommand "touch $0/nested"' "$M"
try replaced sh -c 'mv .git .git_orig && git init -q . && git config core.fsmonitor "touch $0/replaced"' "$M"
exit 0
"""


def git(user, project, *args, check=True):
    result = user.run(["git", *args], cwd=project, env=user.env(GIT_PAGER="cat"))
    if check:
        assert result.returncode == 0, (args, result.stderr)
    return result


@pytest.fixture
def repo(user, project) -> Path:
    """A repository the user made outside: one commit, a project file its
    config includes, per-worktree config enabled, husky-style hooks path."""
    (project / "a.txt").write_text("a\n")
    (project / "shared.gitconfig").write_text("# shared settings\n")
    (project / ".githooks").mkdir()
    for path in (project / "a.txt", project / "shared.gitconfig", project / ".githooks"):
        os.chown(path, user.uid, user.gid)
    git(user, project, "init", "-q", ".")
    git(user, project, "config", "user.email", "t@example.org")
    git(user, project, "config", "user.name", "T")
    git(user, project, "config", "include.path", "../shared.gitconfig")
    git(user, project, "config", "extensions.worktreeConfig", "true")
    git(user, project, "add", "a.txt", "shared.gitconfig")
    git(user, project, "commit", "-q", "-m", "first")
    # The user's own code-running keys, there before the session: never reported.
    git(user, project, "config", "filter.lfs.process", "git-lfs filter-process")
    (project / "lib").mkdir()
    os.chown(project / "lib", user.uid, user.gid)
    git(user, project / "lib", "init", "-q", ".")
    git(user, project / "lib", "config", "alias.x", "!true")
    return project


def markers_dir(user) -> Path:
    path = user.home / f"markers-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    os.chown(path, user.uid, user.gid)
    return path


def use_repo_outside(user, project) -> None:
    """What a user does next, outside the sandbox: every command that reads
    the routes above (status → fsmonitor and clean filters, -p → the pager,
    commit → the hooks, nested repo → its own config)."""
    git(user, project, "status", check=False)
    git(user, project, "-p", "log", "--oneline", check=False)
    git(user, project, "diff", check=False)
    git(user, project, "commit", "-q", "--allow-empty", "-m", "after", check=False)
    if (project / "sub").is_dir():
        git(user, project / "sub", "status", check=False)
        git(user, project / "sub", "ls-remote", "ssh://example.invalid/x", check=False)


def remedies(stderr: str) -> list[list[str]]:
    return [shlex.split(line.split("Remove it: ", 1)[1]) for line in stderr.splitlines()
            if line.startswith("agent-sandbox: git:") and "Remove it: " in line]


@pytest.mark.parametrize("backend", BACKENDS)
def test_git_routes_fail_inside_or_are_reported(user, repo, backend):
    marks = markers_dir(user)
    head = git(user, repo, "rev-parse", "HEAD").stdout
    result = user.sandbox("/bin/sh", "-c", PLANT, "plant", marks,
                          env=user.env(SANDBOX_BACKEND=backend), cwd=repo)
    assert result.returncode == 0, result.stderr
    outcome = dict(line.split("=", 1) for line in result.stdout.split())
    report = result.stderr
    assert "filter.lfs" not in report and "alias.x" not in report, report
    if backend == "landlock":
        assert set(outcome.values()) == {"planted"}, outcome   # detection only
        for text in ("core.fsmonitor", "pre-commit", "core.hookspath", "core.pager",
                     "filter.evil.clean", "commondir", "config.worktree",
                     "core.sshcommand", str(repo / "sub/.git/config")):
            assert text in report, (text, report)
        for command in remedies(report):
            fix = user.run(command, cwd=repo)
            assert fix.returncode == 0, (command, fix.stderr)
    else:
        refused = {route for route, verdict in outcome.items() if verdict == "refused"}
        assert refused == set(ROUTES) - {"nested"}, (outcome, report)
        assert outcome["nested"] == "planted"      # a nested repository is legitimate…
        assert "core.sshcommand" in report and str(repo / "sub/.git/config") in report
        for command in remedies(report):
            assert command[:2] == ["git", "config"], command   # …and only it is reported
            assert user.run(command, cwd=repo).returncode == 0
        assert (repo / ".git").is_dir() and not (repo / ".git_orig").exists()
        assert git(user, repo, "rev-parse", "HEAD").stdout == head
    use_repo_outside(user, repo)
    assert sorted(p.name for p in marks.iterdir()) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_launcher_is_reported_by_status_and_logs(user, project, backend):
    """The launcher is SIGKILLed after a nested repository gained a key: the
    next `agent-sandbox status` reports it, and `logs` keeps it."""
    marks = markers_dir(user)
    ready = project / "ready"
    plant = ('git init -q sub && git -C sub config core.sshCommand "touch $0/x" '
             '&& touch ready && sleep 60')
    kill_launcher_when_ready(user, project,
                             [INSTALLED, "run", "--", "/bin/sh", "-c", plant, str(marks)],
                             ready, user.env(SANDBOX_BACKEND=backend))
    status = user.run([INSTALLED, "status"], cwd=user.home)
    config = str(project / "sub/.git/config")
    assert status.returncode == 0, status.stderr
    assert config in status.stdout + status.stderr and "core.sshcommand" in status.stdout + status.stderr
    logs = user.run([INSTALLED, "logs"], cwd=user.home)
    assert config in logs.stdout and "core.sshcommand" in logs.stdout, logs.stdout + logs.stderr
    # The next session of the project removes what the killed one left, and
    # does not report the same finding again.
    again = user.sandbox("true", env=user.env(SANDBOX_BACKEND=backend), cwd=project)
    assert again.returncode == 0 and "git:" not in again.stderr, again.stderr
    assert not (project / ".envrc").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_git_status_shows_no_placeholders_during_a_session(user, repo, backend):
    exclude = repo / ".git/info/exclude"
    before = exclude.read_bytes()
    wait = "touch ready; while [ ! -e stop ]; do sleep 0.05; done; rm -f ready stop"
    proc = subprocess.Popen([INSTALLED, "run", "--", "/bin/sh", "-c", wait], user=user.uid,
                            group=user.gid, extra_groups=[], cwd=repo,
                            env=user.env(SANDBOX_BACKEND=backend), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not (repo / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        assert (repo / ".envrc").exists() and (repo / ".mcp.json").exists()   # the placeholders
        status = git(user, repo, "status", "--porcelain").stdout
        ours = ("?? ready", "?? lib/")            # the test's own files
        assert [line for line in status.splitlines() if line not in ours] == [], status
    finally:
        (repo / "stop").touch()
        os.chown(repo / "stop", user.uid, user.gid)
        proc.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr.read()
    assert exclude.read_bytes() == before            # the last session took its lines back
    assert not (repo / ".envrc").exists()


# Review finding 1: session A stages a config (and a hook) in a directory that
# is not a repository yet; session B makes it one and points a gitdir: file at
# it. Nothing of it is newer than B but the HEAD and the .git file.
STAGE = r"""mkdir stash stash/hooks
printf '[core]\n\tbare = false\n\tfsmonitor = "touch %s/staged; false"\n' "$0" > stash/config
printf '#!/bin/sh\ntouch %s/hook\n' "$0" > stash/hooks/pre-commit && chmod +x stash/hooks/pre-commit"""
ACTIVATE = r"""mkdir -p stash/objects stash/refs/heads sub
echo 'ref: refs/heads/master' > stash/HEAD
echo "gitdir: $PWD/stash" > sub/.git"""


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_repository_staged_in_one_session_and_activated_in_the_next_is_reported(
        user, project, backend):
    marks = markers_dir(user)
    env = user.env(SANDBOX_BACKEND=backend)
    first = user.sandbox("/bin/sh", "-c", STAGE.replace("%s", str(marks)), str(marks),
                         env=env, cwd=project)
    assert first.returncode == 0 and "git:" not in first.stderr, first.stderr  # no repository yet
    second = user.sandbox("/bin/sh", "-c", ACTIVATE, env=env, cwd=project)
    assert second.returncode == 0, second.stderr
    config, hook = project / "stash/config", project / "stash/hooks/pre-commit"
    assert (f"agent-sandbox: git: {config} gained core.fsmonitor = touch {marks}/staged; false"
            in second.stderr), second.stderr
    assert f"Remove it: git config --file {config} --unset-all core.fsmonitor" in second.stderr
    assert f"{hook} is a new or changed hook" in second.stderr
    for command in remedies(second.stderr):
        assert user.run(command, cwd=project).returncode == 0, command
    git(user, project / "sub", "status", check=False)
    git(user, project / "sub", "commit", "-q", "--allow-empty", "-m", "x", check=False)
    assert sorted(p.name for p in marks.iterdir()) == []


# ---------------------------------------------------------------- the project's .git (docs/shared-channels.md §7)
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
        until(lambda: (project / ".git" / "hooks").is_dir(), "the first session's placeholders",
              20.0, interval=0.01)
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
