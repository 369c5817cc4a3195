"""Attacks on the egress plumbing of NETWORK_MODE=allowlist (docs/network.md),
from inside real bwrap and firejail sandboxes as the unprivileged user:

- drive another session's egress proxy (its Unix socket lies in the same
  always-hidden directory; only the own session's socket may be reachable);
- read the proxy's spec, which holds the real API keys, from inside (firejail
  shows the session's egress directory itself: the spec must be gone before
  the sandbox starts).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest

from tests.support.install import INSTALLED

BACKENDS = ("bwrap", "firejail")
MARKER = "REALKEYMARKER" + uuid.uuid4().hex[:8]


def _project(user):
    path = user.project / f"adv{uuid.uuid4().hex[:8]}"
    path.mkdir()
    os.chown(path, user.uid, user.gid)
    return path


def _egress_dirs(user) -> set:
    return set((user.home / ".local/state/agent-sandbox-run").glob("egress-*"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_another_sessions_egress_proxy_is_out_of_reach(user, backend):
    project = _project(user)
    user.set_config("NETWORK_MODE=allowlist\n")
    before = _egress_dirs(user)
    victim = subprocess.Popen([INSTALLED, "run", "--backend", backend, "--", "sleep", "3600"],
                              user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                              cwd=str(project), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not [d for d in _egress_dirs(user) - before if (d / "proxy.sock").exists()]:
            assert time.monotonic() < deadline, "the victim's proxy did not start"
            time.sleep(0.05)
        socket_path = next(d for d in _egress_dirs(user) - before) / "proxy.sock"
        attack = ("import socket, sys\n"
                  "s = socket.socket(socket.AF_UNIX)\n"
                  "try:\n"
                  "    s.connect(sys.argv[1]); s.sendall(b'CONNECT x.test:443 HTTP/1.1\\r\\n\\r\\n')\n"
                  "    print('reached', s.recv(100))\n"
                  "except OSError as exc:\n"
                  "    print('refused', type(exc).__name__)\n")
        result = user.sandbox("/usr/bin/python3", "-c", attack, str(socket_path),
                              options=("--backend", backend), cwd=project)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("refused"), result.stdout
    finally:
        victim.send_signal(signal.SIGTERM)
        victim.wait(15)
        user.set_config("")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_spec_with_the_real_key_is_gone_before_the_sandbox_starts(user, backend):
    project = _project(user)
    user.write(".config/agent-sandbox/agents/keyagent.conf",
               "AGENT_COMMAND=(/bin/sh)\nNETWORK_MODE=allowlist\nAGENT_BROKERS=(anthropic)\n")
    user.set_config("ENABLED_AGENTS+=(keyagent)\n")
    look = ('dir=$(dirname "$AGENT_SANDBOX_EGRESS"); ls -A "$dir"; '
            'cat "$dir"/spec.json 2>/dev/null; '
            'grep -rls "$1" "$dir" /run /tmp "$HOME" | sed "s/^/FOUND /"; '
            'echo "key=$ANTHROPIC_API_KEY"')
    result = user.run([INSTALLED, "--backend", backend, "keyagent", "-c", look, "sh",
                       MARKER[:13]], env=user.env(ANTHROPIC_API_KEY=f"sk-ant-api03-{MARKER}"),
                      cwd=project)
    user.set_config("")
    assert result.returncode == 0, result.stderr
    assert "spec.json" not in result.stdout
    assert MARKER not in result.stdout and "FOUND" not in result.stdout
    assert "key=sk-ant-api03-agentsandbox" in result.stdout
