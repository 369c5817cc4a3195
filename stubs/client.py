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
from __future__ import annotations

import os
import sys

from chaperon import protocol
from chaperon.session import (ANNOUNCE_FIFO, CONN_DIR, ENV_SESSION_DIR, SANDBOX_DIR,
                              SILENCE_TIMEOUT, announcement)

READS_STDIN = {"sbatch"}   # only sbatch takes its script from stdin; others never read it
MAX_STDIN = 4 * 1024 * 1024


def fail(command: str, what: str, why: str, fix: str) -> int:
    sys.stderr.write(f"agent-sandbox: {command}: {what} — {why}. {fix}\n")
    return 1


def _wants_stdin(command: str, args: list[str]) -> bool:
    if command not in READS_STDIN or sys.stdin is None or os.isatty(0):
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
        chunk = os.read(0, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_STDIN:
            raise OverflowError
        chunks.append(chunk)


def _open_fifo(path: str, flags: int, deadline: float) -> int:
    """Open a FIFO end without blocking forever on a missing peer."""
    import time

    while True:
        try:
            return os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != 6 or time.monotonic() > deadline:   # ENXIO: no reader yet
                raise
            time.sleep(0.002)


def _announce(fd: int, line: bytes, deadline: float) -> None:
    """One atomic write (the line is far below PIPE_BUF). When the FIFO is
    full (someone floods it), wait for the chaperon to drain it."""
    import select
    import time

    while True:
        try:
            os.write(fd, line)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the announcement FIFO stayed full") from None
            select.select([], [fd], [], min(left, 0.05))


def exchange(command: str, request: bytes, session_dir: str, name: str) -> tuple:
    """Send `request` on the connection `name`; return (decoder events, error)."""
    import select
    import time

    conn = os.path.join(session_dir, CONN_DIR)
    req_path = os.path.join(conn, f"{name}.req")
    resp_path = os.path.join(conn, f"{name}.resp")
    os.mkfifo(req_path, 0o600)
    os.mkfifo(resp_path, 0o600)
    try:
        resp_fd = os.open(resp_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            announce_fd = os.open(os.path.join(session_dir, ANNOUNCE_FIFO),
                                  os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None, "not_running"
        deadline = time.monotonic() + SILENCE_TIMEOUT
        try:
            _announce(announce_fd, announcement(name), deadline)
        finally:
            os.close(announce_fd)
        req_fd = _open_fifo(req_path, os.O_WRONLY, deadline)
        try:
            os.set_blocking(req_fd, True)
            view = memoryview(request)
            while view:
                written = os.write(req_fd, view)
                view = view[written:]
        finally:
            os.close(req_fd)
        decoder = protocol.ResponseDecoder()
        poller = select.poll()
        poller.register(resp_fd, select.POLLIN)
        writer_seen = False
        while True:
            if not poller.poll(SILENCE_TIMEOUT * 1000):
                return None, "timeout"
            data = os.read(resp_fd, 65536)
            if not data:
                if not writer_seen:
                    time.sleep(0.002)   # the chaperon has not opened its end yet
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
                os.unlink(path)
            except OSError:
                pass


def yield_event(event) -> None:
    if isinstance(event, protocol.Output):
        stream = sys.stdout.buffer if event.stream == "stdout" else sys.stderr.buffer
        stream.write(event.data)
        stream.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    command = os.path.basename(argv[0])
    args = argv[1:]
    session_dir = os.environ.get(ENV_SESSION_DIR, SANDBOX_DIR)
    if not os.path.isdir(session_dir):
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
    env = [(k.encode(), v.encode("utf-8", "surrogateescape")) for k, v in os.environ.items()]
    name = os.urandom(16).hex()
    request = protocol.encode_request(protocol.Request(
        command=command, args=tuple(os.fsencode(a) for a in args),
        cwd=os.fsencode(os.getcwd()), env=tuple(env), stdin=stdin,
        resp_path=os.path.join(session_dir, CONN_DIR, f"{name}.resp")))
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
