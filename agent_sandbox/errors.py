"""Errors and exit codes, mapped once (pip's base_command does the same).

Every refusal or failure before the command runs becomes one line on stderr,
`agent-sandbox: <what> — <why>. <what to do>`, and one exit code: 125 when
the sandbox could not be set up (no backend, a bad config, a refused
policy), 2 for a usage error, 126/127 as the shell uses them when the
command cannot be executed or found, 1 when a subcommand other than a launch
could not do its job. Nothing that raises one of these ever runs the command
unsandboxed.

The code raises; `mapped` turns the exception into its line and its exit
code, and is called at the edges only: the CLI's entry (cli/__init__.main,
both the fast path and typer's), the egress proxy's entry (egress/__main__),
and the job holder's launch callback (a forked child, launch/run.py). The
exit codes are spelled here and nowhere else (a guard in
tests/unit/test_structure.py; the jail-side helper, stdlib only, is the
documented exception).
"""
from __future__ import annotations

import sys

FAILED = 1
USAGE = 2
SETUP_FAILED = 125
NOT_EXECUTABLE = 126
NOT_FOUND = 127


class SandboxError(Exception):
    """A launch refused or failed before the command ran. `reason` is a stable
    code for logs and --json; the message says what, why and what to do."""

    reason = "setup_failed"
    exit_code = SETUP_FAILED

    def __init__(self, message: str, *, reason: str | None = None):
        super().__init__(message)
        if reason:
            self.reason = reason


class ConfigError(SandboxError):
    reason = "bad_config"


class PolicyError(SandboxError):
    reason = "refused_policy"


class BackendUnavailable(SandboxError):
    reason = "no_backend"


class UsageError(SandboxError):
    reason = "usage"
    exit_code = USAGE


class Failed(SandboxError):
    """A subcommand other than a launch could not do its job (exit 1): a
    state directory hidden inside the sandbox, Slurm missing on this host."""

    reason = "failed"
    exit_code = FAILED


class NotFound(SandboxError):
    """A command that could not be found or run, as the shell's 127."""

    reason = "not_found"
    exit_code = NOT_FOUND


class NotExecutable(SandboxError):
    """A command found but not executable, as the shell's 126."""

    reason = "not_executable"
    exit_code = NOT_EXECUTABLE


def say(message: str) -> None:
    """One line to stderr in the house format's prefix."""
    sys.stderr.write(f"agent-sandbox: {message}\n")


def fail(error: SandboxError) -> int:
    """Report `error` and return its exit code."""
    say(str(error))
    return error.exit_code


def mapped(call, *args, **kwargs) -> int:
    """`call(*args, **kwargs)`'s exit code; a SandboxError it raises becomes
    its one line on stderr and its exit code. The one mapping, used at the
    edges only (pip's _run_wrapper)."""
    try:
        return call(*args, **kwargs)
    except SandboxError as error:
        return fail(error)
