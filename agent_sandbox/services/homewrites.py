"""Writes to the private home that vanish at exit (HOME_ACCESS=tmpwrite).

With the default home mode the sandbox's $HOME is a tmpfs: the writable
entries (HOME_WRITABLE, the project) are bound into it, and a file written
anywhere else in it is gone when the session ends — silently, before: a
user who saved notes to ~/results.txt inside found nothing outside.

Strategy. While the sandbox starts (lifecycle AT_SPAWN), the launcher opens
the sandbox's home directory through /proc/<pid>/root of a process in the
sandbox — the first one whose home lies on another filesystem than the real
home (the tmpfs, once the backend has set up its view) — and holds that
descriptor: it keeps the tmpfs alive after the sandbox's mount namespace is
gone. At exit it walks the tmpfs by descriptor (never following a link,
never crossing onto another filesystem — a bound entry is the user's real
one, which stays), lists the regular files and symlinks the backend did not
make itself (the plan's seeded files, placeholders and links: `made`), and
says how many there were, the first few, and where to put them instead.
Only where the plan says what it made (bwrap's mount operations); a backend
whose home it cannot account for (firejail's private home is populated by
firejail) is not watched. Nothing here changes what the session can do.
"""
from __future__ import annotations

import os
import stat

SHOWN = 3            # paths named in the line
WALK_LIMIT = 20000   # entries looked at, at most
FIND_SECONDS = 2.0   # how long the start may take to show the tmpfs home


def made_paths(plan, home: str) -> frozenset:
    """Paths below `home` the plan itself puts there (every mount
    operation's destination): not the session's writes."""
    prefix = home.rstrip("/") + "/"
    return frozenset(op.dest for op in plan.mounts
                     if isinstance(getattr(op, "dest", None), str)
                     and op.dest.startswith(prefix))


def watchable(plan, policy) -> bool:
    from agent_sandbox.traits import traits

    return (policy.home_access == "tmpwrite" and traits(plan.backend).mount_namespace
            and any(getattr(op, "dest", None) == policy.home for op in plan.mounts))


def _pid_of(pidfd: int) -> int | None:
    try:
        with open(f"/proc/self/fdinfo/{pidfd}", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def open_home(gone: int | None, home: str) -> int | None:
    """The sandbox's home, opened from outside once the backend has put its
    tmpfs there; None when it cannot be seen (in time)."""
    import select
    import time

    from agent_sandbox.process.spawn import descendants

    if gone is None:
        return None
    pid = _pid_of(gone)
    try:
        real = os.stat(home).st_dev
    except OSError:
        return None
    if pid is None:
        return None
    deadline = time.monotonic() + FIND_SECONDS
    while time.monotonic() < deadline:
        for child, _fields in descendants(pid):
            try:
                fd = os.open(f"/proc/{child}/root{home}",
                             os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            if os.fstat(fd).st_dev != real:
                return fd
            os.close(fd)
        if select.select([gone], [], [], 0.01)[0]:
            return None                   # the sandbox ended before
    return None


def vanishing(home_fd: int, home: str, made) -> list[str]:
    """The files and links the session wrote on the tmpfs home (paths as
    the user knows them, below `home`), walked by descriptor."""
    device = os.fstat(home_fd).st_dev
    found: list[str] = []
    budget = [WALK_LIMIT]

    def walk(fd: int, path: str, depth: int) -> None:
        try:
            names = sorted(os.listdir(fd))
        except OSError:
            return
        for name in names:
            budget[0] -= 1
            if budget[0] < 0:
                return
            full = f"{path}/{name}"
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != device or full in made:
                continue                  # a bound entry (the real one stays), or ours
            if stat.S_ISDIR(info.st_mode):
                if depth < 32:
                    try:
                        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                        | os.O_CLOEXEC, dir_fd=fd)
                    except OSError:
                        continue
                    try:
                        walk(inner, full, depth + 1)
                    finally:
                        os.close(inner)
            elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                found.append(full)

    walk(home_fd, home.rstrip("/"), 0)
    return found


def report_line(paths, home: str, project: str) -> str:
    """One line: how many, the first few, where to put them instead."""
    def short(path: str) -> str:
        return "~" + path[len(home.rstrip("/")):]

    shown = ", ".join(short(p) for p in paths[:SHOWN])
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    first = short(paths[0]).split("/")[1] if paths else ""
    return (f"{len(paths)} file{'s' if len(paths) != 1 else ''} the session wrote to its "
            f"private home vanished with it: {shown}{more} (HOME_ACCESS=tmpwrite). Write what "
            f"you want to keep to the project ({project}), or make the entry writable: "
            f"HOME_WRITABLE+=({first}) in ~/.config/agent-sandbox/sandbox.conf.")
