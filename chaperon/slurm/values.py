"""The vocabulary the sbatch and srun tables (and the handlers' own small
tables) are written in: value checks (a whole number, a time, a node list,
an --export list, …), the declaration helpers (`allow`, `flag`, `path`,
`deny`, `other`) and the denials sbatch and srun share, each with its why
and its instead. The engine that reads argv against a table is options.py.
"""
from __future__ import annotations

import re

from .options import (REQ, NONE, Arg, Check, Denial, Option, PATH_KINDS, _show, choice, comma_list,
                      pattern)

WORD = pattern(r"[^\s\x00-\x1f\x7f]+", "a value without spaces or control characters",
               "Give a non-empty value without spaces", ("debug", "gpu:2", "a100&ib"))
TEXT = pattern(r"[^\x00-\x1f\x7f]*", "text without control characters",
               "Leave out newlines and other control characters", ("my job", "run 3"))
JOB_NAME = pattern(r"[^/\x00-\x1f\x7f]*", "a job name without '/' or control characters",
                   "Leave out '/': the job name fills %x in output file names",
                   ("train", "run 3", "exp-1.a"))
COUNT = pattern(r"\d{1,9}", "a whole number", "Give a whole number such as 4", ("1", "16"))
NODES = pattern(r"\d{1,9}(?:[-,:]\d{1,9})*", "a node count",
                "Give a count such as 2, or a range such as 2-4", ("1", "2-4"))
TIME = pattern(r"(?i:unlimited|infinite)|-1|\d+(?::\d+){0,2}|\d+-\d+(?::\d+){0,2}",
               "a time limit", "Use MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM[:SS] or UNLIMITED",
               ("30", "1:00:00", "2-12", "1-00:30:00", "UNLIMITED"))
WHEN = pattern(r"[A-Za-z0-9:+\-/.]+", "a date or time",
               "Use a time such as now+1hour, 16:00 or 2030-01-31T16:00:00",
               ("now+1hour", "2030-01-31T16:00:00", "16:00", "midnight"))
SIZE = pattern(r"\d{1,15}(?:[KkMmGgTt][Bb]?)?", "a memory size",
               "Give a size such as 4000 (MB), 512M or 4G", ("4000", "512M", "4G", "1T"))
ARRAY = pattern(r"[0-9][0-9,\-:%]*", "an array index list",
                "Give indexes such as 0-15, 1,3,5 or 0-99:2%10", ("0-15", "1,3,5", "0-99:2%10"))
HOSTLIST = pattern(r"[A-Za-z0-9._\-\[\],]+", "a list of node names",
                   "Give node names inline, such as node[01-04,07] (a file of names is not read)",
                   ("node01", "node[01-04,07]"))
SIGNAL = pattern(r"(?:[RB]{1,2}:)?[A-Za-z0-9]{1,12}(?:@\d{1,9})?", "a signal specification",
                 "Use [B:]SIGNAL[@SECONDS], such as USR1@60 or B:TERM@120",
                 ("USR1@60", "B:TERM@120", "10"))
SOCKETS = pattern(r"[0-9*]{1,9}(?::[0-9*]{1,9}){0,2}", "a SOCKETS[:CORES[:THREADS]] count",
                  "Use SOCKETS[:CORES[:THREADS]], such as 2:8", ("2", "2:8", "2:8:1"))
COMMAND = pattern(r"(?s).+", "a command", "Give the command to run",
                  ("hostname", "python train.py --epochs 3"))
PATH_VALUE = pattern(r"[^\x00-\x1f\x7f]+", "a file name",
                     "Give a file name inside the project, % patterns allowed",
                     ("out.log", "logs/%x-%j.out"))
MAIL_TYPE = comma_list(choice("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL",
                              "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT", "TIME_LIMIT_90",
                              "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"),
                       "mail event types", ("END", "BEGIN,END,FAIL"))


def _check_nice(value: str) -> str | None:
    if not re.fullmatch(r"\d{1,10}", value) or int(value) > 2147483645:
        return (f"{_show(value)} is not a nice value from 0 to 2147483645 (a negative nice "
                "raises the job's priority, which only administrators may do)")
    return None


NICE = Check("a nice value", _check_nice,
             "Give a nice value from 0 to 2147483645, or --nice alone", ("0", "100"))


# --export: which variables an agent may hand to the job's environment. The job
# environment reaches the compute node before the sandbox wrapper is in place,
# so names that change how programs load, which configuration Slurm or the
# sandbox uses, or how shells start are refused (defence in depth: the wrapper
# is also immune to them). Set such variables inside the job script instead.
# The lists live in chaperon/environment.py, shared with the env handling.
from ..environment import export_name_denied  # noqa: E402
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_export(value: str) -> str | None:
    # Slurm splits the list at commas; so do we (a comma inside a quoted value
    # only makes us see more names than Slurm does, never fewer).
    if value == "":
        return "an empty list is not ALL, NONE or NAME[=value] items"
    modes = 0
    for item in value.split(","):
        if item.upper() in ("ALL", "NONE"):
            modes += 1
            continue
        name, eq, val = item.partition("=")
        if not _ENV_NAME.fullmatch(name):
            return (f"{_show(name)} is not a variable name (letters, digits and _, "
                    "not starting with a digit)")
        if export_name_denied(name):
            return (f"{name} changes how programs load or which configuration Slurm or the "
                    "sandbox uses, and the job environment reaches the compute node before "
                    "the sandbox is in place")
        if re.search(r"[\x00-\x1f\x7f]", val):
            return f"the value of {name} contains control characters"
    if modes > 1:
        return "ALL and NONE cannot be combined"
    return None


EXPORT = Check("an export list", _check_export,
               "Give ALL, NONE or NAME[=value] items, and set the variables refused here inside "
               "the job script", ("ALL", "NONE", "ALL,OMP_NUM_THREADS=4", "MY_SETTING=1,OTHER"))



def allow(name: str, short: str | None = None, check: Check = WORD, **kw) -> Option:
    return Option(name, short, kw.pop("arg", REQ), check, **kw)


def flag(name: str, short: str | None = None, **kw) -> Option:
    return Option(name, short, NONE, None, **kw)


def path(name: str, short: str | None, kind: str) -> Option:
    assert kind in PATH_KINDS
    return Option(name, short, REQ, PATH_VALUE, path=kind)


def deny(name: str, short: str | None, arg: Arg, denial: Denial, check: Check | None = None,
         **kw) -> Option:
    """Refused; `check` validates the value when an admin unlock lifts the denial."""
    return Option(name, short, arg, check, denial, **kw)


NOT_ALLOWED = Denial(
    "option_not_allowed",
    "{opt} is not on the sandbox's allow-list of {cmd} options",
    "Leave it out; if the job really needs it, ask the person running the sandbox to "
    "submit it from outside")


def other(name: str, short: str | None = None, arg: Arg = REQ, **kw) -> Option:
    """An option the real command has that the sandbox does not allow."""
    return deny(name, short, arg, NOT_ALLOWED, **kw)


# Denials shared by the sbatch and srun tables.
CHDIR = Denial("chdir", "the job's working directory is the directory {cmd} runs in, which the "
               "sandbox checks is inside the project",
               "cd to that directory inside the project and run {cmd} from there")
IDENTITY = Denial("identity", "jobs run as you; running them as another user or group is "
                  "reserved to root", "Leave out --uid and --gid")
LOGIN_ENV = Denial("login_env", "it makes Slurm start your login shell on the compute node, "
                   "outside the sandbox, to capture its environment",
                   "Pass the variables the job needs with --export=ALL,NAME=value or set them "
                   "in the job script")
PROPAGATE = Denial("propagate", "it copies this shell's resource limits into the job outside "
                   "the sandbox's control", "Set limits inside the job script with ulimit")
HOST_PROGRAM = Denial("host_program", "it runs a program on the compute node outside the "
                      "sandbox", "Run that program at the start or end of the command or job "
                      "script instead")
BCAST = Denial("bcast", "it copies files onto the compute nodes outside the project",
               "Keep the program in the project directory; the job sees it there")
CONTAINER = Denial("container", "containers started by Slurm itself are not inside the sandbox",
                   "Start the container runtime from the job script (e.g. apptainer exec) so "
                   "it runs inside the sandbox")
BURST_BUFFER = Denial("burst_buffer", "burst-buffer directives stage data with the burst-buffer "
                      "plugin's privileges, outside the sandbox",
                      "Copy data in and out from the job script")
MAIL = Denial("mail", "mail from slurmctld leaves the cluster, an egress channel the sandbox "
              "does not control", "Follow the job with squeue or sacct, or ask the admin to "
              "allow mail (SLURM_ALLOW_MAIL=true in /etc/agent-sandbox/sandbox.conf)",
              unlock="mail")
EXPORT_FILE = Denial("file_read", "it makes {cmd} read a file outside the sandbox",
                     "Pass variables with --export=ALL,NAME=value")
NODEFILE = Denial("file_read", "it makes {cmd} read a file outside the sandbox",
                  "Give the node names inline, e.g. --nodelist=node[01-04]")
OTHER_CLUSTER = Denial("other_cluster", "jobs on another cluster are outside this sandbox's "
                       "job ledger and scope", "Run the sandbox on a login node of that cluster")
ADMIN_ONLY = Denial("admin_only", "only Slurm administrators may use {opt}", "Leave it out")
NETWORK = Denial("network", "it configures the interconnect for the job outside the sandbox's "
                 "control", "Leave it out; the default network is used")
