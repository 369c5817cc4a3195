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
        # The sandbox's own listener stays as a socket file in the project; a
        # later test that shows the home (HOME_ACCESS=read) would find it and
        # carve ~/proj around it (test_mount_economy failed after this one).
        (project / "own.sock").unlink(missing_ok=True)


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
    holds (a server it started in a home directory with HOME_ACCESS=write), and an
    abstract socket it bound. The supervisor's listener never stays inside."""
    # A directory of its own at the home's top, made before the launch: on
    # landlock HOME_ACCESS=write grants the home's entries one by one, and a
    # ~/.cache holding read-only package caches (the shared-channels rule) is
    # carved, so nothing new can be made at its top (docs/backends.md).
    served = user.home / f"served-{uuid.uuid4().hex[:6]}"
    served.mkdir()
    os.chown(served, user.uid, user.gid)
    try:
        result = user.sandbox("/usr/bin/python3", "-c", OWN, str(served),
                              options=("--backend", backend), cwd=project,
                              env=user.env(HOME_ACCESS="write"))
        assert result.returncode == 0, result.stderr
    finally:
        import shutil

        shutil.rmtree(served, ignore_errors=True)
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


# ------------------------------------------------------------ the review's holes
ABSTRACT = textwrap.dedent("""\
    import socket, sys
    name = sys.argv[1].encode()
    # A name whose /proc/net/unix line starts with the outside server's name.
    mine = socket.socket(socket.AF_UNIX)
    mine.bind(b'\\0' + name + b' anything\\n00000000: 00000002 0 @' + name); mine.listen(1)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(b'\\0' + name); s.sendall(b'x'); print('reached', s.recv(100))
    except OSError as exc:
        print('refused', type(exc).__name__)
    """)


def test_an_abstract_name_forged_in_proc_net_unix_reaches_nothing(user, project):
    """The outside @NAME must not become connectable because a socket inside
    is bound to b"\\0NAME anything" (/proc/net/unix prints names raw)."""
    import subprocess
    import sys

    name = f"outside-{uuid.uuid4().hex[:8]}"
    code = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
            "s.bind(b'\\0' + sys.argv[1].encode()); s.listen(8); print('up', flush=True)\n"
            "while True:\n    c, _ = s.accept(); c.sendall(b'RAN-OUTSIDE'); c.close()\n")
    server = subprocess.Popen([sys.executable, "-c", code, name], user=user.uid, group=user.gid,
                              extra_groups=[], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "up"
        result = user.sandbox("/usr/bin/python3", "-c", ABSTRACT, name,
                              options=("--backend", "landlock"), cwd=project, env=user.env())
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("refused"), result.stdout
    finally:
        server.kill()
        server.wait(10)


LINKED = textwrap.dedent("""\
    import os, socket, sys
    for how in ('link', 'rename'):
        try:
            (os.link if how == 'link' else os.rename)(sys.argv[1], how + '.sock')
        except OSError as exc:
            print(how, 'refused', exc.errno); continue
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(how + '.sock'); s.sendall(b'x'); print(how, 'reached', s.recv(100))
        except OSError as exc:
            print(how, 'refused', type(exc).__name__)
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_outside_socket_linked_into_the_project_is_unreachable(user, project, backend):
    """A hard link (or a rename) of the user's gpg-agent socket into the
    project: the socket is judged by where it was bound, not by its path."""
    server = Server(user, user.home / f".gnupg-{uuid.uuid4().hex[:6]}" / "S.gpg-agent")
    moved = project / "rename.sock"
    try:
        result = user.sandbox("/usr/bin/python3", "-c", LINKED, str(server.path),
                              options=("--backend", backend), cwd=project,
                              env=user.env(HOME_ACCESS="write"))
        assert result.returncode == 0, result.stderr
        assert "reached" not in result.stdout, result.stdout
    finally:
        server.close()
        for path in (project / "link.sock", moved):
            path.unlink(missing_ok=True)
        __import__("shutil").rmtree(server.path.parent, ignore_errors=True)


INT80 = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
long sys32(long nr, long a, long b, long c, long d, long e, long f);
__asm__(".globl sys32\nsys32:\n push %rbx\n push %rbp\n mov 24(%rsp), %rbp\n"
        " mov %rdi, %rax\n mov %rsi, %rbx\n mov %rdx, %r10\n mov %rcx, %rdx\n"
        " mov %r10, %rcx\n mov %r8, %rsi\n mov %r9, %rdi\n int $0x80\n"
        " pop %rbp\n pop %rbx\n movslq %eax, %rax\n ret\n");
int main(int argc, char **argv) {
    char *low = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT,
                     -1, 0);
    long path = (long)low, name = path + 2048, times = path + 3072, args = path + 3584;
    strcpy(low, argv[1]); strcpy((char *)name, "user.pwned");
    long long *t = (long long *)times; t[0] = 1; t[1] = 0; t[2] = 1; t[3] = 0;
    unsigned int *x = (unsigned int *)args;     /* struct xattr_args */
    *(long long *)x = name; x[2] = 1; x[3] = 0;
    printf("chmod %ld\n", sys32(15, path, 0666, 0, 0, 0, 0));
    printf("chown32 %ld\n", sys32(212, path, -1, -1, 0, 0, 0));
    printf("lchown32 %ld\n", sys32(198, path, -1, -1, 0, 0, 0));
    printf("utimensat_time64 %ld\n", sys32(412, -100, path, times, 0, 0, 0));
    printf("fchmodat2 %ld\n", sys32(452, -100, path, 0666, 0, 0, 0));
    printf("setxattrat %ld\n", sys32(463, -100, path, 0, name, args, 16));
    return 0;
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_0x80_metadata_calls_are_refused(user, project, backend, tmp_path):
    """i386's own metadata calls (chown32, lchown32, utimensat_time64) and
    the numbered ones (fchmodat2, setxattrat) through int 0x80 from a 64-bit
    program: none changes a read-only file."""
    import shutil
    import subprocess

    if os.uname().machine != "x86_64":
        pytest.fail("this test needs an x86_64 machine (int 0x80)")
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "gcc is missing: the test builds a small C program"
    (tmp_path / "int80.c").write_text(INT80)
    binary = project / "int80"
    subprocess.run([gcc, "-O1", "-o", str(binary), str(tmp_path / "int80.c")], check=True)
    os.chmod(binary, 0o755)
    bashrc = user.home / ".bashrc"                    # read-only with HOME_ACCESS=read
    if "user.pwned" in os.listxattr(bashrc):
        os.removexattr(bashrc, "user.pwned")
    before = (bashrc.stat().st_mode, bashrc.stat().st_mtime, bashrc.stat().st_uid)
    result = user.sandbox(str(binary), str(bashrc), options=("--backend", backend),
                          cwd=project, env=user.env(HOME_ACCESS="read"))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split() for line in result.stdout.splitlines())
    assert len(lines) == 6, result.stdout
    after = (bashrc.stat().st_mode, bashrc.stat().st_mtime, bashrc.stat().st_uid)
    assert after == before and "user.pwned" not in os.listxattr(bashrc), result.stdout
    if backend == "landlock":      # bwrap and firejail may show a copy of the home
        assert all(int(value) < 0 for value in lines.values()), result.stdout


PTY = textwrap.dedent("""\
    import os, sys
    try:
        os.chmod(sys.argv[1], 0o666); print('changed')
    except OSError as exc:
        print('refused', exc.errno)
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_users_other_terminal_keeps_its_mode(user, project, backend):
    """/dev/pts is granted for writing (a terminal), never for metadata."""
    import subprocess
    import sys

    code = ("import os, sys\nm, s = os.openpty()\nprint(os.ttyname(s), flush=True)\n"
            "sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], user=user.uid, group=user.gid,
                              extra_groups=[], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        tty = holder.stdout.readline().strip()
        before = os.stat(tty).st_mode
        result = user.sandbox("/usr/bin/python3", "-c", PTY, tty, options=("--backend", backend),
                              cwd=project, env=user.env())
        assert result.returncode == 0, result.stderr
        assert os.stat(tty).st_mode == before, result.stdout
        assert result.stdout.startswith("refused"), result.stdout
    finally:
        holder.kill()
        holder.wait(10)


CHATTR = textwrap.dedent("""\
    import fcntl, os, struct, sys
    GET, SET, FSGET, FSSET = 0x80086601, 0x40086602, 0x801c581f, 0x401c5820
    fd = os.open(sys.argv[1], os.O_RDONLY)
    flags = struct.unpack('=i', fcntl.ioctl(fd, GET, b'\\0' * 4))[0]
    try:
        fcntl.ioctl(fd, SET, struct.pack('=i', flags | 0x40)); print('setflags done')
    except OSError as exc:
        print('setflags refused', exc.errno)
    try:
        attrs = bytearray(fcntl.ioctl(fd, FSGET, b'\\0' * 28))
        attrs[0] |= 0x80                                   # FS_XFLAG_NODUMP
        fcntl.ioctl(fd, FSSET, bytes(attrs)); print('fssetxattr done')
    except OSError as exc:
        print('fssetxattr refused', exc.errno)
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_chattr_ioctls_on_a_read_only_file_are_refused(user, project, backend):
    """FS_IOC_SETFLAGS / FS_IOC_FSSETXATTR on an O_RDONLY descriptor of a
    read-only file outside the writable grants (nodump)."""
    import fcntl
    import struct

    bashrc = user.home / ".bashrc"

    def flags():
        fd = os.open(bashrc, os.O_RDONLY)
        try:
            return struct.unpack("=i", fcntl.ioctl(fd, 0x80086601, b"\0" * 4))[0]
        finally:
            os.close(fd)
    before = flags()
    try:
        result = user.sandbox("/usr/bin/python3", "-c", CHATTR, str(bashrc),
                              options=("--backend", backend), cwd=project,
                              env=user.env(HOME_ACCESS="read"))
        assert result.returncode == 0, result.stderr
        assert flags() == before, result.stdout
        if backend == "landlock":
            assert "done" not in result.stdout, result.stdout
    finally:
        if flags() != before:
            fd = os.open(bashrc, os.O_RDONLY)
            fcntl.ioctl(fd, 0x40086602, struct.pack("=i", before))
            os.close(fd)


SCTP = textwrap.dedent("""\
    import socket
    for label, proto in (('sctp', 132), ('sctp-high', (1 << 32) | 132), ('mptcp', 262),
                         ('tcp', 6), ('default', 0)):
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto).close()
            print(label, 'made')
        except (OSError, OverflowError) as exc:
            print(label, 'refused', getattr(exc, 'errno', None))
    """)


@pytest.mark.parametrize("network", ["allowlist", "isolated"])
def test_no_sctp_socket_past_the_supervisor(user, project, network):
    """SCTP connects through sendmsg's msg_name and setsockopt, which the
    supervisor does not see: only protocol 0 and IPPROTO_TCP are made."""
    result = user.sandbox("/usr/bin/python3", "-c", SCTP, options=("--backend", "landlock"),
                          cwd=project, env=user.env(NETWORK_MODE=network))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["sctp"] == "refused 13" and lines["mptcp"] == "refused 13", result.stdout
    assert lines["tcp"] == "made" and lines["default"] == "made", result.stdout


UNSHARED = textwrap.dedent("""\
    import ctypes, os, sys, threading
    libc = ctypes.CDLL(None, use_errno=True)
    open('mine', 'w').close(); os.chmod('mine', 0o600)
    number = os.open('mine', os.O_RDONLY)          # the leader's descriptor N
    def thread():
        # Its own descriptor table: N is now the read-only file.
        assert libc.unshare(0x400) == 0            # CLONE_FILES
        os.close(number)
        assert os.open(sys.argv[1], os.O_RDONLY) == number
        try:
            os.fchmod(number, 0o644); print('done')
        except OSError as exc:
            print('refused', exc.errno)
    t = threading.Thread(target=thread); t.start(); t.join()
    print(oct(os.stat('mine').st_mode & 0o777))
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_thread_with_its_own_descriptor_table_is_judged_by_it(user, project, backend):
    """fchmod(N) from a thread that unshared CLONE_FILES: the supervisor took
    the leader's N (the project file) and changed it; it must judge the
    thread's N (a read-only file) and refuse."""
    bashrc = user.home / ".bashrc"
    before = bashrc.stat().st_mode
    result = user.sandbox("/usr/bin/python3", "-c", UNSHARED, str(bashrc),
                          options=("--backend", backend), cwd=project,
                          env=user.env(HOME_ACCESS="read"))
    assert result.returncode == 0, result.stderr
    assert bashrc.stat().st_mode == before, result.stdout
    assert result.stdout.split()[-1] == "0o600", result.stdout   # the project file untouched
    if backend == "landlock":
        assert result.stdout.startswith("refused"), result.stdout
