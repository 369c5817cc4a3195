"""What every backend produces: a Plan, and the guarantee report.

A Plan is data: the argv (with FdRef placeholders where a file descriptor
number goes), the payloads those descriptors carry, the environment the
sandbox starts with, and the guarantees provided and missing. The launcher
turns payloads into real descriptors and renders the argv; --dry-run renders
it with the placeholder names.
"""
from __future__ import annotations

from typing import NamedTuple

# SPEC §5: guarantee → one line a person can read.
GUARANTEE_TEXT = {
    "fs.hidden": "hidden paths do not exist (ENOENT)",
    "fs.write_confined": "writes only to the project and declared paths",
    "env.scrubbed": "credential variables removed from the environment",
    "seccomp": "dangerous syscalls answer EPERM",
    "pid.isolated": "processes outside the sandbox are invisible",
    "ipc.isolated": "private SysV IPC and /dev/shm",
    "passwd.filtered": "other users cannot be enumerated",
    "slurm.boundary": "munge socket and real Slurm binaries/config unreachable",
    "abstract_unix.scoped": "abstract unix sockets outside are unreachable",
    "signals.scoped": "processes outside cannot be signalled",
    "self.protected": "install dir and user config read-only",
    "tty.safe": "no TIOCSTI/TIOCLINUX injection into your terminal",
}


class FdRef(NamedTuple):
    """Where a payload's file descriptor number goes in the argv."""
    name: str

    def __str__(self) -> str:
        return f"<fd:{self.name}>"


class Payload(NamedTuple):
    """Bytes handed to the backend through a file descriptor: literal data, or
    the contents of a host file the launcher opens (seeded home files)."""
    data: bytes | None = None
    path: str | None = None


class Plan(NamedTuple):
    backend: str
    argv: tuple                     # str | FdRef
    payloads: dict                  # name → Payload
    env: dict                       # never printed: it holds API keys
    provides: tuple[str, ...]
    cannot: tuple[tuple[str, str], ...]   # (guarantee, why not)
    mounts: tuple = ()              # the ordered view, for --dry-run
    status_fd: str | None = None    # payload-less fd the backend reports status on

    def __repr__(self) -> str:
        return f"Plan(backend={self.backend!r}, argv={self.argv!r})"

    def render(self, fds: dict) -> list[str]:
        return [str(fds[a.name]) if isinstance(a, FdRef) else a for a in self.argv]

    def missing(self, required) -> tuple[str, ...]:
        return tuple(g for g in required if g not in self.provides)
