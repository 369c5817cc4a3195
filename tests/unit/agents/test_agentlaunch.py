"""agents/launch.py: what the plan cache keeps of an agent's launch
besides its plan — the session copy's inputs and outputs, the egress plan
without its keys — and a hit that makes them again."""
from __future__ import annotations

import json
import os

import pytest

from agent_sandbox.agents import copy as agentcopy, launch as agentlaunch
from agent_sandbox.services.egress import EgressPlan
from agent_sandbox.names import RELAY_PORT
from tests.support.agents import profile
from tests.support.policies import claude_session_policy


def compiled(home: str):
    """An agent launch as the compile leaves it: the copy made, its inputs
    and outputs captured (run.start_copy)."""
    os.makedirs(f"{home}/.claude/projects")
    with open(f"{home}/.claude/settings.json", "w") as handle:
        json.dump({"model": "a"}, handle)
    agent_profile = profile(config_dir=("CLAUDE_CONFIG_DIR", ".claude"),
                            settings=("settings.json=.claude/settings.json",),
                            config_keep=("projects/",))
    spec = agentcopy.spec_for(agent_profile, home)
    before = claude_session_policy(home)      # a cached policy is the class itself (policy/model.py)
    agent = agentlaunch.AgentLaunch("claude", [], dry_run=False)
    agent.profile = agent_profile
    after, record = agentcopy.start(spec, before)
    agent.copied(spec, before, after)
    agentcopy.finish(record)
    return agent, after


def hit(agent, policy) -> dict:
    return {"profile": agent.profile, "copy": agent.copy, "policy": policy}


def test_a_hit_makes_the_sessions_copy_again(tmp_path, capsys):
    home = str(tmp_path)
    agent, policy = compiled(home)
    again = agentlaunch.AgentLaunch("claude", ["x"], dry_run=False)
    copies = []
    agentlaunch.from_cache(again, hit(agent, policy), copies)
    assert again.profile is agent.profile and len(copies) == 1
    root = policy.env["CLAUDE_CONFIG_DIR"]
    with open(f"{root}/settings.json") as handle:
        assert json.load(handle) == {"model": "a"}
    agentcopy.finish(copies[0])
    assert not os.path.exists(root)


def test_a_configuration_directory_that_changed_is_a_miss_and_leaves_no_copy(tmp_path, capsys):
    """An entry that appeared since the compile would be missing from the
    cached plan's read-only list: the rebuilt copy differs, Stale, removed."""
    home = str(tmp_path)
    agent, policy = compiled(home)
    with open(f"{home}/.claude/new-rules.md", "w") as handle:
        handle.write("x")
    copies = []
    with pytest.raises(agentlaunch.Stale):
        agentlaunch.from_cache(agentlaunch.AgentLaunch("claude", [], dry_run=False),
                               hit(agent, policy), copies)
    assert copies == []
    assert os.listdir(f"{home}/.local/state/agent-sandbox-run/agents") == []
    assert [n for n in os.listdir(f"{home}/.local/state/agent-sandbox/agents")
            if n.endswith(".json")] == []     # no record left to recover


def test_a_compile_that_changed_what_the_copy_read_is_not_stored(tmp_path, capsys):
    home = str(tmp_path)
    agent, policy = compiled(home)
    assert agentlaunch.stored(agent, policy, None, {}) is not None
    changed = policy._replace(hidden=(f"{home}/.claude",))
    assert agentlaunch.stored(agent, changed, None, {}) is None


def egress_plan(key: str, port: int = RELAY_PORT) -> EgressPlan:
    return EgressPlan("/d", "/d/proxy.sock", port, {"ANTHROPIC_API_KEY": "sk-ant-api03-ph"},
                      {"anthropic": {"upstream": "https://api.anthropic.com", "key": key,
                                     "header": "x-api-key", "scheme": "", "placeholder": "p"}},
                      [], "/audit", ())


def test_the_stored_egress_plan_holds_no_key_and_a_hit_puts_its_own_back():
    environ = {"ANTHROPIC_API_KEY": "sk-ant-api03-REAL"}
    stored = agentlaunch.egress_template(egress_plan("sk-ant-api03-REAL"), environ)
    assert "REAL" not in repr(stored.brokers) and stored.audit == ""
    filled = agentlaunch.egress_filled(stored, {"ANTHROPIC_API_KEY": "sk-ant-api03-NOW"}, "/h")
    assert filled.brokers["anthropic"]["key"] == "sk-ant-api03-NOW"
    assert filled.audit.startswith("/h/")


def test_an_egress_plan_that_cannot_be_rebuilt_is_not_stored():
    environ = {"ANTHROPIC_API_KEY": "sk-ant-api03-REAL"}
    # A key that is not the environment's own; a port chosen for this launch.
    assert agentlaunch.egress_template(egress_plan("sk-ant-api03-OTHER"), environ) is None
    assert agentlaunch.egress_template(egress_plan("sk-ant-api03-REAL", 40000), environ) is None


def test_a_gateway_url_the_user_set_is_not_stored_and_a_hit_puts_its_own_back():
    """A base URL set outside is the broker's upstream; a gateway's URL can
    hold its credentials (https://user:token@…): the environment's, so not
    stored, as the key."""
    url = "https://u:GATEWAYSECRET@gw.example/v1"
    environ = {"ANTHROPIC_API_KEY": "sk-ant-api03-REAL", "ANTHROPIC_BASE_URL": url + "/"}
    planned = egress_plan("sk-ant-api03-REAL")
    planned.brokers["anthropic"]["upstream"] = url
    stored = agentlaunch.egress_template(planned, environ)
    assert "GATEWAYSECRET" not in repr(stored)
    filled = agentlaunch.egress_filled(stored, environ, "/h")
    assert filled.brokers["anthropic"]["upstream"] == url
    # The default upstream (no base URL set) is stored as it is.
    default = agentlaunch.egress_template(egress_plan("sk-ant-api03-REAL"),
                                          {"ANTHROPIC_API_KEY": "sk-ant-api03-REAL"})
    assert default.brokers["anthropic"]["upstream"] == "https://api.anthropic.com"
