"""The session registry: which sandboxes of this user run on this host.

The launcher writes one small JSON record per session right before the
sandbox starts, `~/.local/state/agent-sandbox/sessions/<session>.json` (0600
in a 0700 directory, hidden inside every sandbox like the rest of the state
directory, so an agent can neither forge nor remove one), and removes it in
its `finally`. A launcher killed with SIGKILL cannot remove its record, so a
reader never trusts one: `judge` calls a record live only while a process
with the recorded pid runs, as this user, on the same boot of the same host,
with the same start time. The start time is the kernel's (clock ticks since
boot, field 22 of /proc/PID/stat): unlike a wall-clock creation time it does
not move when the clock is stepped, so a pid reused by another process never
matches and a long-running session is never mistaken for a stale one.

Records of other hosts (a home on NFS shared by several login nodes) are only
counted: their processes cannot be checked from here, so they are left for
`agent-sandbox status` on their own host to judge.

A record says whether the *launcher* runs. The sandbox can outlive it: a
launcher SIGKILLed after spawning bwrap but before bwrap's sandbox init arms
its parent-death signal (bwrap does that only after its mounts) leaves a
sandbox running with nobody to end it, its placeholders mounted. So each
launcher also takes a lock, `~/.local/state/agent-sandbox/sandboxes/
<project hash>.<session>` (`flock`, made under a temporary name and renamed
once locked, so a visible one is never free while its owner starts), and
hands the descriptor to the backend as one its sandbox's init keeps open for
the sandbox's whole life (bwrap `--sync-fd`; the command itself never gets
it). The lock is free only when the launcher *and* every process holding
the descriptor are gone, whatever killed them, with no window between spawn
and record: `held_by_others` is what placeholders.release and gitcheck ask
before they treat a session as ended (docs/shared-channels.md §7). The
project is in the file's name, which nothing inside can change.

Writing costs one small file (well under a millisecond): this module imports
only os, and jsonlite (json's C parts, without json's 3 ms of imports).
"""
from __future__ import annotations

import os

from agent_sandbox import jsonlite
# A record's host and boot (on the lowest floor: the plan cache keys plans on
# the boot too); the services ask them here.
from agent_sandbox.hostid import boot_id, host_name

SUBDIR = "sessions"
HELD_SUBDIR = "sandboxes"
TEMP_GRACE = 60.0        # seconds before an unreadable or half-written file is removed
LIVE, STALE, FOREIGN = "live", "stale", "foreign"
FIELDS = ("session", "pid", "host", "boot_id", "start_ticks", "uid")


def registry_dir(home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), SUBDIR)




def _state_and_ticks(pid: int | str) -> tuple[bytes, int] | None:
    """(state letter, start time in clock ticks since boot) from
    /proc/PID/stat; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int | str = "self") -> int | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    found = _state_and_ticks(pid)
    return found[1] if found else None


def lookup_proc(pid: int):
    """(uid, start ticks) of a running, non-zombie process, else None: the
    `lookup` judge() uses, from /proc alone."""
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    found = _state_and_ticks(pid)
    if found is None or found[0] == b"Z":
        return None
    return uid, found[1]


# ---------------------------------------------------------------- writing (launcher)
def register(home: str, *, session: str, backend: str, project: str,
             chaperon_pid: int | None, command: str,
             allocation: str | None = None) -> str | None:
    """Write this launcher's record; returns its path, None when it could not
    be written (a full or read-only home must not stop a launch)."""
    import time

    directory = registry_dir(home)
    record = {"session": session, "pid": os.getpid(), "host": host_name(),
              "boot_id": boot_id(), "start_ticks": start_ticks(), "uid": os.getuid(),
              "started": time.time(), "backend": backend, "project": project,
              "chaperon_pid": chaperon_pid, "command": command}
    if allocation:     # the user's allocation this session adopted (chaperon.py)
        record["allocation"] = allocation
    path = os.path.join(directory, f"{session}.json")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path if _write(path, os.path.join(directory, f".{session}.tmp"), record) else None


def set_chaperon(path: str, pid: int) -> None:
    """Name the chaperon's pid in this launcher's record once it was started
    on demand (services/chaperon.py); best effort, like `register`."""
    try:
        with open(path, "rb") as handle:
            record = jsonlite.loads(handle.read())
        record["chaperon_pid"] = pid
    except (OSError, ValueError, TypeError):
        return
    _write(path, os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".pid.tmp"),
           record)


def _write(path: str, temp: str, record: dict) -> bool:
    """Write `record` to `path` through `temp`: readers never see half a record."""
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, jsonlite.dumps(record))
        finally:
            os.close(fd)
        os.replace(temp, path)
    except (OSError, ValueError, TypeError):
        try:
            os.unlink(temp)
        except OSError:
            pass
        return False
    return True


def unregister(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


# ---------------------------------------------------------------- the sandbox's lock
def _held_dir(home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), HELD_SUBDIR)


def _held_name(project: str, session: str) -> str:
    from chaperon.paths import project_hash

    return f"{project_hash(project)}.{session}"


def hold(home: str, session: str, project: str) -> int | None:
    """Take this session's lock (before the sandbox is spawned); returns its
    descriptor (close-on-exec: the backend gets a copy), None when the state
    directory cannot be written (then only the record counts, as before)."""
    import fcntl

    directory = _held_dir(home)
    name = _held_name(project, session)
    temp = os.path.join(directory, f".{name}.tmp")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(temp, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(temp, os.path.join(directory, name))
    except OSError:
        os.close(fd)
        try:
            os.unlink(temp)
        except OSError:
            pass
        return None
    return fd


def unhold(home: str, session: str, project: str, fd: int | None) -> None:
    """At the end of the session (after the sandbox was waited for)."""
    if fd is None:
        return
    try:
        os.unlink(os.path.join(_held_dir(home), _held_name(project, session)))
    except OSError:
        pass
    os.close(fd)


def held_by_others(home: str, project: str | None, session: str = "") -> set[str]:
    """Sessions of `project` (None: of any project), but `session`, whose lock
    someone still holds: a launcher, or a sandbox that outlived its launcher.
    A lock found free is left over from a killed session whose sandbox is
    gone too: removed."""
    import fcntl

    directory = _held_dir(home)
    prefix = _held_name(project, "") if project is not None else ""
    try:
        names = [n for n in os.listdir(directory)
                 if n.startswith(prefix) and not n.startswith(".") and "." in n]
    except OSError:
        return set()
    held = set()
    for name in names:
        other = name.partition(".")[2]
        if other == session:
            continue
        try:
            fd = os.open(os.path.join(directory, name),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held.add(other)
        except OSError:
            held.add(other)       # cannot tell: count it (placeholders stay, never unsafe)
        else:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
        finally:
            os.close(fd)
    return held


# ---------------------------------------------------------------- reading (status)
def is_live(home: str, session: str) -> bool:
    """Whether `session` has a record whose launcher runs here now."""
    if not session or "/" in session or session.startswith("."):
        return False
    try:
        with open(os.path.join(registry_dir(home), f"{session}.json"), "rb") as handle:
            record = jsonlite.loads(handle.read())
    except (OSError, ValueError):
        return False
    return judge(record, host=host_name(), boot=boot_id(), lookup=lookup_proc) == LIVE


def judge(record, *, host: str, boot: str, lookup) -> str:
    """LIVE, STALE or FOREIGN for one record. `lookup(pid)` returns the running
    process's (uid, start ticks), or None when there is none (or it is a zombie)."""
    if not isinstance(record, dict) or any(k not in record for k in FIELDS):
        return STALE
    if record["host"] != host:
        return FOREIGN
    if record["boot_id"] != boot or not isinstance(record["pid"], int):
        return STALE
    found = lookup(record["pid"])
    if found is None:
        return STALE
    uid, ticks = found
    if uid != record["uid"] or ticks is None or ticks != record["start_ticks"]:
        return STALE            # the pid now belongs to another process
    return LIVE


def read(home: str, *, now: float) -> tuple[list[tuple[str, dict]], list[str]]:
    """([(path, record)], [paths of leftovers to delete]): parsed records, and
    files that can no longer be a record being written (temporary or
    unreadable files older than TEMP_GRACE)."""
    directory = registry_dir(home)
    records, junk = [], []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return [], []
    for name in names:
        path = os.path.join(directory, name)
        record = None
        if name.endswith(".json") and not name.startswith("."):
            try:
                with open(path, "rb") as handle:
                    record = jsonlite.loads(handle.read(65536))
            except (OSError, ValueError):
                record = None
            if isinstance(record, dict):
                records.append((path, record))
                continue
        try:
            old = now - os.lstat(path).st_mtime > TEMP_GRACE
        except OSError:
            continue
        if old:
            junk.append(path)
    return records, junk


def remove(paths) -> int:
    removed = 0
    for path in paths:
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed
