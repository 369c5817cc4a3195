"""What the egress proxy's tests and benchmark share: a test CA made with
the openssl command, HTTP(S) servers on 127.0.0.2 that record what reached
them, the installed proxy started as the contract says (`python3 -I -m
egress SPEC`, a pipe on stdin, `ready` on stdout) and the installed relay
(`python3 -I netrelay.py PORT SOCKET`), both as a given user."""
from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PREFIX = os.environ.get("AGENT_SANDBOX_TEST_PREFIX", "/opt/agent-sandbox")
PYTHON = f"{PREFIX}/venv/bin/python"
HOOK_NAME = "egress-test-hosts.json"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def installed_relay() -> str:
    """The installed copy of agent_sandbox/helper/netrelay.py."""
    return subprocess.run([PYTHON, "-I", "-c", "from agent_sandbox.paths import helper_path; "
                           "print(helper_path('netrelay'))"], capture_output=True, text=True,
                          check=True).stdout.strip()


def make_ca(directory: Path, names=("api.test", "www.test"), ips=("127.0.0.2",)):
    """(CA certificate, server certificate, server key) paths; P-256 keys."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=agent-sandbox test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={names[0]}")
    alt = ",".join([f"DNS:{n}" for n in names] + [f"IP:{i}" for i in ips])
    (directory / "ext.cnf").write_text(
        f"subjectAltName={alt}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "keyUsage=digitalSignature\nauthorityKeyIdentifier=keyid\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    for name in ("ca.pem", "server.pem"):
        (directory / name).chmod(0o644)
    return directory / "ca.pem", directory / "server.pem", directory / "server.key"


class Recorder(BaseHTTPRequestHandler):
    """Answers every request with JSON naming what it saw (path, Host, and
    whether the expected API key arrived — never the key itself); records
    the request (method, path, headers, body) for the test."""
    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({"method": self.command, "path": self.path,
                                 "headers": dict(self.headers.items()), "body": body})
        key = self.server.expected_key
        reply = json.dumps({"path": self.path, "host": self.headers.get("Host"),
                            "key_ok": bool(key) and self.headers.get("x-api-key") == key,
                            "server": self.server.label}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args):
        pass


def serve(host: str, label: str, tls: tuple | None = None, expected_key: str = ""):
    """A threaded Recorder server on host:<free port>; `tls` = (cert, key)."""
    server = ThreadingHTTPServer((host, 0), Recorder)
    server.daemon_threads = True
    server.seen, server.label, server.expected_key = [], label, expected_key
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*map(str, tls))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def as_user(user) -> dict:
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": []}


def write_spec(directory: Path, rules, brokers=None, session="test-session", user=None):
    spec = {"socket": str(directory / "proxy.sock"),
            "rules": [{"entry": e, "origin": f"test:{i}"} for i, e in enumerate(rules, 1)],
            "audit": str(directory / "network.log"), "brokers": brokers or {},
            "session": session}
    path = directory / "spec.json"
    path.write_text(json.dumps(spec))
    path.chmod(0o600)
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path, spec


def start_proxy(spec_path: Path, user=None, timeout: float = 10) -> subprocess.Popen:
    """The installed proxy; returns once it printed `ready` (else raises)."""
    process = subprocess.Popen([PYTHON, "-I", "-m", "egress", str(spec_path)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd="/", **as_user(user))
    line = process.stdout.readline()
    if line != b"ready\n":
        process.kill()
        raise RuntimeError(f"the proxy did not start: {line!r} {process.stderr.read()!r}")
    return process


def stop_proxy(process: subprocess.Popen) -> int:
    process.stdin.close()
    return process.wait(10)


def start_relay(port: int, socket_path, user=None, timeout: float = 10) -> subprocess.Popen:
    process = subprocess.Popen(["/usr/bin/python3", "-I", installed_relay(), str(port),
                                str(socket_path)], stdin=subprocess.DEVNULL, cwd="/",
                               **as_user(user))
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"the relay did not listen on 127.0.0.1:{port}")
            time.sleep(0.02)


def audit_records(spec: dict) -> list[dict]:
    path = Path(spec["audit"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
