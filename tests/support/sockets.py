"""A unix socket server the test user runs outside the sandbox (a tmux
stand-in that answers every connection), and the attack on it from inside:
connect, send a command, print what came back."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.support.waiting import wrote

# Inside: connect to the socket, send a command, print what came back.
ATTACK = textwrap.dedent("""\
    import socket, sys
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1]); s.sendall(b'new-window -d evil')
        print('reached', s.recv(100))
    except OSError as exc:
        print('refused', type(exc).__name__)
    """)


class Server:
    """A unix socket server the user runs outside the sandbox; it answers
    every connection (what tmux would do with the command it got)."""

    def __init__(self, user, path):
        self.path = path
        code = textwrap.dedent("""\
            import os, socket, sys
            s = socket.socket(socket.AF_UNIX)
            s.bind(sys.argv[1]); s.listen(8); print('up', flush=True)
            while True:
                c, _ = s.accept()
                try:
                    c.recv(100); c.sendall(b'RAN-OUTSIDE')
                except OSError:
                    pass
                c.close()
            """)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chown(path.parent, user.uid, user.gid)
        self.process = subprocess.Popen([sys.executable, "-c", code, str(path)],
                                        user=user.uid, group=user.gid, extra_groups=[],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "up"
        wrote()

    def close(self):
        self.process.kill()
        self.process.wait(10)
        self.path.unlink(missing_ok=True)


def attack(user, project, path, backend, **env):
    result = user.sandbox("/usr/bin/python3", "-c", ATTACK, str(path),
                          options=("--backend", backend), cwd=project, env=user.env(**env))
    assert result.returncode == 0, result.stderr
    return result.stdout


class DatagramServer:
    """A pathname datagram socket the user serves outside the sandbox (a
    stand-in for /dev/log or journald's socket): it keeps every datagram it
    receives; `close()` returns them."""

    def __init__(self, user, path):
        import uuid

        self.path = path
        self.token = b"quit-" + uuid.uuid4().hex.encode()
        code = textwrap.dedent("""\
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind(sys.argv[1]); print('up', flush=True)
            got = []
            while True:
                data = s.recv(65536)
                if data == sys.argv[2].encode():
                    break
                got.append(data)
            print(repr(got), flush=True)
            """)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chown(path.parent, user.uid, user.gid)
        self.process = subprocess.Popen([sys.executable, "-c", code, str(path),
                                         self.token.decode()],
                                        user=user.uid, group=user.gid, extra_groups=[],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "up"
        wrote()

    def close(self) -> list:
        """The datagrams it received (it stops at our token)."""
        import ast
        import socket

        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stop:
                stop.sendto(self.token, str(self.path))
            out, _ = self.process.communicate(timeout=10)
            return ast.literal_eval(out.strip())
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            self.path.unlink(missing_ok=True)
