"""Every Slurm authentication path is unreachable inside, on every backend
(issue 32 item 1): besides munge's socket, auth/slurm's — sackd's sockets
/run/slurm/sack.socket, /run/slurmctld/sack.socket, /run/slurmdbd/sack.socket,
the key files slurm.key and slurm.jwks beside slurm.conf, and the configless
cache /run/slurm/conf. This host runs Slurm 22.05 with munge, so stand-ins are
put where 24.11's auth_slurm.so looks: root's listening sockets that answer
every connection (what sackd would: a signed credential) and world-readable
key files (so the file mode does not hide them; sites make them 0600, the
sandbox must not rely on it). The stand-ins are removed afterwards; only what
the fixture made is removed.

Failed before: on landlock without the supervisor every socket was reached,
and with it /etc/slurm/slurm.key and slurm.jwks were read (Landlock granted
/etc whole; bwrap and firejail mask /etc/slurm) — backends/landlock.py rules
now leaves the Slurm configuration directories out as the others mask them.
The real 24.11 sackd is tested in tests/platform/test_slurm2411.py."""
from __future__ import annotations

import os
import socket
import textwrap
import threading

import pytest

BACKENDS = ("bwrap", "firejail", "landlock")
SOCKETS = ("/run/slurm/sack.socket", "/run/slurmctld/sack.socket",
           "/run/slurmdbd/sack.socket")
KEYS = ("/etc/slurm/slurm.key", "/etc/slurm/slurm.jwks", "/run/slurm/conf/slurm.conf")

PROBE = textwrap.dedent("""\
    import socket, sys
    for path in sys.argv[1].split(','):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path); s.sendall(b'x'); print('reached', path, s.recv(32))
        except OSError as exc:
            print('refused', path, type(exc).__name__)
    for path in sys.argv[2].split(','):
        try:
            print('read', path, open(path, 'rb').read(32))
        except OSError as exc:
            print('unreadable', path, type(exc).__name__)
    """)


@pytest.fixture(scope="module")
def sack_standins():
    """Root's stand-ins for sackd's sockets and auth/slurm's files; every
    directory and file made here is removed afterwards (nothing else)."""
    if os.geteuid() != 0:
        pytest.fail("the sack stand-ins need root (the integration suite runs as root)")
    made_dirs, made_files, servers = [], [], []
    for path in SOCKETS + KEYS:
        directory = os.path.dirname(path)
        missing = []
        while not os.path.isdir(directory):
            missing.append(directory)
            directory = os.path.dirname(directory)
        for directory in reversed(missing):
            os.mkdir(directory, 0o755)
            made_dirs.append(directory)
        if os.path.lexists(path):
            pytest.fail(f"{path} exists on this host: the stand-in would replace a real one")
    stop = threading.Event()

    def serve(listener):
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(16)
                    conn.sendall(b"SACK-CREDENTIAL")
                except OSError:
                    pass

    try:
        for path in SOCKETS:
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(path)
            made_files.append(path)
            os.chmod(path, 0o777)
            listener.listen(8)
            servers.append(listener)
            threading.Thread(target=serve, args=(listener,), daemon=True).start()
        for path in KEYS:
            with open(path, "w") as handle:
                handle.write("STANDIN-SECRET\n")
            made_files.append(path)
            os.chmod(path, 0o644)
        yield
    finally:
        stop.set()
        for listener in servers:
            listener.close()
        for path in made_files:
            os.unlink(path)
        for directory in reversed(made_dirs):
            os.rmdir(directory)


def test_the_standins_are_reachable_outside(sack_standins, user):
    """The control: the test user reaches each socket and reads each file
    outside the sandbox, so a refusal inside is the sandbox's doing."""
    import subprocess
    import sys

    result = subprocess.run(
        ["runuser", "-u", user.name, "--", sys.executable, "-c", PROBE,
         ",".join(SOCKETS), ",".join(KEYS)], capture_output=True, text=True, timeout=30)
    assert result.stdout.count("reached") == len(SOCKETS), result.stdout + result.stderr
    assert result.stdout.count("read ") == len(KEYS), result.stdout + result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_sack_socket_or_key_is_reachable_inside(sack_standins, user, project, backend):
    result = user.sandbox("/usr/bin/python3", "-c", PROBE, ",".join(SOCKETS), ",".join(KEYS),
                          options=("--backend", backend), cwd=project, env=user.env(),
                          timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for path in SOCKETS:
        assert f"refused {path}" in "\n".join(lines), result.stdout
    for path in KEYS:
        assert any(line.startswith(f"unreadable {path} ") for line in lines), result.stdout
    assert "STANDIN" not in result.stdout and "SACK-CREDENTIAL" not in result.stdout, \
        result.stdout
