"""The real agent CLIs (pinned in tests/integration/agent-versions.txt,
installed from npm by scripts/test.sh under AGENT_SANDBOX_TEST_AGENTS) and
stand-in agents (scripts under the user's tools/bin), launched through the
installed agent-sandbox as the test user; `profile` builds an agent Profile
(Claude Code's name and command) with the keys a pure test gives. The agent state a test leaves in the
user's home (AGENT_STATE) is cleared by the `home` fixture (tests/support/homes.py)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_sandbox.config.profiles import Profile
from tests.support.install import INSTALLED

AGENTS = Path(os.environ.get("AGENT_SANDBOX_TEST_AGENTS", "/opt/agent-sandbox-agents"))
AGENT_BIN = AGENTS / "node_modules" / ".bin"
AGENT_STATE = (".claude", ".claude.json", ".codex", ".gemini", ".cache/agent-sandbox",
               ".local/state/agent-sandbox/agents", ".local/state/agent-sandbox/logins", "planted",
               "tools", "rt", ".npmrc", "npm-global")


@pytest.fixture(scope="module")
def clis():
    wanted = (Path(__file__).parents[1] / "integration" / "agent-versions.txt").read_text().split()
    for spec in wanted:
        name, _, version = spec.rpartition("@")
        package = AGENTS / "node_modules" / name / "package.json"
        if not package.exists() or json.loads(package.read_text())["version"] != version:
            pytest.fail(f"{spec} is not installed in {AGENTS} — run scripts/test.sh as root "
                        "(it installs the pinned agent CLIs)")
    return AGENT_BIN


def agent_env(user, clis, **extra):
    return user.env(PATH=f"{clis}:/usr/local/bin:/usr/bin:/bin", NETWORK_MODE="open",
                    SANDBOX_QUIET="1", **extra)


def standin_env(user, **extra):
    return user.env(PATH=f"{user.home}/tools/bin:/usr/local/bin:/usr/bin:/bin",
                    NETWORK_MODE="open", SANDBOX_QUIET="1", **extra)


def run_agent(user, project, argv, env, *, input=None, timeout=120):
    return user.run([INSTALLED, *argv], cwd=project, env=env, input=input, timeout=timeout)


def profile(**keys) -> Profile:
    return Profile("claude", "/p", "", ("claude",), "", "", (), **keys)
