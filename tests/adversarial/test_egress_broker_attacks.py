"""Attacks on the egress proxy's broker route and forwarding (issue 16, from
the security review), as a prompt-injected agent whose only path out is the
proxy's Unix socket: the installed proxy as the unprivileged test user, raw
upstreams on 127.0.0.2 (plain, and TLS with a root-owned test CA) that record
every byte each connection carried, names by the root-owned admin-dir hook.

- the real key reflected: TRACE on the broker route (origin and absolute
  form) gets the key added, and an upstream that echoes TRACE hands it back;
- paths outside the upstream's base path: dot segments spelled with encoded
  slashes, `;` parameters, double encoding;
- a second request on a connection: a chunked body (broker route and plain
  forwarding) or a WebSocket upgrade the upstream does not accept carried
  the rest of the client's stream — on the broker route, on the TLS
  connection that holds the real key;
- running the proxy out of descriptors ended its accept loop for good.

No fixed sleeps: an upstream records a connection before closing it, and
the proxy closes the client's connection only after the upstream's ended,
so once `exchange` returns, what reached the upstream is recorded."""
from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.support.install import ADMIN_DIR
from tests.support.egresskit import (HOOK_NAME, PYTHON, make_ca, start_proxy, stop_proxy,
                             write_spec)

REAL_KEY = "sk-ant-api03-REAL-secret-key-value"
PLACEHOLDER = "sk-ant-api03-agentsandbox0123456789abcdef"
LINGER = 0.5      # how long an upstream keeps reading after its answer


class RawUpstream:
    """Accepts on 127.0.0.2:<free port> (TLS when `tls` = (cert, key)); per
    connection: reads one request head and answers it — TRACE: the head
    echoed as the body (Apache's TraceEnable On, many debug endpoints); a
    WebSocket upgrade to a path containing `/ws-ok`: 101, then echoes what
    follows; anything else 200 "ok" — then keeps reading for LINGER seconds
    and records every byte the connection carried."""

    def __init__(self, tls=None):
        self.connections: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.context = None
        if tls:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(*map(str, tls))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        data = b""
        try:
            if self.context:
                conn = self.context.wrap_socket(conn, server_side=True)
            conn.settimeout(5)
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0]
            if b"/ws-ok" in head.split(b"\r\n", 1)[0] and b"upgrade: websocket" in head.lower():
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: Upgrade\r\n\r\n")
                while chunk := conn.recv(65536):     # echo until the client ends
                    data += chunk
                    conn.sendall(b"echo:" + chunk)
                return
            body = head + b"\r\n\r\n" if head.startswith(b"TRACE ") else b"ok"
            kind = b"message/http" if head.startswith(b"TRACE ") else b"text/plain"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            conn.settimeout(LINGER)
            while chunk := conn.recv(65536):
                data += chunk
        except (OSError, ssl.SSLError):
            pass
        finally:
            self.connections.append(data)
            try:
                conn.close()
            except OSError:
                pass

    def close(self):
        self.sock.close()


class World:
    pass


@pytest.fixture(scope="module")
def world(user):
    w = World()
    w.dir = Path(tempfile.mkdtemp(prefix="egress-attack-"))
    os.chown(w.dir, user.uid, user.gid)
    w.dir.chmod(0o700)
    w.ca, cert, key = make_ca(w.dir)
    for path in w.dir.iterdir():
        os.chown(path, user.uid, user.gid)
    os.chown(w.ca, 0, 0)        # the proxy trusts the hook's CA only when it is root's
    w.tls = RawUpstream(tls=(cert, key))
    w.plain = RawUpstream()
    created = not ADMIN_DIR.exists()
    ADMIN_DIR.mkdir(mode=0o755, exist_ok=True)
    w.hook = ADMIN_DIR / HOOK_NAME
    w.hook.write_text(json.dumps({"hosts": {"api.test": ["127.0.0.2"],
                                            "www.test": ["127.0.0.2"]},
                                  "ca_file": str(w.ca)}))
    w.hook.chmod(0o644)
    os.chown(w.hook, 0, 0)
    brokers = {"anthropic": {"upstream": f"https://api.test:{w.tls.port}/v1",
                             "header": "x-api-key", "scheme": "",
                             "placeholder": PLACEHOLDER, "key": REAL_KEY}}
    w.rules = [f"www.test:{w.plain.port}", f"127.0.0.2/32:{w.plain.port}",
               f"127.0.0.2/32:{w.tls.port}"]
    w.spec_path, w.spec = write_spec(w.dir, w.rules, brokers, user=user)
    w.proxy = start_proxy(w.spec_path, user)
    yield w
    stop_proxy(w.proxy)
    w.tls.close()
    w.plain.close()
    w.hook.unlink()
    if created:
        ADMIN_DIR.rmdir()
    shutil.rmtree(w.dir, ignore_errors=True)


def exchange(path: str, payload: bytes, timeout: float = 10.0) -> bytes:
    """Send `payload` on one connection to the proxy's socket; all it answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(payload)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except socket.timeout:
            pass
        return answer


def broker_head(method: str, path: str, extra: str = "") -> bytes:
    return (f"{method} /broker/anthropic{path} HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"
            f"x-api-key: {PLACEHOLDER}\r\n{extra}\r\n").encode()


# ------------------------------------------------------------------ the key
@pytest.mark.parametrize("form", ["origin", "absolute"])
def test_trace_on_the_broker_route_does_not_reflect_the_real_key(world, form):
    before = len(world.tls.connections)
    head = broker_head("TRACE", "/messages") if form == "origin" else (
        f"TRACE http://127.0.0.1:3128/broker/anthropic/x HTTP/1.1\r\n"
        f"Host: 127.0.0.1:3128\r\nx-api-key: {PLACEHOLDER}\r\n\r\n").encode()
    answer = exchange(world.spec["socket"], head)
    assert REAL_KEY.encode() not in answer, answer
    assert answer.startswith(b"HTTP/1.1 405 "), answer
    assert world.tls.connections[before:] == []


def test_an_allowed_method_still_gets_the_key(world):
    before = len(world.tls.connections)
    answer = exchange(world.spec["socket"], broker_head("GET", "/models"))
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"ok"), answer
    (seen,) = world.tls.connections[before:]
    assert seen.startswith(b"GET /v1/models HTTP/1.1\r\n")
    assert f"x-api-key: {REAL_KEY}".encode() in seen
    assert REAL_KEY not in Path(world.spec["audit"]).read_text()


@pytest.mark.parametrize("path", ["/..%2f..%2fadmin", "/..;/admin", "/%252e%252e/admin",
                                  "/.%2e/admin", "/%2e%2e%2fadmin", "/a/..%5c..%5cadmin"])
def test_no_path_outside_the_upstream_base_reaches_it(world, path):
    before = len(world.tls.connections)
    answer = exchange(world.spec["socket"], broker_head("GET", path))
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert world.tls.connections[before:] == []


# ------------------------------------------------- one request per connection
def test_the_broker_route_refuses_a_chunked_body(world):
    before = len(world.tls.connections)
    smuggled = b"0\r\n\r\nGET /v1/smuggled HTTP/1.1\r\nHost: other.example\r\n\r\n"
    answer = exchange(world.spec["socket"], broker_head(
        "POST", "/messages", "Transfer-Encoding: chunked\r\n") + smuggled)
    assert answer.startswith(b"HTTP/1.1 411 "), answer
    assert world.tls.connections[before:] == []


def test_a_websocket_upgrade_the_upstream_refuses_carries_one_request_only(world):
    """Without a 101 the upstream keeps the connection (which holds the real
    key) for more requests: nothing behind the upgrade request may reach it."""
    before = len(world.tls.connections)
    answer = exchange(world.spec["socket"], broker_head(
        "GET", "/realtime", "Upgrade: websocket\r\nConnection: Upgrade\r\n")
        + b"GET /v1/second HTTP/1.1\r\nHost: other.example\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    (seen,) = world.tls.connections[before:]
    assert seen.startswith(b"GET /v1/realtime HTTP/1.1\r\n")
    assert b"/v1/second" not in seen, seen


def test_a_websocket_the_upstream_accepts_goes_raw_both_ways(world):
    before = len(world.tls.connections)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(world.spec["socket"])
        sock.sendall(broker_head("GET", "/ws-ok", "Upgrade: websocket\r\n"
                                 "Connection: Upgrade\r\nSec-WebSocket-Key: abc\r\n"))
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 101 "), answer
        sock.sendall(b"frame-1")
        echoed = b""
        while b"echo:frame-1" not in echoed:
            echoed += sock.recv(4096)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):
            pass
    (seen,) = world.tls.connections[before:]
    assert seen.endswith(b"\r\n\r\nframe-1")


def test_plain_forwarding_refuses_a_chunked_body(world):
    """protocol.py promises that nothing after the first request reaches the
    upstream; a chunked body was forwarded with the whole rest of the stream."""
    before = len(world.plain.connections)
    port = world.plain.port
    answer = exchange(world.spec["socket"], (
        f"POST http://www.test:{port}/first HTTP/1.1\r\nHost: www.test:{port}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        "GET /second HTTP/1.1\r\nHost: not-allowed.example\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 411 "), answer
    assert world.plain.connections[before:] == []


def test_content_length_bounds_the_forwarded_body(world):
    before = len(world.plain.connections)
    port = world.plain.port
    exchange(world.spec["socket"], (
        f"POST http://www.test:{port}/a HTTP/1.1\r\nHost: www.test:{port}\r\n"
        "Content-Length: 5\r\n\r\nhello"
        "GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        "CONNECT evil.example:443 HTTP/1.1\r\n\r\n").encode())
    (seen,) = world.plain.connections[before:]
    assert seen.endswith(b"\r\n\r\nhello"), seen


# ------------------------------------------------------- resource exhaustion
def _descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def test_the_proxy_still_accepts_after_running_out_of_descriptors(world, user):
    """Idle connections (the head timeout is 30 s) exhaust the proxy's
    descriptors; accept() fails with EMFILE; once they close, the proxy must
    serve again (it used to end its accept loop for good)."""
    directory = Path(tempfile.mkdtemp(prefix="egress-emfile-"))
    os.chown(directory, user.uid, user.gid)
    spec_path, spec = write_spec(directory, world.rules, user=user)
    process = subprocess.Popen(
        ["prlimit", "--nofile=64:64", PYTHON, "-I", "-m", "egress", str(spec_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
        user=user.uid, group=user.gid, extra_groups=[])
    idle = []
    try:
        assert process.stdout.readline() == b"ready\n"
        for _ in range(100):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(spec["socket"])
            except BlockingIOError:
                pass
            idle.append(sock)
        deadline = time.monotonic() + 10
        while _descriptors(process.pid) < 64:        # full: the next accept() fails
            assert time.monotonic() < deadline, _descriptors(process.pid)
            time.sleep(0.01)
        for sock in idle:
            sock.close()
        idle.clear()
        port = world.plain.port
        deadline = time.monotonic() + 10
        while True:
            answer = exchange(spec["socket"],
                              f"GET http://www.test:{port}/ HTTP/1.1\r\n\r\n".encode(),
                              timeout=2)
            if answer.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                break
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        for sock in idle:
            sock.close()
        process.stdin.close()
        process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


# ------------------------------------------------------------- what held
@pytest.mark.parametrize("request_", [
    b"\x05\x02\x00\x01\x7f\x00\x00\x02\x00\x50",     # BIND
    b"\x05\x03\x00\x01\x7f\x00\x00\x02\x00\x50",     # UDP ASSOCIATE
    b"\x05\x01\x00\x03\x09localhost\x00\x50",
    b"\x05\x01\x00\x03\x0a127.0.0.1.\x00\x50",
    b"\x05\x01\x00\x03\x0d127.0.0.1\x00www\x00\x50",
    b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x00\x50",
    b"\x05\x01\x00\x05\x7f\x00\x00\x01\x00\x50",
    b"\x05\x01\x01\x01\x7f\x00\x00\x02\x00\x50",
])
def test_socks_oddities_are_refused(world, request_):
    before = len(world.plain.connections)
    answer = exchange(world.spec["socket"], b"\x05\x01\x00" + request_, timeout=4)
    assert answer.startswith(b"\x05\x00") and answer[2:4] != b"\x05\x00", answer
    assert len(world.plain.connections) == before


@pytest.mark.parametrize("head", [
    "GET http://www.test:{p}/ HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n",
    "GET http://www.test:{p}@127.0.0.1:{p}/ HTTP/1.1\r\n\r\n",
    "GET http://127.0.0.1:{p}\\@www.test:{p}/ HTTP/1.1\r\n\r\n",
    "GET http://www.test:{p}/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    "CONNECT www.test:{p} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n",
    "GET /broker/anthropic/x HTTP/1.1\r\nx-api-key: other-key\r\n\r\n",
    "GET /broker/anthropic/x HTTP/1.1\r\nx-api-key: {k}\r\nX-Api-Key: {k}\r\n\r\n",
    "GET /broker/nope/x HTTP/1.1\r\nx-api-key: {k}\r\n\r\n",
])
def test_http_oddities_are_refused(world, head):
    before = len(world.plain.connections) + len(world.tls.connections)
    answer = exchange(world.spec["socket"],
                      head.format(p=world.plain.port, k=PLACEHOLDER).encode(), timeout=4)
    assert answer.startswith((b"HTTP/1.1 4", b"HTTP/1.1 5")), answer
    assert len(world.plain.connections) + len(world.tls.connections) == before
    assert REAL_KEY.encode() not in answer
