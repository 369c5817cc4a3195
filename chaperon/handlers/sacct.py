"""sacct: the accounting records of the caller's own jobs (SPEC §9 sacct).

`--user=<self>` is always passed; --allusers, --accounts, foreign --user /
--uid, other clusters and --file (a job completion file outside the sandbox)
are refused; naming yourself is accepted as a no-op. The comment tag never
shows: Comment columns are widened so the full comment can be read at its
column and rendered again at the caller's width (scope.SacctColumns); parsable
output, --json and --yaml are untagged in place. SACCT_FORMAT from the
caller's environment becomes --format (the other SACCT_* variables never
reach sacct). --batch-script and --env-vars (a job's script and environment,
when the site stores them) answer only for jobs in scope: see `_private`.
sacct 22.05's --json/--yaml carry neither.
"""
from __future__ import annotations

from ..environment import command_env
from ..slurm.values import HOSTLIST, OTHER_CLUSTER, TEXT, allow, deny, flag, other
from ..slurm.options import CommandSpec, Denial, NONE, OPT, REQ
from ..untag import Filter, SacctColumns, by_lines, untag_fields, untag_json, untag_yaml
from ..scope import Placeholders, Scope, refuse_foreign_users
from ..slurm.jobids import check_refs, job_refs
from ..selection import select
from .common import binary_and_args, run_real

ALL_USERS = Denial("foreign_jobs", "the sandbox shows only your own jobs, and {opt} selects "
                   "other users' jobs", "Leave it out; sacct inside lists your own jobs")
FILE = Denial("file_read", "it makes sacct read a file outside the sandbox",
              "Leave it out; sacct reads the accounting database")

SACCT = CommandSpec("sacct", [
    deny("accounts", "A", REQ, ALL_USERS, aliases=("account",)),
    deny("allclusters", "L", NONE, OTHER_CLUSTER),
    flag("allocations", "X", aliases=("allocation",)),
    deny("allusers", "a", NONE, ALL_USERS),
    allow("associations", "x", aliases=("association",)),
    flag("batch-script", "B"),
    flag("brief", "b"),
    deny("clusters", "M", REQ, OTHER_CLUSTER, aliases=("cluster",)),
    flag("completion", "c"),
    allow("constraints", "C", TEXT),
    allow("delimiter", None, TEXT),
    flag("duplicates", "D"),
    allow("endtime", "E", aliases=("end",)),
    flag("env-vars"),
    flag("federation"),
    deny("file", "f", REQ, FILE),
    allow("flags", "F"),
    allow("format", "o", TEXT, aliases=("fields", "field")),
    allow("gid", "g", aliases=("group",)),
    flag("help", "h"),
    flag("helpformat", "e", aliases=("help-fields",)),
    allow("jobs", "j", TEXT, aliases=("job",)),
    flag("json"),
    flag("local"),
    flag("long", "l"),
    allow("name", None, TEXT),
    allow("nnodes", "i"),
    allow("ncpus", "I"),
    flag("noconvert"),
    allow("nodelist", "N", HOSTLIST, aliases=("node",)),
    flag("noheader", "n"),
    flag("parsable", "p"),
    flag("parsable2", "P"),
    allow("partition", "r"),
    allow("qos", "q"),
    allow("reason", "R"),
    allow("starttime", "S", aliases=("start",)),
    allow("state", "s", aliases=("stat",)),
    allow("timelimit-max", "K"),
    allow("timelimit-min", "k"),
    flag("truncate", "T"),
    allow("user", "u", aliases=("uid",)),
    allow("units"),
    flag("usage"),
    flag("use-local-uid"),
    flag("verbose", "v"),
    flag("version", "V"),
    allow("wckeys", "W"),
    other("whole-hetjob", None, OPT),
    flag("yaml"),
])


def _field_table(ctx, scope) -> tuple[list[str], int]:
    """sacct's field names in its own order and the Comment field's default
    width, asked once per session (sacct --helpformat; the header of an
    empty listing)."""
    cached = ctx.cache.get("sacct_fields")
    if cached:
        return cached
    _, text = scope.capture("sacct", ["--helpformat"])
    names = text.decode(errors="replace").split()
    _, header = scope.capture("sacct", ["--format=Comment", "--starttime=2100-01-01",
                                        "--endtime=2100-01-01", f"--user={ctx.user or '0'}"])
    lines = header.decode(errors="replace").splitlines()
    width = len(lines[1].strip()) if len(lines) > 1 and set(lines[1].strip()) == {"-"} else 14
    ctx.cache["sacct_fields"] = (names, width)
    return names, width


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SACCT)
    refuse_foreign_users(ctx, parsed,
                         "the sandbox shows only your own jobs",
                         "Leave it out; sacct inside lists your own jobs")

    scope = Scope(ctx, request)
    user = [f"--user={ctx.user or scope.uid}"]
    env = command_env(request.env)
    if parsed.has("batch-script") or parsed.has("env-vars"):
        return _private(ctx, request, out, binary, parsed, scope, user, env)
    run = [binary, *parsed.argv(skip=("user", "format", "noheader")), *user]
    formats = [v for v in parsed.values.get("format", []) if v]
    if not formats and "SACCT_FORMAT" in request.env_str:
        formats = [request.env_str["SACCT_FORMAT"]]
    parsable = parsed.has("parsable") or parsed.has("parsable2")
    if parsed.has("json") or parsed.has("yaml"):
        code, data = run_real(out, run + [f"--format={f}" for f in formats]
                              + (["--noheader"] if parsed.has("noheader") else []),
                              env=env, cwd=ctx.project_dir, capture=True)
        out.stdout(untag_json(data, empty=b"null") if parsed.has("json") else untag_yaml(data))
        return code
    if formats and not parsable and any(_names_comment(f) for f in formats):
        names, default = _field_table(ctx, scope)
        columns = SacctColumns(",".join(formats), names, default)
        if columns.lengths:
            code, data = run_real(out, run + [f"--format={columns.text}"], env=env,
                                  cwd=ctx.project_dir, capture=True)
            out.stdout(columns.lines(data, header=not parsed.has("noheader")))
            return code
    argv = run + [f"--format={f}" for f in formats] + (
        ["--noheader"] if parsed.has("noheader") else [])
    target = Filter(out, by_lines(untag_fields) if parsable else (lambda data: data))
    code, _ = run_real(target, argv, env=env, cwd=ctx.project_dir)
    target.flush()
    return code


def _names_comment(spec: str) -> bool:
    """Could a field of this --format be Comment (an abbreviation, or ALL)?"""
    for item in spec.split(","):
        name = item.partition("%")[0].lower()
        if name == "all" or (name and "comment".startswith(name)):
            return True
    return False


def _private(ctx, request, out, binary, parsed, scope, user, env) -> int:
    """--batch-script / --env-vars: a job's script and environment exist
    for the sandbox only when the job is in scope. sacct prints them only for
    jobs named with -j; an out-of-scope id becomes a placeholder no job has
    (sacct prints nothing for it, as for a job that does not exist). No id
    named: sacct's own refusal, nothing selected."""
    refs = job_refs(parsed.values.get("jobs", []))
    check_refs(refs, "123, 123_4 or 123.batch")
    placeholders = Placeholders()
    selection = []
    if refs and not scope.by_user:
        selection = [select(scope, refs, placeholders).jobs_option()]
    elif refs:
        selection = [f"--jobs={','.join(refs)}"]
    argv = [binary, *parsed.argv(skip=("user", "jobs")), *user, *selection]
    target = Filter(out, by_lines(placeholders.restore))
    code, _ = run_real(target, argv, env=env, cwd=ctx.project_dir)
    target.flush()
    return code
