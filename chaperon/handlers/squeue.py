"""squeue, scoped (SPEC §9 scope): the real squeue restricted to the jobs in
scope, with the caller's own format options, so the answer is Slurm's.

- No ids named (absent, `-j ''`, a bare `-j`, `-j ,`): `--jobs=<in-scope
  ids> --me` (session/project scope) or `--me` (user/none scope); never
  an empty list (chaperon/selection.py). A scope too long for one argument
  takes the wide path: one `squeue --me --all` with a job-id column added
  and cut to the scope (selection.IdColumn).
- Ids named (-j, -s, positional): out-of-scope ones become placeholders that
  no job has, so they behave as jobs that do not exist (scope.py).
- The comment tag never shows: %k / -O comment fields are printed in full
  between sentinels and rendered again at the caller's width; --json and
  --yaml (which ignore every filter in Slurm 22.05 and list all jobs) are
  cut down to the in-scope jobs and untagged.
- SQUEUE_FORMAT / SQUEUE_FORMAT2 from the caller's environment become -o / -O
  (the other SQUEUE_* variables never reach squeue: they would act as
  filters the sandbox does not see).
"""
from __future__ import annotations

import json
import os
import time

from ..environment import command_env
from ..slurm.values import COUNT, HOSTLIST, OTHER_CLUSTER, TEXT, allow, deny, flag
from ..slurm.options import CommandSpec, Denial, OPT, REQ
from ..untag import Filter, SqueueFormat, untag_json, untag_yaml
from ..scope import Placeholders, Scope, refuse_foreign_users
from ..slurm.jobids import check_refs, job_refs
from ..selection import IdColumn, select
from .common import binary_and_args, run_real

ACCOUNTS = Denial("foreign_jobs", "the sandbox lists only the jobs in its scope, and {opt} "
                  "selects jobs by account, across users",
                  "Leave it out; squeue inside already lists exactly the jobs you may see")
JOB_LIST = TEXT

SQUEUE = CommandSpec("squeue", [
    deny("account", "A", REQ, ACCOUNTS, aliases=("accounts",)),
    flag("all", "a"),
    flag("array", "r"),
    flag("array-unique"),
    deny("clusters", "M", REQ, OTHER_CLUSTER, aliases=("cluster",)),
    flag("federation"),
    allow("format", "o", TEXT),
    allow("Format", "O", TEXT),
    flag("help"),
    flag("hide"),
    allow("iterate", "i", COUNT),
    allow("jobs", "j", JOB_LIST, arg=OPT, aliases=("job",)),
    flag("json"),
    allow("licenses", "L", aliases=("license",)),
    flag("local"),
    flag("long", "l"),
    flag("me"),
    allow("name", "n", TEXT),
    flag("noconvert"),
    allow("nodelist", "w", HOSTLIST, aliases=("nodes", "node")),
    flag("noheader", "h"),
    allow("partition", "p", aliases=("partitions",)),
    flag("priority", "P"),
    allow("qos", "q"),
    allow("reservation", "R"),
    flag("sibling"),
    allow("sort", "S"),
    flag("start"),
    allow("states", "t", aliases=("state",)),
    allow("steps", "s", JOB_LIST, arg=OPT, aliases=("step",)),
    flag("usage"),
    allow("user", "u", aliases=("users",)),
    flag("verbose", "v"),
    flag("version", "V"),
    flag("yaml"),
])
# Rebuilt by the handler, never passed as written.
REBUILT = ("jobs", "steps", "user", "me", "format", "Format")
NO_MATCH = "agent-sandbox-no-job"


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SQUEUE)
    refuse_foreign_users(ctx, parsed,
                         "the sandbox lists only your own jobs in its scope",
                         "Leave it out; squeue inside already lists exactly the jobs you "
                         "may see")
    positional = list(parsed.rest)
    jobs = _listed(parsed, "jobs", positional)
    steps = _listed(parsed, "steps", positional)
    check_refs((jobs or []) + (steps or []), "123, 123_4 or 123.0")

    scope = Scope(ctx, request)
    placeholders = Placeholders()
    selection: list[str] = ["--me"]
    wide = None
    if steps:
        # Steps named: each out of scope becomes a placeholder; job ids named
        # beside them filter the steps further, scoped the same way.
        selection.append(select(scope, steps, placeholders).jobs_option("--steps"))
        if jobs:
            selection.append(select(scope, jobs, placeholders).jobs_option())
    else:
        if steps is not None:
            selection.append("--steps")   # every step of the jobs selected below
        chosen = select(scope, jobs, placeholders)
        if chosen.nothing:
            selection.append(f"--name={NO_MATCH}-{os.urandom(4).hex()}")
        elif chosen.mine:
            pass
        elif chosen.fits() or parsed.has("json") or parsed.has("yaml"):
            # --json/--yaml ignore the job list; their answer is cut below.
            selection += [chosen.jobs_option()] if chosen.fits() else []
        else:
            wide = IdColumn(chosen.ids, steps=steps is not None)
            selection.append("--all")

    env_in = request.env_str
    fmt = parsed.last("format")
    long_fmt = parsed.last("Format")
    if fmt is None and long_fmt is None and not parsed.has("long") and not parsed.has("steps"):
        fmt = env_in.get("SQUEUE_FORMAT")
        long_fmt = env_in.get("SQUEUE_FORMAT2") if fmt is None else None
    rewrite = None
    formats: list[str] = []
    if not parsed.has("steps"):
        if long_fmt is not None and fmt is None:
            rewrite = SqueueFormat(long_fmt, long=True)
            formats.append(f"--Format={rewrite.text}")
        elif fmt is not None:
            rewrite = SqueueFormat(fmt, long=False)
            formats.append(f"--format={rewrite.text}")
            if long_fmt is not None:
                formats.append(f"--Format={long_fmt}")   # squeue refuses the pair itself
    else:
        formats += [f"--format={fmt}"] if fmt is not None else []
        formats += [f"--Format={long_fmt}"] if long_fmt is not None else []
    if wide is not None:
        formats = _wide_formats(wide, formats, parsed)

    skip = REBUILT
    if wide is not None and parsed.has("long") and not parsed.has("format") \
            and not parsed.has("Format"):
        # -l takes no format: its default is given explicitly instead, and its
        # date line (which -i and -v print anyway) written as squeue writes it.
        skip = REBUILT + ("long",)
        if not parsed.has("iterate") and not parsed.has("verbose"):
            out.stdout(time.strftime("%a %b %d %H:%M:%S %Y\n").encode())
    argv = [binary, *parsed.argv(skip=skip), *formats, *selection, *positional]
    env = command_env(request.env)
    if parsed.has("json") or parsed.has("yaml"):
        code, data = run_real(_Restore(out, placeholders), argv, env=env, cwd=ctx.project_dir,
                              capture=True)
        if parsed.has("json"):
            data = untag_json(_json_jobs(data, scope.owns), empty=b'""')
        else:
            data = untag_yaml(_yaml_jobs(data, scope.owns))
        out.stdout(data)
        return code

    def fix(line: bytes) -> bytes | None:
        line = placeholders.restore(line)
        if wide is not None:
            line = wide.line(line)
            if line is None:
                return None
        return rewrite.line(line) if rewrite else line

    target = Filter(out, _kept_lines(fix), placeholders.restore)
    code, _ = run_real(target, argv, env=env, cwd=ctx.project_dir)
    target.flush()
    return code


def _wide_formats(wide: IdColumn, formats: list[str], parsed) -> list[str]:
    """The caller's format (or squeue's default for the flags) with the id
    column in front (selection.IdColumn)."""
    if not formats:
        return ["--format=" + wide.short(wide.default(long=parsed.has("long"),
                                                      start=parsed.has("start")))]
    name, _, text = formats[-1].partition("=")
    return formats[:-1] + [f"{name}=" + (wide.long(text) if name == "--Format"
                                         else wide.short(text))]


def _kept_lines(fix_line):
    """A `fix` for Filter from a function of one line that may drop it (None)."""
    def fix(data: bytes) -> bytes:
        lines = data.split(b"\n")
        kept = [fixed for fixed in map(fix_line, lines[:-1]) if fixed is not None]
        last = fix_line(lines[-1]) if lines[-1] else b""
        return b"".join(line + b"\n" for line in kept) + (last or b"")
    return fix


def _listed(parsed, name: str, positional: list[str]) -> list[str] | None:
    """Ids given with -j / -s (or, as squeue reads them, the next positional
    word after a bare -j / -s); None when the option was not given."""
    if not parsed.has(name):
        return None
    values = [v for v in parsed.values[name] if v]
    if not values and positional:
        values = [positional.pop(0)]
    return job_refs(values)


class _Restore:
    """stderr with placeholders turned back (stdout is captured)."""

    def __init__(self, out, placeholders):
        self.out, self.placeholders = out, placeholders

    def stdout(self, data):
        self.out.stdout(data)

    def stderr(self, data):
        self.out.stderr(self.placeholders.restore(data))


def _json_jobs(data: bytes, keep) -> bytes:
    """Slurm's pretty JSON with only the jobs `keep` accepts in its "jobs"
    array; every other byte as Slurm wrote it."""
    lines = data.split(b"\n")
    try:
        start = lines.index(b'  "jobs": [')
        end = next(i for i in range(start + 1, len(lines)) if lines[i] in (b"  ]", b"  ],"))
    except (ValueError, StopIteration):
        return data
    elements, current = [], None
    for line in lines[start + 1:end]:
        if line == b"    {":
            current = [line]
        elif current is not None:
            current.append(line)
            if line in (b"    }", b"    },"):
                elements.append(current)
                current = None
    kept = []
    for element in elements:
        try:
            job = json.loads(b"\n".join(element).rstrip(b","))
        except ValueError:
            continue
        if keep(job):
            kept.append(element)
    body: list[bytes] = []
    for index, element in enumerate(kept):
        body += element[:-1] + [b"    }," if index < len(kept) - 1 else b"    }"]
    return b"\n".join(lines[:start + 1] + body + lines[end:])


_YAML_KEYS = {b"  !!str job_id: !!int ": "job_id", b"  !!str array_job_id: !!int ": "array_job_id",
              b"  !!str het_job_id: !!int ": "het_job_id", b"  !!str user_id: !!int ": "user_id"}


def _yaml_jobs(data: bytes, keep) -> bytes:
    lines = data.split(b"\n")
    try:
        start = lines.index(b"!!str jobs: !!seq")
    except ValueError:
        return data
    end = start + 1
    while end < len(lines) and lines[end].startswith((b"- ", b"  ")):
        end += 1
    elements, current = [], None
    for line in lines[start + 1:end]:
        if line.startswith(b"- "):
            current = [line]
            elements.append(current)
        elif current is not None:
            current.append(line)
    kept = []
    for element in elements:
        job = {}
        for line in element:
            for prefix, key in _YAML_KEYS.items():
                if line.startswith(prefix):
                    job[key] = line[len(prefix):].decode(errors="replace")
        if keep(job):
            kept.append(element)
    if not kept:
        return b"\n".join(lines[:start] + [b"!!str jobs: !!seq []"] + lines[end:])
    return b"\n".join(lines[:start + 1] + [line for e in kept for line in e] + lines[end:])
