"""sstat, scoped (SPEC §9 scope): statistics of running steps, for in-scope
jobs only. Every id named (-j, or as sstat also reads them, positional) that
is out of scope becomes a placeholder no job has, so sstat answers as for a
job that does not exist (scope.py); the rest of the command line is the
caller's, so the output is sstat's own.
"""
from __future__ import annotations

from ..environment import command_env
from ..options import TEXT, CommandSpec, allow, flag
from ..scope import Filter, Placeholders, Scope, bad_refs, by_lines, job_refs
from ..selection import select
from ..submit import Refusal
from . import binary_and_args, refuse_with, run_real

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
    try:
        binary, parsed = binary_and_args(ctx, request, SSTAT)
        refs = job_refs(parsed.values.get("jobs", [])) + job_refs(parsed.rest)
        wrong = bad_refs(refs)
        if wrong:
            raise Refusal("bad_job_id", f"the job id {wrong[0]!r} is refused",
                          "it is not a job id the sandbox can check",
                          "Give job ids such as 123 or 123.0")
    except Refusal as refusal:
        return refuse_with(ctx, out, "sstat", refusal)
    placeholders = Placeholders()
    selection = []
    if refs:   # none named (absent, -j '', -j ,): sstat's own "no job" error, nothing selected
        selection = [select(Scope(ctx, request), refs, placeholders).jobs_option()]
    target = Filter(out, by_lines(placeholders.restore))
    code, _ = run_real(target, [binary, *parsed.argv(skip=("jobs",)), *selection],
                       env=command_env(request.env), cwd=ctx.project_dir)
    target.flush()
    return code
