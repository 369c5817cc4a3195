"""The relay's pure parts (prompt environment, title sequences) and the
relay itself between two ptys: one plays the user's terminal, a child on the
other plays the sandbox."""
from __future__ import annotations

import os
import select
import sys
import termios

import pytest

from agent_sandbox.process import terminal


def test_session_env_tags_the_prompt_and_keeps_the_callers_variables():
    env = terminal.session_env({"PATH": "/bin", "PROMPT_COMMAND": "history -a"}, "[sbx] ")
    assert env["AGENT_SANDBOX_PROMPT"] == "[sbx] "
    assert env["PS1"] == "[sbx] " + terminal.DEFAULT_PS1
    assert env["PROMPT_COMMAND"] == terminal.PROMPT_COMMAND + "; history -a"
    assert env["PATH"] == "/bin"
    # The tag is data for the fixed PROMPT_COMMAND, never part of its code.
    assert "[sbx]" not in terminal.PROMPT_COMMAND
    assert terminal.session_env({"PATH": "/bin"}, "") == {"PATH": "/bin"}


def test_title_sequences_save_set_and_restore_without_control_characters():
    start, end = terminal.title_sequences("[sbx] ba\x07sh\x1b]0;x")
    assert start == b"\x1b[22;0t\x1b]0;[sbx] bash]0;x\x07" and end == b"\x1b[23;0t"
    assert terminal.title_sequences("") == (b"", b"")


def _read_until(fd: int, wanted: bytes, timeout: float = 10.0) -> bytes:
    seen = b""
    while wanted not in seen:
        assert select.select([fd], [], [], timeout)[0], f"{wanted!r} not in {seen!r}"
        seen += os.read(fd, 4096)
    return seen


def _no_pidfd_open(pid):
    raise OSError(38, "Function not implemented")   # Linux < 5.3 (RHEL 8's 4.18)


@pytest.mark.parametrize("kernel", ["pidfd", "no pidfd_open"])
@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_relay_carries_bytes_both_ways_and_restores_the_outer_modes(ending, kernel,
                                                                     monkeypatch):
    """Also without pidfd_open: the relay waits for the sandbox's exit by
    SIGCHLD instead (it crashed with OSError [Errno 38]; issue 30)."""
    if kernel != "pidfd":
        monkeypatch.setattr(os, "pidfd_open", _no_pidfd_open)
    user_side, outer = os.openpty()          # outer: the launcher's stdin/stdout
    terminal.set_window_size(user_side, (30, 100))
    before = termios.tcgetattr(outer)
    pty = terminal.open_pty(outer)
    assert tuple(terminal.window_size(pty.slave)) == (30, 100)
    script = ("import fcntl,os,struct,sys,termios; "
              "size = struct.unpack('HHHH', fcntl.ioctl(0, termios.TIOCGWINSZ, bytes(8)))[:2]; "
              "print('size', *size, flush=True); "
              "line = sys.stdin.readline(); print('got', line.strip(), flush=True); "
              "os.kill(os.getpid(), 9) if line.strip() == 'sigkill' else sys.exit(7)")
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", script], dict(os.environ),
                         file_actions=[(os.POSIX_SPAWN_DUP2, pty.slave, n) for n in (0, 1, 2)])
    pty.close_slave()
    child = os.fork()
    if child == 0:   # the user: waits for the inner output, types a line
        try:
            _read_until(user_side, b"size 30 100")
            os.write(user_side, ending.encode() + b"\r")
            _read_until(user_side, b"got " + ending.encode())
            os._exit(0)
        except BaseException:
            os._exit(1)
    status = terminal.relay(pty, pid, title="[t] x", stdin=outer, stdout=outer)
    pty.close()
    assert os.waitpid(child, 0)[1] == 0
    expected = -9 if ending == "sigkill" else 7
    assert os.waitstatus_to_exitcode(status) == expected
    assert termios.tcgetattr(outer) == before
    os.close(user_side)
    os.close(outer)
