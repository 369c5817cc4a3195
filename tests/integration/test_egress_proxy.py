"""The egress proxy and the relay for real (issue 16), as the unprivileged
test user, without a sandbox: the installed `python3 -I -m egress SPEC`
started as the launcher starts it, the installed netrelay.py in front of it,
and HTTP and HTTPS servers on 127.0.0.2 (allowed by explicit 127.0.0.2/32
entries), a test CA made with openssl, test names mapped by the root-owned
hook in the admin directory. Clients: curl (HTTP proxy with CONNECT, plain
HTTP, socks5h) and Python urllib through HTTPS_PROXY. Refusals (a host not
listed, numeric private addresses, the metadata address, a name resolving to
a private address), the denial text, the audit records, the lifecycle (stdin
EOF, parent killed, bad spec), and API key brokering against a mock API."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.install import ADMIN_DIR
from tests.support.egresskit import (HOOK_NAME, PYTHON, audit_records, free_port, make_ca, serve,
                             start_proxy, start_relay, stop_proxy, write_spec)

REAL_KEY = "sk-ant-api03-REAL-secret-key-value"
PLACEHOLDER = "sk-ant-api03-agentsandbox0123456789abcdef"


class World:
    """Servers, CA, hook, one proxy and its relay, shared by the module."""


@pytest.fixture(scope="module")
def world(user):
    w = World()
    w.dir = Path(tempfile.mkdtemp(prefix="egress-test-"))
    os.chown(w.dir, user.uid, user.gid)
    w.dir.chmod(0o700)
    w.ca, cert, key = make_ca(w.dir)
    for path in w.dir.iterdir():
        os.chown(path, user.uid, user.gid)
    os.chown(w.ca, 0, 0)        # the proxy trusts a hook's CA only when it is root's
    w.https = serve("127.0.0.2", "https", tls=(cert, key), expected_key=REAL_KEY)
    w.http = serve("127.0.0.2", "http")
    w.loopback = serve("127.0.0.1", "loopback")      # must never be reached
    w.hs, w.hp, w.lp = (s.server_address[1] for s in (w.https, w.http, w.loopback))
    created = not ADMIN_DIR.exists()
    ADMIN_DIR.mkdir(mode=0o755, exist_ok=True)
    w.hook = ADMIN_DIR / HOOK_NAME
    w.hook.write_text(json.dumps({"hosts": {
        "api.test": ["127.0.0.2"], "www.test": ["127.0.0.2"], "internal.test": ["127.0.0.1"],
        "meta.test": ["169.254.169.254"], "mixed.test": ["127.0.0.2", "10.0.0.1"]},
        "ca_file": str(w.ca)}))
    w.hook.chmod(0o644)
    os.chown(w.hook, 0, 0)
    brokers = {
        "anthropic": {"upstream": f"https://api.test:{w.hs}", "header": "x-api-key",
                      "scheme": "", "placeholder": PLACEHOLDER, "key": REAL_KEY},
        "internal": {"upstream": f"https://internal.test:{w.hs}", "header": "x-api-key",
                     "scheme": "", "placeholder": PLACEHOLDER, "key": REAL_KEY}}
    rules = [f"127.0.0.2/32:{w.hs}", f"127.0.0.2/32:{w.hp}", f"api.test:{w.hs}",
             f"www.test:{w.hp}", f"internal.test:{w.hs}", f"meta.test:{w.hp}",
             f"mixed.test:{w.hs}", "*.example.org"]
    w.spec_path, w.spec = write_spec(w.dir, rules, brokers, user=user)
    w.proxy = start_proxy(w.spec_path, user)
    w.port = free_port()
    w.relay = start_relay(w.port, w.spec["socket"], user)
    w.user = user
    yield w
    w.relay.kill()
    w.relay.wait()
    stop_proxy(w.proxy)
    for server in (w.https, w.http, w.loopback):
        server.shutdown()
    w.hook.unlink()
    if created:
        ADMIN_DIR.rmdir()
    shutil.rmtree(w.dir)


def curl(w, *args):
    return w.user.run(["curl", "-sS", "--max-time", "20", "--cacert", str(w.ca), *args],
                      cwd=w.user.home)


def records_since(w, count: int, client: str, host: str, port: int,
                  wanted: int = 1) -> list[dict]:
    """The audit records after the first `count` of this client, host and
    port, once the proxy wrote `wanted` of them (a record is written when its
    connection ends, which may be after the client exits; so may the record
    of an earlier test's connection, hence the filter)."""
    deadline = time.monotonic() + 10
    while True:
        records = [r for r in audit_records(w.spec)[count:]
                   if (r["client"], r["host"], r["port"]) == (client, host, port)]
        if len(records) >= wanted or time.monotonic() > deadline:
            return records
        time.sleep(0.02)


def raw_request(w, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", w.port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------ allowed paths
def test_curl_https_through_connect(world):
    w = world
    before = len(audit_records(w.spec))
    result = curl(w, "--proxy", f"http://127.0.0.1:{w.port}", f"https://api.test:{w.hs}/hello")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"path": "/hello", "host": f"api.test:{w.hs}",
                                         "key_ok": False, "server": "https"}
    (record,) = records_since(w, before, "connect", "api.test", w.hs)
    assert record["event"] == "network" and record["session"] == "test-session"
    assert (record["client"], record["host"], record["port"], record["decision"]) == (
        "connect", "api.test", w.hs, "allowed")
    assert record["addresses"] == ["127.0.0.2"]
    assert record["rule"] == f"api.test:{w.hs} (test:3)"
    assert record["bytes_out"] > 0 and record["bytes_in"] > 0 and record["duration_ms"] > 0


def test_curl_socks5h_and_the_name_is_resolved_by_the_proxy(world):
    w = world
    before = len(audit_records(w.spec))
    result = curl(w, "--proxy", f"socks5h://127.0.0.1:{w.port}", f"https://api.test:{w.hs}/s")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "/s"
    (record,) = records_since(w, before, "socks5", "api.test", w.hs)
    assert (record["client"], record["decision"]) == ("socks5", "allowed")


def test_plain_http_is_forwarded_in_origin_form(world):
    w = world
    w.http.seen.clear()
    before = len(audit_records(w.spec))
    result = curl(w, "--proxy", f"http://127.0.0.1:{w.port}", "-H", "Proxy-Authorization: x",
                  "--data", "body=1", f"http://www.test:{w.hp}/p?q=1")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "/p?q=1"
    (seen,) = w.http.seen
    assert seen["body"] == b"body=1" and seen["method"] == "POST"
    assert seen["headers"]["Host"] == f"www.test:{w.hp}"
    assert seen["headers"]["Connection"] == "close"
    assert "Proxy-Authorization" not in seen["headers"]
    (record,) = records_since(w, before, "http", "www.test", w.hp)
    assert (record["client"], record["decision"]) == ("http", "allowed")


def test_python_urllib_through_https_proxy(world):
    w = world
    script = ("import ssl, sys, urllib.request\n"
              "context = ssl.create_default_context(cafile=sys.argv[1])\n"
              "print(urllib.request.urlopen(sys.argv[2], context=context, timeout=20).read()"
              ".decode())\n")
    result = w.user.run(["/usr/bin/python3", "-I", "-c", script, str(w.ca),
                         f"https://api.test:{w.hs}/urllib"], cwd=w.user.home,
                        env=w.user.env(HTTPS_PROXY=f"http://127.0.0.1:{w.port}"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "/urllib"


def test_a_listed_numeric_address_passes(world):
    w = world
    result = curl(w, "--proxy", f"http://127.0.0.1:{w.port}", f"https://127.0.0.2:{w.hs}/ip")
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ refusals
REFUSED = [
    ("not-listed.test:{hs}", "is not in ALLOWED_HOSTS — no entry matches it. Add it to "
     "ALLOWED_HOSTS in ~/.config/agent-sandbox/sandbox.conf"),
    ("www.example.org:{hs}", "*.example.org (test:8) allows the host on port 80, 443 only"),
    ("127.0.0.1:{lp}", "a numeric address passes only inside an address or CIDR entry"),
    ("10.1.2.3:443", "a numeric address passes only"),
    ("169.254.169.254:80", "a numeric address passes only"),
    ("[::ffff:127.0.0.1]:{lp}", "a numeric address passes only"),
    ("2130706433:{lp}", "is not a valid host name"),
    ("internal.test:{hs}", "resolves to 127.0.0.1, a loopback address"),
    ("meta.test:{hp}", "resolves to 169.254.169.254, a link-local (cloud metadata) address"),
    ("mixed.test:{hs}", "resolves to 10.0.0.1, a private address"),
]


def _fill(w, text):
    return text.format(hs=w.hs, hp=w.hp, lp=w.lp)


@pytest.mark.parametrize("target,reason", REFUSED)
def test_connect_refusals_answer_403_with_the_denial_text(world, target, reason):
    w = world
    target = _fill(w, target)
    before = len(audit_records(w.spec))
    answer = raw_request(w, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 "), answer
    assert body.decode().startswith("agent-sandbox: network: ")
    assert reason in body.decode()
    host, _, port = target.rpartition(":")
    host = host.strip("[]").lower()
    (record,) = records_since(w, before, "connect", host, int(port))
    assert (record["client"], record["decision"]) == ("connect", "refused")
    assert (record["bytes_out"], record["bytes_in"]) == (0, 0)
    assert reason in record["reason"]
    assert w.loopback.seen == []


@pytest.mark.parametrize("url", ["http://not-listed.test:{hp}/", "http://127.0.0.1:{lp}/",
                                 "http://169.254.169.254/latest/meta-data/",
                                 "http://internal.test:{hp}/"])
def test_curl_plain_http_refusal_shows_the_denial(world, url):
    w = world
    result = curl(w, "--proxy", f"http://127.0.0.1:{w.port}", "-w", "\n%{http_code}",
                  _fill(w, url))
    body, _, code = result.stdout.rpartition("\n")
    assert code == "403"
    assert body.startswith("agent-sandbox: network: ")
    assert w.loopback.seen == []


def test_a_refused_request_with_a_large_body_still_gets_the_denial(world):
    # The proxy answers before reading the body: closing the connection with
    # the body unread would reset it, and the client would lose the answer.
    w = world
    body = w.dir / "large-body"
    body.write_bytes(b"x" * (4 << 20))
    os.chown(body, w.user.uid, w.user.gid)
    for _ in range(3):
        result = curl(w, "--proxy", f"http://127.0.0.1:{w.port}", "--data-binary", f"@{body}",
                      "-H", "Expect:", "-w", "\n%{http_code}", f"http://not-listed.test:{w.hp}/")
        text, _, code = result.stdout.rpartition("\n")
        assert code == "403", result
        assert text.startswith("agent-sandbox: network: not-listed.test:")


@pytest.mark.parametrize("url", ["https://not-listed.test:{hs}/", "https://127.0.0.1:{lp}/",
                                 "https://internal.test:{hs}/"])
def test_curl_connect_and_socks_refusals_fail_the_client(world, url):
    w = world
    url = _fill(w, url)
    before = len(audit_records(w.spec))
    tunnel = curl(w, "--proxy", f"http://127.0.0.1:{w.port}", url)
    assert tunnel.returncode == 56 and "403" in tunnel.stderr, tunnel.stderr
    socks = curl(w, "--proxy", f"socks5h://127.0.0.1:{w.port}", url)
    assert socks.returncode == 97, socks.stderr       # "connection not allowed by ruleset"
    host, port = url.split("/")[2].rsplit(":", 1)
    for client in ("connect", "socks5"):
        (record,) = records_since(w, before, client, host, int(port))
        assert record["decision"] == "refused"
    assert w.loopback.seen == []


def test_socks_reply_code_and_unsupported_commands(world):
    w = world
    with socket.create_connection(("127.0.0.1", w.port), timeout=10) as sock:
        sock.sendall(b"\x05\x01\x00")
        assert sock.recv(2) == b"\x05\x00"
        sock.sendall(b"\x05\x01\x00\x01\x7f\x00\x00\x01" + w.lp.to_bytes(2, "big"))
        assert sock.recv(10)[:2] == b"\x05\x02"                # not allowed by ruleset
    with socket.create_connection(("127.0.0.1", w.port), timeout=10) as sock:
        sock.sendall(b"\x05\x01\x00" + b"\x05\x03\x00\x01\x7f\x00\x00\x02\x00\x35")   # UDP
        assert sock.recv(2) == b"\x05\x00"
        assert sock.recv(10)[:2] == b"\x05\x07"


def test_a_host_header_naming_another_host_is_refused(world):
    w = world
    w.http.seen.clear()
    answer = raw_request(w, f"GET http://www.test:{w.hp}/ HTTP/1.1\r\n"
                            f"Host: internal.test:{w.hp}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"does not name the requested host" in answer
    assert w.http.seen == []


# ------------------------------------------------------------------ brokering
def _broker_call(w, path, key, extra=()):
    return curl(w, "-H", f"x-api-key: {key}", *extra, "--data", "{}", "-w", "\n%{http_code}",
                f"http://127.0.0.1:{w.port}{path}")


def test_brokering_puts_the_real_key_in_only_on_the_broker_route(world):
    w = world
    w.https.seen.clear()
    before = len(audit_records(w.spec))
    result = _broker_call(w, "/broker/anthropic/v1/messages?beta=1", PLACEHOLDER,
                          ["-H", "Host: evil.test"])
    body, _, code = result.stdout.rpartition("\n")
    assert code == "200", result
    assert json.loads(body) == {"path": "/v1/messages?beta=1", "host": f"api.test:{w.hs}",
                                "key_ok": True, "server": "https"}
    (seen,) = w.https.seen
    assert seen["headers"]["x-api-key"] == REAL_KEY and seen["body"] == b"{}"
    assert REAL_KEY not in result.stdout
    (record,) = records_since(w, before, "broker", "api.test", w.hs)
    assert (record["client"], record["host"], record["decision"]) == (
        "broker", "api.test", "allowed")
    assert REAL_KEY not in json.dumps(audit_records(w.spec))
    # Through the proxy to the same API without the broker route: the
    # placeholder goes out unchanged.
    w.https.seen.clear()
    tunnel = curl(w, "--proxy", f"http://127.0.0.1:{w.port}", "-H", f"x-api-key: {PLACEHOLDER}",
                  f"https://api.test:{w.hs}/v1/messages")
    assert json.loads(tunnel.stdout)["key_ok"] is False
    assert w.https.seen[0]["headers"]["x-api-key"] == PLACEHOLDER


def test_the_broker_route_through_the_proxy_itself(world):
    # A client that sends even its base URL through HTTP_PROXY (a proxy agent
    # that ignores NO_PROXY) asks the proxy for http://127.0.0.1:<port>/broker/...
    w = world
    w.https.seen.clear()
    result = _broker_call(w, "/broker/anthropic/v1/models", PLACEHOLDER,
                          ["--proxy", f"http://127.0.0.1:{w.port}", "--noproxy", ""])
    body, _, code = result.stdout.rpartition("\n")
    assert code == "200", result
    assert json.loads(body)["key_ok"] is True
    assert w.https.seen[0]["headers"]["x-api-key"] == REAL_KEY


@pytest.mark.parametrize("path,key,code", [
    ("/broker/unknown/v1/messages", PLACEHOLDER, "404"),
    ("/broker/anthropic/v1/messages", "sk-ant-api03-some-other-key", "403"),
    ("/broker/anthropic/../../x", PLACEHOLDER, "400"),
    # Resolves to 127.0.0.1: the upstream the launcher chose cannot be used —
    # 502 with the reason, never a 403 that reads like a denial (issue 36).
    ("/broker/internal/v1/messages", PLACEHOLDER, "502"),
    ("/v1/messages", PLACEHOLDER, "400"),
])
def test_broker_route_refusals(world, path, key, code):
    w = world
    w.https.seen.clear()
    result = w.user.run(["curl", "-sS", "--path-as-is", "-H", f"x-api-key: {key}", "--data",
                         "{}", "-w", "\n%{http_code}", f"http://127.0.0.1:{w.port}{path}"],
                        cwd=w.user.home)
    body, _, status = result.stdout.rpartition("\n")
    assert status == code, result
    assert body.startswith("agent-sandbox: network: ")
    assert w.https.seen == [] and w.loopback.seen == []


def test_the_broker_route_for_another_host_is_a_plain_request_decided_by_the_rules(world):
    w = world
    answer = raw_request(w, b"POST http://not-listed.test/broker/anthropic/v1 HTTP/1.1\r\n"
                            b"Host: not-listed.test\r\nx-api-key: " + PLACEHOLDER.encode() +
                         b"\r\nContent-Length: 0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ") and b"not-listed.test:80 is not in" in answer


# ------------------------------------------------------------------ lifecycle
def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _gone_path(path: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def session_dir(user):
    path = Path(tempfile.mkdtemp(prefix="egress-life-"))
    os.chown(path, user.uid, user.gid)
    yield path
    shutil.rmtree(path)


def test_the_proxy_exits_when_stdin_closes_and_removes_its_socket(user, session_dir):
    spec_path, spec = write_spec(session_dir, ["pypi.org"], user=user)
    proxy = start_proxy(spec_path, user)
    info = os.stat(spec["socket"])
    assert oct(info.st_mode & 0o777) == "0o600" and info.st_uid == user.uid
    assert proxy.poll() is None
    assert stop_proxy(proxy) == 0
    assert not os.path.exists(spec["socket"])


def test_the_proxy_holding_the_keys_is_not_dumpable(world):
    # PR_SET_DUMPABLE 0: /proc/<pid> becomes root's, so the user's other
    # processes (the agent's) cannot ptrace it nor read its memory or environ.
    w = world
    assert os.stat(f"/proc/{w.proxy.pid}/environ").st_uid == 0
    for name in ("environ", "mem"):
        result = w.user.run(["cat", f"/proc/{w.proxy.pid}/{name}"], cwd=w.user.home)
        assert result.returncode != 0 and "Permission denied" in result.stderr
    # The same user's ordinary process, for comparison: readable.
    assert w.user.run(["cat", f"/proc/{w.relay.pid}/environ"], cwd=w.user.home).returncode == 0


def test_the_proxy_dies_with_its_parent(user, session_dir):
    # The proxy's stdin stays open (this test holds the write end): only
    # PR_SET_PDEATHSIG can end it when its parent is killed.
    spec_path, spec = write_spec(session_dir, ["pypi.org"], user=user)
    read_end, write_end = os.pipe()
    parent = subprocess.Popen(
        [PYTHON, "-I", "-c", "import subprocess, sys, time\n"
         "p = subprocess.Popen([sys.executable, '-I', '-m', 'egress', sys.argv[1]])\n"
         "print(p.pid, flush=True)\ntime.sleep(600)\n", str(spec_path)],
        stdin=read_end, stdout=subprocess.PIPE, cwd="/", user=user.uid, group=user.gid,
        extra_groups=[])
    os.close(read_end)
    try:
        lines = sorted([parent.stdout.readline(), parent.stdout.readline()])
        assert lines[1] == b"ready\n"      # the proxy's; the parent printed its pid
        pid = int(lines[0])
        assert _alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _gone(pid), "the proxy outlived its parent"
        assert _gone_path(spec["socket"]), "the proxy left its socket"
    finally:
        os.close(write_end)
        parent.kill()


def test_a_bad_spec_exits_125_with_one_line(user, session_dir):
    spec_path, _ = write_spec(session_dir, ["pypi.org", "10.0.0.1/8"], user=user)
    result = subprocess.run([PYTHON, "-I", "-m", "egress", str(spec_path)], input=b"",
                            capture_output=True, cwd="/", user=user.uid, group=user.gid,
                            extra_groups=[], timeout=30)
    assert result.returncode == 125 and result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agent-sandbox: ")
    assert "ALLOWED_HOSTS (test:2)" in lines[0] and "host bits set" in lines[0]


def test_a_hook_file_the_user_owns_is_ignored(world):
    # Same names, but the hook is not root's: the proxy started now cannot
    # resolve api.test (no DNS for it here) and refuses.
    w = world
    os.chown(w.hook, w.user.uid, w.user.gid)
    try:
        directory = Path(tempfile.mkdtemp(prefix="egress-hook-"))
        os.chown(directory, w.user.uid, w.user.gid)
        spec_path, spec = write_spec(directory, [f"api.test:{w.hs}"], user=w.user)
        proxy = start_proxy(spec_path, w.user)
        port = free_port()
        relay = start_relay(port, spec["socket"], w.user)
        try:
            answer = socket.create_connection(("127.0.0.1", port), timeout=10)
            answer.sendall(f"CONNECT api.test:{w.hs} HTTP/1.1\r\n\r\n".encode())
            reply = answer.recv(4096)
            answer.close()
            assert reply.startswith(b"HTTP/1.1 403 ") and b"did not resolve" in reply
        finally:
            relay.kill()
            relay.wait()
            stop_proxy(proxy)
            shutil.rmtree(directory)
    finally:
        os.chown(w.hook, 0, 0)
