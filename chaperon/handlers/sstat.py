"""sstat, scoped (SPEC §9 scope): statistics of running steps, for in-scope
jobs only. Every id named (-j, or as sstat also reads them, positional) that
is out of scope becomes a placeholder no job has, so sstat answers as for a
job that does not exist (scope.py); the rest of the command line is the
caller's, so the output is sstat's own.
"""
from __future__ import annotations

from ..environment import command_env
from ..slurm.values import TEXT, allow, flag
from ..slurm.options import CommandSpec
from ..untag import Filter, by_lines
from ..scope import Placeholders, Scope
from ..slurm.jobids import check_refs, job_refs
from ..selection import select
from .common import binary_and_args, run_real

SSTAT = CommandSpec("sstat", [
    flag("allsteps", "a"),
    allow("format", "o", TEXT, aliases=("fields", "field")),
    flag("help"),
    flag("helpformat", "e"),
    flag("pidformat", "i"),
    allow("jobs", "j", TEXT, aliases=("job",)),
    flag("noconvert"),
    flag("noheader", "n"),
    flag("parsable", "p"),
    flag("parsable2", "P"),
    flag("usage"),
    flag("verbose", "v"),
    flag("version", "V"),
])


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SSTAT)
    refs = job_refs(parsed.values.get("jobs", [])) + job_refs(parsed.rest)
    check_refs(refs, "123 or 123.0")
    placeholders = Placeholders()
    selection = []
    if refs:   # none named (absent, -j '', -j ,): sstat's own "no job" error, nothing selected
        selection = [select(Scope(ctx, request), refs, placeholders).jobs_option()]
    target = Filter(out, by_lines(placeholders.restore))
    code, _ = run_real(target, [binary, *parsed.argv(skip=("jobs",)), *selection],
                       env=command_env(request.env), cwd=ctx.project_dir)
    target.flush()
    return code
