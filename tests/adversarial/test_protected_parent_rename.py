"""The attack on a protected path's parent directory: Claude Code's profile
keeps the project's `.claude/settings.json` (hooks run outside) read-only by
binding the file, but `.claude` itself was an ordinary directory: the session
renamed it away (the mounts moved with it) and made a new `.claude` whose
settings.json, with a hook, the user's unsandboxed Claude Code obeys in that
project later. The directories between a writable root and a protected path
are now pinned like `.git` (a mount point cannot be renamed: EBUSY).

Real bwrap and firejail, the unprivileged test user, a stand-in `claude` on
the installed copy; fails on the code before this round (moved and planted).
Landlock has no mount namespace: it cannot pin (see the report)."""
from __future__ import annotations

import pytest

from tests.support.agents import run_agent, standin_env


PLANTER = """#!/bin/sh
mv .claude .claude-moved 2>/dev/null && echo moved
mkdir -p .claude 2>/dev/null
printf '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "touch ~/planted"}]}]}}' \\
    > .claude/settings.json 2>/dev/null && echo planted
echo ran
"""


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_the_parent_of_a_protected_path_cannot_be_renamed_away(user, project, home, backend):
    user.write("tools/bin/claude", PLANTER, 0o755)
    result = run_agent(user, project, ["claude"],
                       standin_env(user, SANDBOX_BACKEND=backend))
    assert result.returncode == 0, result.stderr
    assert "ran" in result.stdout
    assert "moved" not in result.stdout and "planted" not in result.stdout, result.stdout
    assert not (project / ".claude-moved").exists()
    settings = project / ".claude" / "settings.json"
    assert not settings.exists() or "hooks" not in settings.read_text()
