"""Errors and exit codes, mapped once (pip's base_command does the same).

Every refusal or failure before the command runs becomes one line on stderr,
`agent-sandbox: <what> — <why>. <what to do>`, and one exit code: 125 when
the sandbox could not be set up (no backend, a bad config, a refused
policy), 2 for a usage error, 126/127 as the shell uses them when the
command cannot be executed or found. Nothing that raises one of these ever
runs the command unsandboxed.
"""
from __future__ import annotations

import sys

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


def say(message: str) -> None:
    """One line to stderr in the house format's prefix."""
    sys.stderr.write(f"agent-sandbox: {message}\n")


def fail(error: SandboxError) -> int:
    """Report `error` and return its exit code."""
    say(str(error))
    return error.exit_code
