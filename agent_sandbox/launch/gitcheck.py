"""Detect and report what a session changed in the project's git
repositories that would make git run a command outside (SPEC §8 "Git").

The jail keeps the project's own repository read-only where it can
(gitrepo.py, bwrap and firejail). What it cannot close is found here: the
project's own repository on landlock, and on every backend the repositories
*nested* in the project (a session may `git init` a subdirectory, or leave a
`.git` file or a bare repository anywhere) — the user's next `git` there
would read their configuration.

- `start` (launch): a snapshot of the control files the launch protects —
  their bytes (configuration, `commondir`) or a digest (hooks) — and the
  start time, in `~/.local/state/agent-sandbox/git/<session>.json` (hidden
  inside every sandbox).
- `finish` (end of the session, before its registry record goes): every
  repository in the project is found (a bounded walk that never follows a
  symlink), and each file git would read for it — configuration and what it
  includes, `config.worktree`, hooks — is compared with the snapshot: for a
  file the snapshot holds, only keys that were not there before count; for
  any other, only a file changed since the start (ctime, which a process
  cannot set back). Each finding names the file, the key and the command
  that removes it, on stderr and in a log `agent-sandbox logs` shows.
- `recover` (next launch, `agent-sandbox status`): the snapshot of a session
  whose launcher was killed is checked the same way; claimed by a rename, so
  two launches never report it twice.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import sys
import time
from typing import NamedTuple

from agent_sandbox.policy import gitrepo

SUBDIR = "git"
SLACK = 0.01             # a clock tick: ctime comes from the kernel's coarse clock
WALK_LIMIT = 200_000     # directory entries looked at for nested repositories
CONTENT_LIMIT = 65536    # larger files are kept as a digest only
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


class Finding(NamedTuple):
    path: str
    key: str
    value: str
    remedy: tuple[str, ...]

    def message(self) -> str:
        from agent_sandbox.tools.logs import clean

        value = clean(self.value if len(self.value) <= 80 else self.value[:77] + "...")
        if self.key == "hook":
            what = f"{clean(self.path)} is a new or changed hook"
        elif self.key == "commondir":
            what = (f"{clean(self.path)} (commondir) sends git to the configuration and hooks "
                    f"in {value}")
        else:
            what = f"{clean(self.path)} gained {clean(self.key)} = {value}"
        return (f"git: {what} — git runs it outside the sandbox the next time you use this "
                f"repository. Remove it: {clean(shlex.join(self.remedy))}")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _stored(data: bytes) -> str:
    return data.hex() if len(data) <= CONTENT_LIMIT else _digest(data)


def _state(home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), SUBDIR)


# ---------------------------------------------------------------- snapshot
def snapshot_files(protected) -> dict[str, str]:
    """{path: stored bytes or digest} of the protected git files as they are
    now (placeholders included), and of the files in protected directories."""
    files = {}
    for item in protected:
        if item.is_dir:
            try:
                names = os.listdir(item.path)
            except OSError:
                continue
            paths = [os.path.join(item.path, n) for n in names]
        else:
            paths = [item.path]
        for path in paths:
            data = gitrepo.read_small(path)
            if data is not None:
                files[path] = _stored(data)
    return files


def start(policy) -> str | None:
    """Report what killed sessions left, then write this session's snapshot;
    its path (None when it could not be written: then only files changed
    since the start are reported)."""
    home = policy.home
    recover(home, environ=policy.env)
    from agent_sandbox.policy.resolve import _is_within

    git_items = [p for p in policy.protected if _is_within(p.path, policy.project_dir)]
    directory = _state(home)
    path = os.path.join(directory, f"{policy.session_id}.json")
    temp = os.path.join(directory, f".{policy.session_id}.tmp")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            # The start is the file system's own time (a file's ctime), as
            # the ctimes it is compared with later.
            record = {"session": policy.session_id, "project": policy.project_dir,
                      "started": os.fstat(fd).st_ctime, "files": snapshot_files(git_items)}
            os.write(fd, json.dumps(record).encode())
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError:
        return None
    return path


# ---------------------------------------------------------------- evaluation
def repositories(project: str, limit: int = WALK_LIMIT) -> tuple[list[str], bool]:
    """([`.git` entries and bare-looking directories], walk complete?)."""
    found, stack, seen = [], [project], 0
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return found, False
            if entry.name == ".git":
                found.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                if os.path.isfile(os.path.join(entry.path, "HEAD")) and \
                        os.path.isdir(os.path.join(entry.path, "objects")):
                    found.append(entry.path)          # a bare repository
                else:
                    stack.append(entry.path)
    return found, True


def _files_of(dotgit: str, home: str) -> tuple[list[str], list[str], list[str]]:
    """(config files, commondir files, gitdirs) git reads for one repository,
    submodules and linked worktrees included; hooks are found per gitdir."""
    gitdir = gitrepo.gitdir_of(dotgit)
    if gitdir is None:
        return [], [], []
    gitdirs = [gitdir] + gitrepo.module_gitdirs(gitdir)
    common = gitrepo.commondir_of(gitdir)
    try:
        gitdirs += [e.path for e in os.scandir(os.path.join(common, "worktrees"))
                    if e.is_dir(follow_symlinks=False)]
    except OSError:
        pass
    configs, redirected = [], []
    for each in dict.fromkeys(gitdirs):
        common = gitrepo.commondir_of(each)
        # Its own config too: it counts again once the commondir goes.
        configs += [os.path.join(common, "config"), os.path.join(each, "config"),
                    os.path.join(each, "config.worktree")]
        # A linked worktree's gitdir points back at its repository; any other
        # commondir leads git somewhere else.
        expected = os.path.dirname(os.path.dirname(each)) \
            if os.path.basename(os.path.dirname(each)) == "worktrees" else each
        if common != expected:
            redirected.append(os.path.join(each, "commondir"))
    return list(dict.fromkeys(configs)), redirected, list(dict.fromkeys(gitdirs))


class _Evaluator:
    def __init__(self, project: str, home: str, files: dict, started: float, git):
        self.project, self.home, self.files = project, home, files
        self.since, self.git = started - SLACK, git
        self.findings: dict[tuple, Finding] = {}
        self._known: set | None = None

    def known(self) -> set:
        """Every (key, value) the repository's configuration held at the
        start: the user's own, wherever the session moved it since."""
        if self._known is None:
            self._known = set()
            for path, stored in self.files.items():
                if "/hooks/" in path or stored.startswith("sha256:"):
                    continue
                self._known |= set(gitrepo.config_entries(bytes.fromhex(stored), self.git))
        return self._known

    def _changed(self, path: str, data: bytes) -> tuple[bool, bytes | None]:
        """(changed during the session?, the bytes before it when known)."""
        before = self.files.get(path)
        if before is not None:
            if before in (_stored(data), _digest(data)):
                return False, None
            return True, None if before.startswith("sha256:") else bytes.fromhex(before)
        try:
            return os.lstat(path).st_ctime >= self.since, None
        except OSError:
            return False, None

    def add(self, finding: Finding) -> None:
        self.findings[(finding.path, finding.key, finding.value)] = finding

    def config(self, path: str, queue: list) -> list[tuple[str, str]]:
        data = gitrepo.read_small(path)
        if data is None:
            return []
        entries = gitrepo.config_entries(data, self.git)
        for key, value in entries:      # follow includes, changed or not
            lowered = key.lower()
            if lowered == "include.path" or (lowered.startswith("includeif.")
                                             and lowered.endswith(".path")):
                queue.append(gitrepo.include_target(value, path, self.home))
        changed, before = self._changed(path, data)
        if changed:
            old = set(gitrepo.config_entries(before, self.git)) if before else set()
            for key, value in entries:
                if gitrepo.is_code_key(key, value) and (key, value) not in old \
                        and (key, value) not in self.known():
                    self.add(Finding(path, key, value,
                                     ("git", "config", "--file", path, "--unset-all", key)))
        return entries

    def hooks(self, directory: str) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            if entry.name.endswith(".sample"):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode)
                                              and info.st_mode & 0o111):
                data = gitrepo.read_small(entry.path) or b"(symlink)"
                if self._changed(entry.path, data)[0]:
                    self.add(Finding(entry.path, "hook", "", ("rm", "--", entry.path)))

    def repository(self, dotgit: str) -> None:
        configs, commondirs, gitdirs = _files_of(dotgit, self.home)
        queue, seen, hooks_paths = list(configs), set(), []
        while queue:
            path = queue.pop(0)
            if path in seen or len(seen) > 64:
                continue
            seen.add(path)
            for key, value in self.config(path, queue):
                if key.lower() == "core.hookspath":
                    hooks_paths.append(value)
        for path in commondirs:
            data = gitrepo.read_small(path)
            if data is not None and self._changed(path, data)[0]:
                self.add(Finding(path, "commondir", data.decode("utf-8", "replace").strip(),
                                 ("rm", "--", path)))
        worktree = os.path.dirname(dotgit) if os.path.basename(dotgit) == ".git" else dotgit
        for gitdir in gitdirs:      # its own hooks too: they count again once commondir goes
            for each in dict.fromkeys((gitdir, gitrepo.commondir_of(gitdir))):
                self.hooks(os.path.join(each, "hooks"))
        for value in hooks_paths:
            self.hooks(gitrepo.hooks_dir(value, gitrepo.commondir_of(gitdirs[0]), worktree,
                                         self.home))


def evaluate(project: str, home: str, files: dict, started: float, git) -> tuple[list, bool]:
    """(findings, walk complete?) for the repositories in `project`."""
    found, complete = repositories(project)
    evaluator = _Evaluator(project, home, files, started, git)
    for dotgit in found:
        evaluator.repository(dotgit)
    return list(evaluator.findings.values()), complete


# ---------------------------------------------------------------- reporting
def _report(home: str, session: str, project: str, findings, complete: bool, out) -> None:
    for finding in findings:
        out.write(f"agent-sandbox: {finding.message()}\n")
    if not complete:
        out.write(f"agent-sandbox: git: the check for nested repositories in {project} "
                  f"stopped after {WALK_LIMIT} entries — repositories beyond were not "
                  "checked. Check them yourself before you run git in them.\n")
    if not findings:
        return
    from agent_sandbox.tools.logs import log_directory

    directory = log_directory(home)
    stamp = time.strftime(TIME_FORMAT)
    lines = "".join(json.dumps({"time": stamp, "session": session, "command": "git",
                                "event": "git-setting", "project": project,
                                "file": f.path, "key": f.key, "value": f.value,
                                "remedy": shlex.join(f.remedy)}) + "\n" for f in findings)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(directory, f"git_{session}.log"),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _check(path: str, home: str, git, out) -> None:
    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read())
        project, session = str(record["project"]), str(record["session"])
        files, started = dict(record["files"]), float(record["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    findings, complete = evaluate(project, home, files, started, git)
    _report(home, session, project, findings, complete, out)


def finish(policy, snapshot: str | None, out=None) -> None:
    """At the end of the session: report, then drop the snapshot."""
    out = out or sys.stderr
    git = gitrepo.find_git(policy.env.get("PATH", ""))
    if snapshot is None:
        findings, complete = evaluate(policy.project_dir, policy.home, {}, time.time()
                                      - 24 * 3600, git)   # no snapshot: be loud
        _report(policy.home, policy.session_id, policy.project_dir, findings, complete, out)
        return
    _check(snapshot, policy.home, git, out)
    try:
        os.unlink(snapshot)
    except OSError:
        pass


def recover(home: str, *, environ=None, out=None) -> None:
    """Check the snapshots of sessions that no longer run (a killed launcher)."""
    out = out or sys.stderr
    directory = _state(home)
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".json")]
    except OSError:
        return
    if not names:
        return
    from agent_sandbox.launch import registry

    host, boot = registry.host_name(), registry.boot_id()
    records, _ = registry.read(home, now=0.0)
    running = {str(r.get("session")) for _, r in records
               if registry.judge(r, host=host, boot=boot, lookup=registry.lookup_proc)
               in (registry.LIVE, registry.FOREIGN)}
    git = gitrepo.find_git((environ or os.environ).get("PATH", ""))
    for name in names:
        if name[:-len(".json")] in running:
            continue
        path = os.path.join(directory, name)
        claimed = os.path.join(directory, f".{name}.{os.getpid()}.claimed")
        try:
            os.rename(path, claimed)          # only one reporter wins
        except OSError:
            continue
        _check(claimed, home, git, out)
        try:
            os.unlink(claimed)
        except OSError:
            pass
