"""The sbatch and srun tables of each Slurm release series (issue 32).

versions.json (generated from Slurm's sources by scripts/slurm-tables.py) lists,
per series, every long option getopt_long sees in sbatch and srun (name,
argument kind, short letter) and the input variables their opt.c reads. The
reviewed tables of sbatch_options.py and srun_options.py (written for 22.05)
give the grammar; this module makes one CommandSpec per series from both:

- an option of the reviewed table that the series does not have is left out
  (the real command would not know it: `srun --uid` is gone in 23.02);
- an option the series added is either reviewed below (NEW_SBATCH / NEW_SRUN:
  allowed with its value check, or refused with the reason shared with its
  older relatives — --container-id like --container) or refused as
  unreviewed with a message naming the option and the series;
- every option the series has is in the table, allowed or not, and the
  argument kind and short letter are the series' own — so an abbreviation
  resolves to exactly the option the real command of that series would pick
  (`--extra=2` is --extra-node-info on 22.05 and --extra on 23.02+), and a
  prefix ambiguous there is ambiguous here.

How an option was judged (NEW_*): one that only asks the scheduler for
resources, placement or timing (--tres-per-task, --segment, --oom-kill-step,
--treewidth, …) is allowed with a value check; one that changes what runs,
where, or as whom, or makes Slurm read or write a path (--container-id,
--container-type, --export-file, --external, --async until every task of an
asynchronous step is shown to be sandboxed) is refused with the reason of its
older relative; srun --external-launcher (24.11+: the step an MPI launcher
starts for its daemons) is a step like any other, its tasks started through
the sandbox wrapper, so it is allowed; one whose meaning the sources and the
help text do not make plain (--resources, --mem-update) is refused as not
reviewed.

The input variables of a series are the reviewed ones plus the series' new
`env_vars[]` rows whose option the table knows: they are read through the
same allow-list, so a new variable cannot smuggle a refused option, and a
variable not in the table never reaches the real command.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache

from .options import NONE, OPT, REQ, CommandSpec, Denial, Option, choice
from .values import CONTAINER, COUNT, EXPORT_FILE, TEXT, WORD, allow, deny, flag
from . import sbatch_options, srun_options

SERIES = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
BASE = "22.05"        # the series the reviewed tables were written from
_ARG = {"n": NONE, "r": REQ, "o": OPT}
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "versions.json")

EXTERNAL_JOB = Denial("external_job", "{opt} makes a job whose processes are started outside "
                      "Slurm's batch script, where the sandbox's wrapper does not reach",
                      "Submit a batch script or use srun")
ASYNC_STEP = Denial("async_step", "Slurm {series} queues {opt} steps to the step manager and "
                    "starts them later, and that every such task starts inside the sandbox "
                    "has not been shown", "Run the step without --async")
_ONE_OR_ZERO = choice("0", "1")

# Options added after 22.05, reviewed: (option, where for srun: BOTH or ALLOCATION).
_B, _A = srun_options.BOTH, srun_options.ALLOCATION
_REVIEWED = {
    "container-id": (deny("container-id", None, REQ, CONTAINER), None),
    "container-type": (deny("container-type", None, REQ, CONTAINER), None),
    "export-file": (deny("export-file", None, REQ, EXPORT_FILE), None),
    "extra": (allow("extra", None, TEXT), _A),
    "tres-per-task": (allow("tres-per-task"), _B),
    "tres-bind": (allow("tres-bind"), _B),
    "resv-ports": (allow("resv-ports", None, COUNT, arg=OPT), _B),
    "segment": (allow("segment", None, COUNT), _A),
    "stepmgr": (flag("stepmgr"), _A),
    "oom-kill-step": (allow("oom-kill-step", None, _ONE_OR_ZERO, arg=OPT), _B),
    "consolidate-segments": (flag("consolidate-segments"), _A),
    "spread-segments": (flag("spread-segments"), _A),
    "external": (deny("external", None, NONE, EXTERNAL_JOB), None),
    # 24.11+: the step an MPI launcher (mpirun, mpiexec.hydra) starts for its
    # daemons, one task per node (SSF_EXT_LAUNCHER; OMPI_MCA_plm_slurm_args in
    # every job's environment): launched through the sandbox wrapper like any
    # step, so the daemons and the ranks they start run in the job's sandbox.
    "external-launcher": (allow("external-launcher", None, _ONE_OR_ZERO, arg=OPT), _B),
    "treewidth": (allow("treewidth", None, COUNT), _B),
    "wait-for-children": (flag("wait-for-children"), _B),
    "ignore-signals": (allow("ignore-signals", None, WORD), _B),
    "parsable": (flag("parsable"), _B),
    "async": (deny("async", None, NONE, ASYNC_STEP), None),
    "autocomplete": (deny("autocomplete", None, REQ, Denial(
        "autocomplete", "shell completion is for the shell outside the sandbox",
        "Use `{cmd} --help`")), None),
}
# Values a series added to an option of the reviewed table: (from series, check).
_VALUES = {"exclusive": ("24.05", choice("exclusive", "oversubscribe", "user", "mcs", "topo"))}
UNREVIEWED = ("resources", "mem-update")     # refused: meaning not plain from sources/help


@lru_cache(maxsize=1)
def data() -> dict:
    """versions.json, read once."""
    with open(_DATA, encoding="utf-8") as handle:
        return json.load(handle)["versions"]


def series_for(version: str | None) -> tuple[str, str]:
    """(the series whose table applies, a note for doctor or ""). An unknown
    version uses the nearest older table; an unreadable one the base."""
    if not version:
        return BASE, f"the Slurm version is unknown: using the Slurm {BASE} tables"
    parts = version.split(".")
    try:
        key = (int(parts[0]), int(parts[1]))
    except (ValueError, IndexError):
        return BASE, f"Slurm version {version!r} is not understood: using the {BASE} tables"
    known = [s for s in SERIES if tuple(int(p) for p in s.split(".")) <= key]
    if not known:
        return BASE, f"Slurm {version} is older than {BASE}: using the {BASE} tables"
    series = known[-1]
    if series != f"{key[0]:02d}.{key[1]:02d}":
        return series, (f"Slurm {version} has no table of its own: using the nearest older "
                        f"one, Slurm {series}")
    return series, ""


def _key(series: str) -> tuple[int, int]:
    major, minor = series.split(".")
    return int(major), int(minor)


def _first_seen(cmd: str, name: str) -> str:
    for series in SERIES:
        if any(r.split(":")[0] == name for r in data()[series][cmd]):
            return series
    return BASE


def _unreviewed(cmd: str, name: str, arg) -> Option:
    series = _first_seen(cmd, name)
    return deny(name, None, arg, Denial(
        "unreviewed_option", f"{{opt}} is new in Slurm {series} and has not been reviewed "
        "for the sandbox (what it runs, where, and which files it reads)",
        "Leave it out, or run this command outside the sandbox"))


def _rows(cmd: str, series: str, base_rows):
    """[(option, where)] of `cmd` in `series`: see the module docstring."""
    table = {}
    for row in data()[series][cmd]:
        name, arg, short = row.split(":")
        table[name] = (_ARG[arg], short or None)
    in_base = {r.split(":")[0] for r in data()[BASE][cmd]}
    rows, seen = [], set()
    for option, where in base_rows:
        names = (option.name, *option.aliases)
        present = [n for n in names if n in table]
        if not present and any(n in in_base for n in names):
            continue                         # removed in this series
        seen.update(names)
        if present:
            arg, short = table[present[0]]
            option = option._replace(arg=arg, short=short,
                                     aliases=tuple(a for a in option.aliases if a in table))
            change = _VALUES.get(option.name)
            if change and _key(series) >= _key(change[0]):
                option = option._replace(check=change[1])
            if option.name not in table:     # only an alias remains
                option = option._replace(name=present[0], aliases=tuple(present[1:]))
        rows.append((option, where))
    for name, (arg, short) in sorted(table.items()):
        if name in seen:
            continue
        reviewed = _REVIEWED.get(name) if name not in UNREVIEWED else None
        option, where = reviewed if reviewed else (_unreviewed(cmd, name, arg), None)
        if option.denial is ASYNC_STEP:
            option = option._replace(denial=ASYNC_STEP._replace(
                why=ASYNC_STEP.why.replace("{series}", series)))
        rows.append((option._replace(arg=arg, short=short), where))
    return rows


@lru_cache(maxsize=None)
def sbatch(series: str = BASE) -> CommandSpec:
    base = sbatch_options.SBATCH
    if series == BASE:
        return base
    rows = _rows("sbatch", series, [(o, None) for o in base.options])
    names = {o.name for o, _ in rows}
    return CommandSpec("sbatch", [o for o, _ in rows],
                       foreign=[o for o in base.foreign.values() if o.name not in names],
                       het_colon="script")


@lru_cache(maxsize=None)
def srun(series: str = BASE) -> tuple[CommandSpec, CommandSpec]:
    """(allocation mode, step mode) of srun in `series`."""
    if series == BASE:
        return srun_options.SRUN_ALLOCATION, srun_options.SRUN_STEP
    rows = _rows("srun", series, srun_options._ROWS)
    names = {o.name for o, _ in rows}
    foreign = [o for o in srun_options._FOREIGN if o.name not in names]
    return (srun_options.build_spec(rows, foreign, step=False),
            srun_options.build_spec(rows, foreign, step=True))


@lru_cache(maxsize=None)
def input_env(cmd: str, series: str = BASE) -> dict[str, str]:
    """variable → option of `cmd`'s input variables in `series`."""
    table = dict(sbatch_options.INPUT_ENV if cmd == "sbatch" else srun_options.INPUT_ENV)
    if series == BASE:
        return table
    spec = sbatch(series) if cmd == "sbatch" else srun(series)[0]
    base_env = data()[BASE]["env"][cmd]
    for variable, option in data()[series]["env"][cmd].items():
        if variable not in table and variable not in base_env and option in spec.by_long:
            table[variable] = spec.by_long[option].name
    return {v: o for v, o in table.items() if o in spec.by_long}
