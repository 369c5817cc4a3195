"""A session must not waive, for the user's later unsandboxed Claude Code, a
prompt that guards what runs or what is read outside (review of issue 36's
persisted acknowledgements): the shipped claude profile's merge allow-list
keeps harmless notices seen, never `hasSeenAutoModeEntryWarning` (Claude Code
reads it as skipAutoPermissionPrompt), `hasSeenAutoModeOutsideReadPrompt`,
accepted terms, `skipDangerousModePromptSetPreDialog`, or another project's
external-includes warning. Runs the real merge (agents/copy.py) on the
profile file this tree ships."""
from __future__ import annotations

import json
import os
from pathlib import Path

from agent_sandbox.agents import copy as agentcopy
from agent_sandbox.config.load import PROFILE_KEYS
from agent_sandbox.config.model import KNOWN_KEYS
from agent_sandbox.config.syntax import parse_config
from tests.support.agents import profile
from tests.support.policies import claude_session_policy

SHIPPED = Path(__file__).resolve().parents[2] / "conf" / "agents" / "claude.conf"
WAIVERS = {"hasSeenAutoModeEntryWarning": True, "hasSeenAutoModeOutsideReadPrompt": True,
           "skipDangerousModePromptSetPreDialog": True, "hasSeenUltrareviewTerms": True,
           "hasSeenUltraplanTerms": True}


def shipped_keep() -> tuple[str, ...]:
    text = SHIPPED.read_text()
    values = {a.key: a.value for a in parse_config(
        text, file=str(SHIPPED), variables={"HOME": "/h", "USER": "u"},
        known_keys=set(PROFILE_KEYS) | KNOWN_KEYS) if a.key == "AGENT_SETTINGS_KEEP"}
    keep = values["AGENT_SETTINGS_KEEP"]
    return keep if isinstance(keep, tuple) else (keep,)


def test_a_session_cannot_waive_the_users_outside_prompts(tmp_path):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    (tmp_path / ".claude.json").write_text("{}")
    claude = profile(config_dir=("CLAUDE_CONFIG_DIR", ".claude"),
                     settings=("settings.json=.claude/settings.json",
                               ".claude.json=.claude.json"),
                     settings_keep=shipped_keep())
    spec = agentcopy.spec_for(claude, home)
    policy, record = agentcopy.start(spec, claude_session_policy(home))
    with open(f"{policy.env['CLAUDE_CONFIG_DIR']}/.claude.json", "w") as handle:
        json.dump(dict(WAIVERS, hasSeenAutoDefaultNotice=True, projects={
            "/elsewhere": {"hasClaudeMdExternalIncludesWarningShown": True}}), handle)
    agentcopy.finish(record)
    merged = json.loads((tmp_path / ".claude.json").read_text())
    assert merged.get("hasSeenAutoDefaultNotice") is True      # a harmless notice persists
    assert not set(WAIVERS) & set(merged), merged
    assert "hasClaudeMdExternalIncludesWarningShown" not in json.dumps(merged), merged
