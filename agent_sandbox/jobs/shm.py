"""A landlock job's shared-memory directory on a node (SPEC §9): where the
job's ranks on this node put Open MPI's shared-memory segments.

On landlock every task of a job is a sandbox of its own (no namespaces to
join, jobs/share.py), and cross-memory attach is denied by design, so
Open MPI's shared-memory transport (vader) works between two ranks only if
both can write one directory for its backing files. Each landlock job launch
(`run --job-shared`) therefore gets one more writable Landlock path: the
job's directory in /dev/shm, which only that job's sandboxes are given.

Strategy
--------
* The name holds a secret: /dev/shm/agent-sandbox-job-<job>-<digest>, the
  digest a hash of the job's key (the `tmp_key` the chaperon draws once per
  batch job or allocation and stages in every step's jobstart spec, chaperon/
  submit.py) and the node's name. The spec is the user's, 0600, in the
  chaperon's staging directory; the key is never in any argv (every process
  list on the node shows argv, and other sandboxes of this user run there).
  /dev/shm is world-listable, so a name seen on one node must not give the
  key (which also names the job's TMPDIR) nor another node's name: hence the
  hash, with the node in it. The job id comes from the process tree
  (jobshare.slurm_step), never from the environment.
* Made here, in the launcher, outside the Landlock domain and before the
  sandbox exists: mkdir 0700, or, when it exists (the job's other tasks on
  this node made it), opened with O_DIRECTORY|O_NOFOLLOW and taken only when
  fstat says it is a directory of this user with mode 0700. Anything else —
  a symlink, another user's entry, a wrong mode — fails closed (exit 125,
  naming the cause): it was planted. The checked descriptor is what the
  helper grants (`--landlock-dir`, an O_PATH duplicate); no name is looked
  up twice.
* Cleanup: the last launcher of the job on the node removes it. Every
  launcher holds a shared flock on the directory while its task runs; at
  its end it tries an exclusive one without waiting, and only when that
  succeeds (no task of the job runs on the node any more) empties the
  directory (through descriptors, no symlink followed) and removes it. On
  the batch node the batch script's launcher lives longest, so the directory
  goes with the job; on other nodes it goes with each step and the next step
  makes it again. A launcher that opened it just as the last one removed it
  sees a link count of 0 after taking its lock and makes a new one. A
  launcher killed by SIGKILL leaves it behind (tmpfs: memory); nothing reuses
  the name (a new job has a new key), and Open MPI removes its own segment
  files when the ranks finalize.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import sys

from agent_sandbox.errors import PolicyError

SHM_ROOT = "/dev/shm"
SHM_ENV = "AGENT_SANDBOX_JOB_SHM"   # the directory, for jobstart's Open MPI default
KEY = re.compile(r"[0-9a-f]{32}")


def directory(job: str, key: str, host: str, root: str = SHM_ROOT) -> str:
    """The job's directory on `host` (pure)."""
    digest = hashlib.sha256(f"agent-sandbox-shm:{key}:{host}".encode()).hexdigest()[:32]
    return f"{root}/agent-sandbox-job-{job}-{digest}"


def spec_key(command: list[str]) -> str | None:
    """The job's key from the jobstart spec of a job launch: `command` is the
    chaperon's `<python> -IS <installed jobstart> SPEC`
    (chaperon/jobwrap.launch_argv), where <python> is one of the helper
    interpreter's two candidates (backends/helperpython.py: the system
    python3 or this launcher's own); anything else is not a job's launch.
    None when the spec has no valid key (nothing to share: jobstart then
    keeps ranks on TCP)."""
    import json

    from agent_sandbox.paths import helper_path

    from agent_sandbox.backends.helperpython import SYSTEM_PYTHON

    if (len(command) != 4 or command[1:3] != ["-IS", helper_path("jobstart")]
            or command[0] not in (SYSTEM_PYTHON, os.path.realpath(sys.executable))):
        return None
    try:
        fd = os.open(command[3], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            key = json.loads(handle.read(1 << 20)).get("tmp_key", "")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, str) and KEY.fullmatch(key) else None


def _refuse(path: str, why: str) -> PolicyError:
    return PolicyError(
        f"the job's shared-memory directory {path} {why} — it was not made by this job, so "
        "the task was not run. Remove that entry (or ask your admin to), then resubmit the "
        "job.", reason="job_shm_refused")


def _open_checked(path: str) -> int:
    """A descriptor of the job's directory: made now, or an existing one
    that is this user's directory with mode 0700 (never through a symlink)."""
    made = False
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        pass
    except OSError as exc:
        raise PolicyError(f"cannot make the job's shared-memory directory {path} — "
                          f"{exc.strerror}. Check that {SHM_ROOT} is a writable tmpfs on "
                          "this node. The task was not run.", reason="job_shm_refused") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        info = None
        try:
            info = os.lstat(path)
        except OSError:
            pass
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise _refuse(path, "is a symbolic link") from None
        raise _refuse(path, f"cannot be opened as a directory ({exc.strerror})") from None
    try:
        if made:
            os.fchmod(fd, 0o700)     # whatever the umask
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise _refuse(path, f"belongs to uid {info.st_uid}, not to you")
        if stat.S_IMODE(info.st_mode) != 0o700:
            raise _refuse(path, f"has mode {stat.S_IMODE(info.st_mode):04o}, not 0700")
    except BaseException:
        os.close(fd)
        raise
    return fd


class JobShm:
    """The job's directory, held (shared lock) while this launcher's task
    runs; `release` removes it when no other task of the job still holds it."""

    def __init__(self, path: str, fd: int, rule_fd: int):
        self.path, self.fd, self.rule_fd = path, fd, rule_fd

    @classmethod
    def open(cls, path: str) -> "JobShm":
        import fcntl

        for _ in range(8):
            fd = _open_checked(path)
            fcntl.flock(fd, fcntl.LOCK_SH)
            if os.fstat(fd).st_nlink > 0:     # not removed by the last one out
                rule_fd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
                return cls(path, fd, rule_fd)
            os.close(fd)
        raise PolicyError(f"the job's shared-memory directory {path} keeps disappearing — "
                          "the task was not run. Resubmit the job.", reason="job_shm_refused")

    def release(self) -> None:
        import fcntl

        try:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return                       # another task of the job still runs here
            _empty(self.fd)
            try:
                now = os.lstat(self.path)
                mine = os.fstat(self.fd)
                if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                    os.rmdir(self.path)
            except OSError:
                pass
        finally:
            os.close(self.rule_fd)
            os.close(self.fd)


def _empty(dirfd: int) -> None:
    """Remove what the directory holds, through descriptors (no symlink is
    followed, nothing outside it is touched)."""
    for top, dirs, files, fd in os.fwalk(".", topdown=False, dir_fd=dirfd):
        for name in files:
            try:
                os.unlink(name, dir_fd=fd)
            except OSError:
                pass
        for name in dirs:
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                try:
                    os.unlink(name, dir_fd=fd)    # a symlink to a directory
                except OSError:
                    pass


def start(command: list[str]) -> JobShm | None:
    """The job's directory for a landlock job launch in a Slurm step, or
    None when this launch is not one (or its spec has no key)."""
    from agent_sandbox.jobs.share import slurm_step

    key = spec_key(command)
    step = slurm_step() if key else None
    if step is None:
        return None
    host = socket.gethostname().split(".")[0]
    return JobShm.open(directory(step[0], key, host))


def _rw() -> int:
    """The rights --landlock-dir grants (helper/sandbox_exec.py), as the
    rules list shows them."""
    from agent_sandbox.paths import helper_module

    landlock = helper_module("landlock")
    return landlock.READ | landlock.WRITE


def with_job_shm(policy, plan, held: JobShm) -> tuple:
    """(policy, plan) of a landlock job launch with the job's directory
    granted: one more writable Landlock path, by the descriptor the launcher
    checked (`--landlock-dir`: the helper adds it to the ruleset, no name is
    looked up again), named to jobstart in the environment (Open MPI's
    default) and listed in the plan's rules. Applied to a compiled and to a
    cached plan alike, after the plan cache (the path and the descriptor
    are this launch's). Without imports: each new item is made from one of
    its kind in the plan (a NamedTuple, or the plan cache's record of one)."""
    from agent_sandbox.traits import traits
    from agent_sandbox.backends.base import RULESET_PAYLOAD

    argv = plan.argv
    at = next((i for i in range(len(argv) - 1) if argv[i] == "--landlock"
               and getattr(argv[i + 1], "name", None) == RULESET_PAYLOAD), None)
    if not traits(plan.backend).landlock_enforced or at is None or not plan.mounts:
        raise PolicyError("internal error: the job's shared-memory directory cannot be granted "
                          "to this plan (no Landlock ruleset or project grant in it). Report "
                          "this; the task was not run.", reason="job_shm_refused")
    ref = argv[at + 1]
    payloads = dict(plan.payloads)
    payloads["shm"] = payloads[RULESET_PAYLOAD]._replace(data=None, path=None, fd=held.rule_fd)
    env = dict(policy.env, **{SHM_ENV: held.path})
    plan = plan._replace(
        argv=argv[:at + 2] + ("--landlock-dir", ref._replace(name="shm")) + argv[at + 2:],
        payloads=payloads, env=dict(plan.env, **{SHM_ENV: held.path}),
        mounts=plan.mounts + (plan.mounts[0]._replace(access=_rw(), path=held.path),))
    # The directory itself is a launch fact: the lifecycle's Launch.job_shm holds it.
    return policy._replace(env=env), plan
