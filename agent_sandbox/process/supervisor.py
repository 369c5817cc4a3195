"""The landlock supervisor (SPEC §5a, docs/supervisor.md): a thread of the
launcher — outside the sandbox, an ancestor of every sandboxed process — that
decides the calls Landlock cannot judge, through seccomp user notification.

Strategy
--------
* The helper loads the notify filter (policy/seccomp.compile_notify_filter)
  last, with a new listener, writes the listener's number on the plan's
  "supervise" pipe and waits until a first supervised call is answered; the
  launcher takes the listener by pidfd_getfd (so it never has to cross a
  socket) and the helper closes its copy before exec: no sandboxed process
  holds it.
* Watched: connect(), sendto() with a destination, the metadata calls
  (chmod/chown/utime/xattr families, by path and by descriptor). Every other
  call is allowed in the kernel: the supervisor costs nothing there.
* Never trust the target's memory for a later check: the address or path is
  read once; the path is resolved by the supervisor into a descriptor of its
  own (openat2 RESOLVE_NO_MAGICLINKS from the target's cwd or directory
  descriptor, which it takes by pidfd_getfd), the check is made on that
  object's real path, and the supervisor performs the call itself on that
  object (connect through /proc/self/fd/N of the O_PATH descriptor; the
  target's socket is its own, by pidfd_getfd) and answers with the result.
  A thread that swaps the path buffer changes nothing the supervisor does.
  Nothing is ever answered with CONTINUE.
* Refusals answer EACCES (never ENOSYS: glibc would fall back to another
  call). Connected sockets carry the launcher's peer credentials, so the
  sockets allowed are only the session's own (chaperon directory, egress
  proxy), those in its private $TMPDIR and in the project — never a path
  merely in a writable grant, never munge's or Slurm's auth sockets, never
  the job holder's (which admits unconfined peers: it is in the hidden run
  directory, outside every allowed root).
* Its death kills the sandbox: a failing supervisor SIGKILLs the command's
  process group (the helper's watcher then ends the session, the launcher's
  reaper what left it); a killed launcher closes the lifeline, and whatever
  survived gets ENOSYS on every supervised call (a listener that is gone
  answers so) — nothing continues unsupervised.
"""
from __future__ import annotations

import errno
import os
import stat
import struct
import threading

RECV = 0xC0502100          # SECCOMP_IOCTL_NOTIF_RECV, struct seccomp_notif (80 bytes)
SEND = 0xC0182101          # SECCOMP_IOCTL_NOTIF_SEND, struct seccomp_notif_resp (24)
ID_VALID = 0x40082102      # SECCOMP_IOCTL_NOTIF_ID_VALID
NOTIF = struct.Struct("=QIIiIQ6Q")
RESP = struct.Struct("=QqiI")
SYS_PIDFD_OPEN, SYS_OPENAT2, SYS_PIDFD_GETFD = 434, 437, 438
PIDFD_THREAD = os.O_EXCL
SYS_KCMP = {"x86_64": 312, "aarch64": 272, "riscv64": 272}.get(os.uname().machine, -1)
KCMP_FILES = 2
#: Workers for the calls that may block (connect, sendto): beyond these, a
#: call waits in the queue for a free one (never answered unchecked).
MAX_WORKERS = 16
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = 0x100, 0x1000
RESOLVE_NO_MAGICLINKS = 0x02
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
SOCK_STREAM = 1
PATH_MAX = 4096
MAX_DATAGRAM = 1 << 22

# Syscall numbers by machine (the native ABI the filter notifies on).
_X86_64 = {42: "connect", 44: "sendto", 90: "chmod", 91: "fchmod", 92: "chown",
           93: "fchown", 94: "lchown", 132: "utime", 188: "setxattr", 189: "lsetxattr",
           190: "fsetxattr", 197: "removexattr", 198: "lremovexattr", 199: "fremovexattr",
           235: "utimes", 260: "fchownat", 261: "futimesat", 268: "fchmodat",
           280: "utimensat", 452: "fchmodat2"}
_GENERIC = {203: "connect", 206: "sendto", 52: "fchmod", 53: "fchmodat", 54: "fchownat",
            55: "fchown", 88: "utimensat", 5: "setxattr", 6: "lsetxattr", 7: "fsetxattr",
            14: "removexattr", 15: "lremovexattr", 16: "fremovexattr", 452: "fchmodat2"}


def syscall_names() -> dict[int, str]:
    machine = os.uname().machine
    if machine == "x86_64":
        return _X86_64
    if machine in ("aarch64", "riscv64"):
        return _GENERIC
    import pyseccomp   # other machines: libseccomp names them

    from agent_sandbox.policy.seccomp import SUPERVISED_CONNECT, SUPERVISED_METADATA

    table = {}
    for name in SUPERVISED_CONNECT + SUPERVISED_METADATA:
        nr = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
        if nr >= 0:
            table[nr] = name
    table[452] = "fchmodat2"
    return table


# ------------------------------------------------------------------ the rules
NEVER = ("/run/munge", "/var/run/munge", "/run/slurm", "/var/run/slurm", "/run/slurmd",
         "/run/slurmctld", "/run/slurmdbd", "/var/run/slurmd", "/var/run/slurmctld",
         "/var/run/slurmdbd", "/var/spool/slurmd")


#: Never metadata here (device nodes and kernel file systems), whatever the
#: ruleset grants for writing; /dev/shm's files are the exception.
NO_METADATA = ("/proc", "/sys", "/dev/pts", "/dev/tty", "/dev/null", "/dev/zero",
               "/dev/full", "/dev/random", "/dev/urandom", "/dev/ptmx", "/dev/console")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Rules:
    """What the supervisor allows, from the plan (plain data, cached with it):
    `sockets`: roots below which a socket may be connected (the chaperon's
    directory, the private $TMPDIR); `socket_files`: exact sockets (the
    egress proxy's); `project`: the project, where a socket is allowed
    where the sandbox may write; `writable`: the ruleset's writable paths
    (metadata); `network`: open, allowlist or isolated; `relay_port`."""

    def __init__(self, data: dict) -> None:
        self.sockets = tuple(data.get("sockets", ()))
        self.socket_files = tuple(data.get("socket_files", ()))
        self.project = data.get("project") or ""
        self.writable = tuple(data.get("writable", ()))
        self.network = data.get("network", "open")
        self.relay_port = int(data.get("relay_port") or 0)

    def may_write(self, real: str) -> bool:
        return any(_within(real, root) for root in self.writable)

    @staticmethod
    def never(real: str) -> bool:
        return any(_within(real, root) for root in NEVER) or real.endswith("/sack.socket") \
            or os.path.basename(real).startswith("munge")

    def may_connect(self, real: str) -> bool:
        if self.never(real):
            return False
        if real in self.socket_files or any(_within(real, r) for r in self.sockets):
            return True
        return bool(self.project) and _within(real, self.project) and self.may_write(real)

    def may_inet(self, family: int, data: bytes, sock_type: int) -> bool:
        """allowlist: TCP to the relay on the loopback only; isolated: nothing."""
        if self.network == "open":
            return True
        if self.network != "allowlist" or sock_type != SOCK_STREAM or not self.relay_port:
            return False
        if family == AF_INET and len(data) >= 8:
            port, host = struct.unpack("!H4s", data[2:8])
            return port == self.relay_port and host == b"\x7f\0\0\x01"
        if family == AF_INET6 and len(data) >= 24:
            port = struct.unpack("!H", data[2:4])[0]
            return port == self.relay_port and data[8:24] == b"\0" * 15 + b"\x01"
        return False


# ------------------------------------------------------------------ the calls
_libc = None


def libc():
    global _libc
    if _libc is None:
        import ctypes

        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        _libc = (lib, ctypes)
    return _libc


def _sys(*args) -> int:
    lib, ctypes = libc()
    conv = [a if isinstance(a, (bytes, ctypes.Array)) else ctypes.c_long(a) for a in args]
    result = lib.syscall(*conv)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _call(name: str, *args) -> int:
    lib, ctypes = libc()
    result = getattr(lib, name)(*args)
    if result < 0:
        return -ctypes.get_errno()
    return result


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


class Refused(Exception):
    def __init__(self, err: int = errno.EACCES) -> None:
        super().__init__(err)
        self.err = err


class Target:
    """One notification's process, opened once and checked valid after."""

    def __init__(self, listener: int, notif_id: int, tid: int) -> None:
        self.listener, self.id, self.tid = listener, notif_id, tid
        self.fds: list[int] = []
        self._mem = self._pidfd = None

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def own(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def valid(self) -> None:
        import fcntl

        try:
            fcntl.ioctl(self.listener, ID_VALID, struct.pack("=Q", self.id))
        except OSError:
            raise Refused(errno.ESRCH) from None

    def mem(self) -> int:
        if self._mem is None:
            self._mem = self.own(os.open(f"/proc/{self.tid}/mem", os.O_RDONLY | os.O_CLOEXEC))
            self.valid()           # the tid was not reused before the open
        return self._mem

    def read(self, address: int, size: int) -> bytes:
        if not address:
            raise Refused(errno.EFAULT)
        try:
            data = os.pread(self.mem(), size, address)
        except OSError:
            raise Refused(errno.EFAULT) from None
        if len(data) != size:
            raise Refused(errno.EFAULT)
        return data

    def string(self, address: int) -> bytes:
        if not address:
            raise Refused(errno.EFAULT)
        out = b""
        while len(out) < PATH_MAX:
            chunk = 4096 - (address + len(out)) % 4096     # never across a page
            try:
                data = os.pread(self.mem(), chunk, address + len(out))
            except OSError:
                raise Refused(errno.EFAULT) from None
            if not data:
                raise Refused(errno.EFAULT)
            end = data.find(b"\0")
            if end >= 0:
                return out + data[:end]
            out += data
        raise Refused(errno.ENAMETOOLONG)

    def pidfd(self) -> int:
        """A pidfd of the notifying thread itself (PIDFD_THREAD, Linux 6.9),
        so that pidfd_getfd takes its descriptor table — a thread that
        unshared its files (CLONE_FILES) has another than its leader's.
        Older kernels: the leader's, but only while the thread shares the
        leader's table (kcmp KCMP_FILES), else EACCES."""
        if self._pidfd is None:
            try:
                self._pidfd = self.own(_sys(SYS_PIDFD_OPEN, self.tid, PIDFD_THREAD))
            except OSError:
                tgid = None
                with open(f"/proc/{self.tid}/status", "rb") as handle:
                    for line in handle:
                        if line.startswith(b"Tgid:"):
                            tgid = int(line.split()[1])
                            break
                if tgid != self.tid:
                    try:
                        same = _sys(SYS_KCMP, tgid, self.tid, KCMP_FILES, 0, 0) == 0
                    except OSError:
                        same = False
                    if not same:
                        raise Refused() from None
                self._pidfd = self.own(_sys(SYS_PIDFD_OPEN, tgid, 0))
            self.valid()
        return self._pidfd

    def getfd(self, number: int) -> int:
        """Our copy of the target's descriptor `number`."""
        try:
            return self.own(_sys(SYS_PIDFD_GETFD, self.pidfd(), _signed32(number), 0))
        except OSError as exc:
            raise Refused(exc.errno if exc.errno == errno.EBADF else errno.EACCES) from None

    def base(self, dirfd: int) -> int:
        dirfd = _signed32(dirfd)
        if dirfd == AT_FDCWD:
            try:
                return self.own(os.open(f"/proc/{self.tid}/cwd",
                                        os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            except OSError:
                raise Refused() from None
        return self.getfd(dirfd)

    def resolve(self, dirfd: int, path: bytes, *, follow: bool) -> int:
        """An O_PATH descriptor of what `path` names for the target, resolved
        by the supervisor (magic links refused: /proc/self would be ours)."""
        if not path:
            raise Refused(errno.ENOENT)
        base = AT_FDCWD if path.startswith(b"/") else self.base(dirfd)
        flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        how = struct.pack("=QQQ", flags, 0, RESOLVE_NO_MAGICLINKS)
        try:
            return self.own(_sys(SYS_OPENAT2, base, path + b"\0", how, len(how)))
        except OSError as exc:
            raise Refused(exc.errno if exc.errno in (errno.ENOENT, errno.ENOTDIR)
                          else errno.EACCES) from None


def real_path(fd: int) -> str:
    path = os.readlink(f"/proc/self/fd/{fd}")
    if path.endswith(" (deleted)") and os.fstat(fd).st_nlink == 0:
        path = path[:-len(" (deleted)")]
    if not path.startswith("/"):
        raise Refused()              # a pipe, an anonymous inode, another namespace's
    return path


def _sockaddr_un(path: bytes) -> bytes:
    return struct.pack("=H", AF_UNIX) + path + b"\0"


def _status(pid: int) -> dict:
    fields = {}
    with open(f"/proc/{pid}/status", "rb") as handle:
        for line in handle:
            key, _, value = line.partition(b":")
            fields[key] = value.strip()
    return fields


def sandbox_members(launcher: int, root: int | None = None) -> list[int]:
    """The live processes of the sandbox: the helper `root` and its
    descendants, and the orphans the launcher (a subreaper) adopted from
    them (still in the helper's session) — each with no_new_privs and
    seccomp filtering. The launcher's other children (the chaperon, the
    egress proxy) never count, also when the launcher runs with
    no_new_privs. Without `root`, every restricted descendant of the
    launcher (the old rule, for callers that lack the helper's pid). Never
    reaps anything (the launcher's main thread waits for its children)."""
    parents: dict[int, list[int]] = {}
    sessions: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
                parent, session = int(fields[1]), int(fields[3])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(parent, []).append(int(name))
            sessions[int(name)] = session

    def restricted(pid: int) -> bool:
        try:
            fields = _status(pid)
        except OSError:
            return False
        return fields.get(b"NoNewPrivs") == b"1" and fields.get(b"Seccomp") == b"2"

    if root:
        todo = [root] + [pid for pid in parents.get(launcher, [])
                         if pid != root and sessions.get(pid) == root]
    else:
        todo = list(parents.get(launcher, []))
    found, seen = [], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(parents.get(pid, []))
        if restricted(pid):
            found.append(pid)
    return found


class UnixSocket:
    """One unix socket as the kernel's sock_diag reports it."""
    __slots__ = ("ino", "name", "vfs")

    def __init__(self, ino: int, name, vfs) -> None:
        self.ino, self.name, self.vfs = ino, name, vfs


def unix_sockets() -> list:
    """Every unix socket of this network namespace with its exact bound
    address (UNIX_DIAG_NAME: raw bytes, abstract ones with their leading
    NUL) and the (dev, ino) of its socket file (UNIX_DIAG_VFS)."""
    import socket

    nlmsg = struct.Struct("=IHHII")
    request = struct.pack("=BBHIIIII", AF_UNIX, 0, 0, 0xFFFFFFFF, 0, 0x1 | 0x2, 0xFFFFFFFF,
                          0xFFFFFFFF)        # UDIAG_SHOW_NAME | UDIAG_SHOW_VFS
    header = nlmsg.pack(nlmsg.size + len(request), 20, 0x301, 1, 0)  # SOCK_DIAG_BY_FAMILY, DUMP
    found = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4) as diag:  # NETLINK_SOCK_DIAG
        diag.sendall(header + request)
        while True:
            data = diag.recv(1 << 20)
            if not data:
                return found
            offset = 0
            while offset + nlmsg.size <= len(data):
                length, kind = nlmsg.unpack_from(data, offset)[:2]
                if kind == 3:                                      # NLMSG_DONE
                    return found
                if kind == 2 or length < nlmsg.size:               # NLMSG_ERROR
                    raise Refused()
                body = data[offset + nlmsg.size:offset + length]
                sock_ino = struct.unpack_from("=I", body, 4)[0]
                name = vfs = None
                at = 16
                while at + 4 <= len(body):
                    rta_len, rta_type = struct.unpack_from("=HH", body, at)
                    if rta_len < 4:
                        break
                    if rta_type == 0:                             # UNIX_DIAG_NAME
                        name = bytes(body[at + 4:at + rta_len])
                    elif rta_type == 1 and rta_len >= 12:         # UNIX_DIAG_VFS
                        vfs_ino, vfs_dev = struct.unpack_from("=II", body, at + 4)
                        vfs = (os.makedev(vfs_dev >> 20, vfs_dev & 0xFFFFF), vfs_ino)
                    at += (rta_len + 3) & ~3
                found.append(UnixSocket(sock_ino, name, vfs))
                offset += (length + 3) & ~3


def bound_sockets(dev: int, ino: int) -> list:
    """The unix sockets bound to the socket file (dev, ino), from the kernel
    (sock_diag), each with the address it was bound to."""
    return [sock for sock in unix_sockets() if sock.vfs == (dev, ino)]


# ------------------------------------------------------------------ handlers
class Supervisor:
    def __init__(self, listener: int, rules: Rules, *, launcher: int | None = None,
                 root: int | None = None) -> None:
        self.listener = listener
        self.root = root
        self.rules = rules
        self.names = syscall_names()
        self.launcher = launcher or os.getpid()
        self.handled = 0
        import queue

        self.jobs = queue.SimpleQueue()
        self.idle = 0
        self.workers = 0
        self.lock = threading.Lock()

    def _work(self) -> None:
        while True:
            with self.lock:
                self.idle += 1
            job = self.jobs.get()
            with self.lock:
                self.idle -= 1
            self.answer(*job)

    def _dispatch(self, job) -> None:
        """To a waiting worker, or a new one (at most MAX_WORKERS): a call
        that may block (a full backlog, a TCP handshake) never holds up the
        loop (the metadata calls); beyond the cap it waits for a worker."""
        with self.lock:
            start = self.idle - self.jobs.qsize() <= 0 and self.workers < MAX_WORKERS
            if start:
                self.workers += 1
        if start:
            threading.Thread(target=self._work, daemon=True,
                             name="agent-sandbox-supervisor-call").start()
        self.jobs.put(job)

    # -- the loop
    def serve(self) -> None:
        """Until every process of the sandbox has gone (the listener hangs up)."""
        import fcntl
        import select

        poller = select.poll()
        poller.register(self.listener, select.POLLIN)
        buffer = bytearray(NOTIF.size)
        while True:
            events = poller.poll()
            if any(ev & (select.POLLHUP | select.POLLERR) for _, ev in events) and \
                    not any(ev & select.POLLIN for _, ev in events):
                return
            buffer[:] = bytes(NOTIF.size)
            try:
                fcntl.ioctl(self.listener, RECV, buffer, True)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.EINTR):   # the target went away
                    continue
                raise
            notif_id, tid, _flags, nr, _arch, _ip, *args = NOTIF.unpack(buffer)
            name = self.names.get(nr)
            if name in ("connect", "sendto"):
                self._dispatch((notif_id, tid, name, args))   # may block: off the loop
            else:
                self.answer(notif_id, tid, name, args)

    def answer(self, notif_id: int, tid: int, name, args) -> None:
        import fcntl

        target = Target(self.listener, notif_id, tid)
        try:
            handler = getattr(self, "do_" + name, None) if name else None
            value, err = (0, errno.EACCES) if handler is None else (handler(target, *args), 0)
        except Refused as exc:
            value, err = 0, exc.err
        except OSError as exc:
            value, err = 0, exc.errno or errno.EACCES
        except Exception:             # a bug must refuse, never allow
            value, err = 0, errno.EACCES
        finally:
            target.close()
        if value < 0:
            value, err = 0, -value
        self.handled += 1
        try:
            fcntl.ioctl(self.listener, SEND, RESP.pack(notif_id, value, -err if err else 0, 0))
        except OSError:
            pass                      # the target was killed meanwhile

    # -- sockets
    def _peer(self, target: Target, sock: int, raw: bytes) -> bytes:
        """The address the supervisor connects or sends to, or Refused."""
        if len(raw) < 2:
            raise Refused(errno.EINVAL)
        family = struct.unpack("=H", raw[:2])[0]
        if family == AF_UNIX:
            path = raw[2:]
            if not path:
                raise Refused(errno.EINVAL)
            if path[0] == 0:
                return self._abstract(raw)
            path = path.split(b"\0", 1)[0]
            obj = target.resolve(AT_FDCWD, path, follow=True)
            if not stat.S_ISSOCK(os.fstat(obj).st_mode):
                raise Refused(errno.ECONNREFUSED)
            if not self._socket_allowed(obj, real_path(obj)):
                raise Refused()
            return _sockaddr_un(b"/proc/self/fd/%d" % obj)
        if family in (AF_INET, AF_INET6):
            import socket

            kind = socket.socket(fileno=os.dup(sock))
            try:
                sock_type = kind.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
            finally:
                kind.close()
            if not self.rules.may_inet(family, raw, sock_type):
                raise Refused()
            return raw
        if self.rules.network != "open":
            raise Refused()
        return raw

    def _abstract(self, raw: bytes) -> bytes:
        """An abstract name: only one a process of this sandbox bound (the
        supervisor's connect would pass Landlock's scoping otherwise),
        compared byte for byte with the kernel's record of every socket's
        address (sock_diag: /proc/net/unix prints names raw, so a name with
        a space or a newline could pose as another's)."""
        name = raw[2:]
        inodes = {f"socket:[{sock.ino}]" for sock in unix_sockets() if sock.name == name}
        if inodes and self._held_inside(inodes):
            return raw
        raise Refused()

    def _held_inside(self, links: set) -> bool:
        """Whether a process of this sandbox holds one of the sockets
        `links` ("socket:[INODE]")."""
        for pid in sandbox_members(self.launcher, self.root):
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in links:
                        return True
            except OSError:
                continue
        return False

    def _socket_allowed(self, obj: int, real: str) -> bool:
        """A socket file the sandbox may connect to: the egress proxy's; one
        below an allowed root the sandbox cannot write (the chaperon's
        directory: nothing can be linked there from inside); where the
        sandbox may write, one bound by a socket a process of this sandbox
        holds, or one below an allowed root ($TMPDIR, the project) that was
        bound right there — its bound address (sock_diag, absolute) names
        this very file and it has one link — so a hard link or a rename of
        a socket from outside (the user's gpg-agent's) reaches nothing."""
        rules = self.rules
        if rules.never(real):
            return False
        if real in rules.socket_files:
            return True
        writable = rules.may_write(real)
        roots = list(rules.sockets) + ([rules.project] if rules.project else [])
        root = next((r for r in roots if _within(real, r)), None)
        if root is not None and root != rules.project and not writable:
            return True
        if not writable:
            return False
        st = os.fstat(obj)
        bound = bound_sockets(st.st_dev, st.st_ino)
        if not bound:
            return False
        if self._held_inside({f"socket:[{sock.ino}]" for sock in bound}):
            return True
        if root is None or st.st_nlink != 1:
            return False
        for sock in bound:
            name = os.fsdecode((sock.name or b"").split(b"\0", 1)[0])
            if not name.startswith("/") or os.path.realpath(name) != real:
                return False
        return True

    def do_connect(self, target: Target, fd, address, length, *_):
        sock = target.getfd(fd)
        raw = target.read(address, min(length & 0xFFFFFFFF, 128))
        peer = self._peer(target, sock, raw)
        target.valid()
        return _call("connect", sock, peer, len(peer))

    def do_sendto(self, target: Target, fd, buf, length, flags, address, addrlen):
        sock = target.getfd(fd)
        raw = target.read(address, min(addrlen & 0xFFFFFFFF, 128))
        peer = self._peer(target, sock, raw)
        if length > MAX_DATAGRAM:
            raise Refused(errno.EMSGSIZE)
        data = target.read(buf, length) if length else b""
        target.valid()
        return _call("sendto", sock, data, len(data), _signed32(flags), peer, len(peer))

    # -- metadata
    def _object(self, target: Target, dirfd, path_address, *, follow: bool,
                empty_ok: bool = False) -> int:
        path = target.string(path_address) if (path_address or not empty_ok) else b""
        if not path and empty_ok:
            return target.getfd(dirfd)
        return target.resolve(dirfd, path, follow=follow)

    def _writable(self, fd: int) -> str:
        """Metadata only on files and directories beneath the writable
        grants — never a device node (a terminal of the user's), never
        procfs or sysfs, whatever the ruleset lets the sandbox write."""
        real = real_path(fd)
        mode = os.fstat(fd).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or any(
                _within(real, root) for root in NO_METADATA) or not self.rules.may_write(real):
            raise Refused()
        return f"/proc/self/fd/{fd}"

    def _chmod(self, target, fd, mode):
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise Refused(errno.EOPNOTSUPP)
        path = self._writable(fd)
        target.valid()
        os.chmod(path, mode & 0o7777)
        return 0

    def do_chmod(self, t, path, mode, *_):
        return self._chmod(t, self._object(t, AT_FDCWD, path, follow=True), mode)

    def do_fchmod(self, t, fd, mode, *_):
        return self._chmod(t, t.getfd(fd), mode)

    def do_fchmodat(self, t, dirfd, path, mode, *_):
        return self._chmod(t, self._object(t, dirfd, path, follow=True), mode)

    def do_fchmodat2(self, t, dirfd, path, mode, flags, *_):
        obj = self._object(t, dirfd, path, follow=not flags & AT_SYMLINK_NOFOLLOW,
                           empty_ok=bool(flags & AT_EMPTY_PATH))
        return self._chmod(t, obj, mode)

    def _chown(self, target, fd, uid, gid):
        self._writable(fd)
        target.valid()
        return _call("fchownat", fd, b"", _signed32(uid), _signed32(gid), AT_EMPTY_PATH)

    def do_chown(self, t, path, uid, gid, *_):
        return self._chown(t, self._object(t, AT_FDCWD, path, follow=True), uid, gid)

    def do_lchown(self, t, path, uid, gid, *_):
        return self._chown(t, self._object(t, AT_FDCWD, path, follow=False), uid, gid)

    def do_fchown(self, t, fd, uid, gid, *_):
        return self._chown(t, t.getfd(fd), uid, gid)

    def do_fchownat(self, t, dirfd, path, uid, gid, flags, *_):
        obj = self._object(t, dirfd, path, follow=not flags & AT_SYMLINK_NOFOLLOW,
                           empty_ok=bool(flags & AT_EMPTY_PATH))
        return self._chown(t, obj, uid, gid)

    def _utimens(self, target, fd, times: bytes | None, nofollow: bool):
        self._writable(fd)
        target.valid()
        if stat.S_ISLNK(os.fstat(fd).st_mode) or nofollow:
            return _call("utimensat", fd, b"", times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)
        return _call("utimensat", AT_FDCWD, b"/proc/self/fd/%d" % fd, times, 0)

    def do_utimensat(self, t, dirfd, path, times, flags, *_):
        nofollow = bool(flags & AT_SYMLINK_NOFOLLOW)
        obj = (t.getfd(dirfd) if not path
               else self._object(t, dirfd, path, follow=not nofollow))
        raw = t.read(times, 32) if times else None
        return self._utimens(t, obj, raw, nofollow and bool(path))

    def _timevals(self, t, times) -> bytes | None:
        if not times:
            return None
        sec0, usec0, sec1, usec1 = struct.unpack("=4q", t.read(times, 32))
        for usec in (usec0, usec1):
            if not 0 <= usec < 1000000:
                raise Refused(errno.EINVAL)
        return struct.pack("=4q", sec0, usec0 * 1000, sec1, usec1 * 1000)

    def do_utimes(self, t, path, times, *_):
        return self._utimens(t, self._object(t, AT_FDCWD, path, follow=True),
                             self._timevals(t, times), False)

    def do_futimesat(self, t, dirfd, path, times, *_):
        obj = t.getfd(dirfd) if not path else self._object(t, dirfd, path, follow=True)
        return self._utimens(t, obj, self._timevals(t, times), False)

    def do_utime(self, t, path, times, *_):
        raw = None
        if times:
            atime, mtime = struct.unpack("=2q", t.read(times, 16))
            raw = struct.pack("=4q", atime, 0, mtime, 0)
        return self._utimens(t, self._object(t, AT_FDCWD, path, follow=True), raw, False)

    def _xattr(self, t, fd, name_address, value=None, size=0, flags=0):
        name = t.string(name_address)
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise Refused(errno.EPERM)          # no user xattrs on symlinks
        path = self._writable(fd)
        data = t.read(value, size) if size else b""
        t.valid()
        if value is None:
            os.removexattr(path, os.fsdecode(name))
        else:
            os.setxattr(path, os.fsdecode(name), data, _signed32(flags))
        return 0

    def do_setxattr(self, t, path, name, value, size, flags, *_):
        return self._xattr(t, self._object(t, AT_FDCWD, path, follow=True), name, value,
                           min(size, 1 << 16), flags)

    def do_lsetxattr(self, t, path, name, value, size, flags, *_):
        return self._xattr(t, self._object(t, AT_FDCWD, path, follow=False), name, value,
                           min(size, 1 << 16), flags)

    def do_fsetxattr(self, t, fd, name, value, size, flags, *_):
        return self._xattr(t, t.getfd(fd), name, value, min(size, 1 << 16), flags)

    def do_removexattr(self, t, path, name, *_):
        return self._xattr(t, self._object(t, AT_FDCWD, path, follow=True), name)

    def do_lremovexattr(self, t, path, name, *_):
        return self._xattr(t, self._object(t, AT_FDCWD, path, follow=False), name)

    def do_fremovexattr(self, t, fd, name, *_):
        return self._xattr(t, t.getfd(fd), name)


# ------------------------------------------------------------------ the launch
def take_listener(pid: int, report: int) -> int | None:
    """The listener the helper (`pid`) reports on `report` (a pipe), as our
    own descriptor; None when the helper ended without one (its setup failed:
    it says why)."""
    text = b""
    while not text.endswith(b"\n"):
        chunk = os.read(report, 64)
        if not chunk:
            return None
        text += chunk
    pidfd = os.pidfd_open(pid)
    try:
        return _sys(SYS_PIDFD_GETFD, pidfd, int(text), 0)
    finally:
        os.close(pidfd)


def start(pid: int, report: int, rules: dict, on_failure) -> threading.Thread:
    """The supervisor of the helper `pid`, in a thread of this launcher: it
    takes the listener from `report` (closed here), serves until the sandbox
    has gone, and calls `on_failure(reason)` if it cannot go on (the caller
    kills the sandbox: it never runs unsupervised)."""
    def run():
        listener = None
        try:
            listener = take_listener(pid, report)
            if listener is None:
                return
            Supervisor(listener, Rules(rules), root=pid).serve()
        except BaseException as exc:   # noqa: BLE001 - any failure ends the sandbox
            on_failure(f"{type(exc).__name__}: {exc}")
        finally:
            os.close(report)
            if listener is not None:
                os.close(listener)

    thread = threading.Thread(target=run, name="agent-sandbox-supervisor", daemon=True)
    thread.start()
    return thread
