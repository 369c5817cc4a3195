"""sinfo and sdiag: cluster-wide views with no per-job data; they run as the
user would run them, options and all (SPEC §9: pass through)."""
from __future__ import annotations

import os

from ..environment import command_env
from . import refuse, run_real


def handle(ctx, request, out) -> int:
    binary = ctx.binary(request.command)
    if binary is None:
        return refuse(ctx, out, request.command, "not_installed",
                      f"{request.command} is not available", "it is not installed on this host",
                      "Ask your site admin")
    # The command's own input variables (SINFO_FORMAT, SINFO_SORT, …) only
    # shape this read-only view, so they reach it as they would outside.
    own = request.command.upper() + "_"
    keep = tuple(name for name in request.env_str if name.startswith(own))
    code, _ = run_real(out, [binary, *map(os.fsdecode, request.args)],
                       env=command_env(request.env, keep_slurm=keep), cwd=ctx.project_dir)
    return code
