"""The agent session copies' directory, when the user's configuration makes
the place it lay in writable inside (HOME_WRITABLE+=(.cache): pip, uv, npm
caches), on every backend.

The copies were made in ~/.cache/agent-sandbox/agents/<session>/. A session
replaced `agents` with a symlink to a directory whose every subdirectory
something outside runs (Vim's ~/.vim/pack/*/start/*/plugin/*.vim, pyenv's
plugins/*/etc/pyenv.d): the launcher made the next session's copy root
there by name and granted it writable, and the next session planted a Vim
plugin the user's unsandboxed vim runs (firejail, landlock; bwrap's own
mkdir of the mount point failed after the launcher had made the directory).
Checking the directory by descriptor at launch left a race: a concurrent
session could swap `agents` between the check and the backend's bind. Now
the copies live in the always-hidden run directory
(~/.local/state/agent-sandbox-run/agents), each session granted its own
root alone: no sandbox sees another session's copy or a directory on the
way to it, whatever the home grants.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.install import INSTALLED, PREFIX

# Agents on landlock on this Slurm host: the admin's word (issue 31).
pytestmark = pytest.mark.usefixtures("slurm_boundary_optional")

BACKENDS = ["bwrap", "firejail", "landlock"]
GRANTS = ["HOME_WRITABLE+=(.cache)", "HOME_WRITABLE+=(.local)", "HOME_ACCESS=write"]
HOME_STATE = (".claude", ".claude.json", "tools", ".cache/agent-sandbox", ".vim",
           ".local/state/agent-sandbox-run/agents")


@pytest.fixture
def home(home, user):
    """The shared home (tests/support/homes.py: HOME_STATE cleared) with Claude
    Code's settings and a vim pack in it; the user's test tools go afterwards."""
    user.write(".claude/settings.json", "{}\n", 0o600)
    user.write(".vim/pack/.keep", "")
    yield home
    shutil.rmtree(Path(PREFIX) / "test-tools" / user.name, ignore_errors=True)


def claude(user, project, home, backend, script):
    # root's, outside the home: an agent the sandbox could have written
    # (HOME_ACCESS=write) is refused
    tools = Path(PREFIX) / "test-tools" / user.name
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "claude").write_text("#!/bin/sh\n" + script + "\necho ran\n")
    (tools / "claude").chmod(0o755)
    return user.run([INSTALLED, "--backend", backend, "claude"], cwd=project,
                    env=user.env(PATH=f"{tools}:/usr/bin:/bin", NETWORK_MODE="open",
                                 SANDBOX_QUIET=None))


PLANT = ("mkdir -p ~/.cache/agent-sandbox && cd ~/.cache/agent-sandbox && "
         "mv agents agents.old 2>/dev/null; ln -s ~/.vim/pack agents; "
         'cd "$(dirname "$CLAUDE_CONFIG_DIR")" && cd .. && mv agents agents.old; '
         "ln -s ~/.vim/pack agents; true")
VIM_PLUGIN = ('mkdir -p "$CLAUDE_CONFIG_DIR/start/evil/plugin" && '
              'echo "call system(\'touch ~/planted\')" '
              '> "$CLAUDE_CONFIG_DIR/start/evil/plugin/evil.vim"')


@pytest.mark.parametrize("grant", GRANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_planted_link_to_the_copies_directory_gets_nothing_made_through_it(
        user, project, home, backend, grant):
    user.set_config(grant + "\n")
    first = claude(user, project, home, backend, PLANT)
    assert first.returncode == 0 and "ran" in first.stdout, first.stderr
    second = claude(user, project, home, backend, VIM_PLUGIN)
    assert second.returncode == 0 and "ran" in second.stdout, second.stderr
    assert sorted(p.name for p in (home / ".vim/pack").iterdir()) == [".keep"], \
        "the session copy was made through the planted link"
    copies = home / ".local/state/agent-sandbox-run/agents"
    assert copies.is_dir() and not copies.is_symlink()


@pytest.mark.parametrize("grant", GRANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_session_reaches_another_sessions_copy(user, project, home, backend, grant):
    # A concurrent session's copy root, as its launcher has just made it (the
    # moment a session could swap a directory on the way to it).
    user.set_config(grant + "\n")
    first = claude(user, project, home, backend, 'dirname "$CLAUDE_CONFIG_DIR"')
    copies = Path(first.stdout.split()[0])       # where this version makes them
    other = copies / "0123456789ab"
    other.mkdir(parents=True, exist_ok=True)
    for path in (copies, other):
        os.chown(path, user.uid, user.gid)
        path.chmod(0o700)
    result = claude(user, project, home, backend, """
        parent=$(dirname "$CLAUDE_CONFIG_DIR")
        ls "$parent" 2>/dev/null
        touch "$parent/0123456789ab/planted" 2>/dev/null
        touch "$CLAUDE_CONFIG_DIR/mine" && echo own-writable
        mv "$CLAUDE_CONFIG_DIR" "$parent/moved" 2>/dev/null
        mv "$parent" "$parent.moved" 2>/dev/null
        true""")
    assert result.returncode == 0 and "own-writable" in result.stdout, result.stderr
    assert "0123456789ab" not in result.stdout            # not even listed
    assert list(other.iterdir()) == []
    assert copies.is_dir() and not (copies.parent / "agents.moved").exists()
    assert sorted(p.name for p in copies.iterdir()) == ["0123456789ab"]   # own copy removed
    assert copies == home / ".local/state/agent-sandbox-run/agents"
