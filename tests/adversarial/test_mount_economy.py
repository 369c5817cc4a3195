"""The attack on bwrap's cheaper mount list (policy/mountcost.py): a session
whose project lies inside a tree the home grants read-only. Every protected
path in the project then has a read-only self-bind of an ancestor (the
project's parent, granted with the home) before it, but the writable bind of
the project lies between the two: a rule that looked only for an enclosing
read-only bind would leave out the protected paths' own binds, and the
session would plant a git hook, .envrc and editor tasks that run outside.

Real bwrap, the unprivileged test user, the installed copy. Checked to fail
with such a rule (drop_redundant taking the nearest read-only self-bind of
a parent instead of the operation that last touched the path)."""
from __future__ import annotations

import json
import os

import pytest

from tests.support.scripts import WRITE_SCRIPT

# The placeholders make every parent (.git/hooks/, .vscode/) before the
# launch: a write below one is refused by its mount, or lands.


@pytest.mark.parametrize("mode", ["read", "restricted"])
def test_protected_paths_in_a_project_below_a_read_only_grant_stay_read_only(
        user, project, mode):
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    for path in (project / ".git", project / ".git" / "config"):
        os.chown(path, user.uid, user.gid)
    if mode == "restricted":     # the project's parent granted read-only by name
        user.set_config("HOME_READONLY+=(proj)\n")
    env = user.env(SANDBOX_BACKEND="bwrap", HOME_ACCESS=mode)
    plan = user.sandbox("true", options=["--dry-run"], cwd=project, env=env)
    assert plan.returncode == 0, plan.stderr
    assert f"ro-bind    {user.project}\n" in plan.stdout, "the project's parent is not granted"
    targets = [project / ".git/hooks/post-checkout", project / ".git/config", project / ".envrc",
               project / ".vscode/tasks.json", project / ".mcp.json", project / "ok.txt"]
    result = user.sandbox("/usr/bin/python3", "-c", WRITE_SCRIPT, *map(str, targets),
                          cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen.pop(str(project / "ok.txt")) == "written"
    assert set(seen.values()) == {"EROFS"}, seen
    assert (project / ".git/config").read_text() == "[core]\n"
    assert not (project / ".envrc").exists() and not (project / ".git/hooks").exists()
