"""The calls Landlock cannot judge (issue 31 item 1, SPEC §5a,
docs/supervisor.md), attacked as the unprivileged user on every backend —
landlock by its supervisor, bwrap and firejail by their mount views:

- a unix socket the user runs outside (tmux, ssh-agent, the D-Bus bus) is
  unreachable in a writable home, also with NETWORK_MODE=isolated; another
  session's egress proxy socket; the munge socket; the real /usr/bin/srun
  runs nothing unsandboxed;
- chmod/chown/utime/setxattr on hidden and read-only paths are refused while
  they work in the project;
- a thread swapping the path buffer while connect() waits for the verdict
  never reaches the outside socket;
- killing the launcher (whose thread is the supervisor) kills the sandbox;
- a datagram socket the user serves outside (a stand-in for /dev/log)
  receives nothing sent with sendmsg() and a destination, from a socket()
  or a socketpair() (landlock: no unix datagram socket can be made).
All of these failed on landlock before the supervisor (the datagram one
before unix datagram sockets were refused).
"""
from __future__ import annotations

import os
import textwrap
import time
import uuid

import pytest

from tests.support.launcher import kill_launcher_when_ready
from tests.support.install import INSTALLED
from tests.support.sockets import DatagramServer, Server, attack

BACKENDS = ("bwrap", "firejail", "landlock")


@pytest.mark.parametrize("network", ["open", "isolated"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_socket_the_user_runs_outside_is_unreachable(user, project, backend, network):
    """tmux's socket in a writable home: the attack of the issue."""
    server = Server(user, user.home / ".cache" / "tmux" / f"t{uuid.uuid4().hex[:6]}")
    try:
        out = attack(user, project, server.path, backend, HOME_ACCESS="write",
                     NETWORK_MODE=network)
        assert out.startswith("refused"), out
    finally:
        server.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_another_sessions_egress_socket_is_unreachable(user, project, backend):
    from agent_sandbox.services.chaperon import session_parent

    other = os.path.join(session_parent(str(user.home)), f"egress-{uuid.uuid4().hex[:12]}")
    server = Server(user, __import__("pathlib").Path(other) / "proxy.sock")
    try:
        out = attack(user, project, server.path, backend)
        assert out.startswith("refused"), out
    finally:
        server.close()
        os.rmdir(other)


SRUN = textwrap.dedent("""\
    import socket, subprocess, sys
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect('/run/munge/munge.socket.2'); print('munge reached')
    except OSError as exc:
        print('munge refused', type(exc).__name__)
    try:
        r = subprocess.run(['/usr/bin/srun', '-N1', '-t1', '/bin/grep', 'NoNewPrivs',
                            '/proc/self/status'], capture_output=True, text=True, timeout=40)
        print('srun', r.returncode, r.stdout.strip().replace('\\t', ' '))
    except OSError as exc:
        print('srun refused', type(exc).__name__)
    """)


@pytest.mark.parametrize("backend", ("bwrap", "landlock"))
def test_munge_is_unreachable_and_the_real_srun_runs_nothing_unsandboxed(
        user, project, backend, slurm_cluster):
    assert os.path.exists("/run/munge/munge.socket.2"), "munged is not running"
    result = user.sandbox("/usr/bin/python3", "-c", SRUN, options=("--backend", backend),
                          cwd=project, env=user.env(), timeout=90)
    assert result.returncode == 0, result.stderr
    assert "munge refused" in result.stdout, result.stdout
    # bwrap: /usr/bin/srun is the stub (a sandboxed job); landlock: refused.
    assert "NoNewPrivs: 0" not in result.stdout, result.stdout


METADATA = textwrap.dedent("""\
    import os, sys
    def attempt(what, call):
        try:
            call(); print(what + '|done')
        except OSError as exc:
            print(what + '|refused ' + str(exc.errno))
    for label, path in (('hidden', sys.argv[1]), ('readonly', sys.argv[2]), ('project', 'mine')):
        if label == 'project':
            open(path, 'w').close()
        attempt(label + ' chmod', lambda: os.chmod(path, 0o666))
        attempt(label + ' chown', lambda: os.chown(path, os.getuid(), os.getgid()))
        attempt(label + ' utime', lambda: os.utime(path, (1, 1)))
        attempt(label + ' setxattr', lambda: os.setxattr(path, 'user.planted', b'1'))
        if label == 'project':
            fd = os.open(path, os.O_RDONLY)
            attempt('project fchmod', lambda: os.fchmod(fd, 0o600))
    fd = os.open(sys.argv[2], os.O_RDONLY)
    attempt('readonly fchmod', lambda: os.fchmod(fd, 0o666))
    attempt('readonly fchown', lambda: os.fchown(fd, os.getuid(), os.getgid()))
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_metadata_outside_the_writable_paths_is_refused(user, project, backend):
    key = user.home / ".ssh" / "id_rsa"               # hidden in every sandbox
    bashrc = user.home / ".bashrc"                    # read-only with HOME_ACCESS=read
    for path in (key, bashrc):          # left by a run on code without the supervisor
        if "user.planted" in os.listxattr(path):
            os.removexattr(path, "user.planted")
    before = {p: (p.stat().st_mode, p.stat().st_mtime) for p in (key, bashrc)}
    result = user.sandbox("/usr/bin/python3", "-c", METADATA, str(key), str(bashrc),
                          options=("--backend", backend), cwd=project,
                          env=user.env(HOME_ACCESS="read"))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("|") for line in result.stdout.splitlines())
    assert len(lines) == 15, result.stdout
    for what, outcome in lines.items():
        if what.startswith("project"):
            assert outcome == "done", result.stdout
        elif what.startswith("hidden"):
            assert outcome != "done", result.stdout
    # The real files are untouched (firejail's read-only home may show a copy,
    # whose metadata the sandbox may change: the host's file keeps its own).
    assert {p: (p.stat().st_mode, p.stat().st_mtime) for p in (key, bashrc)} == before
    assert all("user.planted" not in os.listxattr(p) for p in (key, bashrc))
    assert (project / "mine").stat().st_mode & 0o777 == 0o600


RACE = textwrap.dedent("""\
    import ctypes, os, socket, struct, sys, threading
    libc = ctypes.CDLL(None, use_errno=True)
    mine = socket.socket(socket.AF_UNIX); mine.bind('own.sock'); mine.listen(512)
    good = struct.pack('=H', socket.AF_UNIX) + b'own.sock'.ljust(106, b'\\0')
    bad = struct.pack('=H', socket.AF_UNIX) + sys.argv[1].encode().ljust(106, b'\\0')
    address = ctypes.create_string_buffer(good, 110)
    stop = False
    def swap():
        while not stop:
            ctypes.memmove(address, bad, 110); ctypes.memmove(address, good, 110)
    threading.Thread(target=swap, daemon=True).start()
    reached = 0
    for _ in range(400):
        s = socket.socket(socket.AF_UNIX)
        if libc.connect(s.fileno(), address, 110) == 0:
            # The listener's name: ours, or the outside server's.
            if s.getpeername() != 'own.sock':
                reached += 1
        s.close()
    stop = True
    print('reached', reached)
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_thread_swapping_the_path_gains_nothing(user, project, backend):
    server = Server(user, user.home / ".cache" / "race" / f"t{uuid.uuid4().hex[:6]}")
    try:
        result = user.sandbox("/usr/bin/python3", "-c", RACE, str(server.path),
                              options=("--backend", backend), cwd=project,
                              env=user.env(HOME_ACCESS="write"), timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "reached 0", result.stdout
    finally:
        server.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_killing_the_supervisor_kills_the_sandbox(user, project, backend):
    """On landlock the supervisor is a thread of the launcher: SIGKILL it and
    nothing of the sandbox may go on (unsupervised)."""
    marker = f"supervised-{uuid.uuid4().hex[:8]}"
    ready = project / "ready"
    argv = [INSTALLED, "run", "--backend", backend, "--", "/bin/sh", "-c",
            f"touch ready; exec -a {marker} /bin/sleep 60"]
    kill_launcher_when_ready(user, project, argv, ready, user.env())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [pid for pid in os.listdir("/proc") if pid.isdigit()
                and _cmdline(pid).startswith(marker)]
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"sandboxed processes outlived the supervisor: {left}"


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")[0].decode("utf-8", "replace")
    except OSError:
        return ""


OWN = textwrap.dedent("""\
    import os, socket, sys, threading
    path = os.path.join(sys.argv[1], 'own-%d.sock' % os.getpid())
    server = socket.socket(socket.AF_UNIX); server.bind(path); server.listen(1)
    threading.Thread(target=lambda: server.accept()[0].sendall(b'mine'), daemon=True).start()
    client = socket.socket(socket.AF_UNIX); client.connect(path)
    print(client.recv(10).decode()); os.unlink(path)
    mine = socket.socket(socket.AF_UNIX); mine.bind('\\0own-abstract-%d' % os.getpid())
    mine.listen(1)
    other = socket.socket(socket.AF_UNIX); other.connect('\\0own-abstract-%d' % os.getpid())
    print('abstract ok')
    held = []
    for fd in os.listdir('/proc/self/fd'):
        try:
            held.append(os.readlink('/proc/self/fd/' + fd))
        except OSError:
            pass                  # the listing's own descriptor
    print('listeners', sum('seccomp' in link for link in held))
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sockets_the_sandbox_bound_itself_stay_connectable(user, project, backend):
    """Not a path merely in a writable grant: one a process of this sandbox
    holds (a server it started in ~/.cache with HOME_ACCESS=write), and an
    abstract socket it bound. The supervisor's listener never stays inside."""
    (user.home / ".cache").mkdir(exist_ok=True)
    result = user.sandbox("/usr/bin/python3", "-c", OWN, str(user.home / ".cache"),
                          options=("--backend", backend), cwd=project,
                          env=user.env(HOME_ACCESS="write"))
    assert result.returncode == 0, result.stderr
    # ... and the supervisor's listener is not among the sandbox's descriptors.
    assert result.stdout.split() == ["mine", "abstract", "ok", "listeners", "0"], result.stdout


DATAGRAM = textwrap.dedent("""\
    import ctypes, os, socket, sys
    target = sys.argv[1]
    SYS_SOCKET = {'x86_64': 41, 'aarch64': 198}[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    pairs = []
    def pair(kind):
        pairs.append(socket.socketpair(socket.AF_UNIX, kind))
        return pairs[-1][0]
    def high_bits():
        # socket() takes ints: the kernel ignores the registers' upper halves.
        fd = libc.syscall(ctypes.c_long(SYS_SOCKET), ctypes.c_long((1 << 32) | socket.AF_UNIX),
                          ctypes.c_long((1 << 32) | socket.SOCK_DGRAM), ctypes.c_long(0))
        if fd < 0:
            raise OSError(ctypes.get_errno(), 'socket')
        return socket.socket(fileno=fd)
    routes = (
        ('socket', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
        ('socket-flags', lambda: socket.socket(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)),
        ('socket-high-bits', high_bits),
        ('socketpair', lambda: pair(socket.SOCK_DGRAM)),
        ('socketpair-flags', lambda: pair(socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)),
        # The kernel drops a seqpacket's destination: it goes to the peer.
        ('seqpacket', lambda: pair(socket.SOCK_SEQPACKET)),
    )
    for label, make in routes:
        try:
            s = make()
        except OSError as exc:
            print(label + '|refused ' + str(exc.errno)); continue
        try:
            s.sendmsg([b'from-' + label.encode()], [], 0, target)
            print(label + '|sent')
        except OSError as exc:
            print(label + '|send failed ' + str(exc.errno))
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_datagram_socket_outside_receives_nothing(user, project, backend):
    """sendmsg()'s destination lies in memory, out of the supervisor's reach:
    on landlock no unix datagram socket can be made (socket(), socketpair(),
    also with the upper halves of the registers set); bwrap and firejail
    carve the socket out of the home they show."""
    server = DatagramServer(user, user.home / ".cache" / "log" / f"d{uuid.uuid4().hex[:6]}")
    try:
        result = user.sandbox("/usr/bin/python3", "-c", DATAGRAM, str(server.path),
                              options=("--backend", backend), cwd=project,
                              env=user.env(HOME_ACCESS="write"))
    finally:
        received = server.close()
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("|") for line in result.stdout.splitlines())
    assert len(lines) == 6, result.stdout
    assert received == [], (received, result.stdout)
    if backend == "landlock":
        for label, outcome in lines.items():
            if label != "seqpacket":
                assert outcome == "refused 13", result.stdout


UDP = textwrap.dedent("""\
    import ctypes, os, socket, sys
    SYS_SOCKET = {'x86_64': 41, 'aarch64': 198}[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    # socket() takes ints: AF_INET with the register's upper half set.
    fd = libc.syscall(ctypes.c_long(SYS_SOCKET), ctypes.c_long((1 << 32) | socket.AF_INET),
                      ctypes.c_long(socket.SOCK_DGRAM), ctypes.c_long(0))
    if fd < 0:
        print('refused', ctypes.get_errno()); sys.exit()
    try:
        socket.socket(fileno=fd).sendmsg([b'exfiltrated'], [], 0, ('127.0.0.1', int(sys.argv[1])))
        print('sent')
    except OSError as exc:
        print('send failed', exc.errno)
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolated_makes_no_udp_socket_by_the_registers_upper_half(user, project, backend):
    """NETWORK_MODE=isolated: a family compared on all 64 bits let
    socket(0x1_00000002, SOCK_DGRAM) make a UDP socket on landlock, and
    sendmsg() (whose destination the supervisor does not see) sent with it."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.setblocking(False)
        result = user.sandbox("/usr/bin/python3", "-c", UDP, str(server.getsockname()[1]),
                              options=("--backend", backend), cwd=project,
                              env=user.env(NETWORK_MODE="isolated"))
        assert result.returncode == 0, result.stderr
        try:
            received = server.recv(100)
        except BlockingIOError:
            received = None
    assert received is None, result.stdout
    if backend == "landlock":
        assert result.stdout.strip() == "refused 13", result.stdout


KEPT = textwrap.dedent("""\
    import os, socket, sys
    # The caller made a datagram socket outside and hands it in (--keep-fd 7).
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    os.dup2(s.fileno(), 7)
    inner = ("import socket, sys\\n"
             "try:\\n"
             "    socket.socket(fileno=7).sendmsg([b'kept'], [], 0, sys.argv[1]); print('sent')\\n"
             "except OSError as exc:\\n"
             "    print('send failed', exc.errno)\\n")
    os.execv(sys.argv[1], [sys.argv[1], 'run', '--backend', sys.argv[2], '--keep-fd', '7', '--',
                           '/usr/bin/python3', '-c', inner, sys.argv[3]])
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_datagram_socket_handed_in_reaches_nothing_outside(user, project, backend):
    """The only descriptors from outside are 0-2 and --keep-fd's: on landlock
    a unix datagram socket among them fails the launch (exit 125)."""
    server = DatagramServer(user, user.home / ".cache" / "log" / f"k{uuid.uuid4().hex[:6]}")
    try:
        result = user.run(["/usr/bin/python3", "-c", KEPT, INSTALLED, backend, str(server.path)],
                          cwd=project, env=user.env(HOME_ACCESS="write"))
    finally:
        received = server.close()
    assert received == [], (received, result.stdout, result.stderr)
    if backend == "landlock":
        assert result.returncode == 125, (result.stdout, result.stderr)
        assert "descriptor 7 is a unix datagram socket" in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert "send failed" in result.stdout, result.stdout
