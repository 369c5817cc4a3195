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
`Refusal.argument` (chaperon/refusal.py), which carries what the user wrote,
a stable reason code and a message `agent-sandbox: <cmd>: <what> — <why>.
<how to do it instead>`.

This module is the engine only; the vocabulary the tables are written in
(value checks such as TIME or EXPORT, the declaration helpers `allow`,
`flag`, `deny`, …, and the denials sbatch and srun share) is in values.py,
the tables in sbatch_options.py and srun_options.py.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Callable, Iterable, NamedTuple, Sequence

from ..refusal import Refusal


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
    except Refusal as refused:
        known = refused.index is not None and 0 <= refused.index < len(words)
        variable = words[refused.index][0] if known else f"an input variable of {spec.command}"
        instead = refused.instead[:1].lower() + refused.instead[1:]
        raise Refusal.argument(refused.command, refused.written, refused.reason, refused.why,
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
    options are kept but not re-emitted. Raises Refusal."""
    grants = frozenset(unlock)
    cmd = spec.command
    items: list[Item] = []

    def refuse(written, denial_or_reason, why=None, instead=None, *, option=None, index):
        if isinstance(denial_or_reason, Denial):
            d = denial_or_reason
            fmt = {"cmd": cmd, "opt": f"--{option}" if option else written}
            raise Refusal.argument(cmd, written, d.reason, d.why.format(**fmt),
                                d.instead.format(**fmt), option=option, index=index)
        raise Refusal.argument(cmd, written, denial_or_reason, why, instead, option=option,
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
            raise Refusal.argument(cmd, written, d.reason,
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
        raise Refusal.argument(cmd, ":", HET_JOB.reason, HET_JOB.why, HET_JOB.instead,
                            index=i if rest[:1] == (":",) else list(argv).index(":"),
                            subject="the ':' component separator")
    return Parsed(cmd, tuple(items), rest, i, _items_values(items))


def parse_permuted(spec, argv) -> Parsed:
    """Parse as GNU getopt does without "+": options anywhere, the words that
    are not options collected in order as the positional rest ("--" ends the
    options). The scoped commands (squeue, scancel, scontrol, …) parse so."""
    items: list = []
    positional: list[str] = []
    rest = list(argv)
    while rest:
        parsed = parse(spec, rest)
        items.extend(parsed.items)
        if not parsed.rest:
            break
        index = parsed.rest_index
        ended = index > 0 and rest[index - 1] == "--" and not any(
            item.written.endswith(" --") for item in parsed.items)
        if ended:
            positional.extend(parsed.rest)
            break
        positional.append(parsed.rest[0])
        rest = list(parsed.rest[1:])
    values: dict = {}
    for item in items:
        values.setdefault(item.name, []).append(item.value)
    return Parsed(spec.command, tuple(items), tuple(positional), 0, values)
