"""helper/netrelay.py: the byte pump both hops use (relay inside, proxy
outside) — every byte arrives in order, an end of stream becomes a half
close, a limit stops the copy without closing (the answer still comes), an
error wakes the other direction; and the relay itself end to end over a
Unix socket. Socket pairs and a thread stand in for the two peers."""
from __future__ import annotations

import os
import socket
import threading

from agent_sandbox.paths import helper_module

netrelay = helper_module("netrelay")


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def test_join_carries_both_directions_and_half_closes():
    client, relay_a = socket.socketpair()
    relay_b, server = socket.socketpair()
    payload = os.urandom(5 << 20)
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        counts=netrelay.join(relay_a, relay_b, already=7)))
    thread.start()
    sender = threading.Thread(target=lambda: (client.sendall(payload),
                                              client.shutdown(socket.SHUT_WR)))
    sender.start()
    assert _read_all(server) == payload            # EOF arrived: the half close passed on
    server.sendall(b"answer")
    server.shutdown(socket.SHUT_WR)
    assert _read_all(client) == b"answer"
    thread.join(10)
    sender.join(10)
    assert result["counts"] == (len(payload) + 7, 6)
    for sock in (client, server):
        sock.close()


def test_a_limit_stops_the_copy_but_keeps_the_connection():
    client, relay_a = socket.socketpair()
    relay_b, server = socket.socketpair()
    client.sendall(b"headbodyNEXT REQUEST")
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        counts=netrelay.join(relay_a, relay_b, limit=8)))
    thread.start()
    assert server.recv(100) == b"headbody"
    server.sendall(b"reply")                       # the server still answers
    server.shutdown(socket.SHUT_WR)
    # Give a relay that would close now (with the unread "NEXT REQUEST") the
    # time to do it: that close would reset the client's connection.
    thread.join(0.5)
    assert _read_all(client) == b"reply"           # then a clean end, never a reset
    client.close()
    thread.join(10)
    assert result["counts"] == (8, 5)
    server.settimeout(5)
    assert server.recv(100) == b""                 # never the bytes after the limit
    server.close()


def test_an_error_on_one_side_ends_the_other_direction():
    client, relay_a = socket.socketpair()
    relay_b, server = socket.socketpair()
    thread = threading.Thread(target=netrelay.join, args=(relay_a, relay_b))
    thread.start()
    server.close()                                 # the upstream vanishes
    client.settimeout(10)
    try:
        client.sendall(b"x" * (1 << 20))           # writing to it fails in the pump
        assert _read_all(client) == b""
    except (BrokenPipeError, ConnectionResetError):
        pass                                       # the relay shut the client's side too
    thread.join(10)
    assert not thread.is_alive()                   # no thread is left blocked
    client.close()


def test_serve_relays_tcp_to_the_unix_socket(tmp_path):
    path = str(tmp_path / "proxy.sock")
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    upstream.bind(path)
    upstream.listen(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    threading.Thread(target=netrelay.serve, args=(port, path), daemon=True).start()
    for _ in range(500):
        try:
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            threading.Event().wait(0.01)
    conn, _ = upstream.accept()
    client.sendall(b"CONNECT x:443 HTTP/1.1\r\n\r\n")
    assert conn.recv(100) == b"CONNECT x:443 HTTP/1.1\r\n\r\n"
    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    conn.close()
    assert _read_all(client) == b"HTTP/1.1 200 OK\r\n\r\n"
    client.close()
    upstream.close()


def test_main_refuses_bad_arguments(capsys):
    assert netrelay.main(["x", "/s"]) == 2
    assert netrelay.main(["70000", "/s"]) == 2
    assert "usage" in capsys.readouterr().err


def _splice_or_emulation():
    """os.splice, or on Python 3.9 (none there; netrelay copies instead) a
    read and a write with its signature: the fallback paths tested below are
    the same on every Python once a splice is there to fail."""
    if hasattr(os, "splice"):
        return os.splice

    def emulated(source: int, target: int, count: int, *args, **kwargs) -> int:
        data = os.read(source, count)
        return os.write(target, data) if data else 0
    return emulated


def test_a_splice_refused_midway_falls_back_within_what_is_left_of_the_limit(monkeypatch):
    """Some bytes went by splice, then splice is refused (EINVAL): the
    recv/send fallback may move only the rest of the limit — the bytes
    behind a request's body (a pipelined second request) stay behind."""
    import errno

    source_peer, source = socket.socketpair()
    target, target_peer = socket.socketpair()
    source_peer.sendall(b"0123456789NEXT REQUEST")
    source_peer.shutdown(socket.SHUT_WR)
    real, calls = _splice_or_emulation(), []

    def splice(src, dst, count, *args, **kwargs):
        calls.append(count)
        if len(calls) == 1:
            return real(src, dst, 4)            # 4 bytes into the pipe
        if len(calls) == 2:
            return real(src, dst, count)        # and out to the target
        raise OSError(errno.EINVAL, "splice refused from now on")

    monkeypatch.setattr(netrelay.os, "splice", splice, raising=False)   # none before 3.10
    assert netrelay.pump(source, target, limit=10) == 10
    target.shutdown(socket.SHUT_WR)
    assert _read_all(target_peer) == b"0123456789"
    for sock in (source_peer, source, target, target_peer):
        sock.close()


def test_bytes_already_in_the_pipe_are_delivered_when_splice_out_is_refused(monkeypatch):
    import errno

    source_peer, source = socket.socketpair()
    target, target_peer = socket.socketpair()
    source_peer.sendall(b"abcdef")
    source_peer.shutdown(socket.SHUT_WR)
    real, calls = _splice_or_emulation(), []

    def splice(src, dst, count, *args, **kwargs):
        calls.append(count)
        if len(calls) == 1:
            return real(src, dst, 3)            # "abc" into the pipe, never spliced out
        raise OSError(errno.EINVAL, "splice refused from now on")

    monkeypatch.setattr(netrelay.os, "splice", splice, raising=False)   # none before 3.10
    assert netrelay.pump(source, target) == 6
    assert _read_all(target_peer) == b"abcdef"
    for sock in (source_peer, source, target, target_peer):
        sock.close()
