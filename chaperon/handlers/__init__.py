"""Handlers: one module per Slurm command, each a short declaration (its
option table, its scope rules) over the shared pieces — chaperon/slurm (the
option parser and validator), chaperon/scope.py (which jobs a sandbox may
see and touch), chaperon/untag.py (Slurm's output without the tag),
chaperon/submit.py (what sbatch and srun share) and handlers/common.py (the
context, the runner, the refusal format).

A handler is `handle(ctx, request, out) -> exit code`. It writes the real
command's bytes through `out` (stdout/stderr frames), or raises `Refusal`:
`dispatch` catches it, once for every command, and prints
`agent-sandbox: <command>: <what> — <why>. <how instead>`, exit 1.

The table is lazy: a handler module is imported the first time its command
is asked for (and this package imports none of them at import time).
"""
from __future__ import annotations

import importlib
import os

from ..refusal import Refusal
from .common import Context, refuse

__all__ = ["BLOCKED", "COMMANDS", "Context", "dispatch"]

# The commands with a handler module of the same name.
COMMANDS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sstat", "sacct", "sacctmgr",
            "sprio", "sshare", "sinfo", "sdiag")

# Stubs that exist but are refused, each with the reason and the way forward.
BLOCKED = {
    "salloc": ("interactive allocations are not available inside the sandbox",
               "Make the allocation outside (salloc …) and start the sandbox inside it, or "
               "name it with agent-sandbox run --allocation JOBID: srun inside then runs "
               "steps in it. Use sbatch for batch work, or srun for a single step"),
    "sattach": ("attaching to a running step would bypass the sandbox's I/O rules",
                "Read the job's output file instead"),
    "sbcast": ("broadcasting files to compute nodes writes outside the project",
               "Keep inputs in the project directory; jobs see it"),
    "scrontab": ("recurring jobs would outlive the sandbox session",
                 "Submit individual jobs with sbatch"),
    "scrun": ("OCI containers are not sandboxed by agent-sandbox",
              "Run the workload with sbatch or srun"),
    "strigger": ("triggers run programs outside any sandbox",
                 "Poll with squeue or use sbatch --dependency"),
    "sreport": ("reports enumerate other users and accounts",
                "Use sacct for your own jobs"),
}


def blocked(ctx: Context, request, out) -> int:
    what, fix = BLOCKED.get(request.command, (
        f"{request.command} is not a Slurm command the sandbox proxies",
        "Use sbatch, srun, squeue, scancel, scontrol, sacct, sinfo or sdiag"))
    raise Refusal("blocked_command", f"{request.command} is refused", what, fix)


HANDLERS: dict = {}


def _handler(command: str):
    handler = HANDLERS.get(command)
    if handler is None:
        if command not in COMMANDS:
            return blocked
        handler = HANDLERS[command] = importlib.import_module(f"{__name__}.{command}").handle
    return handler


def dispatch(ctx: Context, request, out) -> int:
    """Log the request, run its handler, and turn a refusal into the house
    message: the one place a Refusal is caught."""
    ctx.log.request(request.command, [os.fsdecode(a) for a in request.args],
                    os.fsdecode(request.cwd))
    try:
        if request.has_nul:
            # No program can receive a NUL byte (exec would fail in every handler).
            raise Refusal("nul_byte", "an argument or variable with a NUL byte is refused",
                          "no program can receive it", "Remove it")
        return _handler(request.command)(ctx, request, out)
    except Refusal as refusal:
        return refuse(ctx, out, request.command, refusal)
