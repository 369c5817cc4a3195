"""The Slurm stub: one entry point, installed inside the sandbox under every
Slurm command name (sbatch, srun, squeue, …).

It packs its argv, working directory, environment and (for sbatch without a
script) stdin into a CHAPERON/1 request, hands it to this session's chaperon
through its own FIFO pair, and replays the response: stdout and stderr bytes
in order, then the exit code. It never decides anything itself; every rule
lives in the chaperon outside the sandbox.

Runs on every Slurm call inside the jail: stdlib only, started with
`python3 -IS`, nothing imported that the call does not need.
"""
import posix   # not os: its import costs a millisecond on every Slurm call
import sys

from chaperon.wire import protocol
from chaperon.wire.session import (ANNOUNCE_FIFO, CONN_DIR, ENV_SESSION_DIR, EXIT_REFUSED,
                                   SANDBOX_DIR, SILENCE_TIMEOUT, announcement)

READS_STDIN = {"sbatch"}   # only sbatch takes its script from stdin; others never read it
MAX_STDIN = 4 * 1024 * 1024
ENXIO = 6


def fail(command: str, what: str, why: str, fix: str) -> int:
    sys.stderr.write(f"agent-sandbox: {command}: {what} — {why}. {fix}\n")
    return EXIT_REFUSED


def _wants_stdin(command: str, args: list[str]) -> bool:
    if command not in READS_STDIN or sys.stdin is None or posix.isatty(0):
        return False
    # sbatch reads stdin only when no script file and no --wrap are given; the
    # chaperon parses for real, this is only to avoid blocking on a pipe.
    for arg in args:
        if arg == "--wrap" or arg.startswith("--wrap="):
            return False
    return True


def _read_stdin() -> bytes:
    chunks, size = [], 0
    while True:
        chunk = posix.read(0, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_STDIN:
            raise OverflowError
        chunks.append(chunk)


class _Alarm(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Alarm


def _open_for_writing(path: str, seconds: float) -> int:
    """Open a FIFO's write end as soon as the chaperon opens its read end —
    a blocking open wakes at that instant, where polling would sleep past it —
    but never longer than `seconds` (SIGALRM interrupts the open)."""
    import _signal   # built in and already loaded: no import cost

    previous = _signal.signal(_signal.SIGALRM, _on_alarm)
    # A caller may have blocked SIGALRM in the mask we inherited; the bound
    # on this wait must hold anyway.
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGALRM})
    _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        return posix.open(path, posix.O_WRONLY | posix.O_CLOEXEC)
    except _Alarm:
        raise TimeoutError("the chaperon did not take the request") from None
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        _signal.signal(_signal.SIGALRM, previous)


def _announce(fd: int, line: bytes, deadline: float) -> None:
    """One atomic write (the line is far below PIPE_BUF). When the FIFO is
    full (someone floods it), wait for the chaperon to drain it."""
    import select
    import time

    while True:
        try:
            posix.write(fd, line)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the announcement FIFO stayed full") from None
            select.select([], [fd], [], min(left, 0.05))


def exchange(command: str, request: bytes, session_dir: str, name: str) -> tuple:
    """Send `request` on the connection `name`; return (exit code, error)."""
    import select
    import time

    conn = f"{session_dir}/{CONN_DIR}"
    req_path = f"{conn}/{name}.req"
    resp_path = f"{conn}/{name}.resp"
    posix.mkfifo(req_path, 0o600)
    posix.mkfifo(resp_path, 0o600)
    try:
        resp_fd = posix.open(resp_path, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
        try:
            announce_fd = posix.open(f"{session_dir}/{ANNOUNCE_FIFO}",
                                     posix.O_WRONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
        except OSError:
            return None, "not_running"
        deadline = time.monotonic() + SILENCE_TIMEOUT
        try:
            _announce(announce_fd, announcement(name), deadline)
        finally:
            posix.close(announce_fd)
        try:
            req_fd = _open_for_writing(req_path, deadline - time.monotonic())
        except TimeoutError:
            return None, "timeout"
        try:
            view = memoryview(request)
            while view:
                written = posix.write(req_fd, view)
                view = view[written:]
        finally:
            posix.close(req_fd)
        decoder = protocol.ResponseDecoder()
        poller = select.poll()
        poller.register(resp_fd, select.POLLIN)
        writer_seen = False
        while True:
            if not poller.poll(SILENCE_TIMEOUT * 1000):
                return None, "timeout"
            data = posix.read(resp_fd, 65536)
            if not data:
                if not writer_seen:
                    time.sleep(0.0005)   # the chaperon has not opened its end yet
                    if time.monotonic() > deadline:
                        return None, "timeout"
                    continue
                return None, "eof"
            writer_seen = True
            deadline = time.monotonic() + SILENCE_TIMEOUT
            decoder.feed(data)
            while True:
                event = decoder.next_event()
                if event is None:
                    break
                yield_event(event)
                if isinstance(event, protocol.Exit):
                    return event.code, None
    finally:
        for path in (req_path, resp_path):
            try:
                posix.unlink(path)
            except OSError:
                pass


def yield_event(event) -> None:
    if isinstance(event, protocol.Output):
        stream = sys.stdout.buffer if event.stream == "stdout" else sys.stderr.buffer
        stream.write(event.data)
        stream.flush()


def _is_dir(path: str) -> bool:
    try:
        return posix.stat(path).st_mode & 0o170000 == 0o040000
    except OSError:
        return False


def main(argv: "list[str] | None" = None) -> int:
    argv = sys.argv if argv is None else argv
    command = argv[0].rpartition("/")[2]
    args = argv[1:]
    environ = posix.environ   # bytes to bytes, as the protocol carries it
    fs_encoding, fs_errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    session_dir = environ.get(ENV_SESSION_DIR.encode(), SANDBOX_DIR.encode()).decode(
        fs_encoding, fs_errors)
    if not _is_dir(session_dir):
        return fail(command, "Slurm is not available in this sandbox",
                    "no chaperon session is attached (CHAPERON=false, or Slurm is not "
                    "installed on this host)", "Run Slurm commands outside the sandbox")
    stdin = None   # not read: the command does not take input from stdin
    if _wants_stdin(command, args):
        try:
            stdin = _read_stdin()
        except OverflowError:
            return fail(command, "the script on stdin was refused",
                        "it is larger than 4 MiB", "Pass a script file instead")
    name = posix.urandom(16).hex()
    request = protocol.encode_request(protocol.Request(
        command=command, args=tuple(a.encode(fs_encoding, fs_errors) for a in args),
        cwd=posix.getcwdb(), env=tuple(environ.items()), stdin=stdin,
        resp_path=f"{session_dir}/{CONN_DIR}/{name}.resp"))
    try:
        code, error = exchange(command, request, session_dir, name)
    except protocol.ProtocolError as exc:
        return fail(command, "the reply of the Slurm proxy was malformed", str(exc),
                    "Report this to your site admin")
    except TimeoutError:
        return fail(command, "no answer from the Slurm proxy",
                    f"its request queue stayed full for {int(SILENCE_TIMEOUT)} s",
                    "Check `agent-sandbox status`; restart the sandbox if it persists")
    except OSError as exc:
        return fail(command, "cannot reach the Slurm proxy", exc.strerror or str(exc),
                    "Restart the sandbox; if it persists, report it")
    if error == "not_running":
        return fail(command, "the Slurm proxy (chaperon) of this sandbox is not running",
                    "it stopped or was killed", "Restart agent-sandbox to get Slurm back; the "
                    "rest of the sandbox keeps working")
    if error == "timeout":
        return fail(command, "no answer from the Slurm proxy",
                    f"nothing was heard for {int(SILENCE_TIMEOUT)} s",
                    "Check `agent-sandbox status`; restart the sandbox if the chaperon died")
    if error == "eof":
        return fail(command, "the Slurm proxy closed the connection without an exit code",
                    "it stopped while handling the request", "Check `agent-sandbox logs`")
    return code
