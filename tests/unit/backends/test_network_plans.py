"""NETWORK_MODE=allowlist in the backends' plans (docs/network.md): bwrap
and firejail get a network namespace of their own, the proxy's socket (only
that) and the relay started by the helper before the command; landlock
refuses unless the admin accepts the partial form, then grants TCP to the
relay's port only; every backend reports net.egress_filtered."""
from __future__ import annotations

import pytest

from agent_sandbox.backends import landlock as landlock_backend
from agent_sandbox.backends.base import PlanContext
from agent_sandbox.errors import PolicyError
from agent_sandbox.names import EGRESS_SOCKET, RELAY_PORT
from agent_sandbox.paths import helper_module
from agent_sandbox.policy.resolve import with_egress
from tests.support.plans import PLAN_HOME, plan_for, policy_for, rows

pytestmark = pytest.mark.home(**PLAN_HOME)     # the `home` fixture's layout

ll = helper_module("landlock")
SOCKET = "/h/.local/state/agent-sandbox-run/egress-s-1/proxy.sock"


def allowlist(home, backend, conf="NETWORK_MODE=allowlist\n", port=RELAY_PORT):
    policy = policy_for(home, conf, backend=backend)
    return with_egress(policy, SOCKET, port, {"ANTHROPIC_API_KEY": "sk-ant-api03-placeholder"})


def test_bwrap_unshares_the_network_binds_only_the_socket_and_starts_the_relay(home):
    plan = plan_for("bwrap", allowlist(home, "bwrap"))
    argv = [str(a) for a in plan.argv]
    assert "--unshare-net" in argv
    at = argv.index(SOCKET)
    assert argv[at - 1:at + 2] == ["--bind", SOCKET, EGRESS_SOCKET]
    assert argv.count(SOCKET) == 1                      # never its directory
    relay = argv.index("--relay")
    assert argv[relay:relay + 3] == ["--relay", str(RELAY_PORT), EGRESS_SOCKET]
    assert argv.index("--relay") < argv.index("claude")
    assert "--lifeline" in argv and plan.lifeline_fd == "lifeline"
    assert rows(plan)["net.egress_filtered"] == "yes"
    assert rows(plan)["abstract_unix.scoped"] == "yes"


def test_the_proxy_variables_point_at_the_relay_and_the_broker(home):
    env = allowlist(home, "bwrap").env
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        assert env[name] == f"http://127.0.0.1:{RELAY_PORT}"
    assert env["ALL_PROXY"] == env["all_proxy"] == f"socks5h://127.0.0.1:{RELAY_PORT}"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1"
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-api03-placeholder"


def test_firejail_gets_no_network_but_loopback_and_the_socket_directory(home):
    plan = plan_for("firejail", allowlist(home, "firejail"))
    argv = [str(a) for a in plan.argv]
    assert "--net=none" in argv
    profile = plan.payloads["profile"].data.decode().splitlines()
    assert "whitelist /h/.local/state/agent-sandbox-run/egress-s-1" in profile
    relay = argv.index("--relay")
    assert argv[relay:relay + 3] == ["--relay", str(RELAY_PORT), SOCKET]
    assert rows(plan)["net.egress_filtered"] == "yes"


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_open_is_reported_as_not_filtered(home, backend):
    plan = plan_for(backend, policy_for(home, "", backend=backend))
    assert rows(plan)["net.egress_filtered"] == "no"
    assert "--unshare-net" not in [str(a) for a in plan.argv]
    assert "--relay" not in [str(a) for a in plan.argv]


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_isolated_is_filtered_without_a_relay(home, backend):
    plan = plan_for(backend, policy_for(home, "NETWORK_MODE=isolated\n", backend=backend))
    assert rows(plan)["net.egress_filtered"] == "yes"
    assert "--relay" not in [str(a) for a in plan.argv]


def test_landlock_holds_allowlist_only_with_its_supervisor(home):
    """Issue 31: the supervisor judges every connect(), so allowlist is
    accepted where it runs; a plan without it refuses, naming the backends
    that can."""
    policy = allowlist(home, "landlock")
    landlock_backend.refuse(policy, context=PlanContext("/usr/bin/python3", landlock_abi=7))
    with pytest.raises(PolicyError, match="bwrap or firejail"):
        plan_for("landlock", policy)          # no "notify" payload: no supervisor


def test_landlock_partial_grants_tcp_to_the_relays_port_only(home):
    policy = allowlist(home, "landlock", port=41234)._replace(landlock_partial=True)
    landlock_backend.refuse(policy, context=PlanContext("/usr/bin/python3", landlock_abi=7))
    plan = plan_for("landlock", policy)
    import marshal

    spec = marshal.loads(plan.payloads["landlock"].data)
    assert spec["net"] == ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    assert spec["ports"] == ((ll.NET_BIND_TCP | ll.NET_CONNECT_TCP, 41234),)
    assert (ll.READ, "/h/.local/state/agent-sandbox-run/egress-s-1") in \
        [tuple(r) for r in spec["paths"]]
    assert rows(plan)["net.egress_filtered"] == "partial"
    argv = [str(a) for a in plan.argv]
    assert argv[argv.index("--relay"):argv.index("--relay") + 3] == ["--relay", "41234", SOCKET]


def test_landlock_partial_still_needs_tcp_rules(home):
    policy = allowlist(home, "landlock")._replace(landlock_partial=True)
    with pytest.raises(PolicyError, match="ABI 4"):
        landlock_backend.refuse(policy, context=PlanContext("/usr/bin/python3", landlock_abi=3))


def test_the_dry_run_names_the_mode_the_relay_and_the_proxy(home):
    from agent_sandbox.launch.report import network_line

    policy = allowlist(home, "bwrap")
    assert network_line(policy) == (f"allowlist — relay 127.0.0.1:{RELAY_PORT} → egress "
                                    f"proxy {SOCKET}")
    assert network_line(policy_for(home, "NETWORK_MODE=allowlist\n")) == \
        "allowlist (egress proxy not started here)"
