"""A native terminal, for real: the test user's own interactive bash runs on
a pseudo-terminal the test drives (as a person at a terminal would), and
types `agent-sandbox bash` at its prompt. Everything is checked through what
appears on that terminal: job control inside, Ctrl-Z leaving the user inside
(the old launcher stopped the whole sandbox and the next line ran in the
outer shell), window size following, the outer terminal's modes restored
after exit and after the inner shell is SIGKILLed, and the prompt marker.

Output is polled for with a deadline, never waited for with a fixed sleep.
"""
from __future__ import annotations

import os
import re
import select
import termios
import time
import uuid

import pytest

from tests.support.install import INSTALLED
from tests.support.terminals import CTRL_C, CTRL_Z, OUTER_PS1, Terminal

BACKENDS = ["bwrap", "firejail", "landlock"]


def wait_running(cmdline: str, timeout: float = 15.0) -> None:
    """Until a process `cmdline` runs in the foreground of its terminal (or
    has none, as under the old launcher): a key pressed earlier would reach
    the shell that is still starting it."""
    wanted = cmdline.encode().replace(b" ", b"\0") + b"\0"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if handle.read() != wanted:
                        continue
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            state, pgrp, tpgid = fields[0], int(fields[2]), int(fields[5])
            if state == b"S" and tpgid in (pgrp, -1):
                return
        select.select([], [], [], 0.02)   # poll interval, not a wait for an outcome
    raise AssertionError(f"{cmdline!r} did not start in the foreground within {timeout} s")


@pytest.fixture
def terminal(user, project):
    env = user.env(PS1=OUTER_PS1, TERM="dumb")
    user.set_config('SANDBOX_PROMPT="[tty-test] "\n')
    env.pop("PROMPT_COMMAND", None)
    opened = []

    def open_terminal(backend: str) -> Terminal:
        term = Terminal(user, dict(env, SANDBOX_BACKEND=backend), project)
        opened.append(term)
        return term

    yield open_terminal
    for term in opened:
        term.close()
    user.set_config("")


def enter_sandbox(term: Terminal) -> None:
    term.line(f"{INSTALLED} bash")
    term.expect(r"\[tty-test\] ")
    assert term.marker("echo $AGENT_SANDBOX").strip() == "1"


@pytest.mark.parametrize("backend", BACKENDS)
def test_job_control_and_ctrl_z_stay_inside(terminal, backend):
    term = terminal(backend)
    enter_sandbox(term)
    # bwrap shows the relayed pty as /dev/console (its --dev binds stdin's tty there).
    assert "term-ok" in term.marker("test -t 0 && test -t 1 && echo term-ok")
    out = term.marker("set -o | grep -w monitor")
    assert "on" in out, f"no job control inside: {out!r}"
    term.line("sleep 100 &")
    assert "sleep 100 &" in term.marker("jobs")
    sleep = f"sleep {uuid.uuid4().int % 9000 + 1000}"   # not another run's
    term.line(sleep)
    wait_running(sleep)
    term.send(CTRL_Z)
    term.expect(rf"Stopped\s+{sleep}")
    # Still inside (the old launcher was stopped here, and the next line ran
    # in the outer shell behind the same prompt).
    assert term.marker("echo $AGENT_SANDBOX").strip() == "1"
    jobs = term.marker("jobs")
    assert re.search(rf"Stopped\s+{sleep}", jobs) and "sleep 100 &" in jobs, jobs
    term.line("bg %2")
    assert re.search(rf"Running\s+{sleep} &", term.marker("jobs"))
    term.line("fg %2")
    wait_running(sleep)
    term.send(CTRL_C)                  # reaches the foreground job, not the sandbox
    assert term.marker("echo $AGENT_SANDBOX").strip() == "1"
    assert sleep not in term.marker("jobs")
    term.line("kill %1; exit")
    term.expect(OUTER_PS1)
    assert term.marker("echo x${AGENT_SANDBOX}x").strip() == "xx"


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_size_follows(terminal, backend):
    term = terminal(backend)
    enter_sandbox(term)
    assert term.marker("stty size").strip() == "24 80"
    termios.tcsetwinsize(term.master, (41, 133))   # the kernel sends SIGWINCH
    deadline = time.monotonic() + 10
    while (size := term.marker("stty size").strip()) != "41 133":
        assert time.monotonic() < deadline, f"the inner size stayed {size!r}"
    term.line("exit")
    term.expect(OUTER_PS1)


def _modes(term: Terminal) -> str:
    """The outer terminal's modes as the outer shell's commands see them
    (`stty -g` run by it): sampled while readline edits a line, they would
    race with readline setting up or restoring its own modes."""
    return term.marker("stty -g").strip()


@pytest.mark.parametrize("backend", BACKENDS)
def test_outer_terminal_restored_after_exit_and_sigkill(terminal, backend):
    term = terminal(backend)
    before = _modes(term)
    enter_sandbox(term)
    during = termios.tcgetattr(term.outer_slave)   # the launcher's raw relay mode
    assert during[3] & termios.ECHO == 0 and during[3] & termios.ICANON == 0, \
        "the outer terminal is not raw while relaying"
    term.line("exit 3")
    term.expect(OUTER_PS1)
    term.line("echo status=$?")
    term.expect("status=3")
    assert _modes(term) == before
    enter_sandbox(term)
    # The inner shell SIGKILLs itself: no chance to restore anything.
    term.line("kill -KILL $$")
    term.expect(OUTER_PS1)
    assert _modes(term) == before
    assert term.marker("echo x${AGENT_SANDBOX}x").strip() == "xx"


@pytest.mark.parametrize("backend", BACKENDS)
def test_prompt_and_title_show_the_sandbox(terminal, backend):
    term = terminal(backend)
    term.line(f"{INSTALLED} bash")
    # The title is set (xterm's OSC 0) and saved/restored with the title stack.
    term.expect(r"\x1b\[22;0t\x1b\]0;\[tty-test\] bash\x07")
    term.expect(r"\[tty-test\] ")
    # A PS1 set later (as a user's rc does) still gets the tag (PROMPT_COMMAND).
    term.line("PS1='mine> '")
    term.expect(r"\[tty-test\] mine> ")
    assert term.marker("echo $AGENT_SANDBOX_PROMPT").strip() == "[tty-test]"
    term.line("exit")
    term.expect(r"\x1b\[23;0t")
    term.expect(OUTER_PS1)


def test_no_relay_without_a_terminal_is_byte_exact(user, project):
    """Pipes keep the byte-exact pass-through: no pty (no CR added, no
    prompt variables), the bytes in come out unchanged."""
    data = bytes(range(256)) * 64 + b"\r\n\x1a\x03"
    result = user.run([INSTALLED, "run", "--", "sh", "-c",
                       'cat; test -t 0 || echo no-tty >&2; printenv PS1 >&2 || echo unset >&2'],
                      input=data, text=False, cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    assert result.stderr.split() == [b"no-tty", b"unset"]
