"""The chaperon process: outside the sandbox, one per sandbox session.

Strategy: the main thread reads announcement lines from the session's shared
FIFO and starts one thread per announced connection; that thread reads the
CHAPERON/1 request from the connection's own FIFO (bounded in size and time),
opens the response FIFO only after checking it is a FIFO of ours inside the
session directory, routes the request through the handler table, and streams
the answer back. A slow `sbatch` or `srun` therefore never blocks `squeue`, and
a client that stalls, floods or never reads ties up only its own thread.

Lifecycle: PR_SET_PDEATHSIG plus polling of the parent pid, so the chaperon
ends with its launcher in every exit path; on the way out it logs the stop and
removes the session directory.

Started by the launcher as `python -I -m chaperon.server --config-fd N`; the
configuration (session, project, scope, real Slurm binaries, …) arrives as
JSON on that descriptor and never through the sandbox.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import stat
import sys
import threading
import time

from .audit import AuditLog
from .wire import protocol
from .wire.session import (ANNOUNCE_FIFO, CONN_DIR, EXIT_INTERNAL, HEARTBEAT_INTERVAL,
                           SILENCE_TIMEOUT, parse_announcement)

REQUEST_TIMEOUT = 10.0     # a whole request must arrive within this
OPEN_TIMEOUT = 10.0        # the client must open its response FIFO within this
MAX_THREADS = 64


class Stopped(Exception):
    """SIGTERM/SIGHUP: leave the main loop at once."""


class ClientGone(Exception):
    """The stub stopped reading its answer."""


class Responder:
    """Writes response frames to one connection, never blocking forever."""

    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()
        self.last = time.monotonic()

    def _send(self, frame: bytes) -> None:
        with self.lock:
            view = memoryview(frame)
            while view:
                ready = select.select([], [self.fd], [], SILENCE_TIMEOUT)[1]
                if not ready:
                    raise ClientGone("the client did not read its answer")
                try:
                    view = view[os.write(self.fd, view):]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    raise ClientGone("the client closed its answer FIFO") from None
            self.last = time.monotonic()

    def stdout(self, data: bytes) -> None:
        if data:
            self._send(protocol.encode_stdout(data))

    def stderr(self, data: bytes) -> None:
        if data:
            self._send(protocol.encode_stderr(data))

    def alive(self) -> None:
        self._send(protocol.encode_alive())

    def exit(self, code: int) -> None:
        self._send(protocol.encode_exit(code))


def _check_fifo(path: str, uid: int, info=None) -> os.stat_result:
    info = info or os.lstat(path)
    if not stat.S_ISFIFO(info.st_mode) or info.st_uid != uid:
        raise PermissionError(f"{path} is not a FIFO owned by uid {uid}")
    return info


def _open_checked(path: str, flags: int, uid: int, deadline: float) -> int:
    """Open a FIFO of the session without following symlinks, and make sure
    the descriptor is the very FIFO that was checked (fstat)."""
    expected = _check_fifo(path, uid)
    while True:
        try:
            fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            break
        except OSError as exc:
            if exc.errno != 6 or time.monotonic() > deadline:   # ENXIO: no reader yet
                raise
            time.sleep(0.005)
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != (expected.st_dev, expected.st_ino):
        os.close(fd)
        raise PermissionError(f"{path} changed while it was opened")
    _check_fifo(path, uid, info)
    return fd


def read_request(fd: int, deadline: float) -> protocol.Request:
    decoder = protocol.RequestDecoder()
    while True:
        event = decoder.next_event()
        if isinstance(event, protocol.Request):
            return event
        if event is not None:   # Closed: the writer went away without a request
            raise protocol.MalformedFrame("the connection closed before a request")
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise protocol.MalformedFrame("the request did not arrive in time (stalled writer)")
        decoder.feed(os.read(fd, 65536))


class Chaperon:
    def __init__(self, config: dict):
        self.config = config
        self.session_dir = config["session_dir"]
        self.uid = os.getuid()
        self.log = AuditLog(config)
        self.threads = threading.BoundedSemaphore(MAX_THREADS)
        self.stopping = False
        from .handlers import Context

        self.context = Context(config, self.log)
        # The ledger's session files folded per project (crash-safe, see
        # ledger.py), beside the first requests: scoped calls then cost what
        # is in scope, not the user's whole history.
        threading.Thread(target=self._compact, daemon=True).start()

    def _compact(self) -> None:
        try:
            self.context.ledger.compact_if_needed()
        except Exception as exc:   # never the chaperon's end: the ledger stays readable
            self.log.event("ledger_compaction_failed", detail=str(exc))

    # -------------------------------------------------------------- connections
    def handle(self, name: str) -> None:
        conn = os.path.join(self.session_dir, CONN_DIR)
        req_path = os.path.join(conn, f"{name}.req")
        resp_path = os.path.join(conn, f"{name}.resp")
        try:
            deadline = time.monotonic() + REQUEST_TIMEOUT
            # O_RDWR: a FIFO opened for reading before its writer shows EOF; the
            # frame ends with END, and the deadline covers a writer that vanishes.
            req_fd = _open_checked(req_path, os.O_RDWR, self.uid, deadline)
            try:
                request = read_request(req_fd, deadline)
            finally:
                os.close(req_fd)
            # The stub names its FIFO as the sandbox sees the session directory.
            expected = os.path.join(self.config.get("visible_dir", self.session_dir),
                                    CONN_DIR, f"{name}.resp")
            if request.resp_path != expected:
                self.log.refusal("-", "bad_response_path",
                                 f"response FIFO {request.resp_path!r} is not {expected!r}")
                return
            resp_fd = _open_checked(resp_path, os.O_WRONLY, self.uid,
                                    time.monotonic() + OPEN_TIMEOUT)
        except (OSError, protocol.ProtocolError) as exc:
            self.log.refusal("-", "bad_connection", f"connection {name}: {exc}")
            return
        responder = Responder(resp_fd)
        heartbeat = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(responder, heartbeat), daemon=True)
        beat.start()
        try:
            from .handlers import dispatch

            code = dispatch(self.context, request, responder)
            responder.exit(code)
        except ClientGone as exc:
            self.log.event("client_gone", command=request.command, detail=str(exc))
        except Exception as exc:   # a handler bug must not take the chaperon down
            self.log.event("handler_error", command=request.command, detail=repr(exc))
            try:
                responder.stderr(f"agent-sandbox: {request.command}: internal error in the "
                                 f"Slurm proxy — {exc!r}. Report this; see `agent-sandbox "
                                 "logs`.\n".encode())
                responder.exit(EXIT_INTERNAL)
            except ClientGone:
                pass
        finally:
            heartbeat.set()
            os.close(resp_fd)

    def _heartbeat(self, responder: Responder, done: threading.Event) -> None:
        while not done.wait(1.0):
            if time.monotonic() - responder.last >= HEARTBEAT_INTERVAL:
                try:
                    responder.alive()
                except (ClientGone, OSError):
                    return

    def _spawn(self, name: str) -> None:
        if not self.threads.acquire(blocking=False):
            self.log.refusal("-", "busy", f"connection {name}: too many concurrent requests")
            return

        def run():
            try:
                self.handle(name)
            finally:
                self.threads.release()

        threading.Thread(target=run, daemon=True).start()

    # -------------------------------------------------------------- main loop
    def serve(self) -> None:
        launcher = self.config["launcher_pid"]
        fd = self.config.get("announce_fd")
        if fd is None:
            fd = os.open(os.path.join(self.session_dir, ANNOUNCE_FIFO),
                         os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_inheritable(fd, False)
        self.log.event("start", session=self.config["session_id"],
                       project=self.config["project_dir"])
        pending = b""
        while not self.stopping:
            if os.getppid() != launcher:
                break
            if not select.select([fd], [], [], 1.0)[0]:
                continue
            try:
                pending += os.read(fd, 65536)
            except BlockingIOError:
                continue
            lines = pending.split(b"\n")
            pending = lines.pop()[-256:]   # a flood without newlines stays bounded
            for line in lines:
                name = parse_announcement(line)
                if name:
                    self._spawn(name)

    def shutdown(self) -> None:
        self.log.event("stop", session=self.config["session_id"])
        shutil.rmtree(self.session_dir, ignore_errors=True)


def _set_pdeathsig() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)   # PR_SET_PDEATHSIG


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "--config-fd":
        sys.stderr.write("usage: python -m chaperon.server --config-fd N\n")
        return 2
    running: list[Chaperon] = []

    signalled: list[int] = []

    def stop(signum, _frame):
        # Raise rather than set a flag: Python retries an interrupted select,
        # so a flag alone would be seen only after the 1 s poll — on every
        # launch that has a chaperon. Only once: the launcher's SIGTERM is
        # followed by the parent-death signal, which must not interrupt the
        # shutdown below.
        if signalled:
            return
        signalled.append(signum)
        for chaperon in running:
            chaperon.stopping = True
        raise Stopped

    # Before anything is read: a signal at any point ends the chaperon through
    # `finally` below (the session directory removed), never by the default
    # action; SIGPIPE stays ignored (Python's default), so a client that goes
    # away is an EPIPE on its own connection.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C belongs to the sandboxed command
    config: dict = {}
    try:
        _set_pdeathsig()
        with os.fdopen(int(argv[1]), "rb") as handle:
            config = json.loads(handle.read() or b"{}")
        if not config or os.getppid() != config.get("launcher_pid"):
            return 1   # the launcher died before we set the death signal
        running.append(Chaperon(config))
        running[0].serve()
    except Stopped:
        pass
    finally:
        for chaperon in running:
            chaperon.shutdown()
        if not running and config.get("session_dir"):
            # Stopped while still starting (a launcher killed the moment its
            # command ran, on a loaded machine): the directory goes all the same.
            shutil.rmtree(config["session_dir"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
