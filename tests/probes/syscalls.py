#!/usr/bin/python3
"""Seccomp probe: call each syscall the sandbox denies, report the errno.

Runs INSIDE the sandbox (stdlib only, x86_64 only).  Every call uses harmless
arguments chosen so that, without the filter, most calls fail with something
other than EPERM (EINVAL, EFAULT, EBADF, ESRCH, ...) or succeed without side
effects; with the filter they all return EPERM.

Prints one JSON object to stdout:

    {"native":   {name: errno_or_0},   # x86_64 `syscall` ABI
     "i386":     {name: errno_or_0},   # 32-bit `int 0x80` ABI
     "allowed":  {name: errno_or_0},   # calls the filter must let through
     "landlock": {name: errno_or_0},   # only with --landlock
     "uid": ..., "euid": ...}

A value is 0 for success, the errno for failure, or a string such as
"signal:11" when the calling child process died.
"""

import ctypes
import fcntl
import json
import mmap
import os
import signal
import sys
import termios
import traceback

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
TIOCGWINSZ = 0x5413
AT_FDCWD = -100
BAD_PID = 0x7FFFFFFF

# x86_64 syscall numbers
NR = {
    "ioctl": 16,
    "ptrace": 101,
    "personality": 135,
    "pivot_root": 155,
    "acct": 163,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "quotactl": 179,
    "kexec_load": 246,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}

# i386 (int 0x80) syscall numbers
NR_I386 = {
    "ioctl": 54,
    "personality": 136,
    "mount": 21,
    "kcmp": 349,
    "bpf": 357,
    "io_uring_setup": 425,
}


def _ret(res):
    """0 for success (closing a returned fd is the caller's job), else errno."""
    if res == -1:
        return ctypes.get_errno()
    return 0


def native(nr, *args):
    ctypes.set_errno(0)
    res = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & 0xFFFFFFFFFFFFFFFF) for a in args])
    return res


def native_rc(name, *args, close_fd=False):
    res = native(NR[name], *args)
    if res >= 0 and close_fd:
        os.close(res)
    return _ret(res)


# --- int 0x80 stub ----------------------------------------------------------
# long stub(long nr, long a1, long a2, long a3, long a4, long a5)
#   SysV: rdi=nr rsi=a1 rdx=a2 rcx=a3 r8=a4 r9=a5
#   i386: eax=nr ebx=a1 ecx=a2 edx=a3 esi=a4 edi=a5
_STUB = bytes(
    [0x53]  # push rbx (callee-saved)
    + [0x89, 0xF8]  # mov eax, edi
    + [0x89, 0xF3]  # mov ebx, esi
    + [0x49, 0x89, 0xCA]  # mov r10, rcx
    + [0x89, 0xD1]  # mov ecx, edx
    + [0x44, 0x89, 0xD2]  # mov edx, r10d
    + [0x44, 0x89, 0xC6]  # mov esi, r8d
    + [0x44, 0x89, 0xCF]  # mov edi, r9d
    + [0xCD, 0x80]  # int 0x80
    + [0x48, 0x63, 0xC0]  # movsxd rax, eax
    + [0x5B]  # pop rbx
    + [0xC3]  # ret
)
_stub_map = None
_stub_fn = None


def i386(nr, *args):
    """Raw int 0x80 syscall; returns the kernel's value (-errno on failure)."""
    global _stub_map, _stub_fn
    if _stub_fn is None:
        _stub_map = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        _stub_map.write(_STUB)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(_stub_map))
        proto = ctypes.CFUNCTYPE(ctypes.c_long, *([ctypes.c_long] * 6))
        _stub_fn = proto(addr)
    args = list(args) + [0] * (5 - len(args))
    return _stub_fn(nr, *args)


def i386_rc(name, *args):
    res = i386(NR_I386[name], *args)
    return -res if res < 0 else 0


def in_child(fn):
    """Run fn() (returns a JSON-able dict) in a forked child; survive crashes."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.write(w, json.dumps(fn()).encode())
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        c = os.read(r, 65536)
        if not c:
            break
        chunks.append(c)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if chunks:
        return json.loads(b"".join(chunks)), None
    if os.WIFSIGNALED(status):
        return None, "signal:%d" % os.WTERMSIG(status)
    return None, "exit:%d" % os.WEXITSTATUS(status)


# --- terminal ioctls: need a pty that is our controlling terminal -----------
def tty_calls():
    """In a new session with a pty as controlling tty (so that TIOCSTI would
    work without the filter, unless dev.tty.legacy_tiocsti=0 -> EIO)."""
    # As session leader we would get SIGHUP when the pty goes away.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    master, slave = os.openpty()
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    ch = ctypes.c_char(b"x")
    p = ctypes.addressof(ch)
    out = {"native": {}, "i386": {}, "allowed": {}}
    out["native"]["ioctl_TIOCSTI"] = native_rc("ioctl", slave, TIOCSTI, p)
    # high bits set: the kernel truncates the request to 32 bits
    out["native"]["ioctl_TIOCSTI_highbits"] = native_rc("ioctl", slave, (1 << 32) | TIOCSTI, p)
    out["native"]["ioctl_TIOCLINUX"] = native_rc("ioctl", slave, TIOCLINUX, 0)
    ws = ctypes.create_string_buffer(8)
    out["allowed"]["ioctl_TIOCGWINSZ"] = native_rc("ioctl", slave, TIOCGWINSZ, ctypes.addressof(ws))
    res, err = in_child(lambda: tty_calls_i386(slave))
    out["i386"].update(res if res is not None else {"ioctl_TIOCSTI": err, "ioctl_TIOCLINUX": err})
    return out  # the fds close when the child exits


def tty_calls_i386(slave):
    """i386 ioctls on the controlling tty; the pointer must fit in 32 bits."""
    mm = libc.mmap
    mm.restype = ctypes.c_void_p
    mm.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    MAP_32BIT = 0x40
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_32BIT
    page = mm(None, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if page is None or page >= 1 << 32:
        return {"ioctl_TIOCSTI": "no-32bit-page", "ioctl_TIOCLINUX": "no-32bit-page"}
    ctypes.memmove(page, b"y", 1)
    return {
        "ioctl_TIOCSTI": i386_rc("ioctl", slave, TIOCSTI, page),
        "ioctl_TIOCLINUX": i386_rc("ioctl", slave, TIOCLINUX, 0),
    }


def native_calls():
    r = {}
    r["io_uring_setup"] = native_rc("io_uring_setup", 0, 0)  # EFAULT
    r["io_uring_enter"] = native_rc("io_uring_enter", 2**32 - 1, 0, 0, 0, 0, 0)  # EBADF
    r["io_uring_register"] = native_rc("io_uring_register", 2**32 - 1, 0, 0, 0)  # EBADF
    UFFD_USER_MODE_ONLY = 1
    r["userfaultfd"] = native_rc("userfaultfd", UFFD_USER_MODE_ONLY | os.O_CLOEXEC, close_fd=True)
    # kexec: nr_segments beyond KEXEC_SEGMENT_MAX / invalid flags -> EINVAL even for root
    r["kexec_load"] = native_rc("kexec_load", 0, 0xFFFFFFFF, 0, 0xFFFF0000)
    r["kexec_file_load"] = native_rc("kexec_file_load", 2**32 - 1, 2**32 - 1, 0, 0, 0xFFFF0000)
    r["bpf"] = native_rc("bpf", 0xFFFF, 0, 0)  # bad cmd -> EINVAL
    MS_NOUSER = 1 << 31
    root = ctypes.c_char_p(b"/")
    r["mount"] = native_rc("mount", 0, ctypes.cast(root, ctypes.c_void_p).value, 0, MS_NOUSER, 0)  # EINVAL
    r["umount2"] = native_rc("umount2", ctypes.cast(root, ctypes.c_void_p).value, 1 << 31)  # EINVAL (flags)
    r["fsopen"] = native_rc("fsopen", 0, 1 << 31)  # EPERM (no CAP_SYS_ADMIN) or EINVAL/EFAULT
    r["fsconfig"] = native_rc("fsconfig", 2**32 - 1, 0, 0, 0, 0)  # EINVAL (fd < 0)
    r["fsmount"] = native_rc("fsmount", 2**32 - 1, 1 << 31, 0)
    r["fspick"] = native_rc("fspick", 2**32 - 1, 0, 1 << 31)
    r["move_mount"] = native_rc("move_mount", 2**32 - 1, 0, 2**32 - 1, 0, 1 << 31)
    r["open_tree"] = native_rc("open_tree", AT_FDCWD, ctypes.cast(root, ctypes.c_void_p).value, 1 << 31)
    r["mount_setattr"] = native_rc("mount_setattr", AT_FDCWD, ctypes.cast(root, ctypes.c_void_p).value, 1 << 31, 0, 0)
    r["pivot_root"] = native_rc("pivot_root", 0, 0)  # EPERM (no cap) or EFAULT
    r["reboot"] = native_rc("reboot", 0, 0, 0, 0)  # bad magic -> EINVAL (or EPERM without CAP_SYS_BOOT)
    r["swapon"] = native_rc("swapon", 0, 1 << 31)  # bad flags -> EINVAL
    r["swapoff"] = native_rc("swapoff", 0)  # EPERM (no cap) or EFAULT
    cur = native(NR["personality"], 0xFFFFFFFF)
    r["personality"] = native_rc("personality", cur if cur >= 0 else 0)  # set to current: no-op
    # high bits: the kernel truncates to the 32-bit query value; the filter must not be fooled
    r["personality_highbits"] = native_rc("personality", (1 << 32) | 0xFFFFFFFF)
    r["acct"] = native_rc("acct", 1)  # EPERM (no cap) or EFAULT
    r["quotactl"] = native_rc("quotactl", 0xFF, 0, 0, 0)  # type >= MAXQUOTAS -> EINVAL
    r["kcmp"] = native_rc("kcmp", BAD_PID, BAD_PID, 0, 0, 0)  # ESRCH
    return r


def allowed_calls():
    res = native(NR["personality"], 0xFFFFFFFF)
    return {"personality_query": _ret(res)}


def i386_calls():
    r = {}
    r["io_uring_setup"] = i386_rc("io_uring_setup", 0, 0)  # EFAULT
    cur = native(NR["personality"], 0xFFFFFFFF)
    r["personality"] = i386_rc("personality", cur if cur >= 0 else 0)
    r["mount"] = i386_rc("mount", 0, 0, 0, 1 << 31, 0)  # EFAULT (NULL dir)
    r["kcmp"] = i386_rc("kcmp", BAD_PID, BAD_PID, 0, 0, 0)  # ESRCH
    r["bpf"] = i386_rc("bpf", 0xFFFF, 0, 0)  # EINVAL
    return r


def landlock_calls():
    r = {}
    PTRACE_PEEKUSER = 3
    r["ptrace"] = native_rc("ptrace", PTRACE_PEEKUSER, BAD_PID, 0, 0)  # ESRCH
    me = os.getpid()
    r["process_vm_readv"] = native_rc("process_vm_readv", me, 0, 0, 0, 0, 0)  # 0 iovecs -> 0
    r["process_vm_writev"] = native_rc("process_vm_writev", me, 0, 0, 0, 0, 0)
    return r


def main(argv):
    out = {"native": native_calls(), "i386": {}, "allowed": allowed_calls()}
    res, err = in_child(i386_calls)
    if err:
        out["i386"] = {name: err for name in ("io_uring_setup", "personality", "mount", "kcmp", "bpf")}
    else:
        out["i386"].update(res)
    res, err = in_child(tty_calls)
    if err:
        for name in ("ioctl_TIOCSTI", "ioctl_TIOCSTI_highbits", "ioctl_TIOCLINUX"):
            out["native"][name] = err
        for name in ("ioctl_TIOCSTI", "ioctl_TIOCLINUX"):
            out["i386"][name] = err
    else:
        for k in ("native", "i386", "allowed"):
            out[k].update(res[k])
    if "--landlock" in argv:
        out["landlock"] = landlock_calls()
    out["uid"] = os.getuid()
    out["euid"] = os.geteuid()
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
