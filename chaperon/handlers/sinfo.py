"""sinfo: the cluster's partitions and nodes, as the user would see them,
without naming who set a node's reason (chaperon/others.py): every format
sinfo could use (-o, -O, SINFO_FORMAT, the -R defaults) is given without the
user fields, so the answer is sinfo's own for that format; --json/--yaml
show that field as null. The SINFO_* variables (read-only view settings)
reach sinfo from an allow-list, SINFO_FORMAT rewritten like -o.
"""
from __future__ import annotations

from ..environment import command_env
from ..slurm.values import COUNT, HOSTLIST, OTHER_CLUSTER, allow, deny, flag
from ..slurm.options import REQ, CommandSpec, pattern
from ..others import (AllFields, reason_user_null, sinfo_long, sinfo_reasons,
                      sinfo_reasons_long, sinfo_short)
from ..untag import Filter, by_lines
from ..scope import self_names
from ..refusal import Refusal
from .common import binary_and_args, run_real

# A format reaches sinfo as one exec argument (no shell): any text but NUL,
# newlines included (sinfo prints them).
FORMAT = pattern(r"[^\x00]*", "a format", "Give an sinfo format such as '%P %a %N'",
                 ("%P %a", "%N\n%t"))
SINFO = CommandSpec("sinfo", [
    flag("all", "a"),
    deny("clusters", "M", REQ, OTHER_CLUSTER, aliases=("cluster",)),
    flag("dead", "d"),
    flag("exact", "e"),
    flag("federation"),
    allow("format", "o", FORMAT),
    allow("Format", "O", FORMAT),
    flag("help"),
    flag("hide"),
    allow("iterate", "i", COUNT),
    flag("json"),
    flag("list-reasons", "R"),
    flag("local"),
    flag("long", "l"),
    flag("Node", "N"),
    allow("nodes", "n", HOSTLIST),
    flag("noconvert"),
    flag("noheader", "h"),
    allow("partition", "p"),
    flag("responding", "r"),
    flag("reservation", "T"),
    allow("sort", "S"),
    allow("states", "t"),
    flag("summarize", "s"),
    flag("usage"),
    flag("verbose", "v"),
    flag("version", "V"),
    flag("yaml"),
])
VARIABLES = ("SINFO_ALL", "SINFO_FEDERATION", "SINFO_LOCAL", "SINFO_PARTITION", "SINFO_SORT")
WHY = ("it shows who set each node's reason, and the sandbox names no other user")


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SINFO)
    env = command_env(request.env)
    env.update({n: v for n, v in request.env_str.items() if n in VARIABLES})
    formats = []
    for item in parsed.items:
        if item.name == "format":
            formats.append(f"--format={_short(item.value or '')}")
        elif item.name == "Format":
            formats.append(f"--Format={sinfo_long(item.value or '')}")
    if "SINFO_FORMAT" in request.env_str:
        env["SINFO_FORMAT"] = _short(request.env_str["SINFO_FORMAT"])
    reasons = (not formats and parsed.has("list-reasons") and not parsed.has("Node")
               and not parsed.has("summarize"))
    if reasons and not parsed.has("long"):
        formats.append(f"--format={sinfo_reasons()}")
    argv = [binary, *parsed.argv(skip=("format", "Format")), *formats, *parsed.rest]
    if parsed.has("json") or parsed.has("yaml"):
        code, data = run_real(out, argv, env=env, cwd=ctx.project_dir, capture=True)
        out.stdout(reason_user_null(data, self_names(ctx), yaml=not parsed.has("json")))
        return code
    if reasons and parsed.has("long"):
        target = Filter(out, by_lines(sinfo_reasons_long))
        code, _ = run_real(target, argv, env=env, cwd=ctx.project_dir)
        target.flush()
        return code
    code, _ = run_real(out, argv, env=env, cwd=ctx.project_dir)
    return code


def _short(fmt: str) -> str:
    try:
        narrowed = sinfo_short(fmt)
    except AllFields:
        raise Refusal("other_users", "sinfo -o %all is refused", WHY,
                      "Name the fields you need, e.g. sinfo -o '%P %a %l %D %t %N'") from None
    if fmt and "%" not in narrowed:
        raise Refusal("other_users", f"sinfo -o {fmt!r} is refused", WHY,
                      "Ask for the reason and time instead: sinfo -o '%E %H %N'")
    return narrowed
