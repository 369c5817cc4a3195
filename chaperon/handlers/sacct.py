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
sacct 22.05's --json/--yaml carry neither. The fields that carry a command
line (PRIVATE_FIELDS: SubmitLine, which for --wrap is the script) answer only
for jobs in scope too: see `_private_fields`; 24.11's --json/--yaml carry a
"submit_line", emptied for jobs out of scope (untag.scope_submit_json/yaml).
The chaperon's own ` --comment=TAG` in a submit line never shows: it becomes
the user's `--comment=` or goes (untag.untag_line), in every output form.
"""
from __future__ import annotations

from ..environment import command_env
from ..slurm.values import HOSTLIST, OTHER_CLUSTER, TEXT, allow, deny, flag, other
from ..slurm.options import CommandSpec, Denial, NONE, OPT, REQ
from ..untag import (Filter, SacctColumns, by_lines, scope_submit_json, scope_submit_yaml,
                     untag_fields, untag_json, untag_yaml)
from ..scope import Placeholders, Scope, refuse_foreign_users
from ..refusal import Refusal
from ..selection import select
from ..slurm.jobids import check_refs, job_refs, ref_base
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


# Fields whose value is a command line (for --wrap: the script itself; any
# token passed on a command line): shown only for jobs in scope. WorkDir (a
# path, no contents) stays an ordinary column; sacct 22.05 has no other
# such field, and its --json/--yaml have no submit_line (docs/chaperon.md).
PRIVATE_FIELDS = ("SubmitLine",)
ID_WIDTH = 64   # the JobID column prepended to a user-wide listing (InScopeRows)


def _field_names(ctx, scope) -> list[str]:
    """sacct's field names in its own order (sacct --helpformat), asked once
    per session; without an answer, PRIVATE_FIELDS alone (so any prefix of
    one counts as that field: more jobs hidden, never fewer)."""
    cached = ctx.cache.get("sacct_names")
    if cached:
        return cached
    code, text = scope.capture("sacct", ["--helpformat"])
    names = text.decode(errors="replace").split()
    if code != 0 or not set(PRIVATE_FIELDS) <= set(names):
        return list(PRIVATE_FIELDS)
    ctx.cache["sacct_names"] = names
    return names


def format_fields(formats: list[str], names: list[str]) -> list[str] | None:
    """The fields sacct shows for these --format values, as sacct 22.05
    reads them (options.c): the values joined, each followed by ','; an item
    is cut at its first ',' and at its first '%' (the width), leading
    whitespace dropped; an empty item ends the list; a name that is a prefix
    of ALL, case-insensitively (also "", "a", "%20"), is every field; else the
    first field in sacct's order that the name begins (ASCII case-
    insensitive). None for a name that matches nothing (sacct refuses)."""
    spec = "".join(f"{f}," for f in formats)
    fields: list[str] = []
    for item in spec.split(",")[:-1]:
        item = item.lstrip(" \t\n\v\f\r")
        if not item:
            break
        name = item.partition("%")[0].encode(errors="surrogateescape").lower()
        if b"all".startswith(name):
            fields.extend(names)
            continue
        found = next((n for n in names if n.encode().lower().startswith(name)), None)
        if found is None:
            return None
        fields.append(found)
    return fields


def _asks_private(formats: list[str], names: list[str]) -> bool:
    fields = format_fields(formats, names)
    return fields is None or any(f in PRIVATE_FIELDS for f in fields)


class InScopeRows:
    """A user-wide listing cut to the jobs in scope: the real sacct runs as
    the caller asked (its time window, filters, order and header) with a
    JobID column in front (`JobID%-64`, or followed by the delimiter in
    parsable output); a row is kept when that JobID's job id (the array or
    het job's for its tasks and components, the job's for its steps) is in
    scope, the header lines are kept, and the column is removed from every
    line. A truncated id ('+') matches nothing: the row is dropped."""

    def __init__(self, ids: set[str], delimiter: bytes | None):
        self.ids = ids
        self.delimiter = delimiter   # None: fixed-width columns

    def line(self, line: bytes) -> bytes | None:
        if self.delimiter is None:
            head, rest = line[:ID_WIDTH], line[ID_WIDTH + 1:]
        else:
            head, sep, rest = line.partition(self.delimiter)
            if not sep:
                return None
        ref = head.decode(errors="replace").strip()
        if ref == "JobID" or (self.delimiter is None and ref == "-" * ID_WIDTH):
            return rest
        return rest if ref_base(ref) in self.ids else None

    def fix(self, data: bytes) -> bytes:
        lines = data.split(b"\n")
        kept = [k for k in map(self.line, lines[:-1]) if k is not None]
        last = self.line(lines[-1]) if lines[-1] else b""
        return b"".join(k + b"\n" for k in kept) + (last or b"")


def _field_table(ctx, scope) -> tuple[list[str], dict]:
    """sacct's field names in its own order and the default widths of the
    fields rendered again (Comment, SubmitLine), asked once per session
    (sacct --helpformat; the header of an empty listing)."""
    cached = ctx.cache.get("sacct_fields")
    if cached:
        return cached
    names = _field_names(ctx, scope)
    fields = [f for f in SacctColumns.REWRITTEN if f in names] or ["Comment"]
    _, header = scope.capture("sacct", [f"--format={','.join(fields)}", "--starttime=2100-01-01",
                                        "--endtime=2100-01-01", f"--user={ctx.user or '0'}"])
    lines = header.decode(errors="replace").splitlines()
    dashes = lines[1].split() if len(lines) > 1 else []
    widths = {"Comment": 14, "SubmitLine": 20}
    if len(dashes) == len(fields) and all(set(d) == {"-"} for d in dashes):
        widths.update(zip(fields, map(len, dashes)))
    ctx.cache["sacct_fields"] = (names, widths)
    return names, widths


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
    if not formats and "SACCT_FORMAT" in request.env_str and not any(
            parsed.has(o) for o in ("long", "brief", "completion")):
        formats = [request.env_str["SACCT_FORMAT"]]   # sacct reads it only so
    parsable = parsed.has("parsable") or parsed.has("parsable2")
    restore, rows = (lambda data: data), None
    if formats and not scope.by_user and not (parsed.has("json") or parsed.has("yaml")) \
            and _asks_private(formats, _field_names(ctx, scope)):
        run, restore, rows = _private_fields(ctx, parsed, scope, binary, user, parsable)
        if rows is not None:
            formats = [f"JobID%-{ID_WIDTH}", *formats]
    if parsed.has("json") or parsed.has("yaml"):
        code, data = run_real(out, run + [f"--format={f}" for f in formats]
                              + (["--noheader"] if parsed.has("noheader") else []),
                              env=env, cwd=ctx.project_dir, capture=True)
        ids = None if scope.by_user else scope.ledger_ids()
        if parsed.has("json"):
            out.stdout(scope_submit_json(untag_json(data, empty=b"null"), ids))
        else:
            out.stdout(scope_submit_yaml(untag_yaml(data), ids))
        return code
    if formats and not parsable and any(_names_rewritten(f) for f in formats):
        names, default = _field_table(ctx, scope)
        columns = SacctColumns(",".join(formats), names, default)
        if columns.lengths:
            code, data = run_real(out, run + [f"--format={columns.text}"], env=env,
                                  cwd=ctx.project_dir, capture=True)
            data = columns.lines(data, header=not parsed.has("noheader"))
            out.stdout(restore(rows.fix(data) if rows else data))
            return code
    argv = run + [f"--format={f}" for f in formats] + (
        ["--noheader"] if parsed.has("noheader") else [])
    fix = by_lines(untag_fields) if parsable else (lambda data: data)
    target = Filter(out, lambda data: restore(rows.fix(fix(data)) if rows else fix(data)),
                    lambda data: restore(fix(data)))
    code, _ = run_real(target, argv, env=env, cwd=ctx.project_dir)
    target.flush()
    return code


def _names_rewritten(spec: str) -> bool:
    """Could a field of this --format be Comment or SubmitLine (an
    abbreviation, or ALL), whose values carry the tag?"""
    for item in spec.split(","):
        name = item.partition("%")[0].strip().lower()
        if name == "all" or (name and any(f.lower().startswith(name)
                                          for f in SacctColumns.REWRITTEN)):
            return True
    return False


def _private_fields(ctx, parsed, scope, binary, user, parsable):
    """A format asks for a field of PRIVATE_FIELDS (session/project scope).
    Ids named with -j: out-of-scope ones become placeholders, as for -B (sacct
    prints nothing for them). None named: the user-wide listing is cut to the
    in-scope jobs (InScopeRows). Returns the argv without the formats, the
    placeholder restore and the row filter (or None)."""
    refs = job_refs(parsed.values.get("jobs", []))
    check_refs(refs, "123, 123_4 or 123.batch")
    if refs:
        placeholders = Placeholders()
        selection = select(scope, refs, placeholders).jobs_option()
        return ([binary, *parsed.argv(skip=("user", "format", "noheader", "jobs")), *user,
                 selection], placeholders.restore, None)
    delimiter = None
    if parsable:
        given = [v for v in parsed.values.get("delimiter", []) if v is not None]
        delimiter = (given[-1] if given else "|").encode(errors="surrogateescape")
        if not delimiter or any(48 <= b <= 57 for b in delimiter):
            raise Refusal("private_field", f"--delimiter={delimiter.decode(errors='replace')!r}"
                          " with SubmitLine is refused",
                          "a listing with job command lines is cut to the sandbox's jobs "
                          "by their JobID, which this delimiter makes ambiguous",
                          "Use a delimiter without digits, or name the jobs with -j")
    rows = InScopeRows(scope.ledger_ids(), delimiter)
    return [binary, *parsed.argv(skip=("user", "format", "noheader")), *user], \
        (lambda data: data), rows


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
