"""self.protected says what the next launch runs is writable inside, when it
is (backends/base.py self_protection; docs/shared-channels.md §7): a pipx /
uv tool link or a pip --user script in ~/.local/bin with HOME_ACCESS=write."""
from __future__ import annotations

import pytest

from agent_sandbox.backends.base import Guarantees, self_protection
from agent_sandbox.policy.resolve import resolve_policy
from tests.support.homes import context, settings_for


def _row(home, mode, launcher, install=()):
    settings = settings_for(home, HOME_ACCESS=mode)
    ctx = context(home, install_paths=install)._replace(launcher_paths=tuple(launcher))
    g = Guarantees()
    self_protection(g, resolve_policy(settings, ctx, backend="bwrap"))
    return g.rows["self.protected"]


def test_an_entry_point_in_the_writable_home_is_reported(home):
    entry = str(home / ".local" / "bin" / "agent-sandbox")
    state, why = _row(home, "write", [entry, "/usr/bin/python3"])
    assert state == "partial"
    assert why.startswith(f"{entry} (what your next `agent-sandbox` runs first)")
    assert "HOME_ACCESS=write" in why and "/usr/bin/python3" not in why


@pytest.mark.parametrize("mode", ["tmpwrite", "read"])
def test_the_same_entry_point_is_protected_where_the_home_is_not_writable(home, mode):
    entry = str(home / ".local" / "bin" / "agent-sandbox")
    assert _row(home, mode, [entry]) == ("yes", "")


def test_a_target_below_a_read_only_overlay_is_protected(home):
    venv = home / ".local" / "share" / "uv" / "tools" / "agent-sandbox"
    venv.mkdir(parents=True)
    target = str(venv / "bin" / "agent-sandbox")
    assert _row(home, "write", [target], install=[venv]) == ("yes", "")


def test_an_install_outside_every_writable_tree_is_protected(home):
    assert _row(home, "write", ["/opt/as/venv/bin/agent-sandbox", "/usr/bin/python3"]) \
        == ("yes", "")
