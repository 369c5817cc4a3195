"""An older kernel's syscall surface on this one (issue 30, item 5): run
COMMAND as USER under a seccomp filter that answers every syscall newer than
the target kernel with ENOSYS, getsockopt(SO_PEERPIDFD) with ENOPROTOOPT and
waitid(P_PIDFD) with EINVAL — as a kernel of that version does — and,
optionally, Landlock's version query with a lower ABI.

    python3 -I oldkernel.py --kernel 4.18|5.14 [--landlock-abi N] --uid U --gid G -- COMMAND...

Run as root: the filter is installed WITHOUT no_new_privs (root's
CAP_SYS_ADMIN allows that), before dropping to U:G and exec'ing COMMAND, so
that the setuid firejail runs under it too (a filter installed under
no_new_privs would make the setuid bit inert). x86_64 only; stdlib only.

--landlock-abi N: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
answers N — a seccomp user notification this process answers while COMMAND
runs (the other Landlock calls go on to the real kernel: the rules a
launcher that believed N would add are enforced as written).
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import os
import socket
import struct
import sys
import threading

AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_USER_NOTIF = 0x7FC00000
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 8
NR_SECCOMP = 317
NR_GETSOCKOPT = 55
NR_WAITID = 247
NR_LANDLOCK_CREATE_RULESET = 444
SOL_SOCKET, SO_PEERPIDFD = 1, 77
P_PIDFD = 3
LANDLOCK_CREATE_RULESET_VERSION = 1
# The first x86_64 syscall number a kernel lacks (every later one too):
# 4.18's last is rseq (334; 335–423 are unused), 5.14's memfd_secret (447).
FIRST_MISSING = {"4.18": 424, "5.14": 448}

# BPF: class|size|mode codes.
LD_W_ABS = 0x20
JEQ_K, JGE_K = 0x15, 0x35
RET_K = 0x06


def program(kernel: str, landlock_abi: int | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions (pure)."""
    first = FIRST_MISSING[kernel]
    allow, enosys = ("ret", RET_ALLOW), ("ret", RET_ERRNO | errno.ENOSYS)
    # Labelled: jumps name labels, resolved below (jumps are forward only).
    code = [
        ("ld", 4), ("jeq", AUDIT_ARCH_X86_64, None, "allow"),
        ("ld", 0),
    ]
    if landlock_abi is not None and first > NR_LANDLOCK_CREATE_RULESET:
        code += [("jeq", NR_LANDLOCK_CREATE_RULESET, "landlock", None)]
    code += [
        ("jge", first, "enosys", None),
        ("jeq", NR_GETSOCKOPT, "getsockopt", None),
    ]
    if first <= 434:     # P_PIDFD is 5.4's
        code += [("jeq", NR_WAITID, "waitid", None)]
    code += [
        ("jeq", 0xFFFFFFFF, None, "allow"),     # (always) past the tests below
        ("label", "getsockopt"),
        ("ld", 16 + 8 * 1), ("jeq", SOL_SOCKET, None, "allow"),
        ("ld", 16 + 8 * 2), ("jeq", SO_PEERPIDFD, None, "allow"),
        ("ret", RET_ERRNO | errno.ENOPROTOOPT),
    ]
    if first <= 434:
        code += [("label", "waitid"),
                 ("ld", 16), ("jeq", P_PIDFD, None, "allow"),
                 ("ret", RET_ERRNO | errno.EINVAL)]
    if landlock_abi is not None and first > NR_LANDLOCK_CREATE_RULESET:
        code += [("label", "landlock"),
                 ("ld", 16 + 8 * 2), ("jeq", LANDLOCK_CREATE_RULESET_VERSION, None, "allow"),
                 ("ret", RET_USER_NOTIF)]
    code += [("label", "allow"), allow, ("label", "enosys"), enosys]
    labels, position = {}, 0
    for item in code:
        if item[0] == "label":
            labels[item[1]] = position
        else:
            position += 1
    out, position = [], 0
    for item in code:
        op = item[0]
        if op == "label":
            continue
        if op == "ld":
            out.append((LD_W_ABS, 0, 0, item[1]))
        elif op == "ret":
            out.append((RET_K, 0, 0, item[1]))
        else:
            def offset(target):
                return 0 if target is None else labels[target] - position - 1
            out.append((JEQ_K if op == "jeq" else JGE_K, offset(item[2]), offset(item[3]),
                        item[1]))
        position += 1
    assert all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in out)
    return out


def install(instructions, listener: bool) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    raw = b"".join(struct.pack("=HBBI", *i) for i in instructions)
    buffer = ctypes.create_string_buffer(raw)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(instructions), ctypes.addressof(buffer))
    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER if listener else 0
    result = libc.syscall(NR_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(prog))
    if result < 0:
        raise OSError(ctypes.get_errno(), "seccomp(SET_MODE_FILTER)")
    return result


# struct seccomp_notif (80 bytes) and seccomp_notif_resp (24 bytes); their ioctls.
NOTIF_RECV, NOTIF_SEND = 0xC0502100, 0xC0182101


def supervise(listener: int, abi: int) -> None:
    import fcntl
    while True:
        request = bytearray(80)
        try:
            fcntl.ioctl(listener, NOTIF_RECV, request)
        except OSError:
            return          # every task of the filter is gone
        notif_id = struct.unpack_from("=Q", request, 0)[0]
        try:
            fcntl.ioctl(listener, NOTIF_SEND, bytearray(struct.pack("=QqiI", notif_id, abi, 0, 0)))
        except OSError:
            pass            # the caller died meanwhile


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", required=True, choices=sorted(FIRST_MISSING))
    parser.add_argument("--landlock-abi", type=int)
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--gid", type=int, required=True)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    notify = args.landlock_abi is not None and \
        FIRST_MISSING[args.kernel] > NR_LANDLOCK_CREATE_RULESET
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            parent.close()
            os.setgroups([])
            os.setgid(args.gid)
            listener = install(program(args.kernel, args.landlock_abi), notify)
            if notify:
                socket.send_fds(child, [b"x"], [listener])
                os.close(listener)
            child.close()
            os.setuid(args.uid)
            os.execvp(args.command[0], args.command)
        except BaseException as exc:
            print(f"oldkernel.py: {exc!r}", file=sys.stderr)
        os._exit(127)
    child.close()
    if notify:
        _, fds, _, _ = socket.recv_fds(parent, 1, 1)
        threading.Thread(target=supervise, args=(fds[0], args.landlock_abi), daemon=True).start()
    parent.close()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else \
        (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    code = main()
    sys.exit(code if code >= 0 else 128 - code)
