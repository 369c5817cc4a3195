"""sprio, scoped (SPEC §9): the priorities of the pending jobs in scope.

sprio lists every pending job of every user by default, and `-u` changes its
columns (a USER column appears), so the scope is always given as job ids:
the in-scope ids (session/project scope) or the caller's pending jobs
(user/none scope, one squeue call). Ids the caller names are scoped like
everywhere else (out of scope: a placeholder no job has). With nothing in
scope sprio gets a partition filter nothing matches, which prints its own
empty listing.
"""
from __future__ import annotations

import os

from ..environment import command_env
from ..slurm.options import CommandSpec, OPT, REQ
from ..slurm.values import OTHER_CLUSTER, TEXT, allow, deny, flag
from ..untag import Filter, by_lines
from ..scope import Placeholders, Scope, refuse_foreign_users
from ..slurm.jobids import check_refs, job_refs
from ..selection import Selection, select
from ..refusal import Refusal
from .common import binary_and_args, run_real

NOT_FOUND = b"Unable to find jobs matching user/id(s) specified\n"
NO_MATCH = "agent-sandbox-none"

SPRIO = CommandSpec("sprio", [
    deny("clusters", "M", REQ, OTHER_CLUSTER, aliases=("cluster",)),
    flag("federation"),
    allow("format", "o", TEXT),
    flag("help", "h"),
    allow("jobs", "j", TEXT, arg=OPT, aliases=("job",)),
    flag("local"),
    flag("long", "l"),
    flag("noheader", "n"),
    flag("norm"),
    allow("partition", "p"),
    flag("sibling"),
    allow("sort", "S"),
    flag("usage"),
    allow("user", "u", aliases=("users",)),
    flag("verbose", "v"),
    flag("version", "V"),
    flag("weights", "w"),
])


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SPRIO)
    refuse_foreign_users(ctx, parsed,
                         "the sandbox shows only the jobs in its scope",
                         "Leave it out; sprio inside lists exactly the jobs you may see")
    positional = list(parsed.rest)
    named = None
    if parsed.has("jobs"):
        named = job_refs([v for v in parsed.values["jobs"] if v] or positional[:1])
        if not any(parsed.values["jobs"]) and positional:
            positional.pop(0)
    check_refs(named or [], "123")
    scope = Scope(ctx, request)
    placeholders = Placeholders()
    chosen = select(scope, named, placeholders)
    if chosen.mine or not chosen.fits():
        # sprio's -u would add a USER column, and sprio lists only pending
        # jobs: the caller's pending jobs (those in scope) as ids.
        _, data = scope.capture("squeue", ["--me", "--noheader", "--states=PD",
                                           "--format=%i"])
        pending = data.decode(errors="replace").split()
        chosen = Selection(ids=tuple(j for j in pending if chosen.mine or j in chosen.ids))
    if not chosen.fits():
        raise Refusal("too_many_jobs", f"sprio for {len(chosen.ids)} pending jobs is refused",
                      "their ids do not fit in one argument of sprio",
                      "Name the jobs you want: sprio -j ID,ID")
    selection = ([chosen.jobs_option()] if not chosen.nothing else
                 [f"--partition={NO_MATCH}-{os.urandom(4).hex()}"])
    named = chosen.named
    argv = [binary, *parsed.argv(skip=("jobs", "user")), *positional]
    env = command_env(request.env)
    if named:
        target = Filter(out, by_lines(placeholders.restore))
        code, _ = run_real(target, argv + selection, env=env, cwd=ctx.project_dir)
        target.flush()
        return code
    code, data = run_real(out, argv + selection, env=env, cwd=ctx.project_dir, capture=True)
    if data == NOT_FOUND and code == 0:
        # None of the in-scope jobs is pending: sprio's own empty listing,
        # as for a queue holding only the jobs in scope.
        code, data = run_real(out, argv + [f"--partition={NO_MATCH}-{os.urandom(4).hex()}"],
                              env=env, cwd=ctx.project_dir, capture=True)
    out.stdout(data)
    return code
