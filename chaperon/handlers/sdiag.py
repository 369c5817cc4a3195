"""sdiag: the controller's statistics, as the user would see them, with the
per-user RPC statistics cut to the caller's own line (chaperon/others.py)."""
from __future__ import annotations

from ..environment import command_env
from ..slurm.values import OTHER_CLUSTER, deny, flag
from ..slurm.options import REQ, CommandSpec
from ..others import sdiag
from ..scope import self_names
from .common import binary_and_args, run_real

SDIAG = CommandSpec("sdiag", [
    flag("all", "a"),
    deny("cluster", "M", REQ, OTHER_CLUSTER, aliases=("clusters",)),
    flag("help"),
    flag("reset", "r"),
    flag("sort-by-id", "i"),
    flag("sort-by-time", "t"),
    flag("sort-by-time2", "T"),
    flag("usage"),
    flag("version", "V"),
])


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SDIAG)
    code, data = run_real(out, [binary, *parsed.argv(), *parsed.rest],
                          env=command_env(request.env), cwd=ctx.project_dir, capture=True)
    out.stdout(sdiag(data, self_names(ctx)))
    return code
