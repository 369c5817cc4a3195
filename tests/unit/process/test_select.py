"""process/select.py's probe cache: which verdicts are remembered."""
from __future__ import annotations

import types

import pytest

from agent_sandbox import backends
from agent_sandbox.process import select


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


def test_an_option_probe_runs_its_own_argv_and_keeps_its_own_verdict(tmp_path, monkeypatch):
    """bwrap's PRIVATE_MOUNTS probe: its verdict is remembered apart from the
    backend's (one may fail where the other passes), and forget_probe drops both."""
    _probe_with(monkeypatch, "exit 0")
    cache = tmp_path / ".local/state/agent-sandbox/cache"
    assert select.probe_backend("bwrap", "/bin/sh", str(tmp_path))[0]
    failing = ["/bin/sh", "-c", "echo 'unshare: unshare failed: Operation not permitted' >&2; "
               "exit 1"]
    assert select.probe_backend("bwrap", "/bin/sh", str(tmp_path), argv=failing,
                                kind="private-mounts") == (
        False, "unshare: unshare failed: Operation not permitted")
    assert (cache / "probe-bwrap.marshal").exists()
    assert (cache / "probe-bwrap-private-mounts.marshal").exists()
    assert select.probe_backend("bwrap", "/bin/sh", str(tmp_path))[0]     # still its own
    monkeypatch.setattr(select.pwd, "getpwuid",
                        lambda uid: types.SimpleNamespace(pw_dir=str(tmp_path)))
    select.forget_probe("bwrap")
    assert not any(cache.glob("probe-bwrap*"))
