"""The attack on the parent of a read-only overlay or a hidden path: with
HOME_ACCESS=write the user config tree (~/.config/agent-sandbox) is bound
read-only and the state directory (~/.local/state/agent-sandbox: plan cache,
registry, ledger) hidden. A session that renames `.config` or `.local` away
(the mounts would move with them) and makes a new
~/.config/agent-sandbox/sandbox.conf would have the user's next launch obey
it (here HOME_ACCESS=write where the user chose tmpwrite).

Real backends, the unprivileged test user. Held at 04b718e (a review round
that looked for it): bwrap binds each home entry (a mount point: EBUSY),
landlock grants no write on the parents (EACCES), firejail's writable home is
a private view whose renames never reach the real home — the test checks the
outcome outside, not the rename inside."""
from __future__ import annotations

import shutil

import pytest

PLANTER = """
mv ~/.config ~/.config.moved 2>/dev/null && echo moved-config
mkdir -p ~/.config/agent-sandbox 2>/dev/null
printf 'HOME_ACCESS=write\\n' > ~/.config/agent-sandbox/sandbox.conf 2>/dev/null && echo planted
mv ~/.local ~/.local.moved 2>/dev/null && echo moved-local
mkdir -p ~/.local/state/agent-sandbox 2>/dev/null && echo planted-state
echo ran
"""


def _restore(user) -> None:
    for name in (".config", ".local"):
        moved = user.home / f"{name}.moved"
        if moved.exists():
            shutil.rmtree(user.home / name, ignore_errors=True)
            moved.rename(user.home / name)


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_the_parents_of_the_config_tree_and_state_dir_cannot_be_renamed(user, project, backend):
    user.set_config("")
    try:
        result = user.sandbox("/bin/sh", "-c", PLANTER, options=("--backend", backend),
                              env=user.env(HOME_ACCESS="write"), cwd=project)
        assert result.returncode == 0, result.stderr
        assert "ran" in result.stdout
        # Outside: nothing moved, nothing planted (inside, a rename within a
        # throwaway view is harmless).
        assert not (user.home / ".config.moved").exists(), result.stdout
        assert not (user.home / ".local.moved").exists(), result.stdout
        conf = user.home / ".config" / "agent-sandbox" / "sandbox.conf"
        assert "HOME_ACCESS=write" not in conf.read_text()
        # … and the next launch, without the variable, keeps the default home.
        after = user.sandbox("true", options=("--dry-run", "--backend", backend), cwd=project)
        assert after.returncode == 0, after.stderr
        assert "(write)" not in next(line for line in after.stdout.splitlines()
                                     if line.startswith("home:")), after.stdout
    finally:
        _restore(user)
