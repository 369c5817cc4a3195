"""scancel, scoped (SPEC §9 scope): a job out of scope cannot be signalled.

- Ids named: out-of-scope ones become placeholders no job has, so scancel
  answers exactly as for a job that does not exist (scope.py).
- Filters without ids (--name, --state, --partition, --me, -u self, …):
  scancel gets the in-scope jobs Slurm still knows as ids together with the
  filters, so it cancels only in-scope jobs that match (user/none scope:
  the filters with --me, every job of the user).
- Nothing named at all: scancel's own "No job identification provided".
"""
from __future__ import annotations

from ..environment import command_env
from ..slurm.values import HOSTLIST, OTHER_CLUSTER, TEXT, allow, deny, flag
from ..slurm.options import CommandSpec, Denial, NONE, REQ
from ..untag import Filter, by_lines
from ..scope import Placeholders, Scope, refuse_foreign_users
from ..slurm.jobids import check_refs
from ..selection import select
from .common import binary_and_args, run_real

ACCOUNT = Denial("foreign_jobs", "the sandbox touches only the jobs in its scope, and {opt} "
                 "selects jobs by account, across users",
                 "Name the jobs by id, or filter with --name, --state or --partition")
INTERACTIVE = Denial("interactive", "scancel would ask for a confirmation on the terminal, "
                     "which the Slurm proxy does not forward", "Leave out -i and name the jobs")

SCANCEL = CommandSpec("scancel", [
    deny("account", "A", REQ, ACCOUNT),
    flag("batch", "b"),
    deny("clusters", "M", REQ, OTHER_CLUSTER, aliases=("cluster",)),
    flag("ctld"),
    flag("full", "f"),
    flag("help"),
    flag("hurry", "H"),
    deny("interactive", "i", NONE, INTERACTIVE),
    flag("me"),
    allow("name", "n", TEXT, aliases=("jobname",)),
    allow("nodelist", "w", HOSTLIST),
    allow("partition", "p"),
    allow("qos", "q"),
    flag("quiet", "Q"),
    allow("reservation", "R"),
    deny("sibling", None, REQ, OTHER_CLUSTER),
    allow("signal", "s"),
    allow("state", "t"),
    flag("usage"),
    allow("user", "u"),
    flag("verbose", "v"),
    flag("version", "V"),
    allow("wckey"),
])
FILTERS = ("name", "nodelist", "partition", "qos", "reservation", "state", "user", "me",
           "wckey")


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SCANCEL)
    refuse_foreign_users(ctx, parsed,
                         "the sandbox touches only your own jobs in its scope",
                         "Leave it out; name the jobs by id or filter with --name")
    refs = list(parsed.rest)
    check_refs(refs, "123, 123_4, 123_[1-3] or 123.0")

    scope = Scope(ctx, request)
    placeholders = Placeholders()
    options = parsed.argv()
    if refs:
        targets = scope.substitute(refs, placeholders)
    elif any(parsed.has(name) for name in FILTERS):
        chosen = select(scope, None, placeholders)
        if chosen.mine:
            targets = [] if parsed.has("me") else ["--me"]
        else:
            existing = scope.related(set(chosen.ids), active=True)
            # Ids as separate arguments: no one-argument limit for any scope.
            targets = [job for job in chosen.ids if job in existing]
            if not targets:
                return 0   # no in-scope job matches the filters: scancel says nothing
            if not parsed.has("me"):
                targets.insert(0, "--me")
    else:
        targets = []   # scancel's own "No job identification provided"
    target = Filter(out, by_lines(placeholders.restore))
    code, _ = run_real(target, [binary, *options, *targets], env=command_env(request.env),
                       cwd=ctx.project_dir)
    target.flush()
    return code
