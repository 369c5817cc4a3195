"""sacctmgr (SPEC §9 sacctmgr): read-only `show`/`list` of clusters, QOS,
TRES and the configuration. Users, accounts and associations would enumerate
other people; every write (add, modify, delete, load, dump, …) changes the
accounting database; both are refused, as is the interactive mode.
"""
from __future__ import annotations

from ..environment import command_env
from ..slurm.options import NONE, CommandSpec, Denial
from ..slurm.values import deny, flag
from ..refusal import Refusal
from .common import binary_and_args, run_real

ASSOCIATIONS = Denial("foreign_jobs", "it lists the associations of other users",
                      "Leave it out")

SACCTMGR = CommandSpec("sacctmgr", [
    deny("associations", "s", NONE, ASSOCIATIONS, aliases=("assoc",)),
    flag("help", "h"),
    flag("immediate", "i"),
    flag("noheader", "n"),
    flag("oneliner", "o"),
    flag("parsable", "p"),
    flag("parsable2", "P"),
    flag("quiet", "Q"),
    flag("readonly", "r"),
    flag("usage"),
    flag("verbose", "v"),
    flag("version", "V"),
])
VERBS = {"show": 2, "list": 2}
# What a sandbox may list: canonical entity -> minimum abbreviation.
ENTITIES = {"cluster": 2, "clusters": 8, "qos": 1, "tres": 2, "configuration": 2}
REFUSED = ("withassoc", "withcoord", "withsubaccounts", "withrawqos", "withusage")


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SACCTMGR)
    words = list(parsed.rest)
    if not words and not any(parsed.has(n) for n in ("help", "usage", "version")):
        raise Refusal("interactive", "interactive sacctmgr is refused",
                      "the Slurm proxy does not forward a terminal to sacctmgr",
                      "Give the command: sacctmgr show qos")
    if words:
        verb = _match(words[0], VERBS)
        if verb is None:
            raise Refusal("accounting_write", f"sacctmgr {words[0]} is refused",
                          "a sandbox may only read the cluster, QOS, TRES and "
                          "configuration records", "Use sacctmgr show qos (or cluster, "
                          "tres, configuration); ask your site admin for changes")
        entity = _match(words[1], ENTITIES) if len(words) > 1 else None
        if entity is None:
            shown = words[1] if len(words) > 1 else "(nothing)"
            raise Refusal("foreign_jobs", f"sacctmgr {words[0]} {shown} is refused",
                          "users, accounts and associations would list other people; a "
                          "sandbox may read clusters, QOS, TRES and the configuration",
                          "Use sacctmgr show qos, cluster, tres or configuration")
        extra = [w for w in words[2:] if w.lower().startswith(REFUSED)]
        if extra:
            raise Refusal("foreign_jobs", f"sacctmgr {verb} {entity} {extra[0]} is refused",
                          "it lists associations or coordinators, i.e. other users",
                          "Leave it out")
        words = [verb, entity, *words[2:]]
    code, _ = run_real(out, [binary, *parsed.argv(), *words], env=command_env(request.env),
                       cwd=ctx.project_dir)
    return code


def _match(word: str, table: dict) -> str | None:
    lower = word.lower()
    for name, minimum in table.items():
        if name == lower or (len(lower) >= minimum and name.startswith(lower)):
            return name
    return None
