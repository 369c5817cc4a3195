"""The compiled plan cache (issue 19) as an attacker sees it: an agent in
the sandbox cannot read or plant the plan the user's next launch would run,
on any backend, and a plan left by another user is never loaded."""
from __future__ import annotations

import pytest

from tests.support.install import INSTALLED


def _plans(user):
    return user.home / ".local/state/agent-sandbox/cache/plans"


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_an_agent_cannot_plant_a_plan_for_the_next_launch(user, project, backend):
    for _ in range(2):   # the second launch stores its plan
        assert user.sandbox("true", options=("--backend", backend), cwd=project).returncode == 0
    assert any(_plans(user).glob("*.marshal"))
    script = (f"p={_plans(user)}; ls $p >/dev/null 2>&1 && echo LISTED; "
              "for f in $p/*.marshal $p/planted.marshal; do "
              "echo x > \"$f\" 2>/dev/null && echo WROTE; done; "
              "mkdir -p $p 2>/dev/null && echo x > $p/new.marshal 2>/dev/null && echo WROTE; "
              "true")
    result = user.sandbox("/bin/sh", "-c", script, options=("--backend", backend), cwd=project)
    assert result.returncode == 0, result.stderr
    # What it wrote (if anything: a home of its own on bwrap) is not what the
    # next launch reads.
    assert "LISTED" not in result.stdout
    assert all(p.read_bytes() != b"x\n" for p in _plans(user).glob("*.marshal"))
    assert not (_plans(user) / "planted.marshal").exists()


def test_a_plan_written_by_another_user_is_not_loaded(user, project, other_user):
    import os

    user.run([INSTALLED, "run", "--", "true"], cwd=project)
    user.run([INSTALLED, "run", "--", "true"], cwd=project)
    entries = list(_plans(user).glob("*.marshal"))
    assert entries
    for entry in entries:
        os.chown(entry, other_user.pw_uid, other_user.pw_gid)
    result = user.run([INSTALLED, "run", "--dry-run", "--", "true"], cwd=project)
    assert "plan:      compiled now" in result.stdout
