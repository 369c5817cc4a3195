"""launch/select.py's probe cache: which verdicts are remembered."""
from __future__ import annotations

import types

import pytest

from agent_sandbox import backends
from agent_sandbox.launch import select


def _probe_with(monkeypatch, script: str) -> None:
    """bwrap's probe replaced by a shell script (the table loads lazily)."""
    monkeypatch.setitem(backends.BACKENDS._loaded, "bwrap", types.SimpleNamespace(
        probe_argv=lambda path: ["/bin/sh", "-c", script]))


@pytest.mark.parametrize("stderr, remembered", [
    ("bwrap: No permission to create a new namespace", True),     # the host's setting
    ("bwrap: Creating new namespace failed: Resource temporarily unavailable", False),
    ("bwrap: Creating new namespace failed: No space left on device", False),
    ("bwrap: Cannot allocate memory", False),
])
def test_only_a_failure_that_is_not_for_lack_of_resources_is_remembered(tmp_path, monkeypatch,
                                                                        stderr, remembered):
    script = f"echo '{stderr}' >&2; exit 1"
    _probe_with(monkeypatch, script)
    assert select.probe_backend("bwrap", "/bin/sh", str(tmp_path)) == (False, stderr)
    assert (tmp_path / ".local/state/agent-sandbox/cache/probe-bwrap.marshal").exists() \
        == remembered


def test_a_probe_killed_by_a_signal_is_not_remembered(tmp_path, monkeypatch):
    _probe_with(monkeypatch, "kill -9 $$")
    assert not select.probe_backend("bwrap", "/bin/sh", str(tmp_path))[0]
    assert not (tmp_path / ".local/state/agent-sandbox/cache/probe-bwrap.marshal").exists()
