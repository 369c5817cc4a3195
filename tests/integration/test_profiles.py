"""Agent profiles for real: `agent-sandbox claude --version` against a stand-in
`claude` the test puts on the user's PATH; it reports what it can see."""
from __future__ import annotations

import shutil

import pytest

from tests.support.install import INSTALLED

STANDIN = """#!/bin/sh
D="$CLAUDE_CONFIG_DIR"
for last; do :; done; echo "args=$last"
touch "$D/history.jsonl" && echo "claude-state=writable" || echo "claude-state=readonly"
ls ~/.ssh >/dev/null 2>&1 && echo "ssh=visible" || echo "ssh=hidden"
grep -q "You are running inside agent-sandbox" "$D/CLAUDE.md" && echo "note=present"
grep -q "my own instructions" "$D/CLAUDE.md" && echo "user-note=kept"
echo planted >> ~/.claude/settings.json 2>/dev/null; echo planted >> "$D/settings.json" && echo "settings=copy"
mkdir -p "$D/hooks" 2>/dev/null; echo x > "$D/hooks/h.sh" 2>/dev/null && echo "hooks=writable" || echo "hooks=readonly"
"""


@pytest.fixture
def standin(user):
    path = user.write(".local/bin/claude", STANDIN, 0o755)
    yield path
    path.unlink()
    shutil.rmtree(user.home / ".claude", ignore_errors=True)
    (user.home / ".claude.json").unlink(missing_ok=True)


def profile_env(user, **extra):
    return user.env(PATH=f"{user.home}/.local/bin:/usr/local/bin:/usr/bin:/bin", **extra)


def test_claude_profile_runs_the_agent_with_its_state_and_note(user, project, standin):
    user.write(".claude/CLAUDE.md", "my own instructions\n")
    result = user.run([INSTALLED, "claude", "--version"], cwd=project, env=profile_env(user))
    assert result.returncode == 0, result.stderr
    seen = dict(line.split("=", 1) for line in result.stdout.split())
    assert seen == {"args": "--version", "claude-state": "writable", "ssh": "hidden",
                    "note": "present", "user-note": "kept", "settings": "copy",
                    "hooks": "readonly"}
    assert (user.home / ".claude/history.jsonl").exists()  # state on AGENT_CONFIG_KEEP persists
    assert (user.home / ".claude/CLAUDE.md").read_text() == "my own instructions\n"
    assert not (user.home / ".claude/settings.json").exists()      # the copy is not applied
    assert not (user.home / ".claude/hooks").exists()
    assert "settings.json: the session left it unreadable" in result.stderr
    assert sorted(p.name for p in project.iterdir()) == []          # nothing left behind


def test_missing_agent_binary_says_how_to_install_it(user, project):
    result = user.run([INSTALLED, "codex"], cwd=project,
                      env=user.env(PATH="/usr/local/bin:/usr/bin:/bin"))
    assert result.returncode == 127
    assert "codex is not installed" in result.stderr and "npm install -g @openai/codex" in result.stderr


def test_unknown_profile_lists_the_profiles(user, project):
    result = user.run([INSTALLED, "nosuchagent"], cwd=project)
    assert result.returncode == 2   # a usage error (SPEC §3), never 125
    for name in ("claude", "codex", "gemini", "aider", "opencode", "bash"):
        assert name in result.stderr


def test_profile_not_in_enabled_agents_is_refused(user, project):
    user.write(".local/bin/aider", "#!/bin/sh\necho ran\n", 0o755)
    try:
        result = user.run([INSTALLED, "aider"], cwd=project, env=profile_env(user))
    finally:
        (user.home / ".local/bin/aider").unlink()
    assert result.returncode == 125
    assert "ENABLED_AGENTS+=(aider)" in result.stderr and "ran" not in result.stdout


def test_a_new_profile_is_just_a_config_file(user, project):
    user.write(".local/bin/myagent", "#!/bin/sh\necho agent-ran; ls ~/.myagent/\n", 0o755)
    user.write(".config/agent-sandbox/agents/myagent.conf",
               "AGENT_COMMAND=(myagent)\nAGENT_STATE=(.myagent/)\nHOME_WRITABLE+=(.myagent)\n")
    user.set_config("ENABLED_AGENTS+=(myagent)\n")
    try:
        result = user.run([INSTALLED, "myagent"], cwd=project, env=profile_env(user))
    finally:
        (user.home / ".local/bin/myagent").unlink()
        (user.home / ".config/agent-sandbox/agents/myagent.conf").unlink()
        shutil.rmtree(user.home / ".myagent", ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "agent-ran"
