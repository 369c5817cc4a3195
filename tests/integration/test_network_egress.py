"""NETWORK_MODE=allowlist end to end (issue 16), as the unprivileged test user
inside real bwrap and firejail sandboxes (and landlock's, held by its
supervisor): the launcher starts the egress proxy, the
helper starts the relay inside, and clients that honour the proxy variables
reach allowed hosts — curl, `pip download` from a local index, `git clone
https://…` of a local dumb-HTTP repository, Python urllib — while a host not
listed, numeric private addresses, 169.254.169.254, a name resolving to a
private address, DNS, raw TCP and UDP all fail, with the denial text at the
client and every decision in the audit log. Jobs keep their own mode; proxy
and relay leave no process behind in any exit path; a brokered API key
reaches the mock API while the sandbox only ever holds the placeholder.

Nothing leaves this machine: servers on 127.0.0.2 (allowed by an explicit
127.0.0.2/32 entry) with a test CA, test names mapped by the root-owned
resolution hook in the admin directory (docs/network.md), refusals tested on
127.0.0.1 and other internal addresses.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import uuid
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.install import ADMIN_DIR, INSTALLED
from tests.support.waiting import until, wrote
from tests.support.egresskit import HOOK_NAME, PYTHON, make_ca, serve

BACKENDS = ("bwrap", "firejail")
REAL_KEY = "sk-ant-api03-REALKEYMARKER-" + uuid.uuid4().hex
MARKER = "REALKEYMARKER"     # a piece of the real key, searched for inside


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve_directory(root: Path, host: str, tls=None) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), partial(Quiet, directory=str(root)))
    server.daemon_threads = True
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*map(str, tls))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def make_index(www: Path) -> None:
    """A PEP 503 simple index with one pure-Python wheel, and a file."""
    (www / "hello.txt").write_text("hello from pkg.test\n")
    wheel = www / "packages" / "tinypkg-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tinypkg/__init__.py", "VALUE = 1\n")
        archive.writestr("tinypkg-1.0.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        archive.writestr("tinypkg-1.0.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n")
        archive.writestr("tinypkg-1.0.dist-info/RECORD", "")
    (www / "simple" / "tinypkg").mkdir(parents=True)
    (www / "simple" / "tinypkg" / "index.html").write_text(
        '<html><body><a href="../../packages/tinypkg-1.0-py3-none-any.whl">'
        "tinypkg-1.0-py3-none-any.whl</a></body></html>\n")


def make_repo(www: Path) -> None:
    """A bare repository served by dumb HTTP (update-server-info)."""
    work = www.parent / "repo-work"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(www.parent), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    (work / "README").write_text("cloned through the egress proxy\n")
    subprocess.run(["git", "-C", str(work), "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "first"], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(www / "repo.git")],
                   check=True, env=env)
    subprocess.run(["git", "-C", str(www / "repo.git"), "update-server-info"], check=True,
                   env=env)


class Net:
    """The servers, CA, hook and the project the sandboxes run in."""


@pytest.fixture(scope="module")
def net(user):
    n = Net()
    n.user = user
    n.project = user.project / f"net{uuid.uuid4().hex[:8]}"
    n.project.mkdir()
    os.chown(n.project, user.uid, user.gid)
    n.fixture = n.project / "fixture"       # readable inside: the CA, the probe
    n.fixture.mkdir()
    n.ca, cert, key = make_ca(n.fixture, names=("pkg.test", "git.test", "api.test",
                                                "internal.test"))
    www = n.fixture / "www"
    www.mkdir()
    make_index(www)
    make_repo(www)
    n.https = serve_directory(www, "127.0.0.2", tls=(cert, key))
    n.http = serve_directory(www, "127.0.0.2")
    n.api = serve("127.0.0.2", "api", tls=(cert, key), expected_key=REAL_KEY)
    n.loopback = serve("127.0.0.1", "loopback")          # must never be reached
    n.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    n.udp.bind(("127.0.0.2", 0))
    n.udp.setblocking(False)
    n.hs, n.hp, n.ap, n.lp = (s.server_address[1]
                              for s in (n.https, n.http, n.api, n.loopback))
    n.up = n.udp.getsockname()[1]
    created = not ADMIN_DIR.exists()
    ADMIN_DIR.mkdir(mode=0o755, exist_ok=True)
    n.hook = ADMIN_DIR / HOOK_NAME
    n.hook.write_text(json.dumps({"hosts": {
        "pkg.test": ["127.0.0.2"], "git.test": ["127.0.0.2"], "api.test": ["127.0.0.2"],
        "internal.test": ["127.0.0.1"]}, "ca_file": str(n.ca)}))
    n.hook.chmod(0o644)
    os.chown(n.hook, 0, 0)
    n.config = ("NETWORK_MODE=allowlist\n"
                f"ALLOWED_HOSTS+=(127.0.0.2/32:{n.hs} 127.0.0.2/32:{n.ap} pkg.test:{n.hs} "
                f"git.test:{n.hs} "
                f"api.test:{n.ap} internal.test:{n.hs} 127.0.0.2:{n.hp})\n")
    for path in n.fixture.rglob("*"):
        path.chmod(path.stat().st_mode | 0o044 | (0o011 if path.is_dir() else 0))
    yield n
    for server in (n.https, n.http, n.api, n.loopback):
        server.shutdown()
    n.udp.close()
    n.hook.unlink()
    if created:
        ADMIN_DIR.rmdir()
    user.set_config("")
    shutil.rmtree(n.project, ignore_errors=True)


def running(user) -> dict[str, list[str]]:
    """The user's egress proxies, relays, sandboxed `sleep 3600` commands and
    sandboxes (bwrap, firejail) still running, by kind."""
    found: dict[str, list[str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid != user.uid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{pid}/comm") as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        if comm in ("bwrap", "firejail") and "--relay" in cmdline:
            kind = "sandbox"
        elif "-m egress" in cmdline:
            kind = "proxy"
        elif comm.startswith("python") and "--relay" in cmdline or "netrelay" in cmdline:
            kind = "relay"
        elif cmdline.strip() == "sleep 3600":
            kind = "command"
        else:
            continue
        found.setdefault(kind, []).append(f"{pid}: {cmdline}")
    return found


def leftovers(user) -> list[str]:
    return [line for lines in running(user).values() for line in lines]


wait_for = partial(until, timeout=15.0)


def network_records(user, session_prefix="") -> list[dict]:
    directory = user.home / ".local/state/agent-sandbox/chaperon"
    records = []
    for path in directory.glob("*_network.log"):
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                if str(record.get("session", "")).startswith(session_prefix):
                    records.append(record)
    return records


PROBE = r'''
import json, os, socket, ssl, sys, urllib.error, urllib.request
ca, hs, hp, lp, up = sys.argv[1], *map(int, sys.argv[2:6])
out = {}
context = ssl.create_default_context(cafile=ca)

def fetch(url, name):
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as reply:
            out[name] = ["ok", reply.read().decode()]
    except urllib.error.HTTPError as exc:
        out[name] = ["http", exc.code, exc.read().decode(errors="replace")]
    except Exception as exc:
        out[name] = ["error", repr(exc)]

fetch(f"https://pkg.test:{hs}/hello.txt", "urllib_allowed")
fetch("http://notlisted.test/", "http_not_listed")
fetch("http://169.254.169.254/latest/meta-data/", "http_metadata")
fetch(f"http://127.0.0.2:{hp}/hello.txt", "http_numeric_listed")

def connect(target):
    """CONNECT through the relay by hand: the proxy's whole answer."""
    s = socket.create_connection(("127.0.0.1", int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])))
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if data.startswith(b"HTTP/1.1 200"):
            break
    s.close()
    return data.decode(errors="replace")

for name, target in [("connect_not_listed", "notlisted.test:443"),
                     ("connect_private_ip", "10.0.0.1:443"),
                     ("connect_loopback", f"127.0.0.1:{lp}"),
                     ("connect_metadata", "169.254.169.254:443"),
                     ("connect_private_name", f"internal.test:{hs}"),
                     ("connect_listed", f"pkg.test:{hs}")]:
    try:
        out[name] = connect(target)
    except Exception as exc:
        out[name] = "error " + repr(exc)

try:
    out["dns"] = ["resolved", socket.getaddrinfo("pypi.org", 443)[0][4][0]]
except OSError as exc:
    out["dns"] = ["error", repr(exc)]
for name, target in [("tcp_outside", ("192.0.2.1", 443)), ("tcp_host_server", ("127.0.0.2", hs)),
                     ("tcp_loopback_server", ("127.0.0.1", lp))]:
    try:
        socket.create_connection(target, timeout=3).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = "error " + repr(exc)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for name, target in [("udp_outside", ("192.0.2.1", 53)), ("udp_host", ("127.0.0.2", up))]:
    try:
        udp.sendto(b"exfiltrate", target)
        out[name] = "sent"
    except OSError as exc:
        out[name] = "error " + repr(exc)
print(json.dumps(out))
'''

CLIENTS = r'''
set -u
curl -sS --cacert "$1" "https://pkg.test:$2/hello.txt" && echo curl=ok
"$3" -m pip download --quiet --no-deps --disable-pip-version-check --no-cache-dir \
    --index-url "https://pkg.test:$2/simple/" --cert "$1" -d dl tinypkg && ls dl && echo pip=ok
GIT_SSL_CAINFO="$1" git clone -q "https://git.test:$2/repo.git" cloned && cat cloned/README \
    && echo git=ok
curl -sS "https://notlisted.test/" >/dev/null 2>&1 || echo curl_refused=$?
'''


@pytest.fixture(scope="module")
def runs(net):
    """One sandbox per backend runs the clients and the probe (cost: ~2 s each)."""
    user = net.user
    user.set_config(net.config)
    (net.fixture / "probe.py").write_text(PROBE)
    (net.fixture / "clients.sh").write_text(CLIENTS)
    sessions = user.home / ".local/state/agent-sandbox-run"
    before = set(sessions.glob("egress-*"))
    results = {}
    for backend in BACKENDS:
        work = net.project / f"work-{backend}"
        work.mkdir()
        os.chown(work, user.uid, user.gid)
        inside = ("--backend", backend, "--project-dir", str(net.project))
        clients = user.sandbox("/bin/sh", str(net.fixture / "clients.sh"), str(net.ca),
                               str(net.hs), PYTHON, options=inside, cwd=work, timeout=120)
        probe = user.sandbox("/usr/bin/python3", str(net.fixture / "probe.py"), str(net.ca),
                             str(net.hs), str(net.hp), str(net.lp), str(net.up),
                             options=inside, cwd=work, timeout=120)
        results[backend] = (clients, probe, leftovers(user),
                            set(sessions.glob("egress-*")) - before)
    return results


@pytest.mark.parametrize("backend", BACKENDS)
def test_curl_pip_git_reach_allowed_hosts_through_the_proxy(runs, backend):
    clients = runs[backend][0]
    assert clients.returncode == 0, clients.stderr
    out = clients.stdout
    assert "hello from pkg.test\ncurl=ok" in out
    assert "tinypkg-1.0-py3-none-any.whl\npip=ok" in out
    assert "cloned through the egress proxy\ngit=ok" in out
    assert "curl_refused=" in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_urllib_reaches_allowed_hosts(runs, backend):
    result = json.loads(runs[backend][1].stdout)
    assert result["urllib_allowed"] == ["ok", "hello from pkg.test\n"]
    assert result["http_numeric_listed"] == ["ok", "hello from pkg.test\n"]
    assert result["connect_listed"].startswith("HTTP/1.1 200")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,host", [
    ("connect_not_listed", "notlisted.test:443"), ("connect_private_ip", "10.0.0.1:443"),
    ("connect_loopback", "127.0.0.1:"), ("connect_metadata", "169.254.169.254:443"),
    ("connect_private_name", "internal.test:")])
def test_refused_destinations_answer_403_with_the_denial_text(runs, net, backend, name, host):
    answer = json.loads(runs[backend][1].stdout)[name]
    assert answer.startswith("HTTP/1.1 403"), answer
    assert f"agent-sandbox: network: {host}" in answer
    assert "ALLOWED_HOSTS" in answer
    if name == "connect_private_name":
        assert "127.0.0.1" in answer          # the address it resolved to, and how to allow it
    assert net.loopback.seen == []            # nothing ever reached 127.0.0.1


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_http_refusals_carry_the_denial_text_in_the_body(runs, backend):
    result = json.loads(runs[backend][1].stdout)
    for name, host in (("http_not_listed", "notlisted.test:80"),
                       ("http_metadata", "169.254.169.254:80")):
        kind, code, body = result[name]
        assert (kind, code) == ("http", 403)
        assert body.startswith(f"agent-sandbox: network: {host} is not in ALLOWED_HOSTS")
        assert "Add it to ALLOWED_HOSTS in ~/.config/agent-sandbox/sandbox.conf" in body


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_dns_no_raw_tcp_no_udp_out(runs, net, backend):
    result = json.loads(runs[backend][1].stdout)
    assert result["dns"][0] == "error"
    for name in ("tcp_outside", "tcp_host_server", "tcp_loopback_server"):
        assert result[name].startswith("error"), (name, result[name])
    assert result["udp_outside"].startswith("error")
    with pytest.raises(BlockingIOError):
        net.udp.recv(100)                     # the datagram to 127.0.0.2 never arrived


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_audit_log_records_allowed_and_refused_connections(runs, net, backend):
    records = network_records(net.user)
    assert {"event", "session", "client", "host", "port", "decision", "rule", "reason",
            "bytes_out", "bytes_in", "duration_ms"} <= set(records[0])
    allowed = [r for r in records if r["decision"] == "allowed" and r["host"] == "pkg.test"]
    refused = [r for r in records if r["decision"] == "refused"
               and r["host"] == "notlisted.test"]
    assert allowed and refused
    assert any(r["bytes_in"] > 0 for r in allowed)
    assert all(r["bytes_in"] == r["bytes_out"] == 0 for r in refused)
    assert any("sandbox.conf:2" in (r["rule"] or "") for r in allowed)
    shown = net.user.run([INSTALLED, "logs", "--network"], cwd=net.project)
    assert shown.returncode == 0, shown.stderr
    assert f"allowed pkg.test:{net.hs} by pkg.test:{net.hs}" in shown.stdout
    assert "refused notlisted.test:443" in shown.stdout
    assert "request" not in shown.stdout      # only the network records


@pytest.mark.parametrize("backend", BACKENDS)
def test_proxy_and_relay_leave_nothing_behind_after_a_normal_exit(runs, net, backend):
    assert runs[backend][2] == []
    assert runs[backend][3] == set()          # the proxy's directory went too


@pytest.mark.parametrize("signum,when", [(signal.SIGKILL, "running"),
                                         (signal.SIGTERM, "running"),
                                         (signal.SIGKILL, "during bwrap's setup")])
def test_proxy_and_relay_die_with_a_killed_launcher(net, signum, when):
    """Also when the launcher dies while bwrap still builds the sandbox (its
    inner process binds itself to the outer one only right before exec)."""
    user = net.user
    user.set_config(net.config)
    launcher = subprocess.Popen([INSTALLED, "run", "--backend", "bwrap", "--", "sleep", "3600"],
                                user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                                cwd=str(net.project), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if when == "running":
            wait_for(lambda: {"proxy", "relay", "command"} <= set(running(user)),
                     what="proxy, relay and command running")
        else:
            wait_for(lambda: len(running(user).get("sandbox", ())) >= 2,
                     what="bwrap's inner process")
        launcher.send_signal(signum)
        launcher.wait(15)
        wait_for(lambda: leftovers(user) == [], what="every process gone")
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_a_job_keeps_its_own_network_mode(net):
    """`run --job` (what the chaperon's job wrapper starts) takes
    JOB_NETWORK_MODE: open reaches the cluster network directly, allowlist not."""
    user = net.user
    connect = ("import socket; socket.create_connection(('127.0.0.2', %d), timeout=3); "
               "print('direct=ok')" % net.hp)
    user.set_config(net.config + "JOB_NETWORK_MODE=open\n")
    job = user.run([INSTALLED, "run", "--job", "--", "/usr/bin/python3", "-c", connect],
                   cwd=net.project)
    assert job.returncode == 0 and "direct=ok" in job.stdout, job.stderr
    session = user.sandbox("/usr/bin/python3", "-c", connect, cwd=net.project)
    assert session.returncode != 0 and "direct=ok" not in session.stdout
    user.set_config(net.config + "JOB_NETWORK_MODE=allowlist\n")
    job = user.run([INSTALLED, "run", "--job", "--", "/usr/bin/python3", "-c", connect],
                   cwd=net.project)
    assert job.returncode != 0 and "direct=ok" not in job.stdout


UDP_PROBE = ("import socket\n"
             "try:\n"
             "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 53))\n"
             "    print('udp-sent')\n"
             "except OSError as exc:\n"
             "    print('udp-refused', exc.errno)\n")


def test_landlock_holds_allowlist_with_its_supervisor(net):
    """Issue 31: the supervisor judges every connect() and only TCP inet
    sockets can be made, so allowlist holds on landlock (before, it refused
    unless the admin accepted a partial form)."""
    net.user.set_config(net.config)
    report = net.user.sandbox("true", options=("--backend", "landlock", "--dry-run"),
                              cwd=net.project)
    assert re.search(r"^  yes +net\.egress_filtered", report.stdout, re.M), report.stdout
    result = net.user.sandbox("/bin/sh", "-c", f'curl -sS --cacert {net.ca} '
                              f'"https://pkg.test:{net.hs}/hello.txt"; '
                              f'curl -sS --noproxy "*" "https://127.0.0.2:{net.hs}/" '
                              '>/dev/null 2>&1 || echo direct-refused; '
                              f'python3 -c "{UDP_PROBE}"',
                              options=("--backend", "landlock"), cwd=net.project)
    assert result.returncode == 0, result.stderr
    assert "hello from pkg.test" in result.stdout
    assert "direct-refused" in result.stdout
    assert "udp-refused 13" in result.stdout, result.stdout
    assert leftovers(net.user) == []


BROKER_PROBE = r'''
import json, os, stat, sys, urllib.request
marker = sys.argv[1]
request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
                                 data=b"{}", headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"],
                                                      "content-type": "application/json"})
with urllib.request.urlopen(request, timeout=10) as reply:
    answer = json.loads(reply.read())
found = [k for k, v in os.environ.items() if marker in v]
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            if marker.encode() in handle.read():
                found.append(f"/proc/{pid}/environ")
    except OSError:
        pass
for top in (os.environ["HOME"], "/tmp", "/run", "/var/tmp", "/dev/shm", os.getcwd(), "/etc"):
    for root, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue            # FIFOs (the chaperon's), sockets, devices
                with open(path, "rb") as handle:
                    if marker.encode() in handle.read(1 << 22):
                        found.append(path)
            except OSError:
                pass
print(json.dumps({"answer": answer, "found": found,
                  "key": os.environ["ANTHROPIC_API_KEY"],
                  "base": os.environ["ANTHROPIC_BASE_URL"]}))
'''


def mock_agent(net) -> None:
    """A profile that brokers Anthropic's key for /usr/bin/python3 and the
    probe script it runs."""
    net.user.write(".config/agent-sandbox/agents/mockagent.conf",
                   "AGENT_COMMAND=(/usr/bin/python3)\nNETWORK_MODE=allowlist\n"
                   "AGENT_BROKERS=(anthropic)\n")
    net.user.set_config(net.config + "ENABLED_AGENTS+=(mockagent)\n")
    (net.fixture / "broker_probe.py").write_text(BROKER_PROBE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_brokered_key_reaches_the_api_and_never_the_sandbox(net, backend):
    user = net.user
    mock_agent(net)
    before = len(net.api.seen)
    env = user.env(ANTHROPIC_API_KEY=REAL_KEY, ANTHROPIC_BASE_URL=f"https://api.test:{net.ap}")
    result = user.run([INSTALLED, "--backend", backend, "mockagent",
                       str(net.fixture / "broker_probe.py"), MARKER], env=env, cwd=net.project)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["answer"]["key_ok"] is True              # the mock API got the real key
    assert data["found"] == []                           # nowhere inside: env, /proc, files
    assert data["key"].startswith("sk-ant-api03-") and MARKER not in data["key"]
    assert data["base"].endswith("/broker/anthropic")
    assert net.api.seen[before]["headers"]["x-api-key"] == REAL_KEY
    assert leftovers(user) == []
    user.set_config("")


def test_refused_destinations_are_named_at_the_end_of_the_session(net):
    """Issue 36 item 5: the client shows only "403"; the session's end names
    each refused destination once (count, the line to paste), the agents'
    telemetry on one line of its own; `logs --denials` groups the repeats,
    hides the telemetry unless --telemetry, and takes --since/--last."""
    user = net.user
    user.set_config(net.config)
    script = ("for i in 1 2 3; do curl -s -o /dev/null https://refused-here.test/; done; "
              f"curl -s -o /dev/null http://127.0.0.2:{net.lp}/; "
              "curl -s -o /dev/null https://statsig.anthropic.com/v1/initialize; true")
    result = user.run([INSTALLED, "run", "--", "/bin/sh", "-c", script],
                      env=user.env(SANDBOX_QUIET=None), cwd=net.project)
    assert result.returncode == 0, result.stderr
    said = [l for l in result.stderr.splitlines() if "network:" in l]
    assert said[0] == ("agent-sandbox: network: refused refused-here.test:443 (3×) — to "
                       "allow it, add `ALLOWED_HOSTS+=(refused-here.test)` to "
                       "~/.config/agent-sandbox/sandbox.conf"), result.stderr
    assert f"`ALLOWED_HOSTS+=(127.0.0.2:{net.lp})`" in said[1]
    assert "1 connection(s) of the agent's background telemetry refused" in said[2]
    session = re.search(r"--session (\w+)", result.stderr).group(1)
    shown = user.run([INSTALLED, "logs", "--denials", "--session", session], cwd=net.project)
    lines = shown.stdout.splitlines()
    assert lines[0] == "Network (the egress proxy):", shown.stdout
    assert len([l for l in lines if "refused-here.test" in l]) == 1
    assert "(×3, first " in shown.stdout and "statsig" not in shown.stdout
    assert "1 refused connection(s) of the agents' known background telemetry" in lines[-1]
    everything = user.run([INSTALLED, "logs", "--denials", "--telemetry", "--session",
                           session], cwd=net.project)
    assert "statsig.anthropic.com" in everything.stdout
    newest = user.run([INSTALLED, "logs", "--network", "--last", "1", "--since", "10m",
                       "--session", session], cwd=net.project)
    assert newest.stdout.count("\n") == 1 and "statsig" in newest.stdout, newest
    later = user.run([INSTALLED, "logs", "--since", "2099-01-01", "--session", session],
                     cwd=net.project)
    assert later.stdout == "" and "no records" in later.stderr
    wrong = user.run([INSTALLED, "logs", "--since", "yesterday"], cwd=net.project)
    assert wrong.returncode == 2 and "neither a duration" in wrong.stderr, wrong.stderr
    user.set_config("")


def test_a_listed_http_gateway_on_loopback_is_the_brokers_upstream(net):
    """Issue 36 item 2: ANTHROPIC_BASE_URL=http://127.0.0.1:PORT (LiteLLM, an
    ssh tunnel) listed in ALLOWED_HOSTS is where the broker sends the
    agent's requests, the real key added outside; loopback is then not in
    NO_PROXY (inside, loopback is the sandbox's own). Unlisted, the launch
    says at once that and why it is not used, with the line to add."""
    user = net.user
    mock_agent(net)
    gateway = serve("127.0.0.1", "gateway", expected_key=REAL_KEY)
    port = gateway.server_address[1]
    try:
        env = user.env(ANTHROPIC_API_KEY=REAL_KEY, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}")
        user.set_config(net.config + f"ENABLED_AGENTS+=(mockagent)\n"
                        f"ALLOWED_HOSTS+=(127.0.0.1:{port})\n")
        result = user.run([INSTALLED, "mockagent", str(net.fixture / "broker_probe.py"),
                           MARKER], env=env, cwd=net.project)
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["answer"]["key_ok"] is True and data["answer"]["server"] == "gateway"
        assert data["found"] == [] and MARKER not in data["key"]     # never inside
        assert gateway.seen[-1]["headers"]["x-api-key"] == REAL_KEY
        assert gateway.seen[-1]["path"] == "/v1/messages"
        bypass = user.run([INSTALLED, "mockagent", "-c",
                           "import os; print(repr(os.environ['NO_PROXY']))"],
                          env=env, cwd=net.project)
        assert bypass.stdout.strip() == "''", bypass
        # Not listed: not used, said at launch (the command still runs).
        user.set_config(net.config + "ENABLED_AGENTS+=(mockagent)\n")
        unlisted = user.run([INSTALLED, "mockagent", "-c", "pass"], env=env, cwd=net.project)
        assert unlisted.returncode == 0, unlisted.stderr
        assert f"ANTHROPIC_BASE_URL=http://127.0.0.1:{port} is not used" in unlisted.stderr
        assert f"`ALLOWED_HOSTS+=(127.0.0.1:{port})`" in unlisted.stderr
        assert len(gateway.seen) == 1
    finally:
        gateway.shutdown()
        user.set_config("")


@pytest.mark.parametrize("job_mode,expected", [("open", "direct=ok"), ("allowlist", "direct=no")])
def test_a_batch_job_from_an_allowlist_session_runs_in_the_job_mode(net, slurm_cluster,
                                                                     job_mode, expected):
    """The real chaperon and Slurm: a job submitted from inside an allowlist
    sandbox runs with JOB_NETWORK_MODE on the compute node (this host)."""
    user = net.user
    user.set_config(net.config + f"JOB_NETWORK_MODE={job_mode}\n")
    job = net.project / f"job-{job_mode}.sh"
    job.write_text("#!/bin/bash\n/usr/bin/python3 -c \"import socket; socket.create_connection("
                   f"('127.0.0.2', {net.hp}), timeout=3)\" 2>/dev/null && echo direct=ok "
                   "|| echo direct=no\n")
    job.chmod(0o755)
    os.chown(job, user.uid, user.gid)
    result = user.sandbox("sbatch", "--wait", "--parsable", job.name, cwd=net.project,
                          timeout=120)
    assert result.returncode == 0, result.stderr
    output = net.project / f"slurm-{result.stdout.strip()}.out"
    text = wait_for(lambda: output.exists() and output.read_text().strip(),
                    timeout=60, what="the job's output")
    assert text == expected


CODEX_PROBE = r'''#!/usr/bin/env python3
import json, os, sys, urllib.request
# The profile's own option first (the real codex's -c sandbox_mode=…), then
# what the launcher put after the profile's command.
assert sys.argv[1:3] == ["-c", "sandbox_mode=x"], sys.argv
option, value = sys.argv[3:5]
assert option == "-c" and value.startswith("openai_base_url="), sys.argv
request = urllib.request.Request(value.split("=", 1)[1] + "/responses", data=b"{}",
                                 headers={"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
with urllib.request.urlopen(request, timeout=10) as reply:
    answer = json.loads(reply.read())
print(json.dumps({"path": answer["path"], "key": os.environ["OPENAI_API_KEY"],
                  "rest": sys.argv[5:]}))
'''


def test_codex_is_brokered_through_its_base_url_option(net):
    """Codex takes its base URL as `-c openai_base_url=…`: the launcher puts
    the option right after the profile's command, the key stays outside. The
    probe is a `#!/usr/bin/env python3` script with an option of its own in
    the profile, as the real codex (`#!/usr/bin/env node`, `-c
    sandbox_mode=…`): resolved, the command is longer than the profile's,
    and the option once went between the interpreter and its script."""
    user = net.user
    # Outside the project (a script the session can write is refused).
    probe = user.write(".local/share/mockcodex/codex_probe.py", CODEX_PROBE, mode=0o755)
    user.write(".config/agent-sandbox/agents/mockcodex.conf",
               f"AGENT_COMMAND=({probe} -c sandbox_mode=x)\n"
               "NETWORK_MODE=allowlist\nAGENT_BROKERS=(openai)\n")
    user.set_config(net.config + "ENABLED_AGENTS+=(mockcodex)\n")
    before = len(net.api.seen)
    real = "sk-proj-" + MARKER + uuid.uuid4().hex
    # The mock API is the upstream, as a gateway set outside would be.
    env = user.env(OPENAI_API_KEY=real, OPENAI_BASE_URL=f"https://api.test:{net.ap}/v1")
    result = user.run([INSTALLED, "--backend", "bwrap", "mockcodex", "exec", "hi"], env=env,
                      cwd=net.project)
    user.set_config("")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["rest"] == ["exec", "hi"]
    assert MARKER not in data["key"] and data["key"].startswith("sk-proj-agentsandbox")
    assert net.api.seen[before]["headers"]["authorization"] == f"Bearer {real}"
    assert data["path"] == "/v1/responses"


@pytest.mark.parametrize("job_mode", ["open", "allowlist"])
def test_a_job_does_not_inherit_the_sessions_relay(net, job_mode):
    """What Slurm runs for a job submitted from an allowlist session: `run
    --job` starting jobstart.py with the session's environment staged. An
    open job reaches the host directly (the session's proxy variables are not
    restored: no relay there), an allowlist job through its own proxy."""
    user = net.user
    user.set_config(net.config + f"JOB_NETWORK_MODE={job_mode}\n")
    jobstart = subprocess.run([PYTHON, "-I", "-c", "from agent_sandbox.paths import helper_path; "
                               "print(helper_path('jobstart'))"], capture_output=True, text=True,
                              check=True).stdout.strip()
    probe = ("import os, urllib.request; print(os.environ.get('HTTP_PROXY', 'no proxy')); "
             f"print(urllib.request.urlopen('http://127.0.0.2:{net.hp}/hello.txt', "
             "timeout=5).read().decode().strip())")
    session = {"HTTP_PROXY": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128",
               "NO_PROXY": "localhost,127.0.0.1", "AGENT_SANDBOX_EGRESS": "/run/x.sock",
               "MY_VAR": "kept"}
    spec = net.project / f"spec-{job_mode}.json"
    spec.write_text(json.dumps({"argv": ["/usr/bin/python3", "-c", probe],
                                "workdir": str(net.project), "env": session}))
    result = user.run([INSTALLED, "run", "--job", "--", "/usr/bin/python3", "-IS", jobstart,
                       str(spec)], cwd=net.project)
    user.set_config("")
    assert result.returncode == 0, result.stderr
    proxy, fetched = result.stdout.splitlines()
    assert fetched == "hello from pkg.test"
    assert proxy == ("no proxy" if job_mode == "open" else "http://127.0.0.1:3128")


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_proxy_that_cannot_start_stops_the_session_with_its_cause(net, backend):
    """The sandbox starts beside the proxy (issue 19: the proxy's start is off
    the critical path; its socket is bound by the launcher): a proxy that
    never says `ready` ends the session, the command is stopped before it
    could finish, and the refusal names the cause — never a session that
    silently runs on."""
    user = net.user
    user.set_config(net.config)
    good = net.hook.read_text()
    net.hook.write_text(json.dumps({"hosts": 5}))       # the proxy fails on it at start
    marker = net.project / "finished"
    try:
        result = user.sandbox("/bin/sh", "-c", f"sleep 30; touch {marker}",
                              options=("--backend", backend), cwd=net.project, timeout=120)
        assert result.returncode == 125, (result.returncode, result.stderr)
        assert "the egress proxy did not start" in result.stderr, result.stderr
        assert not marker.exists(), "the command ran on after its proxy failed"
        wait_for(lambda: leftovers(user) == [], what="every process gone")
    finally:
        net.hook.write_text(good)


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_command_that_ends_before_its_proxy_is_ready_is_not_held_up(net, backend):
    """A short command (`claude --version`) ends before the proxy has
    finished starting: its exit code stands, the launcher does not wait for
    the rest of the proxy's start, and the proxy it no longer needs is gone
    when the launcher returns (issue 19: not delaying the exit)."""
    user = net.user
    user.set_config(net.config)
    for code in (0, 3):
        result = user.sandbox("/bin/sh", "-c", f"exit {code}", options=("--backend", backend),
                              cwd=net.project)
        assert result.returncode == code, (result.returncode, result.stderr)
        assert "egress proxy did not start" not in result.stderr
        assert leftovers(user) == [], "a proxy or sandbox process outlived its launcher"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cached_agent_launch_brokers_the_key_of_its_own_environment(net, backend):
    """Issue 19: an agent's launch with an egress proxy comes from the plan
    cache too. The stored plan holds no real key (it is this launch's
    environment's, put back at the hit), the hit's proxy brokers with it, and
    the session's directories are its own."""
    user = net.user
    mock_agent(net)
    wrote()       # the first launch's compile waits out the cache's racy window
    env = user.env(ANTHROPIC_API_KEY=REAL_KEY, ANTHROPIC_BASE_URL=f"https://api.test:{net.ap}")
    argv = [INSTALLED, "--backend", backend, "mockagent", str(net.fixture / "broker_probe.py"),
            MARKER]
    try:
        placeholders = []
        # The first launch makes the session's first files (audit log,
        # staging directory), too new for its compile to be stored.
        assert user.run(argv, env=env, cwd=net.project).returncode == 0
        for attempt in range(3):
            if attempt:
                dry = user.run([INSTALLED, "--backend", backend, "--dry-run", "mockagent"],
                               env=env, cwd=net.project)
                assert "plan:      from the compiled plan cache" in dry.stdout, dry.stdout
            before = len(net.api.seen)
            result = user.run(argv, env=env, cwd=net.project)
            assert result.returncode == 0, result.stderr
            data = json.loads(result.stdout)
            assert data["answer"]["key_ok"] is True and data["found"] == []
            assert net.api.seen[before]["headers"]["x-api-key"] == REAL_KEY
            placeholders.append(data["key"])
            assert leftovers(user) == []
        assert all(MARKER not in p for p in placeholders)
        # Each session's own placeholder, the one its proxy takes (a fresh
        # compile makes a new one; a hit reused the compile's).
        assert len(set(placeholders)) == 3, placeholders
        plans = user.home / ".local/state/agent-sandbox/cache/plans"
        assert list(plans.glob("*.marshal")), "no plan was stored"
        for path in plans.iterdir():
            assert MARKER.encode() not in path.read_bytes(), f"the real key is in {path}"
        # Another key: the environment's digest differs, a new plan, that key.
        other = user.env(ANTHROPIC_API_KEY=REAL_KEY.replace(MARKER, "OTHERKEY"),
                         ANTHROPIC_BASE_URL=f"https://api.test:{net.ap}")
        before = len(net.api.seen)
        result = user.run(argv, env=other, cwd=net.project)
        assert result.returncode == 0, result.stderr
        assert net.api.seen[before]["headers"]["x-api-key"] == REAL_KEY.replace(MARKER,
                                                                                 "OTHERKEY")
    finally:
        user.set_config("")
