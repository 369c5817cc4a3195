"""Joining a running sandbox (a job's sandbox on this node), for the helper
(sandbox_exec.py --join / --join-ns): stdlib only, loaded from the helper's
own directory under `python3 -I -S`.

Strategy
--------
* The namespaces to join and their identities (`kind:inode`, read by the
  launcher from /proc/<holder>/ns while the holder's pidfd proved it alive)
  travel in one string. bwrap (unprivileged): setns(pidfd, all of them at
  once) — the user namespace bwrap made owns the others, and the caller is
  its owner; then fork, because a PID namespace is entered by children only.
  firejail: `firejail --join` (setuid) has entered them already.
* Either way the joined process proves where it is before anything runs:
  every listed namespace's inode of /proc/self/ns equals the expected one,
  else it stops (fail closed).
* A joined process inherits nothing of the sandbox's confinement: after
  setns it holds every capability in the sandbox's user namespace and has
  neither no_new_privs nor seccomp. drop_capabilities() empties the bounding,
  ambient, effective, permitted and inheritable sets; the helper then sets
  no_new_privs and loads the session's seccomp filter at once.
* Between the fork (it is now a visible member of the sandbox) and seccomp,
  a member of the same uid could ptrace the joiner or write its memory and
  remove the filter before it is loaded: non_dumpable() before setns shuts
  both (ptrace and /proc/PID/mem need a dumpable target without privilege).
"""
import os

# clone(2) flags, by the names /proc/PID/ns uses.
FLAGS = {"user": 0x10000000, "mnt": 0x00020000, "ipc": 0x08000000, "net": 0x40000000,
         "uts": 0x04000000, "pid": 0x20000000, "cgroup": 0x02000000}
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
_libc = {}


class JoinError(Exception):
    pass


def _function(name: str):
    """A libc function returning int, errno kept (_ctypes: ctypes costs ~4 ms)."""
    if name not in _libc:
        import _ctypes

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO

        class Libc:
            _handle = _ctypes.dlopen(None)

        _libc[name] = (Function((name, Libc())), _ctypes.get_errno)
    return _libc[name]


def _prctl(*args) -> int:
    """prctl with every argument a C long (it is variadic: the kernel reads
    unsigned longs, and checks that unused ones are zero)."""
    import _ctypes

    class c_long(_ctypes._SimpleCData):
        _type_ = "l"

    prctl, _ = _function("prctl")
    return prctl(*(c_long(a) for a in args))


def non_dumpable() -> None:
    """PR_SET_DUMPABLE 0, checked: the members of the sandbox (same uid) can
    then neither ptrace this process nor open its /proc/PID/mem, so nothing
    can strip what it is about to apply. Survives setns and fork; exec
    resets it. Fails closed."""
    if _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or _prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise JoinError("cannot make the joining process non-dumpable (prctl)")


def prepare() -> None:
    """Load now what the steps after setns use (the C modules, the libc
    functions): after it, nothing is imported from the sandbox's view of
    the filesystem while this process still holds capabilities there."""
    import _struct

    _struct.calcsize("=Ii")
    for name in ("setns", "prctl", "capset"):
        _function(name)


def parse_spec(text: str) -> dict:
    """'user:4026532195,mnt:…' → {kind: inode}; only known kinds."""
    spec = {}
    for item in text.split(","):
        kind, _, inode = item.partition(":")
        if kind not in FLAGS or not inode.isdigit():
            raise JoinError(f"bad namespace list {text!r}")
        spec[kind] = int(inode)
    return spec


def enter(pidfd: int, spec: dict) -> None:
    """setns into every namespace of `spec` at once through the pidfd."""
    flags = 0
    for kind in spec:
        flags |= FLAGS[kind]
    setns, errno = _function("setns")
    if setns(pidfd, flags) != 0:
        err = errno()
        raise JoinError(f"cannot enter the job's sandbox (setns: {os.strerror(err)})")
    os.close(pidfd)


def verify(spec: dict) -> None:
    """Every namespace of `spec` is the one this process is in (run in the
    joined process, after the fork that enters the PID namespace)."""
    for kind, inode in spec.items():
        try:
            actual = os.stat(f"/proc/self/ns/{kind}").st_ino
        except OSError as exc:
            raise JoinError(f"cannot read this process's {kind} namespace — "
                            f"{exc.strerror}") from None
        if actual != inode:
            raise JoinError(f"the {kind} namespace is not the job sandbox's "
                            f"({actual} instead of {inode})")


def drop_capabilities() -> None:
    """No capability left in any set; fails closed when one remains."""
    import _struct

    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break        # EINVAL past the last capability the kernel knows
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    capset, errno = _function("capset")
    head = bytearray(_struct.pack("=Ii", LINUX_CAPABILITY_VERSION_3, 0))
    data = bytearray(24)          # two struct __user_cap_data_struct, all zero
    if capset(_bytes(head), _bytes(data)) != 0:
        raise JoinError(f"cannot drop capabilities (capset: {os.strerror(errno())})")
    with open("/proc/self/status", "rb") as handle:
        for line in handle:
            if line.startswith((b"CapEff:", b"CapPrm:", b"CapInh:", b"CapAmb:", b"CapBnd:")):
                if int(line.split()[1], 16) != 0:
                    raise JoinError(f"a capability survived: {line.decode().strip()}")


def _bytes(buffer: bytearray):
    """A C array sharing `buffer`'s memory (what a pointer argument needs)."""
    import _ctypes

    class Byte(_ctypes._SimpleCData):
        _type_ = "B"

    class Array(_ctypes.Array):
        _type_ = Byte
        _length_ = len(buffer)

    return Array.from_buffer(buffer)
