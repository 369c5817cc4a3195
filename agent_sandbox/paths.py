"""Where agent-sandbox's own files are, and how the launcher reaches the
jail-side helper.

The helper (`agent_sandbox/helper/`: sandbox_exec, landlock, jobstart) runs
inside every jail with only its own folder on sys.path, so its modules import
each other as top-level modules and the standard library only. Outside, the
same modules are loaded the same way (`helper_module`), never as a package,
so no module exists twice under two names; the folder has no __init__.py, so
importing it as a subpackage fails.
"""
from __future__ import annotations

import importlib
import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
HELPER_DIR = os.path.join(PACKAGE_DIR, "helper")

# --- the per-user layout (one spelling; every module asks here) -------------
# The admin file: fixed at install time, never the user's to choose (SPEC §4):
# /etc/agent-sandbox, or the directory a site gave install.sh as
# AGENT_SANDBOX_ADMIN_DIR, which it wrote into the root-owned module _site.py
# (several installs on one host, e.g. parallel test runs, keep apart).
try:
    from agent_sandbox._site import ADMIN_DIR  # type: ignore[import-not-found]
except ImportError:
    ADMIN_DIR = "/etc/agent-sandbox"
ADMIN_CONFIG = os.path.join(ADMIN_DIR, "sandbox.conf")
# Below $HOME. The state and run directories are always hidden inside the
# sandbox (policy/resolve.py lists them among the credential paths).
CONFIG_DIR = ".config/agent-sandbox"          # user config, conf.d, agents: read-only inside
STATE_DIR = ".local/state/agent-sandbox"      # ledger, audit logs, registry, caches
RUN_DIR = ".local/state/agent-sandbox-run"    # chaperon session directories (FIFOs)
STAGING_DIR = ".local/share/agent-sandbox/jobs"   # per-project job staging, read-only inside
# The sandbox's own package caches, one per project (policy/caches.py): a
# session is granted its project's alone. Beside the state directory, not in
# it: a grant's mount point would make the state directory exist inside.
CACHES_DIR = ".local/state/agent-sandbox-caches"


def is_within(path: str, parent: str) -> bool:
    """`path` is `parent` or below it (by name: both already normalised)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def user_config_dir(home: str) -> str:
    return os.path.join(home, CONFIG_DIR)


def state_dir(home: str) -> str:
    return os.path.join(home, STATE_DIR)


def run_dir(home: str) -> str:
    return os.path.join(home, RUN_DIR)


def staging_root(home: str) -> str:
    return os.path.join(home, STAGING_DIR)


def defaults_path() -> str:
    """The shipped defaults: installed beside the package, or in the source tree."""
    installed = os.path.join(PACKAGE_DIR, "conf", "sandbox.conf")
    if os.path.exists(installed):
        return installed
    return os.path.join(os.path.dirname(PACKAGE_DIR), "conf", "sandbox.conf")


TOO_LARGE = -1   # read_regular's answer for a file over its limit


def read_regular(path: str, limit: int) -> bytes | int | None:
    """The bytes of a regular file, opened once without following a symlink
    (a FIFO cannot block: non-blocking open, then fstat); TOO_LARGE above
    `limit` bytes; None when it is missing, a symlink, not a regular file or
    unreadable."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit:
            return TOO_LARGE
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return TOO_LARGE if size > limit else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def runnable_outside(path: str) -> bool:
    """Whether the launcher may run the program at `path` outside any sandbox
    (bwrap, firejail, git): neither the file it really is nor a directory on
    the way to it can be written by this user. A place the user can write, a
    sandbox of theirs could have written — under whatever configuration that
    session had (HOME_ACCESS=write makes ~/.local/bin, first on PATH,
    writable inside) — so a program found there is passed over: the PATH
    search goes on. A symlink to a system program passes (it runs that
    program, with our arguments)."""
    import stat

    def unwritable(place: str) -> bool:
        if os.getuid() != 0:
            return not os.access(place, os.W_OK)
        try:                      # root can write anything: owned by root, no one else
            info = os.stat(place)
        except OSError:
            return False
        return info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)

    place, places = os.path.realpath(path), []
    while place not in places:
        places.append(place)
        place = os.path.dirname(place)
    return all(unwritable(place) for place in places)


def helper_path(name: str) -> str:
    """The file of a helper module (`sandbox_exec`, `landlock`, `jobstart`)."""
    return os.path.join(HELPER_DIR, name + ".py")


def helper_module(name: str):
    """A helper module, imported as inside the jail: top-level, from HELPER_DIR."""
    if HELPER_DIR not in sys.path:
        sys.path.insert(0, HELPER_DIR)
    return importlib.import_module(name)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotOwnDirectory(OSError):
    """A component of one of the launcher's own directories is a symlink, not
    a directory, or not the user's: something else put it there."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path} {what}")
        self.path, self.what = path, what


def open_own_dir(base: str, relative: str, *, create: bool = False) -> int:
    """A directory of the launcher's own below `base` (the home, from the
    password database), opened from `base` one component at a time without
    following a symlink, each component a directory owned by this user
    (missing ones made 0700 when `create`): a descriptor the caller works
    through. A name-based os.makedirs/os.mkdir would follow a link that a
    sandbox with that place writable (HOME_WRITABLE+=(.cache)) planted, and
    make, write and grant the launcher's directory wherever it points.
    Raises NotOwnDirectory naming the first component that is not one, or
    the OSError of a missing one."""
    import stat

    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    path = base
    try:
        for part in [p for p in relative.split("/") if p]:
            path = os.path.join(path, part)
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                try:
                    mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                except OSError:
                    raise exc from None
                raise NotOwnDirectory(path, "is a symlink" if stat.S_ISLNK(mode)
                                      else "is not a directory") from None
            os.close(fd)
            fd = inner
            if os.fstat(fd).st_uid != os.getuid():
                raise NotOwnDirectory(path, "is not owned by you")
        return fd
    except BaseException:
        os.close(fd)
        raise


def remove_entry(dir_fd: int, name: str) -> None:
    """remove_tree for the entry `name` of an open directory."""
    _remove_entry(dir_fd, name)


def remove_tree(path: str) -> None:
    """shutil.rmtree(path, ignore_errors=True) without importing shutil
    (with fnmatch and re, ~4.5 ms on a launch's exit path: session copies,
    the egress proxy's and the chaperon's directories): each directory
    opened from its parent's descriptor without following a link (a link a
    session planted is removed, never followed)."""
    try:
        parent = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        _remove_entry(parent, os.path.basename(path))
    finally:
        os.close(parent)


def _remove_entry(dir_fd: int, name: str) -> None:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:          # not a directory (a file, a link) or gone
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        return
    try:
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for entry in names:
            _remove_entry(fd, entry)
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError:
        pass
