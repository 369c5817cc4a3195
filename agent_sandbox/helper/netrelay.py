"""The relay inside the sandbox's network namespace (issue 16, NETWORK_MODE=allowlist).

Runs inside the jail, standard library only (agent_sandbox/paths.py). The
namespace has loopback and nothing else; this relay listens on
127.0.0.1:<port> (and [::1]:<port> when IPv6 loopback is up) and carries each
accepted TCP connection, unread and unchanged, over a new connection to the
egress proxy's Unix socket (bound in from the chaperon's session directory).
It decides nothing: the proxy outside parses, decides and logs.

Speed: each direction of a connection is one thread moving bytes with
splice(2) through a pipe of 1 MiB — the bytes never enter Python — and falls
back to recv_into/sendall on a 1 MiB buffer where splice is refused. An end
of stream is passed on as a half close (shutdown SHUT_WR); an error on
either side shuts both sockets, so the other direction's thread wakes up.
egress/server.py uses the same `pump` and `join` for its own hop.

    python3 -I netrelay.py PORT SOCKET_PATH
"""
from __future__ import annotations

import _socket   # the C module: `socket` (enum, selectors) costs the helper ~4 ms
import errno
import os
import sys

CHUNK = 1 << 20
_F_SETPIPE_SZ = 1031


def _pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        import fcntl

        fcntl.fcntl(write_end, _F_SETPIPE_SZ, CHUNK)
    except OSError:
        pass    # the default 64 KiB pipe still works, only slower
    return read_end, write_end


def _copy(source: _socket.socket, target: _socket.socket, limit: int | None) -> int:
    """recv/sendall fallback; bytes moved."""
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    moved = 0
    while limit is None or moved < limit:
        size = CHUNK if limit is None else min(CHUNK, limit - moved)
        count = source.recv_into(view[:size])
        if not count:
            break
        target.sendall(view[:count])
        moved += count
    return moved


_NO_SPLICE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)


def _splice(source: _socket.socket, target: _socket.socket, limit: int | None) -> int:
    """Bytes moved source → target through a pipe, never through user space;
    where splice is refused (even after some bytes went), the rest by _copy,
    within what is left of the limit."""
    read_end, write_end = _pipe()
    moved = left = 0
    try:
        while limit is None or moved < limit:
            size = CHUNK if limit is None else min(CHUNK, limit - moved)
            count = os.splice(source.fileno(), write_end, size)
            if not count:
                break
            moved += count
            left = count
            while left:
                left -= os.splice(read_end, target.fileno(), left)
    except OSError as exc:
        if exc.errno not in _NO_SPLICE:
            raise
        while left:                     # already read into the pipe: still delivered
            data = os.read(read_end, left)
            target.sendall(data)
            left -= len(data)
        moved += _copy(source, target, None if limit is None else limit - moved)
    finally:
        os.close(read_end)
        os.close(write_end)
    return moved


def _drain(source: _socket.socket) -> None:
    """Read and drop what the source still sends, until it ends: a socket
    closed with unread bytes resets the connection, and a reset can destroy
    the answer the peer has not read yet."""
    buffer = bytearray(CHUNK)
    while source.recv_into(buffer):
        pass


def pump(source: _socket.socket, target: _socket.socket, limit: int | None = None) -> int:
    """Copy source → target until end of stream, then half close target; or
    stop after `limit` bytes, leave target open (an HTTP request whose body
    is complete: the answer still comes) and drop the rest of the source.
    Returns the bytes moved. An error shuts both sockets."""
    moved = 0
    try:                                   # os.splice: Python 3.10+
        moved = (_splice if hasattr(os, "splice") else _copy)(source, target, limit)
        if limit is None or moved < limit:
            target.shutdown(_socket.SHUT_WR)
        else:
            _drain(source)
    except OSError:
        for sock in (source, target):
            try:
                sock.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass
    return moved


def join(first: _socket.socket, second: _socket.socket, already: int = 0,
         limit: int | None = None) -> tuple[int, int]:
    """Carry both directions between two connected sockets until both end
    (first → second at most `limit` bytes); close them.
    Returns (bytes first → second + `already`, bytes second → first)."""
    import threading

    result = [0]

    def backwards():
        result[0] = pump(second, first)

    thread = threading.Thread(target=backwards, daemon=True)
    thread.start()
    forward = pump(first, second, limit)
    thread.join()
    first.close()
    second.close()
    return forward + already, result[0]


def _carry(client: _socket.socket, socket_path: str) -> None:
    import socket

    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        client.close()
        upstream.close()
        return
    join(client, upstream)


def listeners(listen_port: int) -> list:
    """127.0.0.1:<port>, and [::1]:<port> when IPv6 loopback exists."""
    result = []
    for family, host in ((_socket.AF_INET, "127.0.0.1"), (_socket.AF_INET6, "::1")):
        sock = _socket.socket(family, _socket.SOCK_STREAM)
        try:
            sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
            if family == _socket.AF_INET6:
                sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 1)
            sock.bind((host, listen_port))
            sock.listen(128)
        except OSError:
            sock.close()
            if family == _socket.AF_INET:
                raise
            continue
        result.append(sock)
    return result


def serve(listen_port: int, socket_path: str) -> None:
    """Accept on loopback forever; each connection is carried by its own threads."""
    serve_on(listeners(listen_port), socket_path)


def serve_on(bound: list, socket_path: str) -> None:
    """Accept on the listening sockets `bound` forever (the sandbox helper
    binds them before it forks the relay: sandbox_exec.start_relay)."""
    import selectors
    import socket
    import threading

    selector = selectors.DefaultSelector()
    for sock in bound:      # listeners() makes them on the C module: wrapped for accept()
        selector.register(socket.socket(fileno=sock.detach()), selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            try:
                client, _ = key.fileobj.accept()
            except OSError:
                continue
            client.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            threading.Thread(target=_carry, args=(client, socket_path), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[0].isdigit() or not 0 < int(args[0]) < 65536:
        print("usage: netrelay.py PORT SOCKET_PATH", file=sys.stderr)
        return 2
    try:
        serve(int(args[0]), args[1])
    except OSError as exc:
        print(f"agent-sandbox: network relay: cannot listen on 127.0.0.1:{args[0]} — {exc}",
              file=sys.stderr)
        return 125
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
