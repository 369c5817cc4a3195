"""Pathname unix sockets in the trees the sandbox shows from the host
(SPEC §5 `unix_sockets.confined`, §8 "Sockets"; docs/shared-channels.md §5).

A read-only mount does not stop connect(): a tmux server's socket under a
home shown read-only still runs any command the sandbox sends it, outside.
Only the socket's absence does. So the launch looks for sockets where the
user's own servers put them — every tree it shows from the real home — and
the view treats each one like a hidden path: the carve walker (view.py)
leaves it out, so it does not exist inside (bwrap and firejail; Landlock
cannot restrict connect() and its report says so).

Strategy: one scandir walk per tree, never following a symbolic link (a
link is recreated as a link by the view, and one that leads to a socket
found here dangles: the walker resolves it). scandir's d_type names a
socket without a stat call on the file systems a home lives on; an entry of
unknown type is lstat'ed. Pruned: hidden paths (never shown) and the
project (its sockets are the session's own: SPEC §8 allows them).

The plan cache: a socket made after a compile must not be reachable on a
cached launch. The walk keeps what it listed (`Listed`: each directory's
times and the names of the sockets and directories in it); the compile
records that as one derived fact (plancache/plans.py socket_walker) and a
hit `recheck`s it: one lstat per directory while its times are unchanged,
a new listing where they changed, a whole walk of a directory that is new.
A plan therefore survives the files an agent's session writes in its
state directory and yields to any new socket (docs/shared-channels.md §5).

Trees the walk does not search — READONLY_MOUNTS (/usr … /scratch), an
EXTRA_WRITABLE_PATHS entry outside the home, a shared /tmp or /dev/shm, the
name service's sockets kept in NETWORK_MODE=open — are named by
`unsearched()`, which the guarantee report quotes.

In NETWORK_MODE allowlist and isolated the resolver's directories in /run
are walked too (`run_trees`), so systemd-resolved's varlink sockets are
carved out of /run/systemd/resolve while its resolv.conf files stay; the
nscd socket directory is not bound at all there (policy/resolve.py).
"""
from __future__ import annotations

import os
import stat
from typing import NamedTuple

from agent_sandbox.paths import is_within

# Trees that cannot hold a socket (sysfs): never searched, never reported.
NO_SOCKETS = ("/sys",)
# NETWORK_MODEs in which no name may be resolved inside.
NO_RESOLVER = ("allowlist", "isolated")


def find_sockets(trees, prune=(), facts: list | None = None) -> tuple[str, ...]:
    """Every pathname unix socket in `trees` (a tree may itself be one), not
    below a path in `prune`, sorted. Symbolic links are not followed; a
    directory that cannot be listed counts as one (hidden whole: its entries
    may still be reached by name). `facts`, if given, gets
    one Listed per directory listed (what a cached plan rechecks)."""
    found: list[str] = []
    stack = [os.path.normpath(t) for t in dict.fromkeys(trees)]
    seen: set[str] = set()
    while stack:
        path = stack.pop()
        if path in seen or any(is_within(path, p) for p in prune):
            continue
        seen.add(path)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISSOCK(info.st_mode):
            found.append(path)
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        listed = _list(path)
        if listed is None:
            # Unlistable is not unreachable: a directory with search but no
            # read permission (0300, which a session that may write the home
            # can set) is traversed by name, a socket in it at a name the
            # agent knows connectable. It goes whole, like a socket; its
            # record (UNLISTED) makes a cached plan recompile once it changes.
            found.append(path)
            if facts is not None:
                facts.append(Listed(path, _signature(info), UNLISTED, ()))
            continue
        sockets, dirs = listed
        found += [os.path.join(path, name) for name in sockets]
        stack += [os.path.join(path, name) for name in dirs]
        if facts is not None:
            facts.append(Listed(path, _signature(info), sockets, dirs))
    return tuple(sorted(found))


# The sockets recorded for a directory the walk could not list: no listing
# equals it, so a recheck of one that changed recompiles.
UNLISTED = ("",)


class Listed(NamedTuple):
    """One directory the walk listed: its signature (a new entry changes its
    times), the names of the sockets and of the directories in it."""
    path: str
    signature: tuple
    sockets: tuple[str, ...]
    dirs: tuple[str, ...]


def _signature(info) -> tuple:
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _list(path: str):
    """(socket names, directory names) in `path`, sorted; None: unreadable."""
    sockets, dirs = [], []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.name)
                    elif not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                        # a socket, a fifo, a device, or d_type unknown
                        if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                            sockets.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return None
    return tuple(sorted(sockets)), tuple(sorted(dirs))


def recheck(listed: Listed, prune=()) -> tuple[str, ...] | None:
    """What a cached plan asks of a directory its compile listed: the names
    of the sockets in it now — equal to listed.sockets while the plan still
    hides every socket below it. Cheap when nothing changed (one lstat: the
    same times mean the same entries); else the directory is listed again
    and each directory new in it walked whole (a socket there: None, which
    equals nothing). Files and directories that come and go without a
    socket (an agent's session files) keep the plan; a directory that is
    gone keeps it too when it held no socket (the plan carved nothing in it)."""
    try:
        info = os.lstat(listed.path)
    except OSError:
        return listed.sockets if not listed.sockets else None
    if not stat.S_ISDIR(info.st_mode):
        return listed.sockets if not listed.sockets else None
    if _signature(info) == tuple(listed.signature):
        return listed.sockets
    now = _list(listed.path)
    if now is None:
        return None
    sockets, dirs = now
    new = [os.path.join(listed.path, d) for d in dirs if d not in listed.dirs]
    if new and find_sockets(new, prune):
        return None
    return sockets


def home_trees(*, home: str, home_access: str, home_readonly, home_writable, extra_writable,
               overlays) -> tuple[str, ...]:
    """The trees the view shows from the real home: the whole home where it
    is shown (HOME_ACCESS read and write), else its granted entries."""
    if home_access in ("read", "write"):
        return (home,)
    shown = tuple(home_readonly) + tuple(home_writable) + tuple(extra_writable) + tuple(overlays)
    return tuple(p for p in dict.fromkeys(shown) if is_within(p, home))


def run_trees(network_mode: str, run_binds) -> tuple[str, ...]:
    """The /run directories whose sockets go: the resolver's, where no name
    may be resolved inside."""
    return tuple(run_binds) if network_mode in NO_RESOLVER else ()


def unsearched(policy) -> tuple[str, ...]:
    """The trees the sandbox shows from the host whose sockets stay
    connectable (not searched), each with what it is, for the guarantee
    report: exactly what unix_sockets.confined does not cover."""
    out = []
    system = [p for p in policy.system_readonly if p not in NO_SOCKETS]
    if system:
        out.append("READONLY_MOUNTS " + " ".join(system))
    extra = [p for p in policy.extra_writable if not is_within(p, policy.home)]
    if extra:
        out.append("EXTRA_WRITABLE_PATHS " + " ".join(extra))
    if not policy.private_tmp:
        out.append("/tmp and /var/tmp (PRIVATE_TMP=false)")
    if not policy.private_ipc:
        out.append("/dev/shm (PRIVATE_IPC=false)")
    walked = run_trees(policy.network_mode, policy.run_binds)
    kept = [p for p in policy.run_binds if p not in walked]
    if kept:
        out.append("the name service's " + " ".join(kept) + " (NETWORK_MODE=open)")
    return tuple(out)


def report(policy, *, extra: tuple[str, ...] = ()) -> str:
    """The partial line of unix_sockets.confined on a backend with a mount
    view: what is hidden, then what is not searched. A bind shows the host's
    later entries, so a socket made after the walk in a shown directory is
    reachable: only a connect() supervisor (SPEC §5a) could close that."""
    left = unsearched(policy) + extra
    return ("sockets are hidden in the trees shown from your home"
            + (" and in the resolver's /run directories" if run_trees(
                policy.network_mode, policy.run_binds) else "")
            + " as they were at the launch (one made there later, e.g. a tmux server started "
            "during the session, is reachable until the session ends); the project is left "
            "as it is (the sandbox's own sockets live there), so a socket a program outside "
            "made in it (a `tmux -S` socket, git's fsmonitor daemon in .git) is connectable"
            + ("; these trees are shown without being searched, so a socket in them stays "
               "connectable: " + "; ".join(left) if left else ""))
