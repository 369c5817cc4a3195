"""A launch whose standard streams are closed at its start (`cmd >&-`, as a
batch script or a daemon may start it), as the unprivileged user: the
command's exit code is the launch's (exit_now), with no traceback. The test
fails on the code it was found against.
"""
from __future__ import annotations

import subprocess

from tests.support.install import INSTALLED


def _closed(user, project, fds: str, code: int) -> subprocess.CompletedProcess:
    """`agent-sandbox run -- sh -c 'exit CODE'` with the launcher's
    descriptors `fds` ("1", "2", "12") closed, as a batch script or a
    daemon may start it (`cmd >&-`)."""
    closing = " ".join(f"{fd}>&-" for fd in fds)
    return user.run(["/bin/sh", "-c", f'exec "$@" {closing}', "sh", INSTALLED, "run", "--",
                     "sh", "-c", f"exit {code}"], cwd=project)


def test_the_commands_exit_code_survives_a_closed_standard_output(user, project):
    """exit_now flushed sys.stdout and sys.stderr, but Python sets them to
    None when the descriptor is closed at its start: the AttributeError
    escaped with a traceback, and the launch exited 1 whatever the command
    returned — a job script or a CI step that closes stdout (`>&-`) saw
    every failure and every success as 1. The streams that do not exist
    have nothing to flush."""
    for fds in ("1", "2", "12"):
        result = _closed(user, project, fds, 7)
        assert result.returncode == 7, (fds, result.stderr)
        assert "Traceback" not in result.stderr, (fds, result.stderr)
    assert _closed(user, project, "1", 0).returncode == 0
