"""The agent session copy's root below ~/.cache/agent-sandbox/agents, when
the user's configuration makes ~/.cache writable inside
(HOME_WRITABLE+=(.cache): pip, uv, npm caches), on every backend.

A session replaces ~/.cache/agent-sandbox/agents with a symlink to a
directory whose every subdirectory something outside runs (Vim's
~/.vim/pack/*/start/*/plugin/*.vim, pyenv's plugins/*/etc/pyenv.d). The
launcher made the next session's copy root there by name (os.mkdir through
the link) and granted it writable: the next session planted a Vim plugin
the user's unsandboxed vim runs (firejail, landlock; bwrap's own mkdir of
the mount point failed after the launcher had made the directory). Now the
launcher walks to its copy root without following a link and refuses a
planted one, saying which path to remove.
"""
from __future__ import annotations

import shutil

import pytest

from tests.conftest import INSTALLED

BACKENDS = ["bwrap", "firejail", "landlock"]
ENTRIES = (".claude", ".claude.json", "tools", ".cache/agent-sandbox", ".cache/as.old",
           ".cache/decoy", ".vim")


@pytest.fixture
def home(user):
    def clean():
        for entry in ENTRIES:
            path = user.home / entry
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
    clean()
    user.write(".claude/settings.json", "{}\n", 0o600)
    user.write(".vim/pack/.keep", "")
    user.set_config("HOME_WRITABLE+=(.cache)\n")
    yield user.home
    clean()


def claude(user, project, home, backend, script):
    user.write("tools/bin/claude", "#!/bin/sh\n" + script + "\necho ran\n", 0o755)
    return user.run([INSTALLED, "--backend", backend, "claude"], cwd=project,
                    env=user.env(PATH=f"{home}/tools/bin:/usr/bin:/bin", NETWORK_MODE="open",
                                 SANDBOX_QUIET=None))


PLANT = ("cd ~/.cache/agent-sandbox && mv agents agents.old && ln -s ~/.vim/pack agents")
VIM_PLUGIN = ('mkdir -p "$CLAUDE_CONFIG_DIR/start/evil/plugin" && '
              'echo "call system(\'touch ~/planted\')" '
              '> "$CLAUDE_CONFIG_DIR/start/evil/plugin/evil.vim"; '
              # and the link put back, so that the launcher's removal misses it
              'cd ~/.cache/agent-sandbox && rm agents && mkdir agents')


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_planted_link_to_the_copy_roots_is_refused(user, project, home, backend):
    first = claude(user, project, home, backend, PLANT)
    assert first.returncode == 0 and "ran" in first.stdout, first.stderr
    assert (home / ".cache/agent-sandbox/agents").is_symlink()

    second = claude(user, project, home, backend, VIM_PLUGIN)
    assert sorted(p.name for p in (home / ".vim/pack").iterdir()) == [".keep"], \
        "the launcher made the session copy through the planted link"
    assert second.returncode == 125 and "ran" not in second.stdout, second.stderr
    assert f"{home}/.cache/agent-sandbox/agents is a symlink" in second.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_planted_link_above_the_copy_roots_is_refused(user, project, home, backend):
    # the same one level up: ~/.cache/agent-sandbox itself a link to a
    # directory holding an `agents` that leads where the session wants
    first = claude(user, project, home, backend,
                   "cd ~/.cache && mv agent-sandbox as.old && mkdir -p ~/.cache/decoy && "
                   "ln -s ~/.vim/pack ~/.cache/decoy/agents && "
                   "ln -s ~/.cache/decoy agent-sandbox")
    assert first.returncode == 0 and "ran" in first.stdout, first.stderr

    second = claude(user, project, home, backend, 'mkdir -p "$CLAUDE_CONFIG_DIR/start/x"')
    assert sorted(p.name for p in (home / ".vim/pack").iterdir()) == [".keep"]
    assert second.returncode == 125 and "ran" not in second.stdout, second.stderr
    assert f"{home}/.cache/agent-sandbox is a symlink" in second.stderr
