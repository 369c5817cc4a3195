"""Issue 36: no question the user already answered — `agent-sandbox trust`
writes the agent's own trust key alone (agents/trust.py), the launcher's
placeholder keys are approved in the session copy only (copy.approve_keys),
and the end of a session names only drops that matter (copy.quiet_paths)."""
from __future__ import annotations

import json
import os

import pytest

from agent_sandbox.agents import copy as agentcopy
from agent_sandbox.agents.trust import trust
from agent_sandbox.config.agentkeys import entry_problem
from tests.support.agents import profile
from tests.support.policies import claude_session_policy

PLACEHOLDER = "sk-ant-api03-agentsandbox" + "0123456789abcdef" * 2 + "feedfacecafe"


def claude(**keys):
    keys.setdefault("settings_keep", (".claude.json:theme=enum(dark|light)",
                                      ".claude.json:projects.*.hasCompletedProjectOnboarding=bool"))
    return profile(config_dir=("CLAUDE_CONFIG_DIR", ".claude"),
                   settings=("settings.json=.claude/settings.json", ".claude.json=.claude.json"),
                   trust=(".claude.json:projects.{dir}.hasTrustDialogAccepted=true",),
                   key_approval=(".claude.json:customApiKeyResponses.approved=tail:20",),
                   **keys)


def test_trust_writes_only_the_agents_own_key_for_that_directory(tmp_path):
    home = str(tmp_path)
    before = {"theme": "dark", "projects": {"/other": {"allowedTools": ["Bash"]}},
              "mcpServers": {}}
    (tmp_path / ".claude.json").write_text(json.dumps(before))
    os.chmod(tmp_path / ".claude.json", 0o600)
    written = trust(claude(), home, "/w/p.q")              # a dot stays in one key
    assert written == [(f"{home}/.claude.json", 'projects["/w/p.q"].hasTrustDialogAccepted')]
    after = json.loads((tmp_path / ".claude.json").read_text())
    assert after == dict(before, projects={"/other": {"allowedTools": ["Bash"]},
                                           "/w/p.q": {"hasTrustDialogAccepted": True}})
    assert os.stat(tmp_path / ".claude.json").st_mode & 0o777 == 0o600


def test_codex_trust_keeps_the_users_comments_and_gemini_writes_its_folder(tmp_path):
    home = str(tmp_path)
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex/config.toml").write_text('# mine\nmodel = "o3"  # keep\n')
    codex = profile(settings=("config.toml=.codex/config.toml",),
                    trust=('config.toml:projects.{dir}.trust_level="trusted"',))
    trust(codex, home, "/w/p")
    text = (tmp_path / ".codex/config.toml").read_text()
    assert "# mine" in text and "# keep" in text
    assert '[projects."/w/p"]' in text and 'trust_level = "trusted"' in text
    gemini = profile(settings=(".gemini/trustedFolders.json=.gemini/trustedFolders.json",),
                     trust=('.gemini/trustedFolders.json:{dir}="TRUST_FOLDER"',))
    trust(gemini, home, "/w/p")                             # the file did not exist
    assert json.loads((tmp_path / ".gemini/trustedFolders.json").read_text()) == {
        "/w/p": "TRUST_FOLDER"}


@pytest.mark.parametrize("kind, entry, ok", [
    ("AGENT_TRUST", ".claude.json:projects.{dir}.hasTrustDialogAccepted=true", True),
    ("AGENT_TRUST", "x.json:projects.hasTrustDialogAccepted=true", False),   # no {dir}
    ("AGENT_TRUST", "x.json:{dir}=TRUST", False),                          # not JSON
    ("AGENT_TRUST", "x.json:{dir}={}", False),                             # not a scalar
    ("AGENT_KEY_APPROVAL", ".claude.json:customApiKeyResponses.approved=tail:20", True),
    ("AGENT_KEY_APPROVAL", ".claude.json:a=all", False),
    ("AGENT_KEY_APPROVAL", "a=tail:20", False),
])
def test_profile_entries_are_checked(kind, entry, ok):
    assert (entry_problem(kind, entry) == "") is ok


def test_the_placeholder_is_approved_in_the_copy_and_never_merged_back(tmp_path, capsys):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    (tmp_path / ".claude.json").write_text(json.dumps({"theme": "dark"}))
    spec = agentcopy.spec_for(claude(), home)
    policy, record = agentcopy.start(spec, claude_session_policy(home))
    agentcopy.approve_keys(record, claude().key_approval, [PLACEHOLDER])
    root = policy.env["CLAUDE_CONFIG_DIR"]
    with open(f"{root}/.claude.json") as handle:
        copy = json.load(handle)
    assert copy["customApiKeyResponses"]["approved"] == [PLACEHOLDER[-20:]]
    # The session answers the theme question; Claude Code rewrites the file.
    copy["theme"] = "light"
    with open(f"{root}/.claude.json", "w") as handle:
        json.dump(copy, handle)
    agentcopy.finish(record)
    assert json.loads((tmp_path / ".claude.json").read_text()) == {"theme": "light"}
    assert "customApiKeyResponses" not in capsys.readouterr().err


def test_no_placeholder_no_change(tmp_path):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    (tmp_path / ".claude.json").write_text('{"theme": "dark"}')
    spec = agentcopy.spec_for(claude(), home)
    policy, record = agentcopy.start(spec, claude_session_policy(home))
    agentcopy.approve_keys(record, claude().key_approval, [])
    with open(f"{policy.env['CLAUDE_CONFIG_DIR']}/.claude.json") as handle:
        assert handle.read() == '{"theme": "dark"}'
    agentcopy.finish(record)


def test_inert_keys_are_dropped_quietly_the_rest_in_one_line(tmp_path, capsys):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    (tmp_path / ".claude.json").write_text("{}")
    quiet = (".claude.json:tipsHistory", ".claude.json:projects.*.last*")
    spec = agentcopy.spec_for(claude(settings_quiet=quiet), home)
    policy, record = agentcopy.start(spec, claude_session_policy(home))
    with open(f"{policy.env['CLAUDE_CONFIG_DIR']}/.claude.json", "w") as handle:
        json.dump({"tipsHistory": {"a": 3}, "mcpServers": {"x": {"command": "sh"}},
                   "projects": {"/p": {"lastFpsAverage": 60, "mcpServers": {}}}}, handle)
    agentcopy.finish(record)
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "mcpServers" in err and 'projects["/p"].mcpServers' in err
    assert "tipsHistory" not in err and "lastFpsAverage" not in err
    logged = [json.loads(line) for name in os.listdir(
        f"{home}/.local/state/agent-sandbox/chaperon")
        for line in open(f"{home}/.local/state/agent-sandbox/chaperon/{name}")]
    assert set(logged[0]["dropped_inert"]) == {"tipsHistory", 'projects["/p"].lastFpsAverage'}
