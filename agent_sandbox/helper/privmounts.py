"""PRIVATE_MOUNTS where util-linux's unshare has no --map-current-user
(before 2.35; RHEL 8 has 2.32): this does what
`unshare --user --map-current-user --mount --propagation private --` does,
then execs the rest of its command line (bwrap and its options).

    python3 -I -S privmounts.py PROGRAM ARGS...

1. unshare(CLONE_NEWUSER | CLONE_NEWNS): a user namespace of its own and a
   mount namespace it owns (a copy of the host's mounts);
2. /proc/self/setgroups "deny", then uid_map and gid_map mapping the user to
   itself (one id each: the only mapping an unprivileged process may write);
3. mount(NULL, "/", NULL, MS_REC | MS_PRIVATE): nothing the host mounts
   later propagates into the copy bwrap takes its view from;
4. execv: the capabilities the namespace gave are dropped at exec (the uid
   is not 0), as with unshare(1).

Stdlib only, loaded by path under `python3 -I -S` like the other helpers;
any failure exits 125 naming the step and errno (the launcher's probe shows
it), never running the program without the private namespace.
"""
import os
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def _libc(name: str):
    """A libc function returning int, errno kept (_ctypes: ctypes costs ~4 ms)."""
    import _ctypes

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO

    class Libc:
        _handle = _ctypes.dlopen(None)

    return Function((name, Libc())), _ctypes.get_errno


def _fail(step: str, errno: int) -> None:
    sys.stderr.write(f"privmounts: {step} failed: {os.strerror(errno)}\n")
    sys.stderr.flush()
    os._exit(125)


def _write(path: str, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        _fail(f"writing {path}", exc.errno or 0)


def private_namespace() -> None:
    uid, gid = os.getuid(), os.getgid()
    unshare, errno = _libc("unshare")
    if unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        _fail("unshare(CLONE_NEWUSER|CLONE_NEWNS)", errno())
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    mount, errno = _libc("mount")
    if mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        _fail("making / private (mount --make-rprivate /)", errno())


def main(argv) -> None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or not argv[0].startswith("/"):
        sys.stderr.write("privmounts: usage: privmounts.py [--] /ABSOLUTE/PROGRAM ARGS...\n")
        os._exit(125)
    private_namespace()
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        _fail(f"executing {argv[0]}", exc.errno or 0)


if __name__ == "__main__":
    main(sys.argv[1:])
