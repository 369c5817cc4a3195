"""No landlock session process outlives its launcher.

bwrap and firejail run the command in a PID namespace of its own: its init
takes every process with it. Landlock has none, and the helper's watcher
kills the command's process group (or session) only — a process that moved
to a group of its own (setpgid) survived the launcher, kept its write grants
and could write after the guarded merge of the agent's settings
(agents/copy.py). Strategy: before starting a landlock sandbox the
launcher becomes a child subreaper (PR_SET_CHILD_SUBREAPER), so every
orphan of the session is re-parented to it rather than to init; after the
command has ended it walks its descendants and SIGKILLs the confined ones
(no_new_privs is set by the helper just before Landlock — the watcher, forked
before it, and the chaperon's children are not — or, when the launcher itself
runs with no_new_privs, a seccomp filter), reaping those that became its
children, until none is left or a bounded deadline passes. What survives is
returned: the caller then does not merge anything the session could still
write.
"""
from __future__ import annotations

import os
import _signal as signal   # the C module: signal.py's enums import 1 ms a launch
import time

def become_subreaper() -> bool:
    from agent_sandbox.paths import helper_module

    try:
        helper_module("landlock").child_subreaper()
    except (OSError, AttributeError):
        return False
    return True


def reap_orphan(pid: int | None, wait: float = 0.0) -> None:
    """Reap `pid` if it is our child and has ended: bwrap's sandbox init,
    which outlives bwrap's own process by the teardown of its namespaces
    and, orphaned, came back to us (a subreaper) — under an init that does
    not reap (a container, some CI hosts) every launch would leave a zombie
    counted against the user's process limit. Called last, so the teardown
    had the launcher's own cleanup to finish in (it usually has: a launch
    waits at most `wait` seconds for it); never reaps anything else."""
    if not pid:
        return
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if int(handle.read().rsplit(b")", 1)[1].split()[1]) != os.getpid():
                return
        pidfd = os.pidfd_open(pid)
    except (OSError, IndexError, ValueError):
        return
    try:
        import select

        if select.select([pidfd], [], [], wait)[0]:
            os.waitpid(pid, os.WNOHANG)
    except (OSError, ChildProcessError):
        pass
    finally:
        os.close(pidfd)


def _status_field(pid, name: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                key, _, value = line.decode("ascii", "replace").partition(":")
                if key == name:
                    return value.strip()
    except OSError:
        return None
    return None


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, state) for every process we can see."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            out[int(name)] = (int(fields[1]), fields[0].decode())
        except (OSError, IndexError, ValueError):
            continue
    return out


def confined_descendants(me: int | None = None) -> list[int]:
    """Live descendants of `me` that run under the sandbox's restrictions;
    zombies among our own children are reaped on the way."""
    me = os.getpid() if me is None else me
    field, want = (("Seccomp", "2") if _status_field("self", "NoNewPrivs") == "1"
                   else ("NoNewPrivs", "1"))
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(children.get(me, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        parent, state = table[pid]
        if state == "Z":
            if parent == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            continue
        if _status_field(pid, field) == want:
            found.append(pid)
    return found


def sweep(deadline: float = 3.0) -> list[int]:
    """Kill every confined descendant; returns those still alive at the
    deadline (none, unless something keeps forking faster than we kill)."""
    end = time.monotonic() + deadline
    while True:
        found = confined_descendants()
        if not found or time.monotonic() > end:
            return found
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)     # let the kernel re-parent their children to us
