"""The option parser and validator shared by every Slurm handler (SPEC §9).

Strategy: a command is a table (`CommandSpec`) of every option the real
command knows — canonical long name, short letter, whether it takes a value,
a check for the value, and for the ones the sandbox refuses a `Denial` (why,
and what to do instead). `parse(spec, argv)` reads argv exactly as Slurm's
getopt_long does, with the optstring Slurm builds ("+" first: stop at the
first non-option):

- `-p x`, `-px`, clustered flags (`-Hv`, `-Hpdebug`), `--partition x`,
  `--partition=x`, and unambiguous abbreviations (`--part=x`); an exact name
  wins over an abbreviation, an abbreviation of several options is an error;
- a required value is taken from the next word whatever it looks like
  (`-J --hold` names the job "--hold"); an optional value only when attached
  (`--nice=5`, `-k1`); `--` ends the options; the first non-option (or a lone
  `-`) and everything after it are the positional rest — the script and its
  arguments for sbatch, the command for srun.

Because the tables list every option of Slurm 22.05 (allowed or not),
abbreviations resolve as they would for the real command, and an
abbreviation of a refused option is refused with that option's reason.
Anything the table does not know is refused too: it is an allow-list.

The result (`Parsed`) is re-emitted canonically — `--name=value` or `--flag`,
never a short form, never an abbreviation — so the real command never
parses a spelling the agent chose. Nothing here touches the filesystem:
path options (`--output/--error/--input`) are only marked with their kind
for the handler, their `%` patterns untouched. Every refusal raises
`OptionRefused`, which carries what the user wrote, a stable reason code and
a message `agent-sandbox: <cmd>: <what> — <why>. <how to do it instead>`.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Callable, Iterable, NamedTuple, Sequence


class Arg(Enum):
    NONE = "none"            # --flag
    REQUIRED = "required"    # --name=value, --name value, -Xvalue, -X value
    OPTIONAL = "optional"    # --name or --name=value, -X or -Xvalue


NONE, REQ, OPT = Arg.NONE, Arg.REQUIRED, Arg.OPTIONAL


# --- refusals -------------------------------------------------------------

class Denial(NamedTuple):
    """Why an option is refused and what to do instead. `{cmd}` and `{opt}`
    are filled in with the command and the option's canonical spelling.
    `unlock` names an admin switch that lifts the denial (e.g. "mail")."""
    reason: str
    why: str
    instead: str
    unlock: str | None = None


class OptionRefused(Exception):
    """A refused argument list. `written` is the option as the user wrote it
    (`-D /tmp`, `--ch=/tmp`), `option` its canonical name when it resolved,
    `reason` a stable code for logs and --json, `line` the script line for
    #SBATCH directives. `message` is the line the stub prints."""

    def __init__(self, command: str, written: str, reason: str, why: str, instead: str, *,
                 option: str | None = None, index: int | None = None,
                 line: int | None = None, subject: str | None = None):
        self.command = command
        self.subject = subject      # what is refused when it is not an option
        self.written = written
        self.reason = reason
        self.why = why
        self.instead = instead
        self.option = option
        self.index = index          # position in the argv that was parsed
        self.line = line
        super().__init__(self.message)

    @property
    def what(self) -> str:
        if self.subject:
            return f"{self.subject} is refused"
        shown = self.written
        if self.option and not shown.startswith(f"--{self.option}"):
            shown += f" (--{self.option})"
        if self.line is not None:
            if not shown.startswith("#"):
                shown = f"#SBATCH {shown}"
            return f"{shown} on script line {self.line} is refused"
        return f"{shown} is refused"

    @property
    def message(self) -> str:
        return f"agent-sandbox: {self.command}: {self.what} — {self.why}. {self.instead}"

    def at_line(self, line: int) -> "OptionRefused":
        return OptionRefused(self.command, self.written, self.reason, self.why, self.instead,
                             option=self.option, index=self.index, line=line,
                             subject=self.subject)

    def __str__(self) -> str:
        return self.message


# --- value checks -----------------------------------------------------------

class Check(NamedTuple):
    """A value check: `test(value)` is None when the value is fine, else why
    not; `fix` says how to write it. `examples` are valid values (for the
    documentation and the tests)."""
    describe: str
    test: Callable[[str], str | None]
    fix: str
    examples: tuple[str, ...]


def _show(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


def pattern(regex: str, describe: str, fix: str, examples: Sequence[str]) -> Check:
    rx = re.compile(regex)

    def test(value: str) -> str | None:
        return None if rx.fullmatch(value) else f"{_show(value)} is not {describe}"
    return Check(describe, test, fix, tuple(examples))


def choice(*values: str) -> Check:
    allowed = {v.lower() for v in values}
    listed = ", ".join(values)

    def test(value: str) -> str | None:
        return None if value.lower() in allowed else f"{_show(value)} is not one of {listed}"
    return Check(f"one of {listed}", test, f"Use one of {listed}", values)


def comma_list(item: Check, describe: str, examples: Sequence[str]) -> Check:
    def test(value: str) -> str | None:
        for part in value.split(","):
            why = item.test(part)
            if why:
                return why
        return None
    return Check(describe, test, f"Give a comma-separated list of {item.describe}",
                 tuple(examples))


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
from .environment import export_name_denied  # noqa: E402
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


# --- the table --------------------------------------------------------------

PATH_KINDS = ("output", "error", "input")


class Option(NamedTuple):
    name: str                           # canonical long name, re-emitted as --name
    short: str | None = None
    arg: Arg = REQ
    check: Check | None = None
    denial: Denial | None = None        # refused (unless its unlock is granted)
    aliases: tuple[str, ...] = ()       # other long names Slurm maps to the same option
    path: str | None = None             # "output" | "error" | "input": handler resolves it
    emit: bool = True                   # False: the handler rebuilds it (sbatch --wrap)
    script_denial: Denial | None = None  # refused inside #SBATCH lines only
    early: bool = False                 # read in sbatch's early pass only: ignored (not
    #                                     re-emitted) inside #SBATCH lines, as sbatch does


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
HET_JOB = Denial("het_job", "heterogeneous jobs (components separated by ':') are not "
                 "supported through the sandbox", "Submit each component as its own job and "
                 "link them with --dependency")


class CommandSpec:
    """The option table of one command (or one mode of a command).

    `foreign` are options of *other* Slurm commands given a specific reason
    when used by their exact name here (e.g. srun's --prolog under sbatch);
    they never take part in abbreviation matching. `het_colon` says where a
    bare ":" splits a heterogeneous job for the real command: "script" (the
    first positional, sbatch) or "anywhere" (any word, srun)."""

    def __init__(self, command: str, options: Iterable[Option], *,
                 foreign: Iterable[Option] = (), het_colon: str | None = None):
        self.command = command
        self.options = tuple(options)
        self.het_colon = het_colon
        self.by_long: dict[str, Option] = {}
        self.by_short: dict[str, Option] = {}
        for option in self.options:
            for name in (option.name, *option.aliases):
                assert name not in self.by_long, name
                self.by_long[name] = option
            if option.short:
                assert option.short not in self.by_short, option.short
                self.by_short[option.short] = option
        self.foreign = {o.name: o for o in foreign}

    def resolve(self, name: str) -> Option | list[Option] | None:
        """An exact name or alias, else the one option `name` abbreviates;
        a list when it abbreviates several; None when nothing matches."""
        exact = self.by_long.get(name)
        if exact is not None:
            return exact
        found: list[Option] = []
        for long_name, option in self.by_long.items():
            if long_name.startswith(name) and all(option is not f for f in found):
                found.append(option)
        if len(found) == 1:
            return found[0]
        return found or None

    def allowed(self, unlock: Iterable[str] = ()) -> tuple[Option, ...]:
        grants = frozenset(unlock)
        return tuple(o for o in self.options
                     if o.denial is None or (o.denial.unlock and o.denial.unlock in grants))


# --- the result -------------------------------------------------------------

class Item(NamedTuple):
    name: str                 # canonical long name
    value: str | None         # None: given without a value
    written: str              # as the user wrote it
    index: int                # argv index where it started
    path: str | None = None   # path kind for --output/--error/--input
    emit: bool = True

    def render(self) -> str:
        return f"--{self.name}" if self.value is None else f"--{self.name}={self.value}"


class Parsed(NamedTuple):
    command: str
    items: tuple[Item, ...]
    rest: tuple[str, ...]          # script and its arguments / command and its arguments
    rest_index: int                # argv index where `rest` starts
    values: dict[str, list[str | None]]   # canonical name -> values, in order (None: no value)

    def argv(self, skip: Iterable[str] = ()) -> list[str]:
        """Canonical re-emission, in the order given, without the options the
        handler rebuilds (`emit=False`) and without the names in `skip`."""
        skipped = frozenset(skip)
        return [i.render() for i in self.items if i.emit and i.name not in skipped]

    @property
    def canonical(self) -> list[str]:
        return self.argv()

    def has(self, name: str) -> bool:
        return name in self.values

    def last(self, name: str, default: str | None = None) -> str | None:
        """The value that wins (Slurm: the last one given)."""
        values = self.values.get(name)
        return values[-1] if values and values[-1] is not None else default

    @property
    def paths(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.path is not None)


def _items_values(items: Iterable[Item]) -> dict[str, list[str | None]]:
    values: dict[str, list[str | None]] = {}
    for item in items:
        values.setdefault(item.name, []).append(item.value)
    return values


def merge(first: Parsed, then: Parsed) -> Parsed:
    """Directive options followed by command-line options (the command line
    wins, as with Slurm); the positional rest comes from `then`."""
    items = first.items + then.items
    return then._replace(items=items, values=_items_values(items))


# --- input environment variables ---------------------------------------------

def input_env_table(prefix: str, options: str, **renamed: str) -> dict[str, str]:
    """variable → long option for a command's input variables: PREFIX plus the
    option in upper case with "_" for "-" (SBATCH_JOB_NAME → job-name), and
    the variables Slurm names otherwise (`renamed`: variable=option)."""
    table = {prefix + name.upper().replace("-", "_"): name for name in options.split()}
    table.update(renamed)
    return table


def input_env_words(spec: CommandSpec, table: dict[str, str],
                    env: dict[str, str]) -> list[tuple[str, str]]:
    """(variable, command-line word) for each of the command's input
    variables (`table`: variable → long option) set in `env`, as Slurm reads
    them: a flag option is on when its variable is empty, "yes" or a non-zero
    number, and off for any other value (checked against the real sbatch and
    srun of 22.05)."""
    words = []
    for variable, name in table.items():
        value = env.get(variable)
        if value is None:
            continue
        option = spec.by_long.get(name)
        arg = option.arg if option else REQ
        if arg is NONE:
            if value == "" or value.lower() == "yes" or (value.isascii() and value.isdigit() and int(value)):
                words.append((variable, f"--{name}"))
        elif arg is OPT and value == "":
            words.append((variable, f"--{name}"))
        else:
            words.append((variable, f"--{name}={value}"))
    return words


def parse_input_env(spec: CommandSpec, table: dict[str, str], env: dict[str, str],
                    parse_words: Callable[[list[str]], Parsed]) -> Parsed:
    """The input variables as options, read by `parse_words` (the command's
    own allow-list). A refusal names the variable the option came from."""
    words = input_env_words(spec, table, env)
    try:
        return parse_words([w for _, w in words])
    except OptionRefused as refused:
        known = refused.index is not None and 0 <= refused.index < len(words)
        variable = words[refused.index][0] if known else f"an input variable of {spec.command}"
        instead = refused.instead[:1].lower() + refused.instead[1:]
        raise OptionRefused(refused.command, refused.written, refused.reason, refused.why,
                            f"Unset {variable}, or: {instead}", option=refused.option,
                            index=refused.index,
                            subject=f"{variable} (read by {spec.command} as {refused.written})"
                            ) from None


# --- the parser -------------------------------------------------------------

def parse(spec: CommandSpec, argv: Sequence[str], *, unlock: Iterable[str] = (),
          in_script: bool = False) -> Parsed:
    """Read `argv` (without the program name) as the real command would and
    validate every option. `unlock` lifts denials whose `unlock` key it
    names (admin settings such as "mail"). `in_script` applies the rules of
    #SBATCH lines: options with a `script_denial` are refused, early-pass
    options are kept but not re-emitted. Raises OptionRefused."""
    grants = frozenset(unlock)
    cmd = spec.command
    items: list[Item] = []

    def refuse(written, denial_or_reason, why=None, instead=None, *, option=None, index):
        if isinstance(denial_or_reason, Denial):
            d = denial_or_reason
            fmt = {"cmd": cmd, "opt": f"--{option}" if option else written}
            raise OptionRefused(cmd, written, d.reason, d.why.format(**fmt),
                                d.instead.format(**fmt), option=option, index=index)
        raise OptionRefused(cmd, written, denial_or_reason, why, instead, option=option,
                            index=index)

    def check_denied(option: Option, written: str, index: int) -> None:
        denial = option.denial
        if denial is not None and not (denial.unlock and denial.unlock in grants):
            refuse(written, denial, option=option.name, index=index)

    def accept(option: Option, value: str | None, written: str, index: int) -> None:
        check_denied(option, written, index)
        if in_script and option.script_denial is not None:
            refuse(written, option.script_denial, option=option.name, index=index)
        if value is not None and option.check is not None:
            why = option.check.test(value)
            if why:
                refuse(written, "bad_value", why, option.check.fix, option=option.name,
                       index=index)
        items.append(Item(option.name, value, written, index, option.path,
                          option.emit and not (in_script and option.early)))

    def unknown_long(name: str, written: str, index: int):
        foreign = spec.foreign.get(name)
        if foreign is not None and foreign.denial is not None:
            d = foreign.denial
            fmt = {"cmd": cmd, "opt": f"--{name}"}
            raise OptionRefused(cmd, written, d.reason,
                                f"--{name} is not an option of {cmd}, and {d.why.format(**fmt)}",
                                d.instead.format(**fmt), index=index)
        refuse(written, "unknown_option", f"{cmd} has no option --{name}",
               f"Check the spelling in `{cmd} --help`", index=index)

    i, n = 0, len(argv)
    while i < n:
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word == "-" or not word.startswith("-"):
            break
        start = i
        if word.startswith("--"):
            name, eq, attached = word[2:].partition("=")
            found = spec.resolve(name)
            if found is None:
                unknown_long(name, word, start)
            if isinstance(found, list):
                names = ", ".join(f"--{o.name}" for o in found[:8])
                more = ", …" if len(found) > 8 else ""
                refuse(word, "ambiguous_option",
                       f"--{name} abbreviates several {cmd} options ({names}{more})",
                       "Spell the option out in full", index=start)
            option = found
            if option.arg is NONE:
                if eq:
                    check_denied(option, word, start)
                    refuse(word, "unexpected_value", f"--{option.name} takes no value",
                           f"Write --{option.name} alone", option=option.name, index=start)
                value, written = None, word
            elif eq:
                value, written = attached, word
            elif option.arg is REQ:
                if i + 1 >= n:
                    check_denied(option, word, start)
                    refuse(word, "missing_value", f"--{option.name} needs a value",
                           f"Write --{option.name}=VALUE", option=option.name, index=start)
                i += 1
                value, written = argv[i], f"{word} {argv[i]}"
            else:
                value, written = None, word
            accept(option, value, written, start)
            i += 1
            continue
        # A cluster of short options: -Hv, -pdebug, -Hp debug.
        j = 1
        while j < len(word):
            letter = word[j]
            option = spec.by_short.get(letter)
            if option is None:
                refuse(f"-{letter}", "unknown_option", f"{cmd} has no option -{letter}",
                       f"Check the spelling in `{cmd} --help`", index=start)
            attached = word[j + 1:]
            if option.arg is NONE:
                accept(option, None, f"-{letter}", start)
                j += 1
                continue
            if attached:
                accept(option, attached, f"-{letter}{attached}", start)
            elif option.arg is REQ:
                if i + 1 >= n:
                    check_denied(option, f"-{letter}", start)
                    refuse(f"-{letter}", "missing_value", f"-{letter} needs a value",
                           f"Write --{option.name}=VALUE", option=option.name, index=start)
                i += 1
                accept(option, argv[i], f"-{letter} {argv[i]}", start)
            else:
                accept(option, None, f"-{letter}", start)
            break
        i += 1

    rest = tuple(argv[i:])
    if (spec.het_colon == "script" and rest[:1] == (":",)) or (
            spec.het_colon == "anywhere" and ":" in argv):
        raise OptionRefused(cmd, ":", HET_JOB.reason, HET_JOB.why, HET_JOB.instead,
                            index=i if rest[:1] == (":",) else list(argv).index(":"),
                            subject="the ':' component separator")
    return Parsed(cmd, tuple(items), rest, i, _items_values(items))
