"""sstat, scoped (SPEC §9 scope): statistics of running steps, for in-scope
jobs only. Every id named (-j, or as sstat also reads them, positional) that
is out of scope becomes a placeholder no job has, so sstat answers as for a
job that does not exist (scope.py); the rest of the command line is the
caller's, so the output is sstat's own.
"""
from __future__ import annotations

from ..environment import command_env
from ..options import TEXT, CommandSpec, OptionRefused, allow, flag
from ..scope import Filter, Placeholders, Scope, bad_refs, by_lines, job_refs, parse_permuted
from ..submit import Refusal, from_option
from . import refuse, run_real

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
        binary = ctx.binary("sstat")
        if binary is None:
            raise Refusal("not_installed", "sstat is refused", "it is not installed here",
                          "Ask your site admin")
        try:
            parsed = parse_permuted(SSTAT, request.args_str)
        except OptionRefused as refused:
            raise from_option(refused) from None
        refs = job_refs(parsed.values.get("jobs", [])) + job_refs(parsed.rest)
        wrong = bad_refs(refs)
        if wrong:
            raise Refusal("bad_job_id", f"the job id {wrong[0]!r} is refused",
                          "it is not a job id the sandbox can check",
                          "Give job ids such as 123 or 123.0")
    except Refusal as refusal:
        return refuse(ctx, out, "sstat", refusal.reason, refusal.what, refusal.why,
                      refusal.fix)
    placeholders = Placeholders()
    selection = []
    if refs:
        selection = ["--jobs=" + ",".join(Scope(ctx, request).substitute(refs, placeholders))]
    target = Filter(out, by_lines(placeholders.restore))
    code, _ = run_real(target, [binary, *parsed.argv(skip=("jobs",)), *selection],
                       env=command_env(request.env), cwd=ctx.project_dir)
    target.flush()
    return code
