"""A plan cache file must hold no credential the launch's environment gave
(issue 19's environment template): an agent's API key the sandbox keeps
(ANTHROPIC_API_KEY, OPENAI_API_KEY) sat in clear in every stored plan — in
the policy's and the plan's environment, and in firejail's `env` payload —
in the state directory, backed up and kept long after the key was revoked."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.support.install import INSTALLED

HIT = "plan:      from the compiled plan cache"


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_a_cache_file_holds_no_value_the_plan_keeps_from_the_environment(user, project,
                                                                         backend):
    """The value a kept variable has is in the plan's environment, but the
    cache file holds only its name; a hit gives the command the launch's own
    value."""
    user.set_config("CHAPERON=false\n")
    plans = user.home / ".local/state/agent-sandbox/cache/plans"
    shutil.rmtree(plans, ignore_errors=True)
    value = "sk-kept-" + os.urandom(12).hex()
    env = user.env(ANTHROPIC_API_KEY=value, SANDBOX_BACKEND=backend)
    for _ in range(2):
        assert user.sandbox("true", cwd=project, env=env).returncode == 0
    assert HIT in user.run([INSTALLED, "run", "--dry-run", "--", "true"], cwd=project,
                           env=env).stdout
    stored = b"".join(p.read_bytes() for p in plans.iterdir())
    assert b"ANTHROPIC_API_KEY" in stored and value.encode() not in stored
    result = user.sandbox("/bin/sh", "-c", "echo $ANTHROPIC_API_KEY", cwd=project, env=env)
    assert result.stdout.strip() == value, result.stderr
