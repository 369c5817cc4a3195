"""An agent plants what would run outside the sandbox later through its own
settings (SPEC §8 "Agents' settings", issue 17), for real on every backend: a
hook or status line written to its settings copy, an MCP server written to
~/.claude.json (writable before the guard: the old profile bound it
read-write), a hooks/ directory made in the copy in place of the link. None
of it reaches the user's files; the allow-listed choice beside it does.
And a same-named decoy earlier on the inner PATH never runs in the agent's
place."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.support.install import INSTALLED

# Agents on landlock on this Slurm host: the admin's word (issue 31).
pytestmark = pytest.mark.usefixtures("slurm_boundary_optional")

BACKENDS = ["bwrap", "firejail", "landlock"]
PLANTER = """#!/bin/sh
d="$CLAUDE_CONFIG_DIR"
printf '{"model": "chosen", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "touch ~/planted"}]}]}, "statusLine": {"type": "command", "command": "touch ~/planted"}}' > "$d/settings.json"
printf '{"hooks": {"Stop": "touch ~/planted"}}' > ~/.claude/settings.json 2>/dev/null && echo real-settings-writable
printf '{"mcpServers": {"y": {"command": "touch", "args": ["planted"]}}}' > ~/.claude.json 2>/dev/null
rm -f "$d/hooks"; mkdir -p "$d/hooks" && echo 'touch ~/planted' > "$d/hooks/stop.sh"
echo ran
"""


@pytest.fixture
def planter(user):
    home = user.home
    for entry in (".claude", ".claude.json", "tools", ".cache/agent-sandbox", "planted"):
        path = home / entry
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    user.write("tools/bin/claude", PLANTER, 0o755)
    user.write(".claude/settings.json", '{"model": "base"}\n', 0o600)
    yield home
    for entry in (".claude", ".claude.json", "tools", ".cache/agent-sandbox"):
        path = home / entry
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_planted_hooks_and_mcp_servers_never_reach_the_users_files(user, project, planter,
                                                                   backend):
    home = planter
    result = user.run([INSTALLED, "--backend", backend, "claude"], cwd=project,
                      env=user.env(PATH=f"{home}/tools/bin:/usr/bin:/bin", NETWORK_MODE="open"))
    assert result.returncode == 0, result.stderr
    assert "ran" in result.stdout and "real-settings-writable" not in result.stdout
    assert json.loads((home / ".claude/settings.json").read_text()) == {"model": "chosen"}
    claude_json = home / ".claude.json"
    assert not claude_json.exists() or "mcpServers" not in claude_json.read_text()
    assert not (home / ".claude/hooks").exists()
    assert "hooks, statusLine" in result.stderr and "~/.claude/hooks" in result.stderr
    assert not (home / "planted").exists()


DECOY = "#!/bin/sh\necho DECOY-RAN\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decoy_earlier_on_the_inner_path_never_runs(user, project, planter, backend):
    # The user's claude is ~/tools/bin/claude (first on PATH outside, not
    # visible in the sandbox home as such); ~/.local/bin is visible inside
    # and holds a decoy of the same name.
    home = planter
    user.write("tools/bin/claude", "#!/bin/sh\necho THE-USERS-AGENT\n", 0o755)
    decoy = user.write(".local/bin/claude", DECOY, 0o755)
    try:
        result = user.run([INSTALLED, "--backend", backend, "claude"], cwd=project,
                          env=user.env(PATH=f"{home}/tools/bin:{home}/.local/bin:/usr/bin:/bin",
                                       NETWORK_MODE="open"))
    finally:
        decoy.unlink()
    assert "DECOY-RAN" not in result.stdout
    assert result.returncode == 0, result.stderr
    assert "THE-USERS-AGENT" in result.stdout


NESTER = """#!/bin/sh
python3 -c 'import os; open(os.environ["CLAUDE_CONFIG_DIR"] + "/settings.json", "w").write("[" * 200000 + "]" * 200000)'
echo nested
"""


def test_a_settings_copy_nested_beyond_the_parser_is_dropped_cleanly(user, project, planter):
    # The session controls its copy: a tree nested deeper than the parser
    # recurses must not crash the launcher at exit (nor every later launch
    # that recovers it); nothing of it is applied.
    home = planter
    user.write("tools/bin/claude", NESTER, 0o755)
    result = user.run([INSTALLED, "claude"], cwd=project,
                      env=user.env(PATH=f"{home}/tools/bin:/usr/bin:/bin", NETWORK_MODE="open"))
    assert result.returncode == 0, result.stderr
    assert "nested" in result.stdout and "Traceback" not in result.stderr
    assert "the session left it unreadable (RecursionError)" in result.stderr
    assert json.loads((home / ".claude/settings.json").read_text()) == {"model": "base"}
    assert not list((home / ".local/state/agent-sandbox/agents").glob("*.json"))


READER = """#!/bin/sh
cat .claude/settings.local.json 2>&1
for f in $(find ~/.cache/agent-sandbox -type f 2>/dev/null); do cat "$f"; done
echo read
"""


def test_a_project_settings_link_to_a_credential_is_not_copied_in(user, project, planter):
    # An earlier session made the project's settings.local.json a link to
    # ~/.ssh/id_rsa: the next launch must not copy what it points to into a
    # session copy the agent can read.
    home = planter
    key = (home / ".ssh/id_rsa").read_text()
    (project / ".claude").mkdir()
    (project / ".claude/settings.local.json").symlink_to(home / ".ssh/id_rsa")
    os.chown(project / ".claude", user.uid, user.gid)
    user.write("tools/bin/claude", READER, 0o755)
    result = user.run([INSTALLED, "claude"], cwd=project,
                      env=user.env(PATH=f"{home}/tools/bin:/usr/bin:/bin", NETWORK_MODE="open"))
    assert "read" in result.stdout, result.stderr
    assert key.strip() not in result.stdout + result.stderr
    assert (project / ".claude/settings.local.json").is_symlink()      # left as it was
