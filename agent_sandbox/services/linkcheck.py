"""Files with a second name: reported at launch (issue 27, docs/shared-channels.md §1).

A regular file with more than one link is one inode under several names. A
write through a name the sandbox may write changes what every other name
shows — outside the sandbox too, where the read-only view protects the other
*path*, not the inode. uv links a venv's files (`uv sync`, `uv venv`,
`uv tool install`) from ~/.cache/uv by default, so a `.venv` uv made in the
project outside shares its files with the cache and through it with every
other uv install of the user; `git clone --local` links objects, pnpm links
node_modules from its store, conda an environment from pkgs/.

- `report(policy)` (every launch, the cached ones too, before the command
  runs): the writable trees (the project, HOME_WRITABLE and
  EXTRA_WRITABLE_PATHS entries; not the sandbox's own hidden directories)
  are walked without following a link, and every regular file whose link
  count is larger than the names it has inside those trees is reported,
  with the fix (recreate them as copies: `UV_LINK_MODE=copy`, reinstall).
  Reported, not refused and not made read-only: an install tool inside
  replaces files, which a read-only bind of each would break.
- Cost: the walk remembers each directory it listed (inode, mtime, ctime,
  its subdirectories and its files with several links) in the hidden state
  tree; a directory whose times did not change is not listed again, so a
  launch stats each directory once plus the files known to have several
  links. A new `.venv`, an install or a `git clone --local` into the tree
  changes the directories it writes. Not seen until its directory changes:
  a second name made *outside* for a file already in the tree (the tree
  itself being the source of a `cp -al` or a local clone).
- `install_links(paths)` (each compile, doctor): the same question for the
  install the launcher runs from; `self.protected` is partial while any
  (backends/base.py).
"""
from __future__ import annotations

import marshal
import os
import stat

# Below the state directory's cache/ (the plan cache's recorder ignores it:
# remembering directories never makes a plan stale).
SUBDIR = "cache/links"
WALK_LIMIT = 200_000    # directory entries listed per launch (a tree beyond: said so)
SHOWN = 3               # files named in a message
FORMAT = 1


def scan(root: str, previous: dict, limit: int = WALK_LIMIT):
    """(files, directories, complete): every regular file below `root` with
    more than one link, as (path, device, inode, links), found without
    following a link; `directories`: what to remember for the next scan
    (path → ((inode, mtime, ctime), subdirectories, names with several
    links)). A directory whose times equal `previous`'s is not listed."""
    files, directories, listed = [], {}, 0
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            info = os.lstat(directory)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        key = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        known = previous.get(directory)
        if known is not None and known[0] == key:
            subdirs, several = known[1], known[2]
        else:
            subdirs, several = [], []
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        listed += 1
                        if entry.is_dir(follow_symlinks=False):
                            subdirs.append(entry.name)
                        elif entry.is_file(follow_symlinks=False):
                            try:
                                if entry.stat(follow_symlinks=False).st_nlink > 1:
                                    several.append(entry.name)
                            except OSError:
                                pass
            except OSError:
                continue
            if listed > limit:
                return files, directories, False
            subdirs, several = tuple(subdirs), tuple(several)
        directories[directory] = (key, subdirs, several)
        for name in several:
            path = os.path.join(directory, name)
            try:
                each = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(each.st_mode) and each.st_nlink > 1:
                files.append((path, each.st_dev, each.st_ino, each.st_nlink))
        stack.extend(os.path.join(directory, name) for name in subdirs)
    return files, directories, True


def shared(files) -> list[tuple[str, int]]:
    """(path, links) of the files that have names outside the scanned
    trees: more links than the names found for their inode there."""
    names: dict[tuple[int, int], int] = {}
    for _path, dev, ino, _links in files:
        names[(dev, ino)] = names.get((dev, ino), 0) + 1
    return [(path, links) for path, dev, ino, links in files if links > names[(dev, ino)]]


def roots_of(policy) -> list[str]:
    """The writable trees a session shares with the outside, outermost only
    (the launcher's own hidden directories — the package cache, an agent's
    session copy — are the session's and not walked)."""
    from agent_sandbox.paths import is_within

    # (fields only: a cached launch's policy is a record, plancache/plans.py)
    return outermost([policy.project_dir] + [p for p in policy.home_writable
                                             + policy.extra_writable
                                             if not any(is_within(p, h) for h in policy.hidden)])


def outermost(roots) -> list[str]:
    """`roots` without those inside another (a file is one name, walked once)."""
    from agent_sandbox.paths import is_within

    roots = list(dict.fromkeys(roots))
    return [r for r in roots if not any(r != o and is_within(r, o) for o in roots)]


def message(found, complete: bool = True) -> str:
    # The names are the session's (a file in the project): escaped, so that
    # no name prints a line or a terminal escape of its choosing.
    from agent_sandbox.logfiles import clean

    shown = ", ".join(f"{clean(path)} ({links} links)" for path, links in found[:SHOWN])
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    partial = "" if complete else " (the walk stopped early: there may be more)"
    return (f"{len(found)} file(s) the sandbox can write have another name outside its "
            f"writable trees (hard links): {shown}{more}{partial} — a write to one inside "
            "changes every other name, outside the sandbox too (a venv or tool uv installed "
            "shares its files with ~/.cache/uv and every other uv install of yours). Make "
            "them copies: for a uv venv `UV_LINK_MODE=copy uv sync --reinstall` (and set "
            "UV_LINK_MODE=copy in your shell), otherwise `cp -p FILE FILE.new && mv FILE.new "
            "FILE`; docs/shared-channels.md")


def report(policy, say) -> list[tuple[str, int]]:
    """The launch's check: the shared files found (also said through `say`)."""
    roots = roots_of(policy)
    remembered = _load(policy.home, roots)
    found, states, complete = [], {}, True
    for root in roots:
        files, directories, done = scan(root, remembered.get(root, {}))
        found += files
        complete = complete and done
        if done:
            states[root] = directories
    if states != remembered:
        _store(policy.home, roots, states)
    result = shared(found)
    if result or not complete:
        say("warning: " + message(result, complete) if result else
            f"warning: the check for hard-linked files stopped after {WALK_LIMIT} entries "
            f"in {' '.join(roots)}: files there may share their inode with a file outside "
            "(docs/shared-channels.md)")
    return result


def install_links(paths, limit: int = 50_000) -> tuple:
    """(how many, a few of them) of the install's files with more than one
    link (`paths`: the launcher's package and virtual environment)."""
    found = []
    for root in outermost(paths):
        files, _dirs, _complete = scan(root, {}, limit)
        found += files
    result = shared(found)
    return (len(result), tuple(path for path, _links in result[:SHOWN]))


# ---------------------------------------------------------------- remembered directories
def _name(roots) -> str:
    import zlib

    return f"{zlib.crc32(repr(roots).encode('utf-8', 'surrogateescape')):08x}.marshal"


def _load(home: str, roots) -> dict:
    """The directories remembered for exactly these roots, from a file of
    this user's in the hidden state tree that no one else can write (as
    every cache of the launcher, config/load.py load_cache); else nothing."""
    from agent_sandbox.plancache.plans import _open_private
    from agent_sandbox.paths import state_dir

    dir_fd = _open_private(state_dir(home), tuple(SUBDIR.split("/")))
    if dir_fd is None:
        return {}
    try:
        fd = os.open(_name(roots), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return {}
    finally:
        os.close(dir_fd)
    try:
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                    or info.st_mode & 0o022):
                return {}
            stored = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not (isinstance(stored, tuple) and len(stored) == 3 and stored[0] == FORMAT
            and stored[1] == tuple(roots) and isinstance(stored[2], dict)):
        return {}
    return stored[2]


def _store(home: str, roots, states: dict) -> None:
    """Best effort: written through a descriptor of the state tree opened
    without following a link."""
    from agent_sandbox.paths import STATE_DIR, NotOwnDirectory, open_own_dir

    try:
        dir_fd = open_own_dir(home, f"{STATE_DIR}/{SUBDIR}", create=True)
    except (OSError, NotOwnDirectory):
        return
    name = _name(roots)
    temp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            marshal.dump((FORMAT, tuple(roots), states), handle)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except (OSError, ValueError):
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
    finally:
        os.close(dir_fd)
