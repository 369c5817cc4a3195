"""The egress proxy's plan (services/egress.py), the job's network mode and
the helper's --relay: which keys are brokered and what the sandbox gets
instead, never on landlock; the spec's rules carry their origins."""
from __future__ import annotations

import os
import socket

import pytest

from agent_sandbox.services import egress
from agent_sandbox.names import RELAY_PORT
from agent_sandbox.paths import helper_module
from tests.support.plans import PLAN_HOME, policy_for

pytestmark = pytest.mark.home(**PLAN_HOME)     # the `home` fixture's layout

REAL = "sk-ant-api03-REALKEYREALKEYREALKEY"


class Profile:
    def __init__(self, brokers):
        self.brokers = brokers


def settings_and_policy(home, backend="bwrap", conf="NETWORK_MODE=allowlist\n", env=None):
    from agent_sandbox.config import load as confload

    (home / ".config/agent-sandbox/sandbox.conf").write_text(conf)
    settings = confload.load_settings(home=str(home), user="alice", environ={},
                                      admin_path=str(home.parent / "none.conf"), cache=False)
    policy = policy_for(home, conf, backend=backend)
    return settings, policy._replace(env=dict(policy.env, **(env or {})))


def test_a_brokered_key_stays_outside_and_a_placeholder_goes_in(home):
    settings, policy = settings_and_policy(home, env={"ANTHROPIC_API_KEY": REAL})
    planned = egress.plan(settings, policy, Profile(("anthropic",)))
    stand_in = planned.env_changes["ANTHROPIC_API_KEY"]
    assert stand_in.startswith("sk-ant-api03-") and REAL not in stand_in
    assert len(stand_in) >= len("sk-ant-api03-") + 40
    assert planned.env_changes["ANTHROPIC_BASE_URL"] == \
        f"http://127.0.0.1:{RELAY_PORT}/broker/anthropic"
    assert planned.brokers["anthropic"] == {
        "upstream": "https://api.anthropic.com", "header": "x-api-key", "scheme": "",
        "placeholder": stand_in, "key": REAL}
    assert REAL not in repr(planned)


def test_placeholders_differ_per_session(home):
    assert egress.placeholder("AIza") != egress.placeholder("AIza")


@pytest.mark.parametrize("case", ["no profile", "profile without broker", "brokering off",
                                  "landlock", "no key"])
def test_when_nothing_is_brokered(home, case):
    conf = "NETWORK_MODE=allowlist\n" + ("API_KEY_BROKERING=false\n"
                                         if case == "brokering off" else "")
    env = {} if case == "no key" else {"ANTHROPIC_API_KEY": REAL}
    settings, policy = settings_and_policy(
        home, backend="landlock" if case == "landlock" else "bwrap", conf=conf, env=env)
    profile = {"no profile": None, "profile without broker": Profile(())}.get(
        case, Profile(("anthropic",)))
    planned = egress.plan(settings, policy, profile)
    assert planned.env_changes == {} and planned.brokers == {}


def test_a_gateway_the_user_set_outside_stays_the_upstream(home):
    settings, policy = settings_and_policy(
        home, env={"ANTHROPIC_API_KEY": REAL, "ANTHROPIC_BASE_URL": "https://gw.example/v1/"})
    planned = egress.plan(settings, policy, Profile(("anthropic",)))
    assert planned.brokers["anthropic"]["upstream"] == "https://gw.example/v1"


def rule(entry):
    return {"entry": entry, "origin": "t:1"}


@pytest.mark.parametrize("url,rules,used", [
    ("", [], "https://api.anthropic.com"),
    ("https://10.1.2.3:8443/v1", [], "https://10.1.2.3:8443/v1"),     # its addresses: the proxy's
    ("http://127.0.0.1:4000", [rule("127.0.0.1:4000")], "http://127.0.0.1:4000"),
    ("http://gw.lab:8080/", [rule("gw.lab:8080")], "http://gw.lab:8080"),
    ("http://gw.lab/", [rule("gw.lab:80")], "http://gw.lab"),
    ("http://127.0.0.1:4000", [], None),                             # not listed
    ("http://127.0.0.1:4000", [rule("127.0.0.1:4001")], None),       # another port
    ("ftp://gw.lab", [rule("gw.lab")], None),
    ("http://user:pw@gw.lab:80", [rule("gw.lab:80")], None),
])
def test_a_gateway_is_the_upstream_when_https_or_listed_http(url, rules, used):
    upstream, note = egress.gateway(egress.BROKERS["anthropic"], url, rules)
    if used:
        assert (upstream, note) == (used, "")
    else:
        assert upstream == "https://api.anthropic.com"
        assert note.startswith(f"ANTHROPIC_BASE_URL={url} is not used — ")


def test_the_unlisted_gateways_note_gives_the_line_to_add():
    _, note = egress.gateway(egress.BROKERS["anthropic"], "http://127.0.0.1:4000", [])
    assert "`ALLOWED_HOSTS+=(127.0.0.1:4000)`" in note and "unencrypted" in note


@pytest.mark.parametrize("entries,bypass", [
    ([], "localhost,127.0.0.1"), (["pypi.org", "10.0.0.0/8"], "localhost,127.0.0.1"),
    (["127.0.0.1:4000"], ""), (["localhost:8000"], ""), (["127.0.0.0/8"], ""),
    (["[::1]:4000"], ""),
])
def test_a_listed_loopback_host_is_not_shadowed_by_no_proxy(entries, bypass):
    assert egress.proxy_bypass([rule(e) for e in entries]) == bypass


def test_an_unlisted_http_gateway_is_a_warning_of_the_launch(home):
    settings, policy = settings_and_policy(
        home, env={"ANTHROPIC_API_KEY": REAL, "ANTHROPIC_BASE_URL": "http://127.0.0.1:4000"})
    planned = egress.plan(settings, policy, Profile(("anthropic",)))
    assert planned.brokers["anthropic"]["upstream"] == "https://api.anthropic.com"
    assert len(planned.notes) == 1 and "is not used" in planned.notes[0]


def test_landlock_takes_a_free_port_of_the_host(home):
    settings, policy = settings_and_policy(home, backend="landlock")
    planned = egress.plan(settings, policy)
    assert planned.port != RELAY_PORT and 0 < planned.port < 65536


def test_the_spec_rules_carry_their_origin(home):
    settings, policy = settings_and_policy(home, conf="NETWORK_MODE=allowlist\n"
                                                      "ALLOWED_HOSTS+=(x.example.org)\n")
    planned = egress.plan(settings, policy)
    assert {"entry": "x.example.org",
            "origin": f"{home}/.config/agent-sandbox/sandbox.conf:2"} in planned.rules
    assert planned.socket.startswith(f"{home}/.local/state/agent-sandbox-run/egress-")
    assert planned.audit.startswith(f"{home}/.local/state/agent-sandbox/chaperon/")
    assert planned.audit.endswith("_network.log")


def test_a_job_takes_the_job_network_mode(home, monkeypatch):
    from agent_sandbox.launch import run

    (home / ".config/agent-sandbox/sandbox.conf").write_text(
        "NETWORK_MODE=allowlist\nJOB_NETWORK_MODE=isolated\n")
    monkeypatch.setattr(run, "launch_context", lambda project_dir, environ: __import__(
        "agent_sandbox.policy.resolve", fromlist=["LaunchContext"]).LaunchContext(
        uid=1000, gid=1000, user="alice", home=str(home), environ={"PATH": "/usr/bin"},
        cwd=str(home / "proj"), project_dir=None, install_paths=(), session_id="s"))
    monkeypatch.setattr(run, "choose_backend", lambda *a, **k: __import__(
        "agent_sandbox.backends", fromlist=["Selection"]).Selection("bwrap", "/usr/bin/bwrap",
                                                                     "test"))
    import agent_sandbox.config.load as confload

    real = confload.load_settings
    monkeypatch.setattr(confload, "load_settings", lambda **kw: real(
        **dict(kw, admin_path=str(home.parent / "none.conf"), cache=False)))
    settings, _, policy = run.resolve(project_dir=None, backend=None, environ={}, job=True)
    assert settings.NETWORK_MODE == "isolated" and policy.network_isolated
    assert settings.origins["NETWORK_MODE"].endswith("sandbox.conf:2")
    settings, _, policy = run.resolve(project_dir=None, backend=None, environ={})
    assert policy.network_mode == "allowlist"


def test_the_helper_parses_relay():
    sandbox_exec = helper_module("sandbox_exec")
    opts = sandbox_exec.parse(["--relay", "3128", "/run/x.sock", "--", "true"])
    assert opts["relay"] == (3128, "/run/x.sock") and opts["command"] == ["true"]


def test_a_relay_port_that_is_taken_fails_the_launch_at_once():
    """Bound by the helper before it forks the relay: a port someone else
    holds (landlock: the host's loopback) is an immediate SetupError, not a
    wait for a listener that could be the other's."""
    sandbox_exec = helper_module("sandbox_exec")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(sandbox_exec.SetupError,
                           match=f"cannot listen on 127.0.0.1:{port}.*launch again"):
            sandbox_exec.start_relay(port, "/nonexistent/proxy.sock")


RELAY_CHILD = r"""
import os, socket, sys
sys.path.insert(0, sys.argv[1])
import sandbox_exec
os.setpgid(0, 0)
sandbox_exec.start_relay(int(sys.argv[2]), sys.argv[3])
# What the command would see: the relay's sockets are not among its descriptors.
print(sorted(int(n) for n in os.listdir("/proc/self/fd")), flush=True)
sys.stdin.read()
"""


def test_the_relay_listens_when_the_helper_goes_on_and_carries_to_the_proxy(tmp_path):
    """start_relay returns with the port listening (no wait, no poll): a
    connection made at once is carried to the proxy's Unix socket; the
    command (this process) holds no descriptor of the relay."""
    import signal
    import subprocess

    sandbox_exec = helper_module("sandbox_exec")
    path = str(tmp_path / "proxy.sock")
    proxy = socket.socket(socket.AF_UNIX)
    proxy.bind(path)
    proxy.listen(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    here = os.path.dirname(sandbox_exec.__file__)
    child = subprocess.Popen(["/usr/bin/python3", "-I", "-c", RELAY_CHILD, here, str(port),
                              path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        fds = child.stdout.readline()
        assert fds.strip() == b"[0, 1, 2, 3]", fds     # 3: listdir's own
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"hello")
            proxy.settimeout(10)
            carried, _ = proxy.accept()
            with carried:
                carried.settimeout(10)
                assert carried.recv(5) == b"hello"
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        proxy.close()


def test_the_sweep_removes_only_old_directories_without_a_socket(tmp_path):
    import os

    gone, running, died_starting, fresh, other = (tmp_path / n for n in (
        "egress-a", "egress-b", "egress-c", "egress-d", "agent-sandbox-x"))
    for path in (gone, running, died_starting, fresh, other):
        path.mkdir()
    (running / egress.SOCKET_NAME).write_text("")
    (died_starting / egress.SPEC_NAME).write_text('{"brokers": "a key"}')
    (fresh / egress.SPEC_NAME).write_text("{}")
    for path in (gone, running, died_starting, other):
        os.utime(path, (1, 1))
    egress.sweep(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "agent-sandbox-x", "egress-b", "egress-d"]


class CodexProfile:
    command = ("codex",)
    brokers = ("openai",)


def test_codex_gets_its_base_url_as_an_option_after_its_command(home):
    settings, policy = settings_and_policy(home, env={"OPENAI_API_KEY": "sk-proj-REAL"})
    planned = egress.plan(settings, policy, CodexProfile())
    url = f"http://127.0.0.1:{RELAY_PORT}/broker/openai"
    assert planned.args == ("-c", f"openai_base_url={url}")
    assert planned.env_changes["OPENAI_API_KEY"].startswith("sk-proj-agentsandbox")
    assert planned.env_changes["OPENAI_BASE_URL"] == url
    assert planned.brokers["openai"]["header"] == "authorization"
    assert planned.brokers["openai"]["scheme"] == "Bearer "
    assert planned.brokers["openai"]["upstream"] == "https://api.openai.com/v1"
    assert egress.with_args(["codex", "exec", "hi"], 2, planned.args) == [
        "codex", "-c", f"openai_base_url={url}", "exec", "hi"]
    # Resolved (agentexe.resolve), the real codex is `node codex.js` with the
    # profile's own `-c sandbox_mode=…`: the option goes after all of that.
    resolved = ["/usr/bin/node", "/x/codex.js", "-c", "sandbox_mode=y", "exec", "hi"]
    assert egress.with_args(resolved, 2, planned.args) == [
        "/usr/bin/node", "/x/codex.js", "-c", "sandbox_mode=y", "-c",
        f"openai_base_url={url}", "exec", "hi"]
    assert egress.with_args(resolved[:4], 0, planned.args)[-2:] == list(planned.args)


def test_a_chatgpt_login_without_a_key_gets_no_option(home):
    settings, policy = settings_and_policy(home)
    planned = egress.plan(settings, policy, CodexProfile())
    assert planned.args == () and planned.brokers == {}
    assert egress.with_args(["codex", "exec"], 1, ()) == ["codex", "exec"]


def test_the_proxys_ready_is_not_waited_for_once_the_sandbox_has_ended():
    """A short command (`claude --version`) must not pay for the rest of the
    proxy's start at its exit; a proxy that already failed is still heard."""
    from agent_sandbox.services.egress import _read_ready

    proxy_read, proxy_write = os.pipe()
    gone_read, gone_write = os.pipe()
    try:
        os.write(gone_write, b"x")                      # the sandbox has exited
        assert _read_ready(proxy_read, gone_read) is None
        os.close(proxy_write)                           # the proxy died meanwhile
        proxy_write = None
        assert _read_ready(proxy_read, gone_read) == b""
    finally:
        for fd in (proxy_read, proxy_write, gone_read, gone_write):
            if fd is not None:
                os.close(fd)
    proxy_read, proxy_write = os.pipe()
    os.write(proxy_write, b"ready\n")
    assert _read_ready(proxy_read, None) == b"ready\n"
    os.close(proxy_read)
    os.close(proxy_write)


def test_without_brokering_an_unlisted_loopback_gateway_is_named_at_launch(home):
    conf = "NETWORK_MODE=allowlist\nAPI_KEY_BROKERING=false\n"
    settings, policy = settings_and_policy(
        home, conf=conf, env={"ANTHROPIC_API_KEY": REAL,
                              "ANTHROPIC_BASE_URL": "http://localhost:4000"})
    planned = egress.plan(settings, policy, Profile(("anthropic",)))
    assert planned.brokers == {} and len(planned.notes) == 1
    assert "`ALLOWED_HOSTS+=(localhost:4000)`" in planned.notes[0]
    settings, policy = settings_and_policy(
        home, conf=conf + "ALLOWED_HOSTS+=(localhost:4000)\n",
        env={"ANTHROPIC_API_KEY": REAL, "ANTHROPIC_BASE_URL": "http://localhost:4000"})
    listed = egress.plan(settings, policy, Profile(("anthropic",)))
    assert listed.notes == () and listed.no_proxy == ""
