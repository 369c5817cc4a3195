"""A user's terminal for tests: a pty whose slave is the controlling
terminal of the test user's interactive bash (job control on, like a login),
driven as a person at a terminal would (tests/integration/test_terminal.py,
test_agent_sessions.py). Output is polled for with a deadline."""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import termios
import time
import uuid

CTRL_C, CTRL_Z = b"\x03", b"\x1a"
OUTER_PS1 = "outer> "


class Terminal:
    """The user's terminal: a pty whose slave is the controlling terminal of
    the test user's interactive bash (job control on, like a login)."""

    def __init__(self, user, env: dict, cwd):
        self.master, slave = os.openpty()
        termios.tcsetwinsize(self.master, (24, 80))
        self.outer_slave = slave
        self.process = subprocess.Popen(
            ["/bin/bash", "--norc", "--noprofile", "-i"], stdin=slave, stdout=slave,
            stderr=slave, user=user.uid, group=user.gid, extra_groups=[], env=env,
            cwd=str(cwd), start_new_session=True, preexec_fn=take_terminal)
        self.seen = b""
        self.expect(OUTER_PS1)

    def send(self, data: bytes | str) -> None:
        os.write(self.master, data.encode() if isinstance(data, str) else data)

    def line(self, text: str) -> None:
        self.send(text + "\r")

    def expect(self, pattern: str, timeout: float = 15.0) -> re.Match:
        """Wait until `pattern` (a regex) appears in what was written since
        the last match; consume up to the end of the match."""
        regex = re.compile(pattern.encode(), re.DOTALL)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.seen)
            if found:
                self.seen = self.seen[found.end():]
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{pattern!r} did not appear within {timeout} s; "
                                     f"the terminal showed: {self.seen[-1500:]!r}")
            if select.select([self.master], [], [], left)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:   # EIO: everything on the terminal has exited
                    raise AssertionError(f"the terminal closed while waiting for {pattern!r}: "
                                         f"{self.seen[-1500:]!r}") from None

    def marker(self, command: str, timeout: float = 15.0) -> str:
        """Run `command`, return its output: bracketed by unique markers so
        the echo of the typed line never matches."""
        tag = uuid.uuid4().hex[:8]
        self.line(f"echo B{tag}E; {command}; echo E{tag}D")
        return self.expect(f"B{tag}E\r\n(.*?)E{tag}D", timeout).group(1).decode(
            errors="replace")

    def close(self) -> None:
        """Close the terminal as a window closes: the outer bash and its jobs
        (a launcher still running) get SIGHUP, which ends the sandbox."""
        os.close(self.outer_slave)
        os.close(self.master)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def take_terminal() -> None:
    import fcntl

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
