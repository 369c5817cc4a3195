"""Open a file the caller names, beneath the project, once, without following
a symlink at any component — so that what the chaperon checks is what it uses.

The agent controls every name below the project and can swap a file for a
symlink to a credential between any check and any use (renameat2 with
RENAME_EXCHANGE makes the swap atomic). So nothing here checks a path and
then opens it again by name: each file is opened exactly once, and the
descriptor is what gets checked (`fstat`) and read.

Strategy:
1. The project directory itself is opened from `/` with no symlink allowed
   anywhere (the launcher resolved it, so a symlink there now means the tree
   was changed under us).
2. Below it, `openat2(project_fd, rel, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
   RESOLVE_NO_MAGICLINKS)`: the kernel walks every component, refuses a
   symlink (ELOOP) and any escape (EXDEV). EAGAIN (a rename raced the walk)
   is retried a few times, then refused.
3. Kernels without openat2 (ENOSYS: Linux < 5.6, e.g. RHEL 8) walk the
   components one by one from the project's descriptor, each directory
   opened with O_PATH | O_DIRECTORY | O_NOFOLLOW and the last component with
   O_NOFOLLOW. `..` cannot appear (names are normalised lexically first and
   must stay inside the project).
FIFOs are opened non-blocking, so a FIFO planted as a "script" cannot stall
the handler before fstat refuses it.

Pure helpers (`relative_to`) are separate from the descriptor work so they
can be unit-tested.
"""
from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat

SYS_OPENAT2 = 437                 # the same number on every architecture (a new syscall)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RETRIES = 8

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class Unusable(Exception):
    """The name cannot be used: `why` says so in words a person can act on."""

    def __init__(self, why: str, code: int = 0):
        super().__init__(why)
        self.why, self.errno = why, code


# Set by tests (and by `_probe`) to force the component walk.
FORCE_WALK = False
_HAVE_OPENAT2: bool | None = None


def _openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    how = _OpenHow(flags, mode, resolve)
    fd = _syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd),
                  ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                  ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


def have_openat2() -> bool:
    global _HAVE_OPENAT2
    if _HAVE_OPENAT2 is None:
        try:
            os.close(_openat2(-100, "/", os.O_PATH | os.O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS))
            _HAVE_OPENAT2 = True
        except OSError as exc:
            _HAVE_OPENAT2 = exc.errno not in (errno.ENOSYS, errno.EPERM)
    return _HAVE_OPENAT2 and not FORCE_WALK


def _walk(dirfd: int, rel: str, flags: int, mode: int) -> int:
    """openat2's guarantees by hand: every component without following a
    symlink, `..` impossible (the caller normalised the name)."""
    parts = [p for p in rel.split("/") if p and p != "."]
    if any(p == ".." for p in parts):
        raise OSError(errno.EXDEV, "'..' in a path below the project", rel)
    current = os.dup(dirfd)
    try:
        for part in parts[:-1]:
            step = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            os.close(current)
            current = step
            kind = stat.S_IFMT(os.fstat(current).st_mode)
            if kind != stat.S_IFDIR:
                code = errno.ELOOP if kind == stat.S_IFLNK else errno.ENOTDIR
                raise OSError(code, os.strerror(code), rel)
        last = parts[-1] if parts else "."
        return os.open(last, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
    finally:
        os.close(current)


def open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor for `rel` below the directory `dirfd`: no symlink at any
    component, no escape. Raises OSError (ELOOP for a symlink, EXDEV for an
    escape, or the open's own error)."""
    flags |= os.O_CLOEXEC
    if not have_openat2():
        return _walk(dirfd, rel, flags, mode)
    resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
    for _ in range(RETRIES):
        try:
            return _openat2(dirfd, rel or ".", flags, mode if flags & os.O_CREAT else 0,
                            resolve)
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                raise
    raise OSError(errno.EAGAIN, "the path kept changing while it was opened", rel)


def open_root_path(path: str) -> int:
    """An O_PATH descriptor of an absolute directory with no symlink in it."""
    if not path.startswith("/"):
        raise OSError(errno.EINVAL, "not an absolute path", path)
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_beneath(root, path.lstrip("/"), os.O_PATH | os.O_DIRECTORY)
    finally:
        os.close(root)


def relative_to(project: str, cwd: str, name: str) -> str | None:
    """`name` (absolute, or relative to `cwd`) as a path relative to
    `project`, normalised lexically; None when it lies outside. "" is the
    project itself."""
    full = posixpath.normpath(posixpath.join(cwd, name))
    root = posixpath.normpath(project)
    if full == root:
        return ""
    if not full.startswith(root.rstrip("/") + "/"):
        return None
    return full[len(root.rstrip("/")) + 1:]


WHY = {errno.ELOOP: "a symlink is in the way (symlinks are not followed)",
       errno.EXDEV: "it leads outside the project",
       errno.ENOENT: "it does not exist",
       errno.ENOTDIR: "a part of it is not a directory",
       errno.EISDIR: "it is a directory",
       errno.ENXIO: "it is not a regular file",
       errno.EACCES: "permission denied",
       errno.EAGAIN: "it kept changing while it was opened"}


def why(exc: OSError) -> str:
    return WHY.get(exc.errno, exc.strerror or "it cannot be opened")


class Project:
    """The project directory, opened once per request; names below it are
    opened through this descriptor."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.fd = open_root_path(path)
        except OSError as exc:
            raise Unusable(f"the project directory {path} cannot be opened ({why(exc)})",
                           exc.errno) from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Project":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rel(self, cwd: str, name: str) -> str:
        rel = relative_to(self.path, cwd, name)
        if rel is None:
            raise Unusable(f"it lies outside the project {self.path}", errno.EXDEV)
        return rel

    def open(self, rel: str, flags: int, mode: int = 0o644) -> int:
        try:
            return open_beneath(self.fd, rel, flags, mode)
        except OSError as exc:
            raise Unusable(why(exc), exc.errno) from None

    def directory(self, rel: str) -> int:
        """An O_PATH descriptor of a directory below the project."""
        return self.open(rel, os.O_PATH | os.O_DIRECTORY)

    def open_regular(self, rel: str) -> int:
        """A read descriptor of a regular file below the project."""
        fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise Unusable("it is not a regular file")
        os.set_blocking(fd, True)
        return fd

    def read_regular(self, rel: str, limit: int) -> bytes:
        """The bytes of a regular file (at most `limit` + 1, so the caller
        can tell "too large"), read through the one descriptor."""
        fd = self.open_regular(rel)
        try:
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write_regular(self, rel: str, *, append: bool = False) -> int:
        """A descriptor to write a regular file (created 0644 if missing)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if append
                                                            else os.O_TRUNC)
        fd = self.open(rel, flags)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise Unusable("it is not a regular file")
        os.set_blocking(fd, True)
        return fd
