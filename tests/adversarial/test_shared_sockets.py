"""Sockets and the user's configuration tree as command channels (issue 27,
items 5 and 6; docs/shared-channels.md §5–6), as the unprivileged user:

- a unix socket server the user runs outside (a tmux stand-in) under a home
  shown read-only or writable is not connectable from inside (bwrap,
  firejail), also when the socket appeared after the plan was cached;
  landlock says so in its report;
- in NETWORK_MODE=allowlist the resolver's varlink socket and nscd's (in a
  mount namespace of the test's own, never the host's /run) are absent;
- a configuration tree others can write refuses the launch, also on the
  plan cache's hit path, and doctor says it.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.sockets import ATTACK, Server, attack
from tests.support.waiting import wrote

MOUNT_VIEW = ("bwrap", "firejail")
@pytest.mark.parametrize("access", ["read", "write"])
@pytest.mark.parametrize("backend", MOUNT_VIEW)
def test_a_socket_under_the_shown_home_is_not_connectable(user, project, backend, access):
    path = user.home / ".cache" / "sock" / f"t{uuid.uuid4().hex[:6]}"
    user.write(".cache/sock/neighbour", "still shown\n")
    server = Server(user, path)
    try:
        # The stand-in works outside: the socket is live.
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(path))
        out = attack(user, project, path, backend, HOME_ACCESS=access)
        assert out.startswith("refused FileNotFoundError"), out
        look = user.sandbox("/bin/cat", str(user.home / ".cache/sock/neighbour"),
                            options=("--backend", backend), cwd=project,
                            env=user.env(HOME_ACCESS=access))
        assert look.stdout == "still shown\n", look.stderr
    finally:
        server.close()


@pytest.mark.parametrize("backend", MOUNT_VIEW)
def test_a_socket_made_after_the_plan_was_cached_is_not_connectable(user, project, backend):
    env = user.env(HOME_ACCESS="read")
    user.write(".cache/late/neighbour", "x\n")
    options = ("--backend", backend)
    for _ in range(2):      # the second launch stores its plan
        assert user.sandbox("true", options=options, cwd=project, env=env).returncode == 0
    # A file written in a walked directory (an agent's session files) keeps the plan.
    # (written here: user.write chowns every parent, the home's times with them)
    session = user.home / ".cache" / "late" / "session.jsonl"
    session.write_text("{}\n")
    os.chown(session, user.uid, user.gid)
    wrote()
    dry = user.sandbox("true", options=options + ("--dry-run",), cwd=project, env=env)
    assert "from the compiled plan cache" in dry.stdout, dry.stdout
    server = Server(user, user.home / ".cache" / "late" / f"t{uuid.uuid4().hex[:6]}")
    try:
        out = attack(user, project, server.path, backend, HOME_ACCESS="read")
        assert out.startswith("refused FileNotFoundError"), out
    finally:
        server.close()


def test_landlock_says_its_supervisor_confines_sockets(user, project):
    """Issue 31: where the supervisor runs, the row says yes (the attacks are
    tests/adversarial/test_landlock_supervisor.py)."""
    result = user.sandbox("true", options=("--backend", "landlock", "--dry-run"), cwd=project,
                          env=user.env(HOME_ACCESS="read"))
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "unix_sockets.confined" in line)
    assert line.split()[0] == "yes", line


# ---------------------------------------------------------------- resolver
NAMESPACE = textwrap.dedent("""\
    # As root in a mount namespace of the test's own: /run is a tmpfs here
    # holding stand-ins for systemd-resolved's and nscd's sockets (world-
    # connectable, as theirs are), then the launch as the test user.
    import os, socket, subprocess, sys, threading
    uid, gid, installed, backend, project = sys.argv[1:6]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run"], check=True)
    servers = []
    for directory, name in (("/run/systemd/resolve", "io.systemd.Resolve"),
                            ("/run/nscd", "socket")):
        os.makedirs(directory, mode=0o755)
        s = socket.socket(socket.AF_UNIX)
        s.bind(f"{directory}/{name}"); os.chmod(f"{directory}/{name}", 0o666); s.listen(8)
        servers.append(s)
    with open("/run/systemd/resolve/stub-resolv.conf", "w") as f:
        f.write("nameserver 127.0.0.53\\n")
    def serve(s):
        while True:
            c, _ = s.accept()
            try:
                c.recv(100); c.sendall(b'RESOLVED')
            except OSError:
                pass
            c.close()
    for s in servers:
        threading.Thread(target=serve, args=(s,), daemon=True).start()
    attack = sys.stdin.read()
    env = dict(os.environ, NETWORK_MODE="allowlist", FILTER_PASSWD="false")
    for target in ("/run/systemd/resolve/io.systemd.Resolve", "/run/nscd/socket"):
        r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                            installed, "run", "--backend", backend, "--", "/usr/bin/python3",
                            "-c", attack, target], env=env, cwd=project,
                           capture_output=True, text=True, timeout=60)
        print(target, r.returncode, r.stdout.strip(), r.stderr.strip()[-300:], flush=True)
    r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                        installed, "run", "--backend", backend, "--", "/bin/cat",
                        "/run/systemd/resolve/stub-resolv.conf"], env=env, cwd=project,
                       capture_output=True, text=True, timeout=60)
    print("stub", r.returncode, r.stdout.strip(), flush=True)
    """)


@pytest.mark.parametrize("backend", MOUNT_VIEW)
def test_no_resolver_or_name_service_socket_in_allowlist_mode(user, project, backend):
    assert os.geteuid() == 0, "this test makes a mount namespace of its own: run it as root"
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", NAMESPACE,
         str(user.uid), str(user.gid), INSTALLED, backend, str(project)],
        input=ATTACK, env=user.env(), capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for target in ("/run/systemd/resolve/io.systemd.Resolve", "/run/nscd/socket"):
        line = next(line for line in lines if line.startswith(target))
        assert f"{target} 0 refused" in line, result.stdout
    # the resolver's directory itself stays (its resolv.conf files are no channel)
    assert "stub 0 nameserver 127.0.0.53" in lines, result.stdout


# ---------------------------------------------------------------- config tree
def _config(user):
    return user.home / ".config" / "agent-sandbox"


# The tree itself, a file in it, and (review of issue 27) the directory above
# it: another user who can write ~/.config can move the tree aside.
@pytest.mark.parametrize("relative, mode", [("", 0o777), ("conf.d/zz.conf", 0o664),
                                            ("..", 0o777), ("..", 0o775)])
def test_a_config_tree_others_can_write_refuses_the_launch(user, project, relative, mode):
    user.set_config("")
    user.write(".config/agent-sandbox/conf.d/zz.conf", "", 0o644)
    target = Path(os.path.normpath(_config(user) / relative))
    before = os.stat(target).st_mode & 0o7777
    try:
        for _ in range(2):    # compiled, then stored: the next is the cache's hit path
            assert user.sandbox("true", cwd=project).returncode == 0
        target.chmod(mode)
        wrote()
        result = user.sandbox("true", cwd=project)
        assert result.returncode == 125, result.stderr
        assert f"chmod go-w {target}" in result.stderr
        assert result.stderr.startswith("agent-sandbox: refusing the user configuration")
        assert "Traceback" not in result.stderr
        if relative == "conf.d/zz.conf":
            doctor = user.run([INSTALLED, "doctor"], cwd=project)
            assert f"chmod go-w {target}" in doctor.stdout, doctor.stdout
    finally:
        target.chmod(before)
        (_config(user) / "conf.d" / "zz.conf").unlink()
        wrote()
    assert user.sandbox("true", cwd=project).returncode == 0
