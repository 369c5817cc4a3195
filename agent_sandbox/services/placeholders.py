"""Placeholders for missing protected paths, shared by every session of a
project.

A protected path (`.git/hooks/`, `.envrc`, …) that does not exist gets an
empty placeholder before the sandbox starts, so it can be kept read-only
(SPEC §4). Sessions overlap: a second sandbox of the same project — or a job
of it, on this or another host with the same home — mounts the placeholder the
first one made. Removing it when the first session ends would end the
protection inside the others (unlinking a mount point in another mount
namespace detaches that mount). So the placeholders a project has are
listed in `~/.local/state/agent-sandbox/placeholders/<project>.jsonl`
(hidden inside every sandbox), and only the last session of the project that
ends removes them — each still only if it is exactly what was written.
"Last" is judged by the session registry (services/registry.py): a live record of this
host, any record of another host (it cannot be checked from here), or a
session lock still held — by a launcher, or by a sandbox that outlived its
SIGKILLed launcher (registry.hold) — keeps them. A session killed with
SIGKILL leaves its placeholders in place until the next session of the
project ends after its sandbox is gone: they stay read-only meanwhile.

Launches race (eight sandboxes of one project started at once): creation
tolerates an entry another session made a moment earlier (EEXIST, when it is
of the right kind and not a symlink) and records only what it made itself;
and "register, then create" and "unregister, then release" each run under one
per-project lock (`flock` on `<project>.lock` beside the list), so a session
that is ending never removes placeholders a starting one is about to mount.

Placeholders are made and removed by descriptor, never by name: each is
reached from its anchor — the project, or the home or writable tree it lies
in, opened as the user's configuration names it — one component at a time
with `O_NOFOLLOW`, missing directories made with `mkdirat`, the file with
`O_CREAT | O_EXCL`. A symlink at any component below the anchor refuses the
launch (exit 125, naming the link): `ln -s ~/tgt .claude` in the project
would otherwise make `.claude/settings.json` in `~/tgt`, outside everything
the sandbox protects and removes (docs/shared-channels.md §7). Removal walks
the same way, so a directory the session swapped for a symlink is never
followed either.

Placeholders in the work tree (`.envrc`, `.mcp.json`, `.vscode/`, …) would
show up in the user's `git status`; while any session of the project runs,
they are listed in the repository's `.git/info/exclude` between two marker
lines, written from here (outside) before they are created and taken out
again by the last session. The cost: a real `.envrc` made meanwhile is
ignored by git until then.
"""
from __future__ import annotations

import errno
import os
import stat

from agent_sandbox import jsonlite
from agent_sandbox.errors import PolicyError

SUBDIR = "placeholders"
EXCLUDE_BEGIN = b"# agent-sandbox: placeholders of running sessions (removed by the last one)\n"
EXCLUDE_END = b"# agent-sandbox: end\n"


class ThroughSymlink(OSError):
    """A component below the anchor is a symbolic link."""

    def __init__(self, link: str):
        super().__init__(errno.ELOOP, "a symbolic link", link)
        self.link = link


def anchor_of(path: str, anchors) -> str:
    """The longest anchor `path` lies below (the project, the home, a
    writable tree), else `/`: the walk starts there, following the user's own
    links above it."""
    from agent_sandbox.paths import is_within

    found = [a for a in anchors if a and is_within(path, a) and path != a]
    return max(found, key=len) if found else os.sep


def components(path: str, anchor: str) -> list[str]:
    """The names of `path` below `anchor`, lexically (never `..`)."""
    rel = os.path.relpath(path, anchor)
    parts = [p for p in rel.split(os.sep) if p and p != "."]
    if not parts or ".." in parts:
        raise OSError(errno.EXDEV, "not below its anchor", path)
    return parts


def _open_dir(name: str, parent: int, shown: str) -> int:
    """The directory `name` in `parent`, never through a symlink."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise ThroughSymlink(shown) from None
            except FileNotFoundError:
                pass
        raise


def _walk_parent(path: str, anchor: str, made: list | None):
    """(descriptor of the directory that holds `path`, its last name),
    walked from `anchor` without following a symlink. With `made`, missing
    directories are created (and listed there, oldest first); without, a
    missing one raises FileNotFoundError."""
    parts = components(path, anchor)
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    shown = anchor
    try:
        for part in parts[:-1]:
            shown = os.path.join(shown, part)
            try:
                step = _open_dir(part, fd, shown)
            except FileNotFoundError:
                if made is None:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made.append((shown, True, b"", anchor))
                except FileExistsError:
                    pass       # another session's, a moment ago
                step = _open_dir(part, fd, shown)
            os.close(fd)
            fd = step
        return fd, parts[-1]
    except BaseException:
        os.close(fd)
        raise


def _make(item, anchor: str, made: list) -> None:
    parent, name = _walk_parent(item.path, anchor, made)
    try:
        if item.is_dir:
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                _check_theirs(name, parent, True)
                return
        else:
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644, dir_fd=parent)
            except FileExistsError:
                _check_theirs(name, parent, False)
                return
            try:
                os.write(fd, item.placeholder)
            finally:
                os.close(fd)
        made.append((item.path, item.is_dir, item.placeholder, anchor))
    finally:
        os.close(parent)


def _check_theirs(name: str, parent: int, is_dir: bool) -> None:
    """An entry another session made a moment earlier is fine when it is of
    the right kind and not a symlink."""
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not (stat.S_ISDIR if is_dir else stat.S_ISREG)(info.st_mode):
        raise OSError(errno.EEXIST, "exists and is not a placeholder")


def create(candidates, anchors=(), made: list | None = None) -> list:
    """Make the placeholders the plan mounts (`candidates`: the compile's
    policy/view.py placeholder_candidates, those missing now are made), each
    walked from its anchor (anchor_of); return (path, is_dir, content,
    anchor) of each thing made (missing parents included), oldest first —
    also in `made`, when given, so that what was made before a refusal is
    still listed for removal."""
    made = [] if made is None else made
    anchors = [a for a in anchors if os.path.isdir(a)]   # a missing one: the next above it
    for item in candidates:
        if os.path.lexists(item.path):
            continue       # the user's own, or another session's placeholder
        try:
            _make(item, anchor_of(item.path, anchors), made)
        except ThroughSymlink as exc:
            try:
                target = f" (to {os.readlink(exc.link)})"
            except OSError:
                target = ""
            raise PolicyError(
                f"cannot create the read-only placeholder {item.path} — {exc.link} is a "
                f"symbolic link{target}: a placeholder made through it would land outside "
                "the tree the sandbox protects and cleans up. Replace the link with a real "
                f"directory, or create {os.path.basename(item.path)} in its target yourself, "
                "then start the sandbox again.", reason="placeholder_symlink") from None
        except OSError as exc:
            raise PolicyError(f"cannot create the read-only placeholder {item.path} — {exc}. "
                              "Create it yourself (an empty file, or a directory for a name "
                              "ending in /), or, if you added it to PROTECTED_PATHS, remove it "
                              "there; agents' project configuration (names.PROJECT_CONFIGS) "
                              "is always protected.", reason="placeholder_failed") from None
    return made


class project_lock:
    """Held while a session registers and makes placeholders, and while one
    unregisters and removes them. Best effort: without a state directory
    there is no list either. (A class, not contextlib: its import is a
    millisecond of every launch.)"""

    def __init__(self, home: str, project: str):
        self.path = _list_path(home, project)[:-len(".jsonl")] + ".lock"
        self.fd = None

    def __enter__(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                              0o600)
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            pass

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)     # releases the lock
            self.fd = None


def _list_path(home: str, project: str) -> str:
    from chaperon.paths import project_hash

    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), SUBDIR, project_hash(project) + ".jsonl")


def remember(home: str, project: str, created: list) -> None:
    """Add what this session made to the project's list (one appended line
    each, so concurrent sessions do not overwrite each other)."""
    if not created:
        return
    path = _list_path(home, project)
    lines = b"".join(jsonlite.dumps([p, d, c.hex(), a]) + b"\n" for p, d, c, a in created)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, lines)
        finally:
            os.close(fd)
    except OSError:
        pass   # unlisted placeholders simply stay: read-only meanwhile, never unsafe


def _others_running(home: str, project: str, session: str) -> bool:
    from agent_sandbox.services import registry

    if registry.held_by_others(home, project, session):
        return True       # a sandbox (or launcher) of the project still runs
    host, boot = registry.host_name(), registry.boot_id()
    records, _ = registry.read(home, now=0.0)
    for _, record in records:
        if record.get("project") != project or record.get("session") == session:
            continue
        verdict = registry.judge(record, host=host, boot=boot, lookup=registry.lookup_proc)
        if verdict in (registry.LIVE, registry.FOREIGN):
            return True
    return False


def release(home: str, project: str, session: str, created: list) -> None:
    """At the end of a session (after its registry record is gone): when no
    other session of the project runs, remove the project's placeholders,
    newest first, each only while it is still exactly what was written."""
    path = _list_path(home, project)
    if not created and not os.path.exists(path):
        return      # nothing of this project to remove: skip reading the registry
    if _others_running(home, project, session):
        return
    _unexclude(project)
    entries = []
    try:
        with open(path, "rb") as handle:
            for line in handle:
                try:
                    fields = jsonlite.loads(line)
                    # (lists written before the anchor was recorded: the project's)
                    p, d, c, a = fields if len(fields) == 4 else (*fields, project)
                    entries.append((p, bool(d), bytes.fromhex(c), a))
                except (ValueError, TypeError):
                    continue
    except OSError:
        pass
    for item in created:
        if item not in entries:
            entries.append(item)
    for item in reversed(entries):
        _remove(*item)
    try:
        os.unlink(path)
    except OSError:
        pass


def _remove(path: str, is_dir: bool, content: bytes, anchor: str) -> None:
    """Remove one placeholder if it is still exactly what was written,
    reached from its anchor without following a symlink (a directory the
    session swapped for a link to elsewhere is left alone)."""
    try:
        parent, name = _walk_parent(path, anchor, None)
    except OSError:
        return
    try:
        if is_dir:
            os.rmdir(name, dir_fd=parent)    # fails when not empty: then it stays
            return
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or \
                    os.read(fd, len(content) + 1) != content:
                return
        finally:
            os.close(fd)
        os.unlink(name, dir_fd=parent)
    except OSError:
        pass
    finally:
        os.close(parent)


# ---------------------------------------------------------------- .git/info/exclude
def _pattern(relative: str, is_dir: bool) -> bytes:
    """An anchored gitignore pattern matching exactly this path."""
    escaped = "".join("\\" + c if c in "\\*?[" else c for c in relative)
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return ("/" + escaped + ("/" if is_dir else "") + "\n").encode("utf-8", "surrogateescape")


def _worktree_patterns(project: str, candidates) -> list[bytes]:
    from agent_sandbox.paths import is_within

    dotgit = os.path.join(project, ".git")
    return [_pattern(os.path.relpath(item.path, project), item.is_dir)
            for item in candidates
            if is_within(item.path, project) and not is_within(item.path, dotgit)
            and not os.path.lexists(item.path)]


def _without_block(data: bytes) -> tuple[bytes, list[bytes]]:
    """(the file without our block, the lines the block held)."""
    lines = data.splitlines(keepends=True)
    if EXCLUDE_BEGIN not in lines:
        return data, []
    start = lines.index(EXCLUDE_BEGIN)
    end = lines.index(EXCLUDE_END, start) if EXCLUDE_END in lines[start:] else len(lines) - 1
    return b"".join(lines[:start] + lines[end + 1:]), lines[start + 1:end]


def _edit_exclude(project: str, edit) -> None:
    """Rewrite `.git/info/exclude` as edit(old bytes) → new bytes. Every
    component below the project is opened without following symlinks (the
    session could have planted one), the file is replaced by a rename."""
    fds = []
    try:
        fds.append(os.open(project, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        fds.append(os.open(".git", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=fds[-1]))
        os.stat("HEAD", dir_fd=fds[-1], follow_symlinks=False)   # a repository at all?
        info = os.open("info", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=fds[-1])
        fds.append(info)
        try:
            fd = os.open("exclude", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=info)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return
                old = os.read(fd, 1 << 20)
            finally:
                os.close(fd)
        except FileNotFoundError:
            old = b""
        new = edit(old)
        if new == old:
            return
        temp = f".exclude.agent-sandbox-{os.getpid()}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=info)
        try:
            os.write(fd, new)
        finally:
            os.close(fd)
        os.replace(temp, "exclude", src_dir_fd=info, dst_dir_fd=info)
    except OSError:
        pass     # not a repository (or one without info/): nothing to keep clean
    finally:
        for fd in fds:
            os.close(fd)


def exclude(project: str, candidates) -> None:
    """List this launch's work-tree placeholders in .git/info/exclude (under
    the project lock, before they are made)."""
    patterns = _worktree_patterns(project, candidates)
    if not patterns or not os.path.isdir(os.path.join(project, ".git")):
        return

    def add(old: bytes) -> bytes:
        rest, listed = _without_block(old)
        merged = list(dict.fromkeys(listed + patterns))
        if rest and not rest.endswith(b"\n"):
            rest += b"\n"
        return rest + EXCLUDE_BEGIN + b"".join(merged) + EXCLUDE_END

    _edit_exclude(project, add)


def _unexclude(project: str) -> None:
    _edit_exclude(project, lambda old: _without_block(old)[0])
