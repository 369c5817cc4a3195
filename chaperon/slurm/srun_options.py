"""srun's options as the sandbox sees them: every option of srun 22.05 (names,
short letters and value kinds as `srun` itself reports them), in two modes.

- allocation mode (no SLURM_JOB_ID: srun creates a job): the scheduling
  options sbatch allows plus the step options;
- step mode (inside a job): step options only; scheduling options belong to
  the job and are refused with that reason.

Each row says where an allowed option applies (BOTH modes or ALLOCATION
only); refused rows carry their reason. The parser is chaperon/slurm/options.py;
the handler resolves -o/-e/-i inside the project and the working directory.
"""
from __future__ import annotations

import re
from typing import Sequence

from .values import (ADMIN_ONLY, BCAST, BURST_BUFFER, CHDIR, CONTAINER, COUNT, EXPORT, EXPORT_FILE,
                     HOSTLIST, HOST_PROGRAM, IDENTITY, JOB_NAME, LOGIN_ENV, MAIL, MAIL_TYPE,
                     NETWORK, NICE, NODEFILE, NODES, OTHER_CLUSTER, PROPAGATE, SIGNAL, SIZE,
                     SOCKETS, TEXT, TIME, WHEN, WORD, allow, deny, flag, other, path)
from .options import (HET_JOB, NONE, OPT, REQ, CommandSpec, Denial, Parsed, choice, input_env_table,
                      parse_input_env)
from .options import parse as _parse

PTY = Denial("pty", "a pseudo-terminal would connect the task to this session outside the "
             "sandbox's I/O rules", "Run the command without --pty. For an interactive "
             "sandboxed shell on a node, run `srun --pty agent-sandbox bash` outside the "
             "sandbox, or start the sandbox inside your allocation (salloc …, then "
             "agent-sandbox … there): srun inside then runs steps in it")
JOBID = Denial("jobid", "attaching a step to a job by id could reach a job outside the "
               "sandbox's scope", "Run srun inside that job's script, or start a new job")
MULTI_PROG = Denial("multi_prog", "the per-task programs come from a configuration file that "
                    "Slurm starts without the sandbox wrapper",
                    "Start one program that dispatches on $SLURM_PROCID")
X11 = Denial("x11", "X11 forwarding opens a channel from the compute node to this session "
             "outside the sandbox", "Leave it out")
SEND_LIBS = Denial("bcast", "it copies the program's libraries onto the compute nodes outside "
                   "the project", "Leave it out; the job reads libraries where they are")
ALLOCATION_ONLY = Denial(
    "allocation_option", "inside a job srun starts a step of the job's allocation, and {opt} "
    "only applies when srun creates a new allocation",
    "Set it on the job (sbatch), or run srun outside the job")

BOTH, ALLOCATION = "both", "allocation"

_ROWS = [
    (allow("accel-bind"), BOTH),
    (allow("account", "A"), ALLOCATION),
    (allow("acctg-freq"), BOTH),
    (deny("bcast", None, OPT, BCAST), None),
    (deny("bcast-exclude", None, REQ, BCAST), None),
    (allow("begin", "b", WHEN), ALLOCATION),
    (deny("bb", None, REQ, BURST_BUFFER), None),
    (deny("bbf", None, REQ, BURST_BUFFER), None),
    (deny("chdir", "D", REQ, CHDIR), None),
    (deny("cluster", None, REQ, OTHER_CLUSTER), None),
    (deny("cluster-constraint", None, REQ, OTHER_CLUSTER), None),
    (deny("clusters", "M", REQ, OTHER_CLUSTER), None),
    (allow("comment", None, TEXT), ALLOCATION),
    (other("compress", None, OPT), None),
    (allow("constraint", "C"), ALLOCATION),
    (deny("container", None, REQ, CONTAINER), None),
    (other("context"), None),
    (flag("contiguous"), ALLOCATION),
    (other("core-spec", "S"), None),
    (allow("cores-per-socket", None, COUNT), BOTH),
    (allow("cpu-bind", aliases=("cpu_bind",)), BOTH),
    (allow("cpu-freq"), BOTH),
    (allow("cpus-per-gpu", None, COUNT), BOTH),
    (allow("cpus-per-task", "c", COUNT), BOTH),
    (allow("deadline", None, WHEN), ALLOCATION),
    (other("debugger-test", None, NONE), None),
    (other("delay-boot"), None),
    (allow("dependency", "d"), ALLOCATION),
    (flag("disable-status", "X"), BOTH),
    (allow("distribution", "m"), BOTH),
    (deny("epilog", None, REQ, HOST_PROGRAM), None),
    (path("error", "e", "error"), BOTH),
    (flag("exact"), BOTH),
    (allow("exclude", "x", HOSTLIST), BOTH),
    (allow("exclusive", None, choice("exclusive", "oversubscribe", "user", "mcs"), arg=OPT),
     BOTH),
    (allow("export", None, EXPORT), BOTH),
    (allow("extra-node-info", "B", SOCKETS), BOTH),
    (deny("gid", None, REQ, IDENTITY), None),
    (allow("gpu-bind"), BOTH),
    (allow("gpu-freq"), BOTH),
    (allow("gpus", "G"), BOTH),
    (allow("gpus-per-node"), BOTH),
    (allow("gpus-per-socket"), BOTH),
    (allow("gpus-per-task"), BOTH),
    (allow("gres"), BOTH),
    (allow("gres-flags"), BOTH),
    (flag("help", "h"), BOTH),
    (deny("het-group", None, REQ, HET_JOB, aliases=("pack-group",)), None),
    (allow("hint"), BOTH),
    (flag("hold", "H"), ALLOCATION),
    (allow("immediate", "I", COUNT, arg=OPT), ALLOCATION),
    (path("input", "i", "input"), BOTH),
    (other("interactive", None, NONE), None),
    (deny("jobid", None, REQ, JOBID), None),
    (allow("job-name", "J", JOB_NAME), BOTH),
    (allow("kill-on-bad-exit", "K", choice("0", "1"), arg=OPT), BOTH),
    (flag("label", "l"), BOTH),
    (allow("licenses", "L"), ALLOCATION),
    (deny("mail-type", None, REQ, MAIL, check=MAIL_TYPE), ALLOCATION),
    (deny("mail-user", None, REQ, MAIL, check=WORD), ALLOCATION),
    (other("mcs-label"), None),
    (allow("mem", None, SIZE), BOTH),
    (allow("mem-bind"), BOTH),
    (allow("mem-per-cpu", None, SIZE), BOTH),
    (allow("mem-per-gpu", None, SIZE), BOTH),
    (allow("mincpus", None, COUNT), BOTH),
    (allow("mpi"), BOTH),
    (allow("msg-timeout", None, COUNT), BOTH),
    (deny("multi-prog", None, NONE, MULTI_PROG), None),
    (deny("network", None, REQ, NETWORK), None),
    (allow("nice", None, NICE, arg=OPT), ALLOCATION),
    (deny("no-allocate", "Z", NONE, ADMIN_ONLY), None),
    (allow("no-kill", "k", choice("set", "off", "no"), arg=OPT), BOTH),
    (deny("nodefile", "F", REQ, NODEFILE), None),
    (allow("nodelist", "w", HOSTLIST), BOTH),
    (allow("nodes", "N", NODES), BOTH),
    (allow("ntasks", "n", COUNT), BOTH),
    (allow("ntasks-per-core", None, COUNT), BOTH),
    (allow("ntasks-per-gpu", None, COUNT), BOTH),
    (allow("ntasks-per-node", None, COUNT, aliases=("tasks-per-node",)), BOTH),
    (allow("ntasks-per-socket", None, COUNT), BOTH),
    (allow("ntasks-per-tres", None, COUNT), BOTH),
    (allow("open-mode", None, choice("append", "truncate", "a", "t")), BOTH),
    (path("output", "o", "output"), BOTH),
    (flag("overcommit", "O"), BOTH),
    (allow("overlap", None, WORD, arg=OPT), BOTH),
    (flag("oversubscribe", "s"), BOTH),
    (allow("partition", "p"), ALLOCATION),
    (other("power"), None),
    (allow("prefer"), ALLOCATION),
    (flag("preserve-env", "E"), BOTH),
    (deny("priority", None, REQ, ADMIN_ONLY), None),
    (other("profile"), None),
    (deny("prolog", None, REQ, HOST_PROGRAM), None),
    (deny("propagate", None, OPT, PROPAGATE), None),
    (deny("pty", None, NONE, PTY), None),
    (allow("qos", "q"), ALLOCATION),
    (flag("quiet", "Q"), BOTH),
    (flag("quit-on-interrupt"), BOTH),
    (deny("reboot", None, NONE, ADMIN_ONLY), None),
    (allow("relative", "r", COUNT), BOTH),
    (allow("reservation"), ALLOCATION),
    (allow("resv-ports", None, COUNT, arg=OPT), BOTH),
    (deny("send-libs", None, OPT, SEND_LIBS), None),
    (allow("signal", None, SIGNAL), BOTH),
    (deny("slurmd-debug", None, REQ, ADMIN_ONLY), None),
    (allow("sockets-per-node", None, COUNT), BOTH),
    (flag("spread-job"), ALLOCATION),
    (allow("switches"), ALLOCATION),
    (deny("task-epilog", None, REQ, HOST_PROGRAM), None),
    (deny("task-prolog", None, REQ, HOST_PROGRAM), None),
    (flag("test-only"), ALLOCATION),
    (other("thread-spec"), None),
    (allow("threads", "T", COUNT), BOTH),
    (allow("threads-per-core", None, COUNT), BOTH),
    (allow("time", "t", TIME), BOTH),
    (allow("time-min", None, TIME), ALLOCATION),
    (allow("tmp", None, SIZE), ALLOCATION),
    (deny("uid", None, REQ, IDENTITY), None),
    (flag("unbuffered", "u"), BOTH),
    (flag("usage"), BOTH),
    (flag("use-min-nodes"), ALLOCATION),
    (flag("verbose", "v"), BOTH),
    (flag("version", "V"), BOTH),
    (allow("wait", "W", COUNT), BOTH),
    (allow("wckey"), ALLOCATION),
    (flag("whole"), BOTH),
    (deny("x11", None, OPT, X11), None),
]

_FOREIGN = [
    # sbatch/salloc options that people try on srun: refused by exact name.
    deny("get-user-env", None, OPT, LOGIN_ENV),
    deny("export-file", None, REQ, EXPORT_FILE),
]


def build_spec(rows, foreign, *, step: bool) -> CommandSpec:
    """srun's table in one mode from (option, where) rows (versions.py makes
    the rows of each Slurm series)."""
    options = []
    for option, where in rows:
        if step and where == ALLOCATION:
            option = option._replace(denial=ALLOCATION_ONLY)
        options.append(option)
    return CommandSpec("srun", options, foreign=foreign, het_colon="anywhere")


SRUN_ALLOCATION = build_spec(_ROWS, _FOREIGN, step=False)
SRUN_STEP = build_spec(_ROWS, _FOREIGN, step=True)


def allowed_in_step(name: str, step_spec: CommandSpec | None = None) -> bool:
    """Is the long option `name` allowed inside a job (step mode)?"""
    option = (step_spec or SRUN_STEP).by_long.get(name)
    return option is not None and option.denial is None


def allocation_only(name: str, step_spec: CommandSpec | None = None) -> bool:
    """Does the long option `name` only apply when srun makes an allocation?"""
    option = (step_spec or SRUN_STEP).by_long.get(name)
    return option is not None and option.denial is ALLOCATION_ONLY


def parse(argv: Sequence[str], *, step: bool, allow_mail: bool = False,
          specs: tuple[CommandSpec, CommandSpec] | None = None) -> Parsed:
    """srun's command line: options, then the command and its arguments.
    `step` is True inside a job (SLURM_JOB_ID set): step options only.
    `specs`: (allocation, step) tables of the Slurm series in use (versions.srun)."""
    allocation, in_step = specs or (SRUN_ALLOCATION, SRUN_STEP)
    return _parse(in_step if step else allocation, argv,
                  unlock=("mail",) if allow_mail else ())


# srun's input environment variables (from srun(1) of 22.05 and the names
# the installed srun reads, each with the option it sets). Outside a job they
# become options before the command line; inside a job (step mode) they are
# validated the same way, by the step allow-list, and passed on unchanged, so
# srun tells them from command-line options as it always does. Either way a
# variable cannot smuggle a denied option, and a refusal names it.
INPUT_ENV = input_env_table("SLURM_", """
    account acctg-freq bcast clusters compress constraint core-spec cpus-per-gpu cpu-bind
    delay-boot dependency disable-status distribution epilog exact exclusive gpus
    gpus-per-node gpus-per-socket gpus-per-task gpu-bind gpu-freq gres gres-flags hint
    immediate job-name mem-bind mem-per-cpu mem-per-gpu network no-kill ntasks
    ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres
    open-mode overcommit overlap partition power profile prolog qos reservation resv-ports
    send-libs signal spread-job task-epilog task-prolog threads threads-per-core thread-spec
    use-min-nodes wait wckey""",
    SLURM_BURST_BUFFER="bb", SLURM_CPU_FREQ_REQ="cpu-freq", SLURM_EXPORT_ENV="export",
    SLURM_JOB_NUM_NODES="nodes", SLURM_NNODES="nodes", SLURM_KILL_BAD_EXIT="kill-on-bad-exit",
    SLURM_LABELIO="label", SLURM_MEM_PER_NODE="mem", SLURM_MPI_TYPE="mpi",
    SLURM_NPROCS="ntasks", SLURM_TIMELIMIT="time", SLURM_UNBUFFEREDIO="unbuffered",
    SLURM_WORKING_DIR="chdir", SRUN_CONTAINER="container", SRUN_CPUS_PER_TASK="cpus-per-task",
    SRUN_EXPORT_ENV="export", SLURM_CONTAINER="container", SLURM_BCAST_EXCLUDE="bcast-exclude",
    SLURM_CLUSTER_CONSTRAINT="cluster-constraint", SLURM_DEBUG="verbose",
    SLURM_NCORES_PER_SOCKET="cores-per-socket", SLURM_NSOCKETS_PER_NODE="sockets-per-node",
    SLURMD_DEBUG="slurmd-debug", SLURM_REMOTE_CWD="chdir", SLURM_SRUN_MULTI="multi-prog",
    SLURM_HOSTFILE="nodefile", SLURM_STDOUTMODE="output", SLURM_STDERRMODE="error",
    SLURM_STDINMODE="input")

_DIGITS = re.compile(r"\d{1,10}")
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_HOSTS = re.compile(r"[A-Za-z0-9._\-\[\],]{1,65536}")
# Inside a job: variables srun reads that describe the allocation rather than
# set an option (srun keeps them for the tasks, or reads them as defaults).
# Each reaches the real srun only when its value passes.
STEP_FACTS = {
    "SLURM_ARRAY_JOB_ID": _DIGITS, "SLURM_ARRAY_TASK_ID": _DIGITS, "SLURM_HET_SIZE": _DIGITS,
    "SLURM_JOB_NODELIST": _HOSTS,
    "SLURM_NODE_ALIASES": re.compile(r"[A-Za-z0-9._:,\-\[\]]{0,65536}"),
    "SLURM_JOB_CPUS_PER_NODE": re.compile(r"[0-9(),x]{1,65536}"),
    "SLURM_JOB_ACCOUNT": _NAME, "SLURM_JOB_PARTITION": re.compile(r"[A-Za-z0-9_.,\-]{1,1024}"),
    "SLURM_JOB_QOS": _NAME, "SLURM_JOB_RESERVATION": _NAME,
    "SLURM_STEP_GRES": re.compile(r"[A-Za-z0-9_:.,()=\-]{1,1024}"),
    "SLURM_DIST_PLANESIZE": _DIGITS, "SLURM_SRUN_REDUCE_TASK_EXIT_MSG": _DIGITS,
    "SLURM_PRIO_PROCESS": re.compile(r"-?\d{1,3}"), "SLURM_UMASK": re.compile(r"0?[0-7]{3}"),
    "SLURM_EXIT_ERROR": _DIGITS, "SLURM_EXIT_IMMEDIATE": _DIGITS, "SRUN_DEBUG": _DIGITS,
    # 24.11+ (api/allocate.c): the node whose step manager creates the job's
    # steps (slurmctld sets it to the batch host when the site or job enables
    # stepmgr). It only picks which slurmd gets srun's authenticated step
    # request, which that step manager checks against its job; without it
    # every step costs a controller RPC and a reroute.
    "SLURM_STEPMGR": _NAME,
}
# Read by srun or by slurmstepd from the job environment and never passed on
# (beyond the input variables above, whose denied options are refused with
# the variable's name): each names a file, a socket, a program, a directory
# or a controller outside the sandbox, or is not needed. Listed so the table
# says why; a name in neither table does not reach the real srun either.
STEP_DROPPED = {
    "SLURM_CONF, SLURM_CONF_SERVER": "the Slurm configuration (plugins, prologs, controllers)",
    "SLURM_WORKING_CLUSTER": "the controller srun talks to (and sends credentials to)",
    "SLURM_SRUN_CR_SOCKET": "a Unix socket srun connects to",
    "SLURM_ARBITRARY_NODELIST": "only with SLURM_HOSTFILE's arbitrary distribution",
    "SLURM_REQ_SWITCH, SLURM_WAIT4SWITCH": "scheduling of a new allocation",
    "SLURM_PTY_PORT, SLURM_SRUN_COMM_HOST": "srun's --pty and I/O channels",
    "SLURM_SCRIPT_CONTEXT": "internal to Slurm's script hooks",
    "SLURM_SPANK_*, _SLURM_SPANK_OPTION_*": "options of SPANK plugins, which run outside",
    "<VAR>_HET_GROUP_<n>, <VAR>_PACK_GROUP_<n>": "heterogeneous steps are refused",
    "SLURM_PMIX_*, SLURM_PMI2_*, PMIX_*, PMI_*": "slurmstepd's MPI plugins run as root "
                                                 "(SLURM_PMIX_TMPDIR is a directory it "
                                                 "creates, chowns and removes)",
    "SLURM_RLIMIT_*, SLURM_STEP_KILLED_MSG_NODE_ID": "srun sets its own from its limits",
    "TMPDIR, LD_*, GCONV_PATH, LOCPATH, …": "directories or code outside the sandbox",
    "SLURM_JOB_ID, SLURM_JOBID": "set by the chaperon to the job the ledger vouched for",
}


def parse_env(env: dict[str, str], *, step: bool = False, allow_mail: bool = False,
              specs: tuple[CommandSpec, CommandSpec] | None = None,
              table: dict[str, str] | None = None) -> Parsed:
    """srun's input variables as options (read by the mode's allow-list)."""
    allocation, in_step = specs or (SRUN_ALLOCATION, SRUN_STEP)
    return parse_input_env(in_step if step else allocation, table or INPUT_ENV, env,
                           lambda words: parse(words, step=step, allow_mail=allow_mail,
                                               specs=specs))
