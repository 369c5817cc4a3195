"""process/select.py's probe cache: which verdicts are remembered, and on what."""
from __future__ import annotations

import types

import pytest

from agent_sandbox import backends
from agent_sandbox.process import select


def _probe_with(monkeypatch, script: str) -> None:
    """bwrap's probe replaced by a shell script (the table loads lazily)."""
    monkeypatch.setitem(backends.BACKENDS._loaded, "bwrap", types.SimpleNamespace(
        probe_argv=lambda path, features=None: ["/bin/sh", "-c", script]))


@pytest.mark.parametrize("stderr", [
    "bwrap: No permission to create a new namespace",     # the host's setting of the moment
    "bwrap: Creating new namespace failed: Resource temporarily unavailable",
    "bwrap: error while loading shared libraries: libcap.so.2: cannot open shared object file",
    "bwrap: Unknown option --disable-userns",
])
def test_a_failed_probe_is_never_remembered(tmp_path, monkeypatch, stderr):
    """Issue 30: a failure's cause (a library installed later, a sysctl, an
    AppArmor profile) is not among the inputs, so no failure is cached."""
    script = f"echo '{stderr}' >&2; exit 1"
    _probe_with(monkeypatch, script)
    verdict = select.probe_backend("bwrap", "/bin/sh", str(tmp_path))
    assert verdict[0] is False and verdict[1] and len(verdict) == 3
    assert not (tmp_path / ".local/state/agent-sandbox/cache/probe-bwrap.marshal").exists()


def test_a_library_installed_after_a_failed_probe_is_seen_at_the_next_probe(tmp_path,
                                                                           monkeypatch):
    """The stale verdict of issue 30 (an Ubuntu 24.04 node): firejail failed
    for a missing libapparmor.so.1; once it is installed the next launch
    works, without `doctor`."""
    library = tmp_path / "libapparmor.so.1"
    _probe_with(monkeypatch, f"test -e {library} || {{ echo 'bwrap: error while loading shared "
                "libraries: libapparmor.so.1: cannot open shared object file: No such file or "
                "directory' >&2; exit 127; }")
    failed = select.probe_backend("bwrap", "/bin/sh", str(tmp_path))
    assert failed[0] is False and "libapparmor.so.1 is missing" in failed[1]
    assert "libapparmor1" in failed[2]
    library.write_bytes(b"")
    assert select.probe_backend("bwrap", "/bin/sh", str(tmp_path)) == (True, "")


def _counting(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    _probe_with(monkeypatch, f"echo x >> {runs}")
    return lambda: len(runs.read_text().splitlines()) if runs.exists() else 0


def test_a_passed_verdict_is_keyed_on_each_binary_the_probe_ran(tmp_path, monkeypatch):
    """The PRIVATE_MOUNTS probe runs /usr/bin/unshare: its verdict is keyed on
    that binary too (issue 30: it was keyed on bwrap alone), so a changed
    unshare is probed again."""
    home = tmp_path / "home"
    unshare = tmp_path / "unshare"
    runs = tmp_path / "runs"
    unshare.write_text(f"#!/bin/sh\necho x >> {runs}\n")
    unshare.chmod(0o755)
    argv = [str(unshare), "--user", "--", "/bin/sh"]
    count = lambda: len(runs.read_text().splitlines())   # noqa: E731
    _probe_with(monkeypatch, "exit 0")
    for _ in range(2):
        assert select.probe_backend("bwrap", "/bin/sh", str(home), argv=argv,
                                    kind="private-mounts") == (True, "")
    assert count() == 1
    replacement = tmp_path / "unshare.new"           # another binary at the same path
    replacement.write_text(unshare.read_text() + "# 2.32\n")
    replacement.chmod(0o755)
    replacement.rename(unshare)
    assert select.probe_backend("bwrap", "/bin/sh", str(home), argv=argv,
                                kind="private-mounts") == (True, "")
    assert count() == 2


@pytest.mark.parametrize("table", ["USERNS_SYSCTLS", "APPARMOR_STATE"])
def test_a_passed_verdict_is_keyed_on_the_userns_sysctls_and_the_apparmor_state(
        tmp_path, monkeypatch, table):
    state = tmp_path / "state"
    state.write_text("0\n")
    monkeypatch.setattr(select, table, (str(state),))
    count = _counting(tmp_path, monkeypatch)
    home = str(tmp_path / "home")
    select.probe_backend("bwrap", "/bin/sh", home)
    select.probe_backend("bwrap", "/bin/sh", home)
    assert count() == 1
    state.write_text("1\n")      # a sysctl changed, a profile loaded
    select.probe_backend("bwrap", "/bin/sh", home)
    assert count() == 2


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
    failed = select.probe_backend("bwrap", "/bin/sh", str(tmp_path), argv=failing,
                                  kind="private-mounts")
    assert failed[0] is False
    assert failed[1] == ("/bin/sh may not make a user namespace here (unshare: unshare failed: "
                         "Operation not permitted)")
    assert (cache / "probe-bwrap.marshal").exists()
    assert not (cache / "probe-bwrap-private-mounts.marshal").exists()   # a failure
    assert select.probe_backend("bwrap", "/bin/sh", str(tmp_path), argv=["/bin/true"],
                                kind="private-mounts")[0]
    assert (cache / "probe-bwrap-private-mounts.marshal").exists()
    assert select.probe_backend("bwrap", "/bin/sh", str(tmp_path))[0]     # still its own
    monkeypatch.setattr(select.pwd, "getpwuid",
                        lambda uid: types.SimpleNamespace(pw_dir=str(tmp_path)))
    select.forget_probe("bwrap")
    assert not any(cache.glob("probe-bwrap*"))
