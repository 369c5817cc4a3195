"""Landlock through raw syscalls: the kernel interface, the ABI table, and
the degradation of a ruleset to an older ABI.

Strategy
--------
* A ruleset is plain data (a dict of ints, strings and tuples) so the launcher
  can build it purely, marshal it into a file descriptor, and the helper
  (sandbox_exec.py) can apply it. This module is loaded by that helper from
  its own directory under ``python3 -I -S``: it imports only builtin modules
  and never the agent_sandbox package.
* Best ABI, degraded field by field: each access right and ruleset field
  belongs to the ABI that introduced it (:data:`FEATURES`). :func:`downgrade`
  removes what an older kernel does not know and says what was removed, so
  the caller can refuse (the launcher's plans) or report (tests, doctor).
* Bound through ``_ctypes`` (the C core of ctypes) rather than ``ctypes``:
  importing ctypes costs ~4 ms, which every sandbox launch would pay twice
  (launcher and helper); the three entry points needed here are small.

Landlock grants by allow-list: once a right is *handled*, only paths with a
rule granting it keep it. There is no deny rule, so a hidden path below a
granted directory is left out by granting the directory's other entries one
by one instead (done by the backend, not here).
"""
from __future__ import annotations

import os
import stat

# Syscall numbers are shared by every architecture's unified table since 5.13.
SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36

# Filesystem access rights (include/uapi/linux/landlock.h).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13        # ABI 2
TRUNCATE = 1 << 14     # ABI 3
IOCTL_DEV = 1 << 15    # ABI 5
# Network (ABI 4) and scopes (ABI 6).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX = 1 << 0
SCOPE_SIGNAL = 1 << 1

_FS_ABI1 = (1 << 13) - 1
FS_BY_ABI = {1: _FS_ABI1, 2: _FS_ABI1 | REFER, 3: _FS_ABI1 | REFER | TRUNCATE,
             4: _FS_ABI1 | REFER | TRUNCATE, 5: _FS_ABI1 | REFER | TRUNCATE | IOCTL_DEV}
# Rights that make sense on a file (a rule on a file with others is EINVAL).
ACCESS_FILE = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
         | MAKE_SYM | REFER | TRUNCATE)
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV

# (ABI, field, bits, what a person loses without it) — the degradation table.
FEATURES = (
    (2, "fs", REFER, "renaming and linking files across directories (denied on ABI 1: EXDEV)"),
    (3, "fs", TRUNCATE, "truncation of files outside the writable paths"),
    (4, "net", NET_BIND_TCP | NET_CONNECT_TCP, "TCP bind/connect restrictions"),
    (5, "fs", IOCTL_DEV, "ioctl restrictions on devices"),
    (6, "scoped", SCOPE_ABSTRACT_UNIX, "scoping of abstract unix sockets"),
    (6, "scoped", SCOPE_SIGNAL, "scoping of signals"),
)
LATEST = 7


def fs_rights(abi: int) -> int:
    """Every filesystem right the given ABI knows (0 without Landlock)."""
    return FS_BY_ABI.get(min(abi, 5), 0) if abi > 0 else 0


def ruleset(abi: int, *, fs: int = 0, net: int = 0, scoped: int = 0, paths=(), ports=()) -> dict:
    """The data form of a ruleset, as the helper receives it (marshal)."""
    return {"abi": abi, "fs": fs, "net": net, "scoped": scoped,
            "paths": tuple((int(a), str(p)) for a, p in paths),
            "ports": tuple((int(a), int(p)) for a, p in ports)}


def downgrade(spec: dict, abi: int) -> tuple[dict, list[str]]:
    """`spec` limited to what ABI `abi` knows, field by field, and the list of
    what that removed (empty when nothing that `spec` handles was lost)."""
    lost = []
    fs_known = fs_rights(abi)
    net_known = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    scoped_known = (SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL) if abi >= 6 else 0
    for needed, field, bits, text in FEATURES:
        if abi < needed and spec.get(field, 0) & bits:
            lost.append(f"{text} (needs ABI {needed})")
    if abi < 1 and (spec.get("fs") or spec.get("net") or spec.get("scoped")):
        lost.insert(0, "all Landlock restrictions (the kernel has no Landlock)")
    fs = spec.get("fs", 0) & fs_known
    net = spec.get("net", 0) & net_known
    paths = tuple((a & fs, p) for a, p in spec.get("paths", ()) if a & fs)
    ports = tuple((a & net, p) for a, p in spec.get("ports", ()) if a & net) if net else ()
    result = dict(spec, abi=min(spec.get("abi", abi), abi), fs=fs, net=net,
                  scoped=spec.get("scoped", 0) & scoped_known, paths=paths, ports=ports)
    return result, lost


# ---------------------------------------------------------------- the kernel
_calls = None


def _bind():
    """syscall() and prctl() from libc, returning C longs and keeping errno."""
    global _calls
    if _calls is None:
        import _ctypes

        class c_long(_ctypes._SimpleCData):
            _type_ = "l"

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = c_long

        class Libc:
            _handle = _ctypes.dlopen(None)

        libc = Libc()
        _calls = (Function(("syscall", libc)), Function(("prctl", libc)), c_long,
                  _ctypes.get_errno)
    return _calls


def _check(result: int, what: str) -> int:
    if result < 0:
        err = _bind()[3]()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def syscall(*args) -> int:
    call, _, c_long, _ = _bind()
    return call(*(a if isinstance(a, (bytes, c_long)) else c_long(a) for a in args))


def abi_version() -> int:
    """The kernel's Landlock ABI, 0 when it has none (or it is disabled)."""
    try:
        version = syscall(SYS_CREATE_RULESET, 0, 0, CREATE_RULESET_VERSION)
    except OSError:   # pragma: no cover - no libc
        return 0
    return version if version > 0 else 0


def no_new_privs() -> None:
    _, prctl, c_long, _ = _bind()
    _check(prctl(c_long(PR_SET_NO_NEW_PRIVS), c_long(1), c_long(0), c_long(0), c_long(0)),
           "prctl(PR_SET_NO_NEW_PRIVS)")


def child_subreaper() -> None:
    """Orphaned descendants come back to the calling process, not to init
    (the launcher reaps what a backend leaves behind, process/reap.py).
    Here beside no_new_privs: the prctl binding without ctypes (~4 ms)."""
    _, prctl, c_long, _ = _bind()
    _check(prctl(c_long(PR_SET_CHILD_SUBREAPER), c_long(1), c_long(0), c_long(0), c_long(0)),
           "prctl(PR_SET_CHILD_SUBREAPER)")


def restrict_self(spec: dict) -> int:
    """Apply `spec` to the calling thread (and everything it executes).
    The caller must have set no_new_privs. Rules on paths that do not exist
    are skipped: a missing grant can only make the sandbox stricter. A path
    that is a symlink when the rule is added is skipped too (O_NOFOLLOW): the
    plan named its real path, and a link planted since must not widen it.
    A path given as an int is a descriptor the caller opened and checked
    (the launcher's, inherited): used as it is, never reopened by name.
    Returns the number of rules added."""
    import _struct

    # Older kernels accept the longer struct as long as the fields they do
    # not know are zero, which downgrade() guarantees.
    attr = _struct.pack("=QQQ", spec["fs"], spec["net"], spec["scoped"])
    ruleset_fd = _check(syscall(SYS_CREATE_RULESET, attr, len(attr), 0),
                        "landlock_create_ruleset")
    added = 0
    try:
        for access, path in spec["paths"]:
            try:
                fd = os.dup(path) if isinstance(path, int) else \
                    os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    continue
                if not stat.S_ISDIR(mode):
                    access &= ACCESS_FILE
                if access:
                    rule = _struct.pack("=Qi", access, fd)
                    _check(syscall(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, rule, 0),
                           f"landlock_add_rule({path})")
                    added += 1
            finally:
                os.close(fd)
        for access, port in spec["ports"]:
            rule = _struct.pack("=QQ", access, port)
            _check(syscall(SYS_ADD_RULE, ruleset_fd, RULE_NET_PORT, rule, 0),
                   f"landlock_add_rule(port {port})")
            added += 1
        _check(syscall(SYS_RESTRICT_SELF, ruleset_fd, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset_fd)
    return added
