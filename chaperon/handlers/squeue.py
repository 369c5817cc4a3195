"""squeue, scoped: the real squeue restricted to the jobs in scope (SPEC §9
scope). Output formats stay the user's own (-o, -O, --json, -h, …), so what
comes back is Slurm's exact output. Under session/project scope the ledger
names the jobs; under user/none scope squeue runs with --me.
"""
from __future__ import annotations

import os

from ..environment import command_env
from . import refuse, run_real

# Options that would select other users' jobs: refused with a reason.
REFUSED = {"-u": "--user", "--user": "--user", "-A": "--account", "--account": "--account",
           "--me": "--me", "-a": "--all", "--all": "--all"}
JOB_OPTIONS = ("-j", "--jobs")


def _split_jobs(args: list[str]) -> tuple[list[str], list[str] | None]:
    """Remove -j/--jobs from args; return (other args, requested ids or None)."""
    rest, wanted = [], None
    i = 0
    while i < len(args):
        arg = args[i]
        value = None
        if arg in JOB_OPTIONS:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        elif arg.startswith("--jobs="):
            value = arg[len("--jobs="):]
        elif arg.startswith("-j") and len(arg) > 2:
            value = arg[2:]
        else:
            rest.append(arg)
        if value is not None:
            wanted = (wanted or []) + [v for v in value.split(",") if v]
        i += 1
    return rest, wanted


def handle(ctx, request, out) -> int:
    args = [os.fsdecode(a) for a in request.args]
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in REFUSED or (arg.startswith("-u") and len(arg) > 2):
            return refuse(ctx, out, "squeue", "foreign_jobs", f"{name} is refused",
                          "the sandbox only shows the jobs in its scope",
                          "Run squeue without it; it lists exactly the jobs you may see")
    binary = ctx.binary("squeue")
    if binary is None:
        return refuse(ctx, out, "squeue", "not_installed", "squeue is not available",
                      "it is not installed on this host", "Ask your site admin")
    rest, wanted = _split_jobs(args)
    if ctx.scope in ("user", "none"):
        selection = ["--me"] + ([f"--jobs={','.join(wanted)}"] if wanted else [])
    else:
        in_scope = ctx.ledger.jobs(ctx.scope)
        ids = [j for j in (wanted or in_scope) if j.split("_")[0] in set(in_scope)]
        if wanted and len(ids) < len(wanted):
            out.stderr(b"slurm_load_jobs error: Invalid job id specified\n")
            return 1
        # No job in scope: a job-name filter nothing matches keeps squeue's own
        # empty output (header and all) and exit code.
        selection = (["--me", f"--jobs={','.join(ids)}"] if ids
                     else ["--me", f"--name=agent-sandbox-none-{os.urandom(4).hex()}"])
    code, _ = run_real(out, [binary, *rest, *selection], env=command_env(request.env),
                       cwd=ctx.project_dir)
    return code
