"""Detect and report what a session changed in the project's git
repositories that would make git run a command outside (SPEC §8 "Git").

The jail keeps the project's own repository read-only where it can
(gitrepo.py, bwrap and firejail). What it cannot close is found here: the
project's own repository on landlock, and on every backend the repositories
*nested* in the project (a session may `git init` a subdirectory, or leave a
`.git` file or a bare repository anywhere) — the user's next `git` there
would read their configuration.

- `start` (launch): every repository in the project is found (a bounded
  walk that never follows a symlink) and what git reads for each is
  recorded — configuration bytes (includes followed), redirecting
  `commondir` files, hook digests — with each repository's `.git` path and
  gitdir inode, in `~/.local/state/agent-sandbox/git/<session>.snapshot` (marshal:
  no json import on a launch; an older version's `<session>.json` is still read)
  (hidden inside every sandbox), together with the protected files.
- `finish` (end of the session, before its registry record goes): the walk
  again. A repository that was one at the start (same `.git` path, or same
  gitdir inode: renamed) reports only code-running keys that are new — not
  in that file's snapshot and nowhere in its configuration at the start —
  and hooks or `commondir` files that are new or changed. Any other
  repository *became* one during the session, whatever the age of its
  files: a config, hooks or a `.git` file can be staged by an earlier
  session in a directory that is not yet a repository and activated by a
  later one (HEAD, objects, a `gitdir:` file or symlink), so every
  code-running key, hook and redirecting `commondir` in it is reported.
  File times are not trusted for anything. A directory the walk cannot
  list is reported, as is a walk cut short. Each finding names the file,
  the key and the command that removes it, on stderr and in a log
  `agent-sandbox logs` shows.
- `recover` (next launch, `agent-sandbox status`): the snapshot of a session
  whose launcher was killed is checked the same way; claimed by a rename, so
  two launches never report it twice.
"""
from __future__ import annotations

import marshal
import os
import stat
import sys

from agent_sandbox.policy import gitrepo

SUBDIR = "git"
WALK_LIMIT = 200_000     # directory entries looked at for nested repositories
CONTENT_LIMIT = 65536    # larger files are kept as a digest only
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
SNAPSHOT_SUFFIXES = (".snapshot", ".json")   # this version's; an older one's (JSON)


class _Record:
    """A few named fields (not typing.NamedTuple: typing and the modules it
    imports are several milliseconds of every launch, which runs this)."""
    __slots__ = ()

    def __init__(self, *values):
        if len(values) != len(self.__slots__):      # zip(strict=True) from Python 3.10
            raise TypeError(f"{type(self).__name__} takes {len(self.__slots__)} values")
        for name, value in zip(self.__slots__, values):
            setattr(self, name, value)

    def __eq__(self, other):
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __iter__(self):
        return (getattr(self, n) for n in self.__slots__)

    def __repr__(self) -> str:
        return type(self).__name__ + repr(tuple(self))


class Finding(_Record):
    __slots__ = ("path", "key", "value", "remedy")    # remedy: the argv that removes it

    def message(self) -> str:
        import shlex

        from agent_sandbox.logfiles import clean

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
    try:   # built into CPython 3.11; hashlib loads OpenSSL (~2 ms a launch)
        from _sha256 import sha256
    except ImportError:
        from hashlib import sha256

    return "sha256:" + sha256(data).hexdigest()


def _stored(data: bytes) -> str:
    return data.hex() if len(data) <= CONTENT_LIMIT else _digest(data)


def _state(home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), SUBDIR)


# ---------------------------------------------------------------- reading a repository
class Walk(_Record):
    # found: `.git` entries and bare-looking directories; complete: False when
    # stopped at the entry limit; unreadable: directories it could not list
    __slots__ = ("found", "complete", "unreadable")


def repositories(project: str, limit: int = WALK_LIMIT) -> Walk:
    """Every place git would take for a repository: `.git` entries (a
    directory, a `gitdir:` file or a symlink to either) and bare-looking
    directories (HEAD with `objects` or `commondir`), searched inside bare
    ones too (git's discovery finds a `.git` below one first)."""
    found, stack, seen, unreadable = [], [project], 0, []
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        except OSError:
            unreadable.append(directory)    # a repository may hide there: fail closed
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return Walk(found, False, unreadable)
            if entry.name == ".git":
                found.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                if os.path.isfile(os.path.join(entry.path, "HEAD")) and (
                        os.path.isdir(os.path.join(entry.path, "objects"))
                        or os.path.isfile(os.path.join(entry.path, "commondir"))):
                    found.append(entry.path)          # a bare repository
                stack.append(entry.path)
    return Walk(found, True, unreadable)


def _identity(path: str) -> str | None:
    """The gitdir's inode: a repository keeps it when it is renamed."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"{info.st_dev}:{info.st_ino}"


def _files_of(dotgit: str) -> tuple[list[str], list[str], list[str]]:
    """(config files, commondir files, gitdirs) git reads for one repository,
    submodules and linked worktrees included; hooks are found per gitdir."""
    gitdir = gitrepo.gitdir_of(dotgit)
    if gitdir is None:
        return [], [], []
    gitdirs = [gitdir] + module_gitdirs(gitdir)
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


def module_gitdirs(gitdir: str, limit: int = WALK_LIMIT) -> list[str]:
    """Every submodule gitdir git could take below `gitdir/modules`, for the
    check (the launch-time list, gitrepo.module_gitdirs, stops at a depth): a
    submodule's name may hold any number of slashes (`.git/modules/a/b/c/d/
    e/f`), and a module's gitdir may lie inside another's. A directory counts
    when it holds HEAD *or* config (a config staged now, its HEAD added
    later, is reported now). At most `limit` entries are looked at."""
    found, stack, seen = [], [os.path.join(gitdir, "modules")], 0
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return found
            if entry.is_dir(follow_symlinks=False):
                if any(os.path.isfile(os.path.join(entry.path, n)) for n in ("HEAD", "config")):
                    found.append(entry.path)
                stack.append(entry.path)
    return found


class Repository(_Record):
    """What git reads for one repository, as it is now: its `.git` path, its
    gitdir's identity (or None), configs (path → bytes, includes followed),
    entries (path → parsed (key, value) pairs, only where parsed),
    commondirs (the redirecting commondir files) and hooks (executable
    hooks; a symlink: a marker)."""
    __slots__ = ("dotgit", "identity", "configs", "entries", "commondirs", "hooks")


def _hooks_in(directory: str) -> dict[str, bytes]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return {}
    hooks = {}
    for entry in entries:
        if entry.name.endswith(".sample"):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_mode & 0o111):
            hooks[entry.path] = gitrepo.read_small(entry.path) or b"(symlink or unreadable)"
    return hooks


def read_repository(dotgit: str, home: str, git, *, parse=None) -> Repository:
    """Read what git reads for `dotgit`. Configuration is parsed (a git call
    each) where it can name more files (includes, a hooks path) and where
    `parse(path, data)` says so (the end check: every file that changed)."""
    configs_paths, commondir_paths, gitdirs = _files_of(dotgit)
    gitdir = gitdirs[0] if gitdirs else None
    configs, entries, hooks_paths = {}, {}, []
    queue, seen = list(configs_paths), set()
    while queue:
        path = queue.pop(0)
        if path in seen or len(seen) > 64:
            continue
        seen.add(path)
        data = gitrepo.read_small(path)
        if data is None:
            continue
        configs[path] = data
        lowered = data.lower()
        if not (parse and parse(path, data)) and b"include" not in lowered \
                and b"hookspath" not in lowered:
            continue         # neither can be spelt without these letters: spare a git call
        entries[path] = gitrepo.config_entries(data, git)
        for key, value in entries[path]:      # follow includes, changed or not
            key = key.lower()
            if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
                queue.append(gitrepo.include_target(value, path, home))
            elif key == "core.hookspath":
                hooks_paths.append(value)
    commondirs = {}
    for path in commondir_paths:
        data = gitrepo.read_small(path)
        if data is not None:
            commondirs[path] = data
    hooks: dict[str, bytes] = {}
    worktree = os.path.dirname(dotgit) if os.path.basename(dotgit) == ".git" else dotgit
    for each in gitdirs:          # its own hooks too: they count again once commondir goes
        for directory in dict.fromkeys((each, gitrepo.commondir_of(each))):
            hooks.update(_hooks_in(os.path.join(directory, "hooks")))
    for value in hooks_paths:
        hooks.update(_hooks_in(gitrepo.hooks_dir(value, gitrepo.commondir_of(gitdir), worktree,
                                                 home)))
    return Repository(dotgit, _identity(gitdir) if gitdir else None, configs, entries,
                      commondirs, hooks)


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


def snapshot_repositories(project: str, home: str, git) -> tuple[dict[str, str], list[dict]]:
    """(files, repositories) of every repository in the project now: the
    bytes of what git reads for each, and each one's `.git` path, gitdir
    inode and configuration files — what counts as "there at the start"."""
    files: dict[str, str] = {}
    repos = []
    for dotgit in repositories(project).found:
        repo = read_repository(dotgit, home, git)
        for path, data in (*repo.configs.items(), *repo.commondirs.items(),
                           *repo.hooks.items()):
            files[path] = _stored(data)
        repos.append({"dotgit": dotgit, "identity": repo.identity,
                      "configs": sorted(repo.configs)})
    return files, repos


def start(policy) -> str | None:
    """Report what killed sessions left, then write this session's snapshot;
    its path (None when it could not be written: then every code-running
    key in the project is reported at the end)."""
    home = policy.home
    recover(home, environ=policy.env)
    from agent_sandbox.paths import is_within

    git = gitrepo.find_git(policy.env.get("PATH", ""))
    git_items = [p for p in policy.protected if is_within(p.path, policy.project_dir)]
    directory = _state(home)
    path = os.path.join(directory, f"{policy.session_id}.snapshot")
    temp = os.path.join(directory, f".{policy.session_id}.tmp")
    files, repos = snapshot_repositories(policy.project_dir, home, git)
    files.update(snapshot_files(git_items))
    from agent_sandbox.services import configcheck   # agents' configuration, any depth

    agent_configs = configcheck.snapshot(policy.project_dir)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            record = {"session": policy.session_id, "project": policy.project_dir,
                      "started": os.fstat(fd).st_ctime, "files": files,
                      "repositories": repos, "agent_configs": agent_configs}
            os.write(fd, marshal.dumps(record))
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError:
        return None
    return path


# ---------------------------------------------------------------- evaluation
class _Evaluator:
    def __init__(self, home: str, files: dict, repos: list, git):
        self.home, self.files, self.git = home, files, git
        self.by_path = {r["dotgit"]: r for r in repos}
        self.by_identity = {r["identity"]: r for r in repos if r.get("identity")}
        self.findings: dict[tuple, Finding] = {}

    def _entries(self, stored: str | None) -> set:
        if not stored or stored.startswith("sha256:"):
            return set()
        return set(gitrepo.config_entries(bytes.fromhex(stored), self.git))

    def before(self, dotgit: str) -> dict | None:
        """The repository's record at the start — by its `.git` path, or by
        its gitdir's inode wherever the session moved it — or None when it
        was no repository at the start (then nothing in it is the user's:
        every code-running key counts, whatever its file's age)."""
        gitdir = gitrepo.gitdir_of(dotgit)
        identity = _identity(gitdir) if gitdir else None
        return self.by_path.get(dotgit) or (self.by_identity.get(identity) if identity else None)

    def known(self, before: dict) -> set:
        """Every (key, value) the repository's configuration held at the
        start: the user's own."""
        known: set = set()
        for path in before["configs"]:
            known |= self._entries(self.files.get(path))
        return known

    def _unchanged(self, path: str, data: bytes) -> bool:
        return self.files.get(path) in (_stored(data), _digest(data))

    def add(self, finding: Finding) -> None:
        self.findings[(finding.path, finding.key, finding.value)] = finding

    def repository(self, dotgit: str) -> None:
        """A file unchanged since the start is the user's own and is not
        parsed (each parse is a git call: an unchanged repository costs
        none); a repository new since the start is parsed whole."""
        before = self.before(dotgit)
        changed = (lambda path, data: True) if before is None else \
            (lambda path, data: not self._unchanged(path, data))
        repo = read_repository(dotgit, self.home, self.git, parse=changed)
        known = None
        for path, data in repo.configs.items():
            if not changed(path, data):
                continue
            if before is not None and known is None:
                known = self.known(before)
            old = self._entries(self.files.get(path)) if before is not None else set()
            for key, value in repo.entries.get(path, []):
                if gitrepo.is_code_key(key, value) and (key, value) not in old \
                        and (known is None or (key, value) not in known):
                    self.add(Finding(path, key, value,
                                     ("git", "config", "--file", path, "--unset-all", key)))
        for path, data in repo.commondirs.items():
            if changed(path, data):
                self.add(Finding(path, "commondir", data.decode("utf-8", "replace").strip(),
                                 ("rm", "--", path)))
        for path, data in repo.hooks.items():
            if changed(path, data):
                self.add(Finding(path, "hook", "", ("rm", "--", path)))


def evaluate(project: str, home: str, files: dict, repos: list, git) -> tuple[list, Walk]:
    """(findings, the walk) for the repositories in `project`, against the
    start snapshot (`files`, `repos`: see snapshot_repositories)."""
    walk = repositories(project)
    evaluator = _Evaluator(home, files, repos, git)
    for dotgit in walk.found:
        evaluator.repository(dotgit)
    return list(evaluator.findings.values()), walk


# ---------------------------------------------------------------- reporting
def _report(home: str, session: str, project: str, findings, walk: Walk, out) -> None:
    for finding in findings:
        out.write(f"agent-sandbox: {finding.message()}\n")
    if not walk.complete:
        out.write(f"agent-sandbox: git: the check for nested repositories in {project} "
                  f"stopped after {WALK_LIMIT} entries — repositories beyond were not "
                  "checked. Check them yourself before you run git in them.\n")
    for directory in walk.unreadable:
        from agent_sandbox.logfiles import clean

        out.write(f"agent-sandbox: git: {clean(directory)} could not be listed — a repository "
                  "there was not checked. Make it readable and check it before you run git "
                  "below it.\n")
    if not findings:
        return
    import shlex
    import time

    from agent_sandbox.logfiles import append_records

    stamp = time.strftime(TIME_FORMAT)
    append_records(home, f"git_{session}.log", (
        {"time": stamp, "session": session, "command": "git", "event": "git-setting",
         "project": project, "file": f.path, "key": f.key, "value": f.value,
         "remedy": shlex.join(f.remedy)} for f in findings))


def _check(path: str, home: str, git, out) -> None:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if data[:1] == b"{":     # an older version's snapshot
            import json

            record = json.loads(data)
        else:
            record = marshal.loads(data)
        project, session = str(record["project"]), str(record["session"])
        files = dict(record["files"])
        # A snapshot without repositories (an older version's) knows none:
        # everything is reported (fail closed).
        repos = [dict(r) for r in record.get("repositories", [])]
        # None (an older version's snapshot, or a walk cut short): all reported.
        agent_configs = record.get("agent_configs")
        agent_configs = dict(agent_configs) if agent_configs is not None else None
    except (OSError, ValueError, EOFError, KeyError, TypeError, AttributeError):
        return
    findings, walk = evaluate(project, home, files, repos, git)
    _report(home, session, project, findings, walk, out)
    from agent_sandbox.services import configcheck

    configcheck.check(home, session, project, agent_configs, out)


def finish(policy, snapshot: str | None, out=None) -> None:
    """At the end of the session: report, then drop the snapshot."""
    out = out or sys.stderr
    git = gitrepo.find_git(policy.env.get("PATH", ""))
    if snapshot is None:
        # No snapshot: no repository is known, every code-running key is reported.
        findings, walk = evaluate(policy.project_dir, policy.home, {}, [], git)
        _report(policy.home, policy.session_id, policy.project_dir, findings, walk, out)
        from agent_sandbox.services import configcheck

        configcheck.check(policy.home, policy.session_id, policy.project_dir, None, out)
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
        names = [n for n in os.listdir(directory) if n.endswith(SNAPSHOT_SUFFIXES)]
    except OSError:
        return
    if not names:
        return
    from agent_sandbox.services import registry

    host, boot = registry.host_name(), registry.boot_id()
    records, _ = registry.read(home, now=0.0)
    running = {str(r.get("session")) for _, r in records
               if registry.judge(r, host=host, boot=boot, lookup=registry.lookup_proc)
               in (registry.LIVE, registry.FOREIGN)}
    running |= registry.held_by_others(home, None)   # a sandbox outliving its launcher
    git = gitrepo.find_git((environ or os.environ).get("PATH", ""))
    for name in names:
        if name.rpartition(".")[0] in running:
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
