"""`python3 -I -m egress SPEC_PATH [--listen-fd N]`: the session's egress
proxy (docs/network.md).

The launcher starts it outside the sandbox with a pipe on stdin whose write
end only the launcher holds. It checks the spec (egress/spec.py; a bad one:
exit 125 and one `agent-sandbox:` line on stderr, mapped once in `main`), opens the audit log,
binds the Unix socket (0600) — or, with --listen-fd, serves the listening
socket the launcher bound and handed it (the launcher then starts the
sandbox without waiting for the proxy: a connection made before the proxy
accepts waits in the socket's backlog; the launcher reads the spec to it
through a pipe, SPEC_PATH /dev/fd/N, so the keys never touch the disk) —
prints `ready`, and serves until stdin reaches
end of file, SIGTERM/SIGINT/SIGHUP, or the death of its parent
(PR_SET_PDEATHSIG sends SIGTERM): the proxy never outlives the launcher.
It holds the real API keys: it makes itself undumpable (PR_SET_DUMPABLE 0).
It removes its socket on the way out.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _harden() -> None:
    """Die with the parent (SIGTERM), and be undumpable: the proxy holds the
    real API keys, so no core file, no ptrace and no /proc/<pid>/mem or
    environ for other processes of the same user (the agent's among them)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _more_descriptors() -> None:
    """Soft NOFILE limit up to the hard one: each relayed connection holds
    six descriptors (two sockets, two pipes)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            pass    # the soft limit still works; accept() backs off when it is reached


def _bind(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(512)
    listener.setblocking(False)
    return listener


def _inherited(fd: int, path: str) -> socket.socket:
    """The listening socket the launcher bound at `path` and handed over."""
    listener = socket.socket(fileno=fd)
    if (listener.family != socket.AF_UNIX or listener.type != socket.SOCK_STREAM
            or listener.getsockname() != path):
        raise OSError(f"descriptor {fd} is not the listening socket at {path}")
    listener.setblocking(False)
    return listener


async def _run(proxy, listener) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for number in STOP_SIGNALS:
        loop.add_signal_handler(number, stop.set)
    # Held since before `ready`: one that came meanwhile is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def watch_stdin():      # a thread: stdin may be any kind of file
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, daemon=True).start()
    server = asyncio.ensure_future(proxy.serve(listener))
    await stop.wait()
    server.cancel()


def main(argv: list[str]) -> int:
    """The proxy's edge: a refusal (SandboxError) becomes its line on stderr
    and exit 125 here, once (errors.mapped, as at the CLI's edge)."""
    from agent_sandbox.errors import mapped

    return mapped(_serve, argv)


def _serve(argv: list[str]) -> int:
    from agent_sandbox.errors import SandboxError
    from agent_sandbox.paths import ADMIN_DIR
    from egress.server import Proxy
    from egress.spec import SpecError, load, load_hook

    listen_fd = None
    if len(argv) == 3 and argv[1] == "--listen-fd" and argv[2].isdigit():
        listen_fd, argv = int(argv[2]), argv[:1]
    if len(argv) != 1:
        raise SandboxError("usage: python3 -I -m egress SPEC_PATH [--listen-fd N]")
    try:
        spec = load(argv[0])
    except SpecError as exc:
        raise SandboxError(f"egress proxy: {exc}") from exc
    # A stop signal (the parent's death among them) that comes before the
    # loop handles them must still remove the socket: held until then.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    _harden()
    _more_descriptors()
    try:
        audit_fd = os.open(spec.audit, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                           0o600)
    except OSError as exc:
        raise SandboxError(f"egress proxy: cannot open the audit log {spec.audit} — "
                           f"{exc}") from exc
    try:
        listener = _bind(spec.socket) if listen_fd is None else _inherited(listen_fd,
                                                                           spec.socket)
    except OSError as exc:
        raise SandboxError(f"egress proxy: cannot bind {spec.socket} — {exc}") from exc
    bound = os.stat(spec.socket)
    try:
        proxy = Proxy(spec, load_hook(ADMIN_DIR), audit_fd)
        try:
            sys.stdout.write("ready\n")
            sys.stdout.flush()
        except BrokenPipeError:
            # The launcher stopped waiting (it refused the launch meanwhile):
            # nobody to serve. Quietly: stdout is gone for the exit's flush too.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        asyncio.run(_run(proxy, listener))
    finally:
        try:
            now = os.stat(spec.socket)
            if (now.st_dev, now.st_ino) == (bound.st_dev, bound.st_ino):
                os.unlink(spec.socket)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)     # connection threads are not waited for: the session is over
