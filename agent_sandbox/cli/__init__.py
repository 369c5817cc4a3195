"""Command-line entry point.

`agent-sandbox run …` sits on the path of every agent tool call at some sites,
so the common launch shapes are parsed here by hand and go straight to the
launcher; typer (which costs more to import than a whole launch) builds the
full CLI for everything else: --help, errors, the other subcommands. Both
paths call the same launcher functions; a test keeps them in agreement.
"""
from __future__ import annotations

import sys

from agent_sandbox.names import SUBCOMMANDS


def _fast_run(args: list[str]) -> dict | None:
    """Parse `run [--project-dir D] [--backend B] [--dry-run] [--job] [--keep-fd N]…
    [--allocation JOBID] [--] CMD…`.
    Returns None for anything unusual (help, unknown options, missing or
    malformed values), which then goes to typer for a proper message."""
    options: dict = {"project_dir": None, "backend": None, "dry_run": False, "keep_fds": ()}
    job = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-"):
            break
        name, eq, value = arg.partition("=")
        if name in ("--project-dir", "--backend", "--keep-fd", "--allocation"):
            if not eq:
                if i + 1 >= len(args):
                    return None
                value = args[i + 1]
                i += 1
            if name == "--keep-fd":
                if not value.isascii() or not value.isdigit():
                    return None
                options["keep_fds"] += (int(value),)
            elif name == "--allocation":
                if not value.isascii() or not value.isdigit():
                    return None     # typer's path says what is wrong with it
                options["allocation"] = value
            else:
                options[name[2:].replace("-", "_")] = value
        elif arg == "--dry-run":
            options["dry_run"] = True
        elif arg == "--job-shared":            # the chaperon's job launches
            options["job_shared"] = True
        elif arg == "--job":
            job = True
        else:
            return None
        i += 1
    command = args[i:]
    if not command:
        return None
    options["command"] = command
    if job:
        options["job"] = True   # only `run` takes it (a profile is never a job)
    return options


# Subcommands of the typer app (names.SUBCOMMANDS); any other first word names
# an agent profile. Launcher options go BEFORE the profile name
# (`agent-sandbox --dry-run claude --resume`): everything after the name is the
# agent's own, so `agent-sandbox claude --dry-run` hands --dry-run to claude.
_NOT_PROFILES = frozenset(SUBCOMMANDS) - {"bash"}


def main(argv: list[str] | None = None) -> int:
    """The CLI's edge: every command's SandboxError becomes its line on stderr
    and its exit code here, once (errors.mapped), the fast path and typer's
    alike."""
    from agent_sandbox.errors import mapped

    return mapped(_dispatch, sys.argv[1:] if argv is None else argv)


# Commands that run nothing in a sandbox: they answer from a pip --user
# install too (doctor says what is wrong with it); every other one is refused.
_ANSWER_ANY_INSTALL = frozenset({"doctor", "version", "help", "--help", "-h", "--version",
                                 "-V"})


def _dispatch(args: list[str]) -> int:
    if "site" in sys.modules and not (args and args[0] in _ANSWER_ANY_INSTALL):
        from agent_sandbox.tools.usersite import check_user_site   # -IS entry: never here

        check_user_site()
    if args and args[0] == "run":
        parsed = _fast_run(args[1:])
        if parsed is not None:
            from agent_sandbox.launch.run import run

            return run(parsed.pop("command"), **parsed)
    elif args and args[0] not in _NOT_PROFILES and args[0:2] != ["bash", "--help"]:
        # `agent-sandbox [LAUNCHER OPTIONS] NAME [ARGS]`: an agent profile, or a
        # usage error suggesting the closest command or profile.
        parsed = _fast_run(args)
        if parsed is not None and parsed["command"][0] in _NOT_PROFILES:
            _options_before_a_subcommand(args, parsed["command"])
        if (parsed is not None and parsed["command"][0] not in _NOT_PROFILES
                and "job_shared" not in parsed and "job" not in parsed):
            from agent_sandbox.launch.run import run_profile

            command = parsed.pop("command")
            return run_profile(command[0], command[1:], **parsed)
    from agent_sandbox.cli.app import app
    from agent_sandbox.errors import FAILED

    try:
        app(args=args, prog_name="agent-sandbox", standalone_mode=True)
    except SystemExit as exc:   # a non-int code is a message: exit 1, as the interpreter's
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else FAILED)
    return 0


def _options_before_a_subcommand(args: list[str], command: list[str]) -> None:
    """`agent-sandbox --dry-run run …`: launcher options go before a profile
    name but after a subcommand — the usage error says the right order."""
    from agent_sandbox.errors import UsageError

    name = command[0]
    options = args[:len(args) - len(command)]
    if options and options[-1] == "--":
        options = options[:-1]
    shown = " ".join(options)
    if name == "run":
        rest = command[1:2] == ["--"] and command[2:] or command[1:]
        right = f"agent-sandbox run {shown} -- {' '.join(rest) or 'CMD …'}"
    else:
        right = f"agent-sandbox {name} --help (the options {name} takes)"
    raise UsageError(f"{shown} before the subcommand {name} is not understood — options of "
                     f"a subcommand go "
                     f"after its name: {right}. (Before an agent profile's name they go "
                     "first: agent-sandbox --dry-run claude.)")


def exit_now(code) -> None:
    """Leave with `code`, on the launch paths without the interpreter's
    teardown (~2 ms of every launch, benchmarks/launch.py): by then the
    launcher has closed every file it wrote and waited for its children;
    only the standard streams' buffers are left, written here. A command
    that went through typer ends normally (its libraries may have exit
    handlers)."""
    code = 0 if code is None else code
    if not isinstance(code, int) or "click" in sys.modules:
        sys.exit(code)
    import os

    # None: the descriptor was closed when the interpreter started (`>&-`).
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120          # as the interpreter's own exit does
    os._exit(code & 0xFF)

