"""A native terminal for interactive sessions: the sandbox runs on a
pseudo-terminal of its own, and the launcher relays bytes between it and the
user's terminal.

Strategy. When stdin and stdout are both terminals (and only then: pipes and
files keep the byte-exact pass-through, and this module is not even
imported), the launcher opens a pty, gives it the outer terminal's modes and
window size, and hands its slave end to the backend as stdin/stdout (and
stderr when that is a terminal too). Inside, the helper calls setsid() and
takes the slave as controlling terminal (sandbox_exec --controlling-tty), so
a shell has full job control. The outer terminal is put in raw mode: Ctrl-Z
and Ctrl-C are plain bytes to the relay, turned into SIGTSTP/SIGINT by the
*inner* line discipline for the inner foreground job — they can no longer
stop the sandbox as a whole and drop the user into the outer shell. The
inner terminal is not the user's, so nothing inside can inject keystrokes
into the outer shell (TIOCSTI is also denied by seccomp).

The relay is one select() loop: outer stdin → pty master (buffered, the
master is non-blocking so a slow reader inside never stalls output), pty
master → outer stdout, and a pidfd that says the backend has exited. SIGWINCH
copies the outer window size to the pty (the kernel then signals the inner
foreground job); SIGCONT (the launcher was stopped and continued from
outside) puts the outer terminal back in raw mode. The outer terminal's
modes are restored in a `finally`, so on every exit path but the launcher's
own SIGKILL.

Ctrl-Z for a program that has no shell to come back to. A full-screen
program run as the session's command (an agent: `agent-sandbox claude`)
reads Ctrl-Z itself in raw mode and suspends itself as a shell's job would:
it leaves raw mode and sends SIGTSTP to its process group. But that group
is orphaned (the session's leader, its parent outside the session), so the
kernel discards the stop, and the program waits for a SIGCONT that never
comes: Claude Code printed "suspended", with no shell inside to type `fg`
into. So the relay watches for it: when it passes a Ctrl-Z byte while the
inner terminal has ISIG off (the program reads keys itself) and the inner
foreground group is the session leader's own (no job-control shell in
between: an inner bash's jobs are stopped by bash, and bash takes the
terminal back), and within SUSPEND_WAIT the program turns ISIG back on (it
left raw mode to suspend — an editor using Ctrl-Z as undo stays raw), the
relay suspends the whole session: SIGSTOP to that group, the outer
terminal's modes and title restored, then SIGTSTP to the launcher itself —
the user's shell shows the job stopped. `fg` (SIGCONT) puts the outer
terminal back in raw mode and sends SIGCONT to the group, and the program
redraws. Where the launcher's own group cannot stop (no job control
outside), the program is continued at once.

The pure parts — the session's environment (prompt) and the title escape
sequences — are plain functions; the loop is the thin shell around them.
"""
from __future__ import annotations

import errno
import os
import select
import signal
import termios
import tty
from agent_sandbox.errors import BackendUnavailable

# bash runs PROMPT_COMMAND before each prompt: put the tag in front of PS1
# unless it is there, so a PS1 set by the user's rc still shows it. Fixed
# code: the tag is only ever read from the variable (and validated as plain
# text by config/model.py because PS1 itself is expanded).
PROMPT_COMMAND = ('case "$PS1" in "$AGENT_SANDBOX_PROMPT"*) ;; '
                  '*) PS1="$AGENT_SANDBOX_PROMPT$PS1" ;; esac')
DEFAULT_PS1 = "\\u@\\h:\\w\\$ "
PUSH_TITLE, POP_TITLE = b"\x1b[22;0t", b"\x1b[23;0t"   # xterm's title stack
CHUNK = 65536
DRAIN_SECONDS = 2.0   # after the backend exited: wait this long for the pty's last bytes
SUSPEND_KEY = b"\x1a"   # Ctrl-Z
SUSPEND_WAIT = 1.5      # seconds for the program to leave raw mode after a Ctrl-Z
TIOCGSID = getattr(termios, "TIOCGSID", 0x5429)   # <asm-generic/ioctls.h>; not in termios


def session_env(env: dict, prompt: str) -> dict:
    """The command's environment for a relayed terminal: AGENT_SANDBOX_PROMPT,
    a PS1 for shells without an rc that sets one, and PROMPT_COMMAND (bash)
    that keeps the tag in front of whatever PS1 the rc sets. An empty prompt
    changes nothing."""
    if not prompt:
        return env
    env = dict(env, AGENT_SANDBOX_PROMPT=prompt)
    env["PS1"] = prompt + env.get("PS1", DEFAULT_PS1)
    theirs = env.get("PROMPT_COMMAND")
    env["PROMPT_COMMAND"] = PROMPT_COMMAND + (f"; {theirs}" if theirs else "")
    return env


def title_sequences(title: str) -> tuple[bytes, bytes]:
    """(start, end): save the outer terminal's title and set `title`; restore
    it. Control characters are dropped (the command name is the caller's)."""
    if not title:
        return b"", b""
    text = "".join(c for c in title if c.isprintable())
    return PUSH_TITLE + b"\x1b]0;" + text.encode("utf-8", "replace") + b"\x07", POP_TITLE


class Pty:
    """The session's pty; each end closed once, whichever path closes it."""

    def __init__(self, master: int, slave: int):
        self.master, self.slave = master, slave

    def close_slave(self) -> None:
        """After the spawn: the relay then sees EIO once the sandbox holds none."""
        if self.slave is not None:
            os.close(self.slave)
            self.slave = None

    def hang_up(self) -> None:
        """Close the master: the kernel hangs up the inner session (SIGHUP)."""
        if self.master is not None:
            os.close(self.master)
            self.master = None

    def close(self) -> None:
        self.close_slave()
        if self.master is not None:
            os.close(self.master)
            self.master = None


def open_pty(stdin: int = 0) -> Pty:
    """A pty with the outer terminal's modes and window size. Fails closed:
    BackendUnavailable (exit 125), never a session on the user's terminal."""
    try:
        master, slave = os.openpty()
    except OSError as exc:
        raise BackendUnavailable(f"cannot open a pseudo-terminal for the session — "
                                 f"{exc.strerror}. The command was not run; redirect stdin "
                                 "or stdout (e.g. `< /dev/null`) to run without one.") from None
    try:
        termios.tcsetattr(slave, termios.TCSANOW, termios.tcgetattr(stdin))
        _copy_window_size(stdin, master)
    except (OSError, termios.error) as exc:
        os.close(master)
        os.close(slave)
        raise BackendUnavailable(f"cannot set up the session's pseudo-terminal — {exc}. "
                                 "The command was not run.") from None
    return Pty(master, slave)


def _copy_window_size(outer: int, master: int) -> None:
    set_window_size(master, window_size(outer))


def window_size(fd: int) -> tuple:
    """(rows, columns) of the terminal on `fd` (termios' own from Python 3.11)."""
    if hasattr(termios, "tcgetwinsize"):
        return termios.tcgetwinsize(fd)
    import fcntl
    import struct

    rows, columns, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8)))
    return rows, columns


def set_window_size(fd: int, size) -> None:
    if hasattr(termios, "tcsetwinsize"):
        termios.tcsetwinsize(fd, size)
        return
    import fcntl
    import struct

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))


def relay(pty: Pty, pid: int, *, title: str = "", stdin: int = 0, stdout: int = 1) -> int:
    """Relay until the backend `pid` has exited; return its wait status. The
    outer terminal is raw meanwhile and restored however this ends. When the
    outer terminal hangs up (EOF, or SIGHUP/SIGTERM to the launcher) the pty
    is hung up too, as a closing terminal window does: the kernel sends the
    inner session SIGHUP (the inner shell is in a session of its own, out of
    reach of the signals forwarded to the sandbox's process group)."""
    saved = termios.tcgetattr(stdin)
    start, end = title_sequences(title)
    exit_watch = ExitWatch(pid)

    def resize(_signum, _frame):
        try:
            if pty.master is not None:
                _copy_window_size(stdin, pty.master)
        except OSError:
            pass

    def continued(_signum, _frame):
        tty.setraw(stdin, termios.TCSANOW)
        resize(None, None)

    previous = {}

    def hang_up(signum, frame):
        pty.hang_up()
        handler = previous.get(signum)
        if callable(handler):
            handler(signum, frame)   # and forward it, as without a relay

    try:
        previous[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, resize)
        previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, continued)
        for signum in (signal.SIGHUP, signal.SIGTERM):
            previous[signum] = signal.signal(signum, hang_up)
        tty.setraw(stdin, termios.TCSANOW)   # TCSANOW: keep what was typed ahead
        resize(None, None)                   # a resize before the handler was in place
        _write_all(stdout, start)

        def suspend(group: int) -> None:
            _suspend(pty, group, stdin, stdout, saved, start, end)
            resize(None, None)
        return _pump(pty, exit_watch, stdin, stdout, suspend)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        _write_all(stdout, end)
        exit_watch.close()


class ExitWatch:
    """A descriptor that becomes readable when the child `pid` exits: its
    pidfd, or on a kernel without pidfd_open (Linux < 5.3: RHEL 8's 4.18;
    ENOSYS crashed every interactive session, issue 30) a pipe that a SIGCHLD
    handler writes to. `status()` is the wait status once it has exited,
    else None (a SIGCHLD of another child, e.g. the chaperon's)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.pipe = None
        self.previous = None
        try:
            self.fd = os.pidfd_open(pid)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
            read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self.fd, self.pipe = read, write
            self.previous = signal.signal(signal.SIGCHLD, self._child)
            os.write(write, b"c")    # look once: it may have exited already

    def _child(self, signum, frame):
        try:
            os.write(self.pipe, b"c")
        except OSError:
            pass                     # full: a wake-up is pending anyway
        if callable(self.previous):
            self.previous(signum, frame)

    def status(self) -> int | None:
        if self.pipe is None:
            return os.waitpid(self.pid, 0)[1]
        try:
            while os.read(self.fd, 512):
                pass
        except BlockingIOError:
            pass
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        return status if pid == self.pid else None

    def close(self) -> None:
        if self.pipe is not None:
            signal.signal(signal.SIGCHLD, self.previous if self.previous is not None
                          else signal.SIG_DFL)
            os.close(self.pipe)
        os.close(self.fd)


def _pump(pty: Pty, exit_watch: ExitWatch, stdin: int, stdout: int, suspend=None) -> int:
    import time

    pidfd = exit_watch.fd
    os.set_blocking(pty.master, False)
    pending = b""             # keystrokes not yet taken by the pty
    slave_open = True         # False once no process inside holds the pty (EIO)
    watch = None              # (group, deadline): a Ctrl-Z the program may suspend on
    while True:
        master = pty.master   # None once hung up
        readers = [pidfd] + ([master] if slave_open and master is not None else [])
        if master is not None and len(pending) < CHUNK:
            readers.append(stdin)
        writers = [master] if pending and master is not None else []
        timeout = None
        if watch is not None:
            timeout = max(0.0, min(0.05, watch[1] - time.monotonic()))
        try:
            ready, writable, _ = select.select(readers, writers, [], timeout)
        except OSError:       # the master was closed by a signal handler meanwhile
            continue
        if watch is not None and master is not None:
            if suspending(master, watch[0]):
                _forward_available(master, stdout)
                suspend(watch[0])
                watch = None
            elif time.monotonic() >= watch[1]:
                watch = None
        if master in ready and not _forward_output(master, stdout):
            slave_open = False
        if stdin in ready:
            try:
                data = os.read(stdin, CHUNK)
            except OSError:
                data = b""
            if data:
                pending += data
                if suspend is not None and SUSPEND_KEY in data and master is not None:
                    group = raw_leader_group(master)
                    if group is not None:
                        watch = (group, time.monotonic() + SUSPEND_WAIT)
            else:
                pty.hang_up()   # the outer terminal is gone
        if writable and pending and pty.master is not None:
            try:
                pending = pending[os.write(master, pending):]
            except BlockingIOError:
                pass
            except OSError:
                pending = b""
        if pidfd in ready:
            if exit_watch.pipe is None:     # a pidfd: the exit is certain, reaped below
                if pty.master is not None and slave_open:
                    _drain(pty.master, stdout)
                return exit_watch.status()
            status = exit_watch.status()
            if status is not None:
                if pty.master is not None and slave_open:
                    _drain(pty.master, stdout)
                return status


def _inner_state(master: int):
    """(ISIG on, foreground group, session) of the inner terminal, read
    through the master (Linux answers these for the pty's slave), or None."""
    import fcntl
    import struct

    try:
        lflag = termios.tcgetattr(master)[3]
        group = os.tcgetpgrp(master)
        session = struct.unpack("i", fcntl.ioctl(master, TIOCGSID, bytes(4)))[0]
    except (OSError, termios.error):
        return None
    return bool(lflag & termios.ISIG), group, session


def raw_leader_group(master: int) -> int | None:
    """The inner foreground group when a Ctrl-Z now goes to a program that
    reads keys itself (ISIG off) and is the session's leader's group (no
    job-control shell inside to take the terminal back), else None."""
    state = _inner_state(master)
    if state is None or state[0] or state[1] != state[2] or state[1] <= 0:
        return None
    return state[1]


def suspending(master: int, group: int) -> bool:
    """Whether the program of `group` left raw mode (ISIG back on) while
    still in the foreground: it is suspending itself."""
    state = _inner_state(master)
    return state is not None and state[0] and state[1] == group


def _suspend(pty: Pty, group: int, stdin: int, stdout: int, saved, start: bytes,
             end: bytes) -> None:
    """The whole session suspended to the user's shell, resumed by `fg`."""
    try:
        os.killpg(group, signal.SIGSTOP)
    except OSError:
        return                  # gone meanwhile: nothing to suspend
    try:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        _write_all(stdout, end)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until `fg` (SIGCONT)
        tty.setraw(stdin, termios.TCSANOW)
        _write_all(stdout, start)
    finally:
        try:
            os.killpg(group, signal.SIGCONT)
        except OSError:
            pass


def _forward_available(master: int, stdout: int) -> None:
    """What the program wrote before suspending (its last frame)."""
    for _ in range(64):
        try:
            data = os.read(master, CHUNK)
        except OSError:
            return
        if not data:
            return
        _write_all(stdout, data)


def _forward_output(master: int, stdout: int) -> bool:
    """Copy what the pty has; False once no process holds its slave (EIO)."""
    try:
        data = os.read(master, CHUNK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    _write_all(stdout, data)
    return bool(data)


def _drain(master: int, stdout: int) -> None:
    """The backend has exited: copy the pty's last bytes until every slave is
    closed (EIO), or until nothing came for DRAIN_SECONDS (a process that
    escaped the sandbox's end still holds it)."""
    while select.select([master], [], [], DRAIN_SECONDS)[0]:
        if not _forward_output(master, stdout):
            return


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            select.select([], [fd], [])
        except OSError:
            return   # the outer terminal is gone: nobody to show it to
