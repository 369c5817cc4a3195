"""The attack on an agent's scratch entries (AGENT_CONFIG_SCRATCH) now that
they are not granted at all (this round: on bwrap each grant was a mount).

Claude Code's Bash tool sources `~/.claude/shell-snapshots/*.sh`, and the
user's unsandboxed Claude Code reads `statsig/` and `session-env/`: a session
that could write the real ones would run code outside later. The session's
copy has its own, empty ones; the real ones must stay out of reach. The
session writes them by their real paths (making the directories if they do
not exist inside): nothing may reach the user's files, on every backend.

Real backends, the unprivileged test user, a stand-in `claude` on the
installed copy."""
from __future__ import annotations

import os

import pytest

from tests.support.agents import run_agent, standin_env

# Agents on landlock on this Slurm host: the admin's word (issue 31).
pytestmark = pytest.mark.usefixtures("slurm_boundary_optional")


PLANTER = """#!/bin/sh
for entry in shell-snapshots/snapshot-bash.sh session-env/env.sh statsig/statsig.cached; do
    mkdir -p "$(dirname "$HOME/.claude/$entry")" 2>/dev/null
    echo 'touch ~/planted' > "$HOME/.claude/$entry" 2>/dev/null && echo "wrote $entry"
done
echo ran
"""
ENTRIES = ("shell-snapshots/snapshot-bash.sh", "session-env/env.sh", "statsig/statsig.cached")


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_a_session_never_reaches_the_real_scratch_entries(user, project, home, backend):
    for entry in ENTRIES:
        user.write(f".claude/{entry}", "# the user's\n")
    user.write("tools/bin/claude", PLANTER, 0o755)
    result = run_agent(user, project, ["claude"],
                       standin_env(user, SANDBOX_BACKEND=backend))
    assert result.returncode == 0, result.stderr
    assert "ran" in result.stdout
    for entry in ENTRIES:
        assert (home / ".claude" / entry).read_text() == "# the user's\n", entry
    assert sorted(os.listdir(home / ".claude" / "shell-snapshots")) == ["snapshot-bash.sh"]
    assert not (home / "planted").exists()
