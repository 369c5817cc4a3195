"""Starting and stopping the chaperon for one sandbox session (SPEC §9
"Transport and lifecycle").

Before the sandbox starts: a private directory (0700) with the announcement
FIFO (0600) and the connection directory, the job-output staging directory of
the project (it must exist before the mounts are computed, so it is never
writable inside), and the chaperon process itself, outside the sandbox, in its
own process group, fed its configuration through a pipe. The chaperon dies
with the launcher (PR_SET_PDEATHSIG and parent polling); `stop` ends it and
removes the directory in the normal exit paths.
"""
from __future__ import annotations

import json
import os
import signal
import sys

from agent_sandbox.paths import PACKAGE_DIR, helper_path, run_dir, staging_root
from agent_sandbox.names import slurm_commands


def wanted(settings, policy) -> bool:
    """A chaperon runs when CHAPERON=true and this host has Slurm (sbatch)."""
    return bool(settings.CHAPERON) and any(
        os.path.basename(p) == "sbatch" for p in policy.slurm_binaries)


def session_parent(home: str) -> str:
    """Where session directories go: a directory every backend hides from
    the sandbox (policy.CREDENTIAL_DIRS) and grants only this session's
    part of. Not /tmp: a sandbox that shares /tmp (PRIVATE_TMP=false, or
    landlock, which cannot hide part of a tree it grants) could drive every
    other session's chaperon there (SPEC §9)."""
    base = run_dir(home)
    os.makedirs(base, mode=0o700, exist_ok=True)
    return base


def staging_dir(home: str, project_dir: str) -> str:
    from chaperon.paths import project_hash

    return os.path.join(staging_root(home), project_hash(project_dir))


def _real_binaries(policy) -> dict[str, str]:
    found = {}
    for path in policy.slurm_binaries:
        name = os.path.basename(path)
        if name in slurm_commands():
            found.setdefault(name, path)
    return found


class ChaperonSession:
    def __init__(self, directory: str, staging: str, pid: int, session_id: str = ""):
        self.directory = directory
        self.staging = staging
        self.pid = pid                  # the chaperon process (`agent-sandbox status`)
        self.session_id = session_id    # the id its audit log and ledger records carry

    @classmethod
    def start(cls, settings, policy) -> "ChaperonSession":
        from chaperon.wire.session import ANNOUNCE_FIFO, CONN_DIR, visible_paths

        from agent_sandbox.errors import SandboxError

        # The session id is random; the suffix only guards against a stale
        # directory of the same name (os.mkdir, not tempfile: 3 ms of imports).
        directory = None
        try:
            directory = os.path.join(session_parent(policy.home),
                                     f"agent-sandbox-{policy.session_id}-{os.urandom(4).hex()}")
            os.mkdir(directory, 0o700)
            os.mkfifo(os.path.join(directory, ANNOUNCE_FIFO), 0o600)
            os.mkdir(os.path.join(directory, CONN_DIR), 0o700)
            if policy.backend != "bwrap":
                _write_stubs(directory, cls.stub_script())
            staging = staging_dir(policy.home, policy.project_dir)
            os.makedirs(staging, mode=0o700, exist_ok=True)
        except OSError as exc:
            if directory:
                import shutil

                shutil.rmtree(directory, ignore_errors=True)
            raise SandboxError(
                f"cannot prepare the Slurm proxy (chaperon) — {exc.strerror or exc} at "
                f"{exc.filename or directory}: its session directory and named pipes live "
                "in ~/.local/state/agent-sandbox-run and the job staging directory in "
                "~/.local/share/agent-sandbox. Free space or fix the permissions there, or "
                "set CHAPERON=false to run without Slurm; the command was not run.") from None
        config = handler_config(settings, policy, staging)
        config.update({"session_dir": directory, "launcher_pid": os.getpid(),
                       "visible_dir": visible_paths(policy.backend, directory)[0]})
        # Opened here and inherited, so the FIFO has a reader from the first
        # instant: a stub called while the chaperon is still starting waits
        # for its answer instead of being told the chaperon is gone.
        announce_fd = os.open(os.path.join(directory, ANNOUNCE_FIFO),
                              os.O_RDWR | os.O_NONBLOCK)
        os.set_inheritable(announce_fd, True)
        config["announce_fd"] = announce_fd
        read_fd, write_fd = os.pipe()
        os.set_inheritable(read_fd, True)
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "USER", "LOGNAME")}
        if policy.slurm_conf:   # the site's Slurm, for every real command it runs
            env["SLURM_CONF"] = policy.slurm_conf
        argv = [sys.executable, "-I", "-m", "chaperon.server", "--config-fd", str(read_fd)]
        try:
            pid = os.posix_spawn(sys.executable, argv, env, setpgroup=0,
                                 setsigdef=(signal.SIGINT, signal.SIGTERM, signal.SIGPIPE))
        except OSError as exc:
            for fd in (read_fd, write_fd, announce_fd):
                os.close(fd)
            raise SandboxError(f"cannot start the Slurm proxy (chaperon) — {exc}. Set "
                               "CHAPERON=false to run without Slurm.") from None
        os.close(read_fd)
        os.close(announce_fd)
        with os.fdopen(write_fd, "wb") as handle:
            handle.write(json.dumps(config).encode())
        return cls(directory, staging, pid, policy.session_id)

    @staticmethod
    def stub_script() -> bytes:
        """The stub every Slurm name inside points to: the system python in
        isolated mode, importing only our stdlib-only client code."""
        site = os.path.dirname(PACKAGE_DIR)
        return ("#!/usr/bin/python3 -IS\n"
                "import sys\n"
                f"sys.path.insert(0, {site!r})\n"
                "from stubs.client import main\n"
                "sys.exit(main())\n").encode()

    def stub_payload(self):
        from agent_sandbox.backends.base import Payload

        return Payload(data=self.stub_script())

    def stop(self) -> None:
        """SIGTERM, then up to 2 s for the chaperon to finish its requests (a
        pidfd wakes us the instant it exits), then SIGKILL."""
        end_child(self.pid, signal.SIGTERM)
        if os.path.lexists(self.directory):   # the chaperon removes it itself
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)


def end_child(pid: int, first: int | None, grace: float = 2.0) -> None:
    """Send `first` (None: the child ends by itself, e.g. on EOF), wait up to
    `grace` seconds (a pidfd wakes us the instant it exits), then SIGKILL;
    reap it. The chaperon and the egress proxy end this way."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        pidfd = None   # already gone
    except OSError:    # a kernel before 5.3: no pidfd, wait in small steps
        pidfd = -1
    if pidfd is not None:
        try:
            if first is not None:
                os.kill(pid, first)
            if not _exited(pid, pidfd, grace):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        finally:
            if pidfd >= 0:
                os.close(pidfd)


def _exited(pid: int, pidfd: int, timeout: float) -> bool:
    if pidfd >= 0:
        import select

        return bool(select.select([pidfd], [], [], timeout)[0])
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True     # reaped here; the caller's waitpid finds no child
        time.sleep(0.005)
    return False


def handler_config(settings, policy, staging: str) -> dict:
    """What the Slurm handlers need to know of the session, whether they run
    in a chaperon or in-process (`agent-sandbox sbatch` outside)."""
    from agent_sandbox.paths import state_dir

    return {
        "session_id": policy.session_id, "project_dir": policy.project_dir,
        # The session a job's steps belong to (launch/jobshare.py shape): this
        # one, or — for the chaperon of a job's sandbox on a node — the session
        # that submitted the job, which its wrapper told the launcher.
        "job_session": os.environ.get("AGENT_SANDBOX_JOB_SESSION") or policy.session_id,
        "staging_dir": staging, "state_dir": state_dir(policy.home),
        # What is read-only inside the sandbox stays so for the chaperon,
        # which writes srun's -o/-e outside it (chaperon/submit.py).
        "protected": sorted({p.path for p in policy.protected} | set(policy.pinned)),
        "slurm_scope": settings.SLURM_SCOPE, "slurm_binaries": _real_binaries(policy),
        "log_level": settings.CHAPERON_LOG_LEVEL,
        "retain_days": settings.CHAPERON_LOG_RETAIN_DAYS,
        "allowed_partitions": list(settings.SLURM_ALLOWED_PARTITIONS),
        "max_jobs": settings.SLURM_MAX_JOBS, "allow_mail": settings.SLURM_ALLOW_MAIL,
        "backend": policy.backend,
        # The compute side gives at least what this session gives: its backend,
        # pinned for every job and task, unless the admin allows weaker ones.
        "job_backend": None if settings.JOB_ALLOW_WEAKER_BACKEND else policy.backend,
        "launcher": [sys.executable, "-I", "-m", "agent_sandbox"],
        "jobstart": helper_path("jobstart"),
        "home": policy.home, "user": policy.user, "overrides": _overrides(settings),
    }


def _write_stubs(directory: str, script: bytes) -> None:
    """bin/ in the session dir: the stub once, every Slurm name a symlink to
    it. Nothing here needs protecting: the stub decides nothing, so a
    sandbox that rewrites its own copy gains nothing."""
    from chaperon.wire.session import BIN_DIR, STUB_COMMANDS

    bin_dir = os.path.join(directory, BIN_DIR)
    os.mkdir(bin_dir, 0o700)
    fd = os.open(os.path.join(bin_dir, ".stub"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o500)
    with os.fdopen(fd, "wb") as handle:
        handle.write(script)
    for name in STUB_COMMANDS:
        os.symlink(".stub", os.path.join(bin_dir, name))


def _overrides(settings) -> dict:
    """The values the session got from the environment or flags: a job must
    run under the same policy, so the wrapper re-applies exactly these."""
    return {key: settings.values[key] for key, origin in settings.origins.items()
            if origin in ("env", "flag")}
