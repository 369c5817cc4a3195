"""Seccomp deny-list for the sandbox (SPEC §7).

Strategy
--------
* **Deny-list, default allow.**  The sandbox must run arbitrary agents,
  compilers, interpreters and HPC tools, so an allow-list would break
  ordinary programs.  Instead a short list of syscalls is refused: the ones
  that widen kernel attack surface (io_uring, userfaultfd, bpf, kexec), that
  could rearrange the filesystem view (mount, the new mount API, pivot_root),
  that touch the whole machine (reboot, swap, acct, quotactl), that probe
  other processes (kcmp; ptrace and process_vm_* when there is no PID
  namespace), and the terminal-injection ioctls TIOCSTI/TIOCLINUX.
* **EPERM, not kill.**  A denied call fails with ``EPERM`` instead of killing
  the process, so well-written programs fall back (e.g. an event loop
  that tries io_uring then uses epoll; a tool that probes ``personality``).
* **Compat ABIs.**  A 64-bit kernel also accepts the syscalls of its 32-bit
  ABI (x86_64: ``int 0x80``/i386 and x32; aarch64: arm).  Seccomp sees those
  with a different ``AUDIT_ARCH`` and different syscall numbers, so a filter
  for the native ABI alone could be bypassed by a 32-bit syscall.  The filter
  therefore carries one section per ABI; every denied name is added to each
  ABI on which it exists (numbers are translated by libseccomp; names missing
  on an ABI are skipped for that ABI only).  Any other architecture token
  hits libseccomp's bad-arch action (kill), i.e. fails closed.
* **Conditional rules.**  Two names are not denied outright:

  - ``personality`` is denied except for the query value ``0xffffffff``
    (glibc and some runtimes ask for the current persona).  The comparison
    is on the full 64-bit argument, so only the exact query value passes.
  - ``ioctl`` is denied only when the request (arg1) is ``TIOCSTI`` or
    ``TIOCLINUX``.  The kernel truncates the request to 32 bits, so the
    comparison masks the low 32 bits: setting high bits cannot smuggle the
    request past the filter.  Putting ``ioctl`` into ``SECCOMP_EXTRA_DENY``
    does not deny every ioctl (that would break every program); it stays this
    conditional rule.

The pure part (:data:`DEFAULT_DENY`, :func:`deny_list`) imports nothing
heavy; :func:`compile_filter` imports pyseccomp (libseccomp via ctypes)
lazily, because this module sits on the launch path.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Iterable, Sequence

__all__ = [
    "DEFAULT_DENY",
    "LANDLOCK_EXTRA_DENY",
    "CONDITIONAL",
    "TIOCSTI",
    "TIOCLINUX",
    "PERSONALITY_QUERY",
    "deny_list",
    "compile_filter",
]

#: ioctl requests that push input into (or reprogram) a terminal.
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
#: ``personality(0xffffffff)`` only returns the current persona.
PERSONALITY_QUERY = 0xFFFFFFFF

DEFAULT_DENY: tuple[str, ...] = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "mount",
    "umount2",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "pivot_root",
    "reboot",
    "swapon",
    "swapoff",
    "personality",  # conditional, see CONDITIONAL
    "acct",
    "quotactl",
    "kcmp",
    "ioctl",  # conditional, see CONDITIONAL
)

#: Added when the backend has no PID namespace (landlock).
LANDLOCK_EXTRA_DENY: tuple[str, ...] = ("ptrace", "process_vm_readv", "process_vm_writev")

#: Added where the backend has no refusal of its own for nested user
#: namespaces (bubblewrap before 0.8.0 has no --disable-userns, firejail
#: before 0.9.72 no --restrict-namespaces): a namespace made inside would give
#: the sandbox's processes capabilities over mounts of their own.
USERNS_DENY: tuple[str, ...] = ("clone", "clone3", "unshare")
CLONE_NEWUSER = 0x10000000

#: Names whose rule is conditional, with a human description (for --dry-run).
CONDITIONAL: dict[str, str] = {
    "personality": "denied unless arg0 == 0xffffffff (query)",
    "ioctl": "denied only for request TIOCSTI (0x5412) or TIOCLINUX (0x541c), low 32 bits",
    "clone": "denied only when its flags include CLONE_NEWUSER (a nested user namespace)",
    "unshare": "denied only when its flags include CLONE_NEWUSER (a nested user namespace)",
    "clone3": "answers ENOSYS (its flags lie in memory the filter cannot read; libc falls "
              "back to clone, which the filter checks)",
}

_NAME_RE = re.compile(r"[a-z_][a-z0-9_]*\Z")
_NR_SCMP_ERROR = -1  # libseccomp: name unknown on every architecture


def _check_names(names: Iterable[str]) -> None:
    """Raise ValueError for a name libseccomp does not know on any arch."""
    import pyseccomp  # lazy: libseccomp is only needed when validating extras

    for name in names:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"invalid syscall name {name!r}")
        # The native resolver returns a (negative) pseudo number for names that
        # exist on some other architecture, and __NR_SCMP_ERROR for unknown ones.
        if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) == _NR_SCMP_ERROR:
            raise ValueError(f"unknown syscall name {name!r}")


def deny_list(extra: Iterable[str] = (), *, no_pid_namespace: bool = False,
              no_user_namespaces: bool = False) -> tuple[str, ...]:
    """The sorted, de-duplicated set of denied syscall names.

    ``extra`` is ``SECCOMP_EXTRA_DENY``; every name must be a syscall known to
    libseccomp (on at least one architecture), else ``ValueError`` names it.
    ``no_pid_namespace`` adds :data:`LANDLOCK_EXTRA_DENY`,
    ``no_user_namespaces`` :data:`USERNS_DENY` (conditional rules).
    """
    if isinstance(extra, (str, bytes)):
        raise TypeError("extra must be an iterable of syscall names, not a single string")
    extra = tuple(extra)
    if extra:
        _check_names(extra)
    names = set(DEFAULT_DENY)
    names.update(extra)
    if no_pid_namespace:
        names.update(LANDLOCK_EXTRA_DENY)
    if no_user_namespaces:
        names.update(USERNS_DENY)
    return tuple(sorted(names))


def _arches(pyseccomp) -> list[tuple[int, bool]]:
    """Compat ABIs to cover besides the native one: (arch token, required)."""
    A = pyseccomp.Arch
    native = pyseccomp.system_arch()
    compat = {
        A.X86_64: [(A.X86, True), (A.X32, True)],
        A.AARCH64: [(A.ARM, False)],
        A.S390X: [(A.S390, False)],
    }
    return compat.get(native, [])


def _S390(pyseccomp) -> tuple:
    A = pyseccomp.Arch
    native = pyseccomp.system_arch()
    s390 = tuple(a for a in (getattr(A, "S390", None), getattr(A, "S390X", None)) if a)
    return s390 + ((A.NATIVE,) if native in s390 else ())


def _arch_filter(pyseccomp, arch: int, names: Sequence[str]):
    """A filter with exactly one ABI (``arch``) and the rules that exist there."""
    A = pyseccomp.Arch
    deny = pyseccomp.ERRNO(errno.EPERM)
    f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    try:  # binary-tree syscall dispatch: fewer comparisons for allowed calls
        f.set_attr(pyseccomp.Attr.CTL_OPTIMIZE, 2)
    except (OSError, AttributeError):
        pass
    if arch != A.NATIVE:
        f.add_arch(arch)
        f.remove_arch(A.NATIVE)
    for name in names:
        if pyseccomp.resolve_syscall(arch, name) < 0:
            continue  # does not exist on this ABI
        # add_rule takes the name (resolved to the native number or pseudo
        # number) and libseccomp translates it to this ABI's number.
        if name == "personality":
            f.add_rule(deny, name, pyseccomp.Arg(0, pyseccomp.NE, PERSONALITY_QUERY))
        elif name == "ioctl":
            for req in (TIOCSTI, TIOCLINUX):
                f.add_rule(deny, name, pyseccomp.Arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, req))
        elif name == "clone3":
            f.add_rule(pyseccomp.ERRNO(errno.ENOSYS), name)
        elif name in ("clone", "unshare"):
            # s390's clone takes the stack first and the flags second.
            index = 1 if name == "clone" and arch in _S390(pyseccomp) else 0
            f.add_rule(deny, name, pyseccomp.Arg(index, pyseccomp.MASKED_EQ, CLONE_NEWUSER,
                                                 CLONE_NEWUSER))
        else:
            f.add_rule(deny, name)
    return f


class _Fd:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def _export(f) -> bytes:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("agent-sandbox-seccomp", os.MFD_CLOEXEC)
    else:  # pragma: no cover - Linux always has memfd_create on supported kernels
        import tempfile

        fd = os.dup(tempfile.TemporaryFile().fileno())
    try:
        f.export_bpf(_Fd(fd))
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def compile_filter(denied: Sequence[str]) -> bytes:
    """Compile ``denied`` (names, e.g. from :func:`deny_list`) to raw BPF.

    Default action ALLOW; each denied syscall returns EPERM (``personality``
    and ``ioctl`` conditionally, see module docstring), on the native ABI and
    the compat ABIs.  The result is a ``struct sock_filter`` array (8 bytes per
    instruction), as bwrap ``--seccomp FD`` and ``SECCOMP_SET_MODE_FILTER``
    expect.  Deterministic: the same set of names gives the same bytes.
    """
    if isinstance(denied, (str, bytes)):
        raise TypeError("denied must be a sequence of syscall names, not a single string")
    import pyseccomp

    names = tuple(sorted(set(denied)))
    _check_names(names)

    f = _arch_filter(pyseccomp, pyseccomp.Arch.NATIVE, names)
    for arch, required in _arches(pyseccomp):
        try:
            f.merge(_arch_filter(pyseccomp, arch, names))
        except OSError:
            if required:
                raise
    bpf = _export(f)
    if not bpf or len(bpf) % 8:
        raise RuntimeError(f"libseccomp produced an invalid BPF program ({len(bpf)} bytes)")
    return bpf


# ------------------------------------------------------ the supervisor's filter
#: Calls the landlock supervisor decides (SPEC §5a, docs/supervisor.md):
#: Landlock judges neither connect() on unix sockets nor metadata changes.
#: sendto is watched only with a destination (arg 4 not NULL): a send on a
#: connected socket goes to a peer its connect() was checked for.
SUPERVISED_CONNECT: tuple[str, ...] = ("connect", "sendto")
SUPERVISED_METADATA: tuple[str, ...] = (
    "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
)
#: x86_64/aarch64 generic numbers libseccomp 2.5.4 may not name: fchmodat2
#: (6.6) is supervised; setxattrat/removexattrat (6.13) and file_setattr
#: (6.17) are refused outright (EACCES): nothing needs them yet.
FCHMODAT2 = 452
REFUSED_BY_NUMBER: tuple[int, ...] = (463, 466, 469)
#: The compat ABIs' own names for the metadata calls (i386's 32-bit uid
#: calls, the 64-bit-time utimensat): refused there with the rest.
COMPAT_METADATA: tuple[str, ...] = ("chown32", "lchown32", "fchown32", "utimensat_time64",
                                    "fchmodat2")
#: Refused on every non-native ABI (EACCES): every metadata and socket call
#: the supervisor watches natively — it decodes only the native ABI — and
#: the calls that could carry a unix or inet destination past it.
COMPAT_REFUSED: tuple[str, ...] = SUPERVISED_CONNECT + SUPERVISED_METADATA + \
    COMPAT_METADATA + ("socketcall", "sendmsg", "sendmmsg")
#: The ioctls that change a file's attributes (chattr): FS_IOC_SETFLAGS
#: (64- and 32-bit sizes) and FS_IOC_FSSETXATTR. Landlock does not judge
#: ioctl on a descriptor opened read-only, so they are refused everywhere
#: (EACCES) where the supervisor runs.
ATTR_IOCTLS: tuple[int, ...] = (0x40086602, 0x40046602, 0x401C5820)
#: Native AUDIT_ARCH values and the x32 syscall bit, for the hand-written
#: prefix that refuses the numbered calls on every ABI.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000


#: With NETWORK_MODE=allowlist or isolated: the only inet sockets are TCP's
#: (every connect of which the supervisor judges), and no TCP Fast Open
#: through sendmsg (its address is in memory, not in a register). A stream
#: socket's protocol must be 0 or IPPROTO_TCP (6): SCTP (132) connects by
#: sendmsg's msg_name and setsockopt, and MPTCP (262) is refused too (it
#: would pass the supervised connect(), but nothing needs it).
INET_FAMILIES = (2, 10)                     # AF_INET, AF_INET6
NON_STREAM_TYPES = (2, 3, 4, 5, 6, 10)      # DGRAM, RAW, RDM, SEQPACKET, DCCP, PACKET
IPPROTO_TCP = 6
MSG_FASTOPEN = 0x20000000

#: Always where the supervisor runs: no unix datagram socket can be made
#: (socket() and socketpair()). sendmsg()/sendmmsg() carry their destination
#: in memory (msg_name), where the filter cannot see it and the supervisor
#: could only read it racily; of the unix socket types only a datagram
#: socket's sendmsg looks a destination up (a stream socket refuses one, a
#: seqpacket socket drops it), also on a connected socket or a socketpair.
AF_UNIX, SOCK_DGRAM = 1, 2
#: socket() and socketpair() take ints: the kernel ignores a register's upper
#: half, so a family is compared on the low 32 bits (a bare EQ compares all
#: 64 and would miss 0x1_00000001); the type on its low 4 (SOCK_TYPE_MASK:
#: SOCK_CLOEXEC and SOCK_NONBLOCK are flags above them).
INT_MASK, SOCK_TYPE_MASK = 0xFFFFFFFF, 0xF
#: io_uring makes sockets, connects and sends without these syscalls
#: (IORING_OP_SOCKET, _CONNECT, _SENDMSG): refused here too (EPERM, as the
#: deny list does), so SECCOMP=false does not open it where the supervisor runs.
IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")


def compile_notify_filter(restrict_inet: bool = False) -> bytes:
    """The user-notification filter the landlock helper loads with
    SECCOMP_FILTER_FLAG_NEW_LISTENER (its listener goes to the supervisor):
    the supervised calls notify on the native ABI; on the compat ABIs (where
    socketcall(2) would hide the address) they, socketcall and the calls
    refused by number answer EACCES. On every ABI, socket() and
    socketpair() of AF_UNIX SOCK_DGRAM answer EACCES and io_uring EPERM.
    `restrict_inet` (allowlist, isolated): inet sockets other than TCP's and
    sendmsg with MSG_FASTOPEN answer EACCES on every ABI. Every other call
    is allowed in the kernel without a round trip (the supervisor costs
    nothing there)."""
    import pyseccomp

    notify = pyseccomp.NOTIFY
    refuse = pyseccomp.ERRNO(errno.EACCES)
    names = SUPERVISED_CONNECT + SUPERVISED_METADATA

    def one(arch, action):
        f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        if arch != pyseccomp.Arch.NATIVE:
            f.add_arch(arch)
            f.remove_arch(pyseccomp.Arch.NATIVE)
        native = arch == pyseccomp.Arch.NATIVE
        for name in (names + ("socketcall",) if native else COMPAT_REFUSED):
            if pyseccomp.resolve_syscall(arch, name) < 0:
                continue
            act = refuse if name == "socketcall" or not native else action
            if not native:
                f.add_rule(act, name)
                continue
            if name == "sendto":
                f.add_rule(act, name, pyseccomp.Arg(4, pyseccomp.NE, 0))
            else:
                f.add_rule(act, name)
        for name in ("socket", "socketpair"):
            if pyseccomp.resolve_syscall(arch, name) >= 0:
                f.add_rule(refuse, name, pyseccomp.Arg(0, pyseccomp.MASKED_EQ, INT_MASK, AF_UNIX),
                           pyseccomp.Arg(1, pyseccomp.MASKED_EQ, SOCK_TYPE_MASK, SOCK_DGRAM))
        for name in IO_URING:
            if pyseccomp.resolve_syscall(arch, name) >= 0:
                f.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
        if restrict_inet:
            for family in INET_FAMILIES:
                for kind in NON_STREAM_TYPES:
                    f.add_rule(refuse, "socket",
                               pyseccomp.Arg(0, pyseccomp.MASKED_EQ, INT_MASK, family),
                               pyseccomp.Arg(1, pyseccomp.MASKED_EQ, SOCK_TYPE_MASK, kind))
            for family in INET_FAMILIES:
                # protocol (an int) above IPPROTO_TCP on all 64 bits: a value
                # with its upper half set is refused too (fail closed).
                f.add_rule(refuse, "socket",
                           pyseccomp.Arg(0, pyseccomp.MASKED_EQ, INT_MASK, family),
                           pyseccomp.Arg(2, pyseccomp.GT, IPPROTO_TCP))
            for name, position in (("sendmsg", 2), ("sendmmsg", 3)):
                if pyseccomp.resolve_syscall(arch, name) >= 0:
                    f.add_rule(refuse, name, pyseccomp.Arg(position, pyseccomp.MASKED_EQ,
                                                           MSG_FASTOPEN, MSG_FASTOPEN))
        for request in ATTR_IOCTLS:
            f.add_rule(refuse, "ioctl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, INT_MASK, request))
        if arch == pyseccomp.Arch.NATIVE and pyseccomp.system_arch() in (
                pyseccomp.Arch.X86_64, pyseccomp.Arch.AARCH64):
            f.add_rule(action, FCHMODAT2)
            for number in REFUSED_BY_NUMBER:
                f.add_rule(refuse, number)
        return f

    f = one(pyseccomp.Arch.NATIVE, notify)
    for arch, required in _arches(pyseccomp):
        try:
            f.merge(one(arch, refuse))
        except OSError:
            if required:
                raise
    bpf = _export(f)
    if not bpf or len(bpf) % 8:
        raise RuntimeError(f"libseccomp produced an invalid BPF program ({len(bpf)} bytes)")
    return numbered_prefix() + bpf


def numbered_prefix(machine: str | None = None) -> bytes:
    """Classic BPF run before libseccomp's program: the calls libseccomp may
    not name (setxattrat, removexattrat, file_setattr; fchmodat2 off the
    native ABI) answer EACCES on every ABI — the native one, x32 (its numbers
    carry X32_SYSCALL_BIT) and the 32-bit one (i386, arm: the same numbers
    since 4.x's unified table). Everything else falls through to the rest."""
    import struct

    machine = machine or os.uname().machine
    native = AUDIT_ARCH.get(machine)
    if native is None:
        return b""

    def op(code, jt, jf, k):
        return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)
    LD_W_ABS, JEQ_K, JA, RET_K = 0x20, 0x15, 0x05, 0x06
    refuse = 0x00050000 | errno.EACCES                       # SECCOMP_RET_ERRNO
    native_numbers = list(REFUSED_BY_NUMBER)
    if machine == "x86_64":
        native_numbers += [X32_SYSCALL_BIT | n for n in REFUSED_BY_NUMBER + (FCHMODAT2,)]
    compat_numbers = list(REFUSED_BY_NUMBER + (FCHMODAT2,))
    # layout: ld arch; jeq native ? N : C; N: ld nr; jeq n.. -> R; ja END;
    # C: ld nr; jeq n.. -> R; ja END; R: ret EACCES; END:
    n_block = 1 + len(native_numbers) + 1
    c_block = 1 + len(compat_numbers) + 1
    out = [op(LD_W_ABS, 0, 0, 4), op(JEQ_K, 0, n_block, native)]
    for numbers, after in ((native_numbers, c_block), (compat_numbers, 0)):
        out.append(op(LD_W_ABS, 0, 0, 0))
        for index, number in enumerate(numbers):
            # jump to R: the rest of this block, then `after`
            out.append(op(JEQ_K, len(numbers) - index + after, 0, number))
        out.append(op(JA, 0, 0, after + 1))
    out.append(op(RET_K, 0, 0, refuse))
    return b"".join(out)
