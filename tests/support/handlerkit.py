"""Handlers in-process: a Context built as the chaperon builds it (a fresh
state directory, a session of a project) and an `out` that collects the
frames, so tests can call `dispatch` without a sandbox or FIFOs. `binaries`
names the real Slurm programs, or fakes."""
from __future__ import annotations

import os
import uuid

from chaperon.wire import protocol
from chaperon.audit import AuditLog
from chaperon.handlers import Context, dispatch

SLURM_COMMANDS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sstat", "sacct",
                  "sacctmgr", "sprio", "sshare", "sinfo", "sdiag")


class Collected:
    """An `out` that keeps what a handler wrote, frame by frame."""

    def __init__(self):
        self.frames: list[tuple[str, bytes]] = []

    def stdout(self, data: bytes) -> None:
        self.frames.append(("stdout", bytes(data)))

    def stderr(self, data: bytes) -> None:
        self.frames.append(("stderr", bytes(data)))

    @property
    def out(self) -> bytes:
        return b"".join(d for k, d in self.frames if k == "stdout")

    @property
    def err(self) -> bytes:
        return b"".join(d for k, d in self.frames if k == "stderr")


def context(state_dir: str, project_dir: str, binaries: dict[str, str], *,
            scope: str = "project", session: str | None = None, user: str = "") -> Context:
    config = {
        "session_id": session or uuid.uuid4().hex[:12], "project_dir": project_dir,
        "staging_dir": os.path.join(state_dir, "staging"), "state_dir": state_dir,
        "slurm_scope": scope, "slurm_binaries": binaries, "log_level": "info",
        "retain_days": 1, "allowed_partitions": [], "max_jobs": 0, "allow_mail": False,
        "backend": "bwrap", "fixed_mount_points": True, "launcher": ["/bin/false"],
        "jobstart": "/bin/false", "python": "/usr/bin/python3",
        "home": os.path.dirname(project_dir), "user": user, "overrides": {},
    }
    os.makedirs(config["staging_dir"], mode=0o700, exist_ok=True)
    return Context(config, AuditLog(config))


def call(ctx: Context, command: str, *args, env=None, stdin=None) -> tuple[int, Collected]:
    """One request through the handler table, as the chaperon makes it."""
    request = protocol.Request(command, args, cwd=ctx.project_dir,
                               env=env if env is not None else {"PATH": "/usr/bin:/bin"},
                               stdin=stdin, resp_path="/dev/null")
    out = Collected()
    return dispatch(ctx, request, out), out
