"""scontrol (SPEC §9 scontrol): a read-mostly view of the cluster and control
of the jobs in scope, nothing else.

- `show job|step [ID]`: scoped. With an id, an out-of-scope one becomes a
  placeholder no job has (scontrol's own "Invalid job id specified"); without,
  scontrol lists every job and the records out of scope are dropped (each
  record starts with JobId= / StepId= at the start of a line).
- `show node|partition|config|reservation|licenses|topology|hostnames|…`:
  passed through (a hostlist naming a file, which scontrol would read outside
  the sandbox, is refused), with other users removed from node reasons and
  reservation user lists (chaperon/others.py).
- `hold|uhold|release|requeue|requeuehold|suspend|resume|top|notify|wait_job|
  listpids ID…`: ids scoped as above; job names are refused (scontrol would
  select every job of the user with that name).
- `update JobId=… KEY=VALUE…`: scoped, and only keys on the allow-list below,
  each resolved the way scontrol resolves abbreviations (first match in its
  own order, at least its minimum length) and passed on under its full name.
  TimeLimit may only go down; Comment keeps the job's tag (the user's text
  goes into it); Dependency ids are scoped like any other id.
- `write batch_script ID -`: scoped, to stdout only.
- everything else (shutdown, reconfigure, create, delete, token, show
  assoc_mgr, update of nodes and partitions, …) is refused.
The comment tag is replaced by the user's comment in every answer.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from ..environment import command_env
from ..others import scontrol_nodes, scontrol_reservations
from ..refusal import Refusal
from ..scope import Placeholders, Scope, self_names
from ..slurm.jobids import bad_refs, ref_base
from ..slurm.options import REQ, Check, CommandSpec, Denial, parse_permuted
from ..slurm.values import HOSTLIST, JOB_NAME, NICE, OTHER_CLUSTER, TEXT, TIME, deny, flag
from ..submit import TAG_END, TAG_PREFIX, check_dependency, check_limits
from ..untag import Filter, untag_scontrol
from .common import run_real

UID = Denial("identity", "it makes scontrol act as another user", "Leave it out")

SCONTROL = CommandSpec("scontrol", [
    flag("all", "a"),
    deny("clusters", "M", REQ, OTHER_CLUSTER, aliases=("cluster",)),
    flag("details", "d"),
    flag("federation"),
    flag("future", "F"),
    flag("help", "h"),
    flag("hide"),
    flag("local"),
    flag("oneliner", "o"),
    flag("quiet", "Q"),
    flag("sibling"),
    deny("uid", "u", REQ, UID),
    flag("usage"),
    flag("verbose", "v"),
    flag("version", "V"),
])

# Commands: canonical name -> (minimum abbreviation, kind).
COMMANDS = {
    "show": (3, "show"), "hold": (3, "ids"), "uhold": (3, "ids"), "holdu": (5, "ids"),
    "release": (3, "ids"), "requeue": (7, "ids"), "requeuehold": (8, "ids"),
    "suspend": (3, "ids"), "resume": (3, "ids"), "top": (3, "ids"), "notify": (3, "notify"),
    "wait_job": (4, "one"), "listpids": (4, "one"), "update": (3, "update"),
    "write": (3, "write"), "ping": (3, "pass"), "version": (4, "pass"),
    "errnumstr": (4, "pass"), "help": (4, "pass"),
}
# Entities of `show`: canonical -> (minimum abbreviation, kind).
ENTITIES = {
    "job": (1, "job"), "jobs": (4, "job"), "step": (2, "step"), "steps": (5, "step"),
    "node": (1, "pass"), "nodes": (5, "pass"), "partition": (1, "pass"),
    "partitions": (10, "pass"), "config": (1, "pass"), "reservation": (3, "pass"),
    "reservations": (12, "pass"), "licenses": (1, "pass"), "topology": (2, "pass"),
    "frontend": (2, "pass"), "hostnames": (5, "hosts"), "hostlist": (5, "hosts"),
    "hostlistsorted": (9, "hosts"), "aliases": (2, "pass"), "daemons": (2, "pass"),
    "federation": (2, "pass"), "burstbuffer": (2, "pass"),
}
REFUSED_WHY = {
    **dict.fromkeys(("shutdown", "reconfigure", "takeover", "abort", "setdebug",
                     "setdebugflags", "schedloglevel", "fsdampeningfactor"),
                    "it stops or reconfigures the Slurm controller (administrators only)"),
    **dict.fromkeys(("create", "delete", "reboot", "reboot_nodes", "cancel_reboot", "power"),
                    "it changes partitions, reservations or nodes (administrators only)"),
    "token": "an auth token would let anything in the sandbox talk to Slurm as you, outside "
             "the sandbox",
    "assoc_mgr": "it lists the associations, limits and usage of every user",
}
ADMIN_FIX = "Ask your site admin; the sandbox only shows the cluster and controls your own jobs"

# update job keys, in scontrol's own order: (name, minimum length, check or a
# refusal reason). A value check of None means "any value without control
# characters"; special handling is keyed by name in _update_value.
ADMIN = "only Slurm administrators may change it"
KEYS = [
    ("JobId", 3, "id"), ("AdminComment", 6, ADMIN), ("SiteFactor", 5, ADMIN),
    ("ArrayTaskThrottle", 10, None), ("Comment", 3, None),
    ("Clusters", 8, "it moves the job to another cluster, outside this sandbox's scope"),
    ("ClusterFeatures", 8, "it moves the job to another cluster, outside this sandbox's scope"),
    ("DelayBoot", 5, None), ("TimeLimit", 5, None), ("TimeMin", 5, None),
    ("Priority", 2, ADMIN), ("Nice", 2, None), ("CPUsPerTask", 9, None),
    ("CpusPerTres", 9, None), ("NumCPUs", 6, None), ("NumTasks", 8, None),
    ("ReqProcs", 8, None), ("Requeue", 4, None), ("ReqNodes", 8, None), ("NumNodes", 8, None),
    ("ReqSockets", 4, None), ("ReqCores", 4, None), ("TasksPerNode", 2, None),
    ("ReqThreads", 4, None), ("MinCPUsNode", 4, None), ("MinMemoryNode", 10, None),
    ("MinMemoryCPU", 10, None), ("MinTmpDiskNode", 5, None), ("Partition", 2, None),
    ("QOS", 2, None), ("ReservationName", 3, None), ("Name", 2, None), ("JobName", 4, None),
    ("WCKey", 1, None),
    ("StdOut", 6, "slurmstepd would open that path outside the sandbox"),
    ("Switches", 5, None), ("wait-for-switch", 5, None), ("OverSubscribe", 2, None),
    ("Shared", 2, None), ("Contiguous", 3, None), ("CoreSpec", 4, ADMIN),
    ("MemPerTres", 5, None), ("ThreadSpec", 4, ADMIN), ("TresBind", 5, None),
    ("TresFreq", 5, None), ("TresPerJob", 8, None), ("TresPerNode", 8, None),
    ("TresPerSocket", 8, None), ("TresPerTask", 8, None), ("ExcNodeList", 3, "hosts"),
    ("NodeList", 8, "hosts"), ("ReqNodeList", 8, "hosts"), ("Features", 1, None),
    ("Gres", 2, None), ("Account", 1, None),
    ("BurstBuffer", 1, "burst-buffer stages run with the plugin's privileges, outside the "
                       "sandbox"),
    ("Dependency", 1, None), ("Licenses", 1, None), ("EligibleTime", 2, None),
    ("StartTime", 2, None), ("EndTime", 2, None), ("Reboot", 3, ADMIN),
    ("UserID", 3, "it selects jobs of another user"), ("Deadline", 3, None),
    ("WorkDir", 2, "the job's working directory is checked to lie inside the project at "
                   "submission"),
    ("MailType", 5, "mail from slurmctld leaves the cluster, an egress channel the sandbox "
                    "does not control"),
    ("MailUser", 5, "mail from slurmctld leaves the cluster, an egress channel the sandbox "
                    "does not control"),
]
CHECKS: dict[str, Check] = {"Name": JOB_NAME, "JobName": JOB_NAME, "Nice": NICE,
                            "TimeLimit": TIME, "TimeMin": TIME, "Comment": TEXT}


def _resolve(word: str, table: dict) -> str | None:
    lower = word.lower()
    for name, (minimum, _) in table.items():
        if name == lower or (len(lower) >= minimum and name.startswith(lower)):
            return name
    return None


def _key(tag: str):
    """scontrol's resolution of an update key: the first key in its order
    that the tag abbreviates with at least that key's minimum length."""
    lower = tag.lower()
    for name, minimum, policy in KEYS:
        if len(lower) >= minimum and name.lower().startswith(lower):
            return name, policy
    return None, None


def handle(ctx, request, out) -> int:
    binary = ctx.real_binary("scontrol")
    parsed = parse_permuted(SCONTROL, request.args_str)
    words = list(parsed.rest)
    scope = Scope(ctx, request)
    placeholders = Placeholders()
    if not words:
        if any(parsed.has(n) for n in ("help", "usage", "version")):
            return _run(ctx, request, out, binary, parsed, [], placeholders)
        raise Refusal("interactive", "interactive scontrol is refused",
                      "the Slurm proxy does not forward a terminal to scontrol",
                      "Give the command on the command line, e.g. scontrol show job 123")
    command = _resolve(words[0], COMMANDS)
    if command is None:
        name = words[0].lower()
        raise Refusal("scontrol_command", f"scontrol {words[0]} is refused",
                      REFUSED_WHY.get(name, "it changes or reveals more than the jobs and "
                                      "cluster view a sandbox may have"), ADMIN_FIX)
    kind = COMMANDS[command][1]
    args = words[1:]
    if kind == "pass":
        return _run(ctx, request, out, binary, parsed, [command, *args], placeholders)
    if kind == "show":
        return _show(ctx, request, out, binary, parsed, scope, placeholders, args)
    if kind in ("ids", "one", "notify"):
        if command == "listpids" and not args:
            raise Refusal("job_required", "scontrol listpids without a job is refused",
                          "it would list the processes of every job on this node",
                          "Name an in-scope job: scontrol listpids JOBID")
        if not args:   # scontrol's own "too few arguments" (no job is selected)
            return _run(ctx, request, out, binary, parsed, [command], placeholders)
        if kind == "ids":
            flags = [a for a in args if command.startswith("requeue") and
                     (a.lower() == "incomplete" or a.lower().startswith("state="))]
            targets = [_scoped_list(a, scope, placeholders) for a in args if a not in flags]
            if not targets:
                raise Refusal("bad_job_id", f"scontrol {command} without a job is refused",
                              "no job id was given, and the sandbox never lets an empty "
                              "job list select every job of yours",
                              f"Name the jobs: scontrol {command} {' '.join(flags)} JOBID")
            return _run(ctx, request, out, binary, parsed, [command, *flags, *targets],
                        placeholders)
        first = _scoped_list(args[0], scope, placeholders, single=True)
        return _run(ctx, request, out, binary, parsed, [command, first, *args[1:]],
                    placeholders)
    if kind == "write":
        if len(args) < 2 or args[0].lower() != "batch_script" or args[2:] != ["-"]:
            raise Refusal("write_file", f"scontrol write {' '.join(args)} is refused",
                          "scontrol would write a file outside the sandbox's control",
                          "Use scontrol write batch_script JOBID - (to standard output)")
        return _run(ctx, request, out, binary, parsed,
                    ["write", "batch_script",
                     _scoped_list(args[1], scope, placeholders, single=True), "-"],
                    placeholders)
    return _update(ctx, request, out, binary, parsed, scope, placeholders, args)


def _scoped_list(word: str, scope, placeholders, *, single: bool = False) -> str:
    """`123,124_2` or `jobid=123` with out-of-scope ids as placeholders."""
    prefix = ""
    match = re.match(r"(?i)(jobid=|job=)", word)
    if match:
        prefix, word = word[:match.end()], word[match.end():]
    refs = [r for r in word.split(",") if r]
    wrong = bad_refs(refs)
    if wrong or not refs:
        raise Refusal("bad_job_id", f"the job {word!r} is refused",
                      "it is not a job id (job names would select every job of yours with "
                      "that name)" if wrong else "no job id was given",
                      "Give job ids such as 123 or 123_4; squeue -h -o %i -n NAME lists "
                      "them by name")
    if single and len(refs) > 1:
        raise Refusal("one_job", f"the job list {word!r} is refused",
                      "this command takes one job", "Give one job id")
    return prefix + ",".join(scope.substitute(refs, placeholders))


# show entities whose fixed text names users: the rewrite that removes the others.
OTHERS = {"node": scontrol_nodes, "nodes": scontrol_nodes,
          "reservation": scontrol_reservations, "reservations": scontrol_reservations}


def _run(ctx, request, out, binary, parsed, words, placeholders, *, keep=None,
         others=None) -> int:
    """Run the real scontrol; untag and restore placeholders in its answer.
    `keep` filters the records of a full `show job|step` listing; `others`
    removes other users from a cluster view (chaperon/others.py)."""
    argv = [binary, *parsed.argv(), *words]
    env = command_env(request.env)
    # The whole answer at once: a Comment entry spans a line end.
    errors = Filter(out, placeholders.restore)
    code, data = run_real(errors, argv, env=env, cwd=ctx.project_dir, capture=True)
    errors.flush()
    if others is not None:
        data = others(data, self_names(ctx))
    if keep is None:
        out.stdout(untag_scontrol(placeholders.restore(data)))
        return code
    records = re.split(rb"(?m)^(?=JobId=|StepId=)", data)
    kept = [r for r in records if r and keep(r)]
    if code == 0 and records and not kept and any(records):
        kept = [b"No jobs in the system\n"] if words[1:2] == ["job"] else [
            b"No job steps in the system\n"]
    out.stdout(untag_scontrol(b"".join(kept)))
    return code


def _record_ids(record: bytes) -> tuple[set[str], str | None]:
    ids = set(re.findall(rb"(?:^|\s)(?:JobId|ArrayJobId|HetJobId)=(\d+)", record))
    step = re.match(rb"StepId=(\d+)", record)
    if step:
        ids.add(step.group(1))
    user = re.search(rb"(?:^|\s)UserId=[^(\s]*\((\d+)\)", record) or re.search(
        rb"(?:^|\s)UserId=(\d+)", record)
    return {i.decode() for i in ids}, user.group(1).decode() if user else None


def _show(ctx, request, out, binary, parsed, scope, placeholders, args) -> int:
    if not args:
        raise Refusal("show_what", "scontrol show without an entity is refused",
                      "scontrol would wait for input", "Say what to show: scontrol show job")
    entity = _resolve(args[0], ENTITIES)
    if entity is None:
        name = args[0].lower()
        raise Refusal("scontrol_show", f"scontrol show {args[0]} is refused",
                      REFUSED_WHY.get(name, "a sandbox sees jobs, steps, nodes, partitions, "
                                      "reservations, licenses and the configuration"),
                      "Use scontrol show job, node, partition, config or reservation")
    kind = ENTITIES[entity][1]
    rest = args[1:]
    if kind == "pass":
        if any("/" in a for a in rest):
            raise Refusal("file_read", f"scontrol show {entity} {' '.join(rest)} is refused",
                          "a name with '/' makes scontrol read a file outside the sandbox",
                          "Give the names inline")
        return _run(ctx, request, out, binary, parsed, ["show", entity, *rest], placeholders,
                    others=OTHERS.get(entity))
    if kind == "hosts":
        if not rest and "SLURM_JOB_NODELIST" in request.env_str:
            rest = [request.env_str["SLURM_JOB_NODELIST"]]   # scontrol reads it from the env
        bad = [a for a in rest if HOSTLIST.test(a)]
        if bad:
            raise Refusal("file_read", f"scontrol show {entity} {bad[0]} is refused",
                          "only an inline hostlist is read (a path would make scontrol read "
                          "a file outside the sandbox)", "Give the names, e.g. node[01-04]")
        return _run(ctx, request, out, binary, parsed, ["show", entity, *rest], placeholders)
    if rest:
        target = _scoped_list(rest[0], scope, placeholders, single=True)
        return _run(ctx, request, out, binary, parsed, ["show", entity, target, *rest[1:]],
                    placeholders)
    uid = str(scope.uid)
    known = None if scope.by_user else scope.ledger_ids()

    def keep(record: bytes) -> bool:
        ids, user = _record_ids(record)
        if not ids or user != uid:
            return False
        return known is None or bool(ids & known)

    return _run(ctx, request, out, binary, parsed, ["show", kind], placeholders, keep=keep)


# ------------------------------------------------------------------------- update
def _minutes(text: str) -> float | None:
    """Slurm's time_str2mins for a limit ("UNLIMITED" -> inf); None if invalid."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return float("inf")
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        return None
    days, a, b, c = match.groups()
    if days is not None:
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
        return int(days) * 1440 + hours * 60 + minutes + seconds / 60
    if c is not None:
        return int(a) * 60 + int(b) + int(c) / 60
    if b is not None:
        return int(a) + int(b) / 60
    return int(a)


def _current_limit(scope, job: str) -> float | None:
    code, data = scope.capture("squeue", ["--noheader", "--states=all", "--format=%l",
                                          f"--jobs={job}"])
    lines = data.decode(errors="replace").split()
    return _minutes(lines[0]) if code == 0 and lines else None


def _update(ctx, request, out, binary, parsed, scope, placeholders, args) -> int:
    pairs: list[tuple[str, str, str]] = []   # (tag, operator, value)
    i = 0
    while i < len(args):
        word = args[i]
        match = re.fullmatch(r"(.+?)([+\-]?=)(.*)", word, re.S)
        if match:
            pairs.append((match.group(1), match.group(2), match.group(3)))
        elif _key(word)[0] in ("Nice",) or word.lower().startswith("resetaccrue"):
            pairs.append((word, "", ""))
        elif i + 1 < len(args):
            pairs.append((word, "=", args[i + 1]))
            i += 1
        else:
            raise Refusal("bad_update", f"scontrol update {word} is refused",
                          "it is not KEY=VALUE", "Write scontrol update JobId=ID KEY=VALUE")
        i += 1
    names = [_key(tag)[0] for tag, _, _ in pairs]
    if "JobId" not in names:
        if any(tag.lower().startswith("stepid") for tag, _, _ in pairs):
            return _update_step(ctx, request, out, binary, parsed, scope, placeholders, pairs)
        raise Refusal("update_what", "this scontrol update is refused",
                      "a sandbox may update its own jobs (JobId=…) and steps (StepId=…) only; "
                      "job names would select every job of yours with that name",
                      "Write scontrol update JobId=ID KEY=VALUE")
    job_word = next(v for (t, _, v), n in zip(pairs, names) if n == "JobId")
    jobs = [r for r in job_word.split(",") if r]
    if bad_refs(jobs) or not jobs:
        raise Refusal("bad_job_id", f"the job {job_word!r} is refused", "it is not a job id",
                      "Give job ids such as 123 or 123_4")
    flags = scope.in_scope(jobs)
    swapped = [j if ok else placeholders.replace(j) for j, ok in zip(jobs, flags)]
    words: list[str] = []
    comment = None
    for (tag, operator, value), name in zip(pairs, names):
        if name is None:
            raise Refusal("update_key", f"updating {tag} is refused",
                          "it is not a job property the sandbox lets you change",
                          "Change TimeLimit (down), Name, Comment, Dependency, Partition, QOS, "
                          "Nice, resources or times")
        policy = dict((k, p) for k, _, p in KEYS)[name]
        if name == "JobId":
            continue
        if isinstance(policy, str) and policy not in ("hosts", "id"):
            raise Refusal("update_key", f"updating {name} is refused", policy,
                          "Leave it out, or ask your site admin")
        if operator not in ("=", "") and name != "TimeLimit":
            raise Refusal("update_key", f"{tag}{operator} is refused",
                          "only TimeLimit takes += or -=", f"Write {name}=VALUE")
        if re.search(r"[\x00-\x1f\x7f]", value):
            raise Refusal("bad_value", f"{name}={value!r} is refused",
                          "it contains control characters", "Leave them out")
        check = CHECKS.get(name) or (HOSTLIST if policy == "hosts" else None)
        if name == "TimeLimit":
            value = _time_limit(scope, jobs, flags, operator, value)
            operator = "="
        elif check is not None and value and check.test(value):
            raise Refusal("bad_value", f"{name}={value} is refused", check.test(value),
                          check.fix)
        if name == "Dependency":
            value = check_dependency(value, scope)
        if name == "Partition":
            check_limits(ctx, value)
        if name == "Comment":
            if TAG_PREFIX in value:
                raise Refusal("bad_value", f"Comment={value} is refused",
                              f"{TAG_PREFIX!r} marks the sandbox's own job tags",
                              "Write the comment without it")
            comment = value
            continue
        words.append(f"{name}{operator}{value}" if operator else name)
    if comment is None:
        return _run(ctx, request, out, binary, parsed,
                    ["update", f"JobId={','.join(swapped)}", *words], placeholders)
    # Comment keeps each job's own tag: one update per job.
    records = {r.job: r for r in ctx.ledger.records("user")}
    code = 0
    for job, ok in zip(swapped, flags):
        base = ref_base(job)
        record = records.get(base) if ok else None
        if record is None and ok and not scope.by_user:
            related = scope.related({base})
            record = next((records[i] for i in related.get(base, ()) if i in records), None)
        text = comment
        if record is not None:
            text = f"{TAG_PREFIX}sid={record.get('session')},proj={record.get('project')}"
            text += (f",user={quote(comment, safe='')}" if comment else "") + TAG_END
        code = max(code, _run(ctx, request, out, binary, parsed,
                              ["update", f"JobId={job}", *words, f"Comment={text}"],
                              placeholders))
    return code


def _time_limit(scope, jobs, flags, operator, value) -> str:
    """A TimeLimit the job may take: never above its current limit."""
    relative = operator in ("+=", "-=") or value[:1] in ("+", "-")
    sign = operator[0] if operator in ("+=", "-=") else (value[0] if value[:1] in "+-" else "")
    amount = value[1:] if value[:1] in ("+", "-") and operator == "=" else value
    if _minutes(amount) is None:
        raise Refusal("bad_value", f"TimeLimit={value} is refused", "it is not a time limit",
                      "Use MINUTES, HH:MM:SS or D-HH:MM:SS")
    if relative:
        if sign == "+":
            raise Refusal("time_limit_up", f"TimeLimit +{amount} is refused",
                          "a sandbox may lower a job's time limit, not raise it",
                          "Ask for a longer limit when you submit the job")
        return "-" + amount
    wanted = _minutes(amount)
    for job, ok in zip(jobs, flags):
        if not ok:
            continue
        current = _current_limit(scope, job)
        if current is not None and wanted > current:
            raise Refusal("time_limit_up", f"TimeLimit={amount} for job {job} is refused",
                          "a sandbox may lower a job's time limit, not raise it",
                          "Ask for a longer limit when you submit the job")
    return amount


def _update_step(ctx, request, out, binary, parsed, scope, placeholders, pairs) -> int:
    words = []
    for tag, operator, value in pairs:
        lower = tag.lower()
        if lower.startswith("stepid") and operator == "=":
            words.append("StepId=" + _scoped_list(value, scope, placeholders, single=True))
        elif len(lower) >= 2 and "timelimit".startswith(lower) and operator == "=":
            if value[:1] == "+":
                raise Refusal("time_limit_up", f"TimeLimit={value} is refused",
                              "a sandbox may lower a step's time limit, not raise it",
                              "Ask for a longer limit when you start the step")
            if _minutes(value.lstrip("-")) is None:
                raise Refusal("bad_value", f"TimeLimit={value} is refused",
                              "it is not a time limit", "Use MINUTES or HH:MM:SS")
            words.append(f"TimeLimit={value}")
        else:
            raise Refusal("update_key", f"updating {tag} of a step is refused",
                          "a sandbox may change a step's TimeLimit only",
                          "Write scontrol update StepId=ID.STEP TimeLimit=VALUE")
    return _run(ctx, request, out, binary, parsed, ["update", *words], placeholders)
