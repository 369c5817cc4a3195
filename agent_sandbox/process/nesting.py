"""Nested use (SPEC §3): inside a sandbox `agent-sandbox run` does not wrap
again; it says so and execs the command. Whether we are inside is decided
from evidence an outside process cannot fake by accident (the AGENT_SANDBOX=1
marker together with the session's read-only marker or the backend's own
traces), never from an environment variable alone.
"""
from __future__ import annotations

import os
import pwd

from agent_sandbox.errors import NotExecutable, NotFound, say

MARKER_PATH = "/run/agent-sandbox/session"   # policy.MARKER_PATH, kept import-free here


def inside_sandbox(environ) -> bool:
    """True only with the AGENT_SANDBOX=1 marker and evidence no process
    outside a sandbox has (a stray AGENT_SANDBOX=1 in a login shell is not
    enough, and nothing the sandbox can write may stand in for it):
    - the session's marker file on a read-only mount under /run, which
      outside would need root to create (bwrap);
    - else the backend's own evidence (its trait inside_evidence, named by
      SANDBOX_BACKEND): "pid1" — PID 1 is our own process (its PID
      namespace; firejail); outside, PID 1 is the system's init, owned by
      root; "state-dir" — our own state directory, which we may list,
      refuses us (landlock: the rules carve the always-hidden paths out of
      every grant; should that ever fail, a nested run wraps once more, which
      is safe)."""
    if environ.get("AGENT_SANDBOX") != "1":
        return False
    import stat

    try:
        flags = os.statvfs(MARKER_PATH).f_flag
        info = os.lstat(MARKER_PATH)
        if flags & os.ST_RDONLY and stat.S_ISREG(info.st_mode):
            return True
    except OSError:
        pass
    from agent_sandbox.traits import TRAITS

    backend = TRAITS.get(environ.get("SANDBOX_BACKEND", ""))
    evidence = backend.inside_evidence if backend is not None else ""
    if evidence == "pid1":
        try:
            return os.stat("/proc/1").st_uid == os.getuid() != 0
        except OSError:
            return False
    if evidence == "state-dir":
        from agent_sandbox.paths import state_dir

        state = state_dir(pwd.getpwuid(os.getuid()).pw_dir)
        try:
            info = os.stat(state)
            if info.st_uid != os.getuid() or info.st_mode & 0o500 != 0o500:
                return False
            os.listdir(state)
        except PermissionError:
            return True
        except OSError:
            return False
    return False


def exec_nested(command: list[str], environ) -> int:
    if environ.get("SANDBOX_QUIET", "").lower() not in ("1", "true", "yes"):
        say("already inside a sandbox — running the command under the current policy "
            "without re-wrapping")
    try:
        os.execvp(command[0], command)
    except FileNotFoundError as exc:    # the shell's 127 and 126, mapped at the CLI's edge
        raise NotFound(f"{command[0]}: command not found") from exc
    except PermissionError as exc:
        raise NotExecutable(f"{command[0]}: permission denied") from exc
