"""Attack review of agent profile launches served by the compiled plan cache
(issue 19: "a cached plan must never be weaker than a fresh compile", and no
secret in a cache file). The agents are stand-in shell scripts under
~/tools/bin, run by an unprivileged user on the real backends. Each test is
one attack and fails on the code it was found against (95d0ea3).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import INSTALLED

HIT = "plan:      from the compiled plan cache"
STATE = (".claude", ".claude.json", ".cache/agent-sandbox", ".local/state/agent-sandbox",
         "tools")


@pytest.fixture
def home(user):
    """The user's home without any agent state or plan, before and after."""
    def clean():
        for entry in STATE:
            path = user.home / entry
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
    clean()
    yield user.home
    clean()


def _agent(user, project, env, *args, dry_run=False):
    argv = [INSTALLED, *(["--dry-run"] if dry_run else []), "claude", *args]
    result = user.run(argv, cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _stored(home: Path) -> bytes:
    plans = home / ".local/state/agent-sandbox/cache/plans"
    return b"".join(p.read_bytes() for p in plans.iterdir() if p.is_file())


KEY_PROBE = """#!/bin/sh
echo "key=$ANTHROPIC_API_KEY"
"""


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_cached_agent_launch_gets_a_placeholder_key_of_its_own(user, project, home,
                                                                 backend):
    """The egress proxy brokers the API key: inside, the key variable holds a
    placeholder, random per session (docs/network.md: "new every session"),
    the one value the broker route takes. A hit reused the compile's — the
    same placeholder in every cached session, and on disk in the cache file
    for as long as the plan was used —, where a fresh compile makes a new
    one. Each hit must make its own (in the environment and the proxy's
    spec alike), and none of them, nor the real key, is in a cache file."""
    user.write("tools/bin/claude", KEY_PROBE, 0o755)
    real = "sk-ant-api03-" + os.urandom(16).hex()
    env = user.env(PATH=f"{home}/tools/bin:/usr/local/bin:/usr/bin:/bin",
                   SANDBOX_BACKEND=backend, ANTHROPIC_API_KEY=real)
    _agent(user, project, env)     # makes the AGENT_STATE entries (too new to store)
    keys = []
    for attempt in range(3):
        if attempt:
            assert HIT in _agent(user, project, env, dry_run=True), attempt
        out = _agent(user, project, env).splitlines()
        assert out[0].startswith("key=sk-ant-api03-agentsandbox"), out
        keys.append(out[0].removeprefix("key="))
    assert len({len(k) for k in keys}) == 1, keys
    assert len(set(keys)) == 3, keys
    stored = _stored(home)
    assert real.encode() not in stored
    assert not any(k.encode() in stored for k in keys[1:]), "a hit's placeholder is on disk"


NOTE_PROBE = """#!/bin/sh
cat "$HOME/.claude/CLAUDE.md" 2>&1
echo "exit-of-probe"
"""


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_a_secret_in_the_agents_note_file_lands_in_no_cache_file(user, project, home, backend):
    """The profile's note is appended to the user's own ~/.claude/CLAUDE.md,
    whose text went into the note payload as read — after the bound-file
    check had found a token in that file and blanked it (bwrap), so the
    stored plan held the token in clear in a cache file (and bwrap, given
    both the blanked file and the note at that path, failed to start).
    The note stands in for the blanked file, with its text: no token in the
    cache, none inside, the user's notes and the sandbox's note both there."""
    token = "ghp_" + os.urandom(18).hex()
    user.write(".claude/CLAUDE.md", f"my notes\nexport GH_TOKEN={token}\n", 0o600)
    user.write("tools/bin/claude", NOTE_PROBE, 0o755)
    env = user.env(PATH=f"{home}/tools/bin:/usr/local/bin:/usr/bin:/bin",
                   SANDBOX_BACKEND=backend, NETWORK_MODE="open")
    for attempt in range(3):     # the first makes the AGENT_STATE entries (too new to store)
        if attempt == 2 and backend == "bwrap":
            # (elsewhere the file is skipped, hidden after the session copy
            # read the hidden paths: such a launch is not stored)
            assert HIT in _agent(user, project, env, dry_run=True)
        out = _agent(user, project, env)
        assert "exit-of-probe" in out and token not in out, out
        if backend == "bwrap":    # blanked (elsewhere the file is not bound: SPEC §6)
            assert "my notes" in out and "You are running inside agent-sandbox" in out, out
    for path in (home / ".local/state/agent-sandbox").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), f"the token is in {path}"
