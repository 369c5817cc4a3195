"""sbatch's options as the sandbox sees them: every option of sbatch 22.05
(names, short letters and value kinds as `sbatch` itself reports them),
each allowed with a value check, or refused with its reason.

A new option is one line here; the parser is chaperon/slurm/options.py.
"""
from __future__ import annotations

from typing import Sequence

from .values import (ADMIN_ONLY, ARRAY, BCAST, BURST_BUFFER, CHDIR, COMMAND, CONTAINER, COUNT,
                     EXPORT, EXPORT_FILE, HOSTLIST, HOST_PROGRAM, IDENTITY, JOB_NAME, LOGIN_ENV,
                     MAIL, MAIL_TYPE, NETWORK, NICE, NODEFILE, NODES, OTHER_CLUSTER, PROPAGATE,
                     SIGNAL, SIZE, SOCKETS, TEXT, TIME, WHEN, WORD, allow, deny, flag, other, path)
from .options import (NONE, OPT, REQ, CommandSpec, Denial, Parsed, choice, input_env_table,
                      input_env_words, parse_input_env)
from .options import parse as _parse

WRAP_IN_SCRIPT = Denial(
    "wrap_in_script", "--wrap gives the job's command on the command line; inside a script "
    "the script itself is the command", "Put the command in the script body")

SBATCH = CommandSpec("sbatch", [
    allow("account", "A"),
    allow("acctg-freq"),
    allow("array", "a", ARRAY),
    other("batch"),
    allow("begin", "b", WHEN),
    deny("bb", None, REQ, BURST_BUFFER),
    deny("bbf", None, REQ, BURST_BUFFER),
    deny("chdir", "D", REQ, CHDIR),
    deny("cluster", None, REQ, OTHER_CLUSTER),
    deny("cluster-constraint", None, REQ, OTHER_CLUSTER),
    deny("clusters", "M", REQ, OTHER_CLUSTER),
    allow("comment", None, TEXT),
    allow("constraint", "C"),
    deny("container", None, REQ, CONTAINER),
    other("context"),
    flag("contiguous"),
    other("core-spec", "S"),
    allow("cores-per-socket", None, COUNT),
    allow("cpu-freq"),
    allow("cpus-per-gpu", None, COUNT),
    allow("cpus-per-task", "c", COUNT),
    allow("deadline", None, WHEN),
    other("delay-boot"),
    allow("dependency", "d"),
    allow("distribution", "m"),
    path("error", "e", "error"),
    allow("exclude", "x", HOSTLIST),
    allow("exclusive", None, choice("exclusive", "oversubscribe", "user", "mcs"), arg=OPT),
    allow("export", None, EXPORT),
    deny("export-file", None, REQ, EXPORT_FILE),
    allow("extra-node-info", "B", SOCKETS),
    deny("get-user-env", None, OPT, LOGIN_ENV),
    deny("gid", None, REQ, IDENTITY),
    allow("gpu-bind"),
    allow("gpu-freq"),
    allow("gpus", "G"),
    allow("gpus-per-node"),
    allow("gpus-per-socket"),
    allow("gpus-per-task"),
    allow("gres"),
    allow("gres-flags"),
    flag("help", "h", early=True),
    allow("hint"),
    flag("hold", "H"),
    flag("ignore-pbs"),
    path("input", "i", "input"),
    allow("job-name", "J", JOB_NAME),
    allow("kill-on-invalid-dep", None, choice("yes", "no")),
    allow("licenses", "L"),
    deny("mail-type", None, REQ, MAIL, check=MAIL_TYPE),
    deny("mail-user", None, REQ, MAIL, check=WORD),
    other("mcs-label"),
    allow("mem", None, SIZE),
    allow("mem-bind"),
    allow("mem-per-cpu", None, SIZE),
    allow("mem-per-gpu", None, SIZE),
    allow("mincpus", None, COUNT),
    deny("network", None, REQ, NETWORK),
    allow("nice", None, NICE, arg=OPT),
    allow("no-kill", "k", choice("set", "off", "no"), arg=OPT),
    flag("no-requeue"),
    deny("nodefile", "F", REQ, NODEFILE),
    allow("nodelist", "w", HOSTLIST),
    allow("nodes", "N", NODES),
    allow("ntasks", "n", COUNT),
    allow("ntasks-per-core", None, COUNT),
    allow("ntasks-per-gpu", None, COUNT),
    allow("ntasks-per-node", None, COUNT, aliases=("tasks-per-node",)),
    allow("ntasks-per-socket", None, COUNT),
    allow("ntasks-per-tres", None, COUNT),
    allow("open-mode", None, choice("append", "truncate", "a", "t")),
    path("output", "o", "output"),
    flag("overcommit", "O"),
    flag("oversubscribe", "s"),
    flag("parsable"),
    allow("partition", "p"),
    other("power"),
    allow("prefer"),
    deny("priority", None, REQ, ADMIN_ONLY),
    other("profile"),
    deny("propagate", None, OPT, PROPAGATE),
    allow("qos", "q"),
    flag("quiet", "Q", early=True),
    deny("reboot", None, NONE, ADMIN_ONLY),
    flag("requeue"),
    allow("reservation"),
    allow("signal", None, SIGNAL),
    allow("sockets-per-node", None, COUNT),
    flag("spread-job"),
    allow("switches"),
    flag("test-only"),
    other("thread-spec"),
    allow("threads-per-core", None, COUNT),
    allow("time", "t", TIME),
    allow("time-min", None, TIME),
    allow("tmp", None, SIZE),
    deny("uid", None, REQ, IDENTITY),
    flag("usage", early=True),
    flag("use-min-nodes"),
    flag("verbose", "v", early=True),
    flag("version", "V", early=True),
    flag("wait", "W"),
    allow("wait-all-nodes", None, choice("0", "1")),
    allow("wckey"),
    # The handler turns --wrap into the job script; it is never re-emitted.
    allow("wrap", None, COMMAND, emit=False, early=True, script_denial=WRAP_IN_SCRIPT),
], foreign=[
    # srun options that people try on sbatch: refused by exact name with the reason.
    deny("prolog", None, REQ, HOST_PROGRAM),
    deny("epilog", None, REQ, HOST_PROGRAM),
    deny("task-prolog", None, REQ, HOST_PROGRAM),
    deny("task-epilog", None, REQ, HOST_PROGRAM),
    deny("bcast", None, OPT, BCAST),
], het_colon="script")


def parse(argv: Sequence[str], *, allow_mail: bool = False, spec: CommandSpec | None = None
          ) -> Parsed:
    """sbatch's command line: options, then the script and its arguments.
    `--wrap` is accepted and left to the handler (`parsed.last("wrap")`).
    `spec`: the table of the Slurm series in use (versions.sbatch)."""
    return _parse(spec or SBATCH, argv, unlock=("mail",) if allow_mail else ())


# sbatch's input environment variables (the names in Slurm 22.05's
# libslurmfull, each with the option it sets). Slurm applies them after the
# #SBATCH lines and before the command line; the handler does the same, with
# the same allow-list, so a variable cannot smuggle a denied option. Not
# mapped (dropped, as before): SBATCH_DEBUG, SBATCH_REQ_SWITCH and
# SBATCH_WAIT4SWITCH (halves of --switches), SBATCH_MEM_BIND_* (set by Slurm
# for the job, not read).
INPUT_ENV = input_env_table("SBATCH_", """
    account acctg-freq batch clusters cluster-constraint constraint container core-spec
    cpus-per-gpu delay-boot distribution error exclusive export get-user-env gpus
    gpus-per-node gpus-per-socket gpus-per-task gpu-bind gpu-freq gres gres-flags hint
    ignore-pbs input job-name mem-bind mem-per-cpu mem-per-gpu network no-kill no-requeue
    open-mode output overcommit partition power profile qos requeue reservation signal
    spread-job threads-per-core thread-spec use-min-nodes wait wait-all-nodes wckey""",
    SBATCH_ARRAY_INX="array", SBATCH_BURST_BUFFER="bb", SBATCH_CPU_FREQ_REQ="cpu-freq",
    SBATCH_MEM_PER_NODE="mem", SBATCH_TIMELIMIT="time")


def env_words(env: dict[str, str]) -> list[tuple[str, str]]:
    return input_env_words(SBATCH, INPUT_ENV, env)


def parse_env(env: dict[str, str], *, allow_mail: bool = False,
              spec: CommandSpec | None = None, table: dict[str, str] | None = None) -> Parsed:
    """The SBATCH_* variables as options, through the same allow-list
    (`spec`, `table`: those of the Slurm series in use, versions.py)."""
    return parse_input_env(spec or SBATCH, table or INPUT_ENV, env,
                           lambda words: parse(words, allow_mail=allow_mail, spec=spec))
