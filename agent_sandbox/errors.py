"""Errors that stop a launch. Each one becomes `agent-sandbox: <message>` on
stderr and exit code 125 (the sandbox could not be set up); nothing that
raises one ever runs the command unsandboxed."""

SETUP_FAILED = 125


class SandboxError(Exception):
    """A launch refused or failed before the command ran. `reason` is a stable
    code for logs and --json; the message says what, why and what to do."""

    reason = "setup_failed"

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
