"""Starting and stopping the chaperon for one sandbox session (SPEC §9
"Transport and lifecycle").

Before the sandbox starts: a private directory (0700) with the announcement
FIFO (0600) and the connection directory, the job-output staging directory of
the project (it must exist before the mounts are computed, so it is never
writable inside), and the chaperon process itself — started on demand, at the first Slurm call
(ChaperonSession), outside the sandbox, in its own process group, fed its
configuration through a pipe. The chaperon dies with the launcher
(PR_SET_PDEATHSIG and parent polling); `stop` ends it without waiting and
removes the directory in the normal exit paths.
"""
from __future__ import annotations

import os
import _signal as signal   # the C module: signal.py's enums import 1 ms a launch
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
    _sweep(base, home)
    return base


STALE_AFTER = 60.0   # seconds: a directory younger than this may be a session starting


def _sweep(base: str, home: str) -> None:
    """Remove the directories of sessions whose launcher was killed while
    their chaperon had not started (a running chaperon removes its own when
    its launcher dies): older than STALE_AFTER and without a live record in
    the session registry. Costs a listdir when there are none."""
    import time

    from agent_sandbox.services import registry

    try:
        names = [n for n in os.listdir(base) if n.startswith("agent-sandbox-")]
    except OSError:
        return
    now = time.time()
    for name in names:
        path = os.path.join(base, name)
        try:
            if now - os.lstat(path).st_mtime < STALE_AFTER:
                continue
        except OSError:
            continue
        session = name[len("agent-sandbox-"):].rpartition("-")[0]
        if registry.is_live(home, session):
            continue
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def session_config(settings, policy) -> dict:
    """The session `ChaperonSession.open` makes, planned by the compile: it
    starts nothing (the directories the plan names — the session parent and
    the staging directory — are made, so that the plan sees them as a launch
    does). The session id is random; the suffix only guards against a stale
    directory of the same name (os.mkdir, not tempfile: 3 ms of imports);
    both are renewed at a plan cache hit (plancache/plans.py)."""
    from chaperon.wire.session import visible_paths

    directory = os.path.join(run_dir(policy.home),
                             f"agent-sandbox-{policy.session_id}-{os.urandom(4).hex()}")
    staging = staging_dir(policy.home, policy.project_dir)
    config = handler_config(settings, policy, staging)
    config.update({"session_dir": directory,
                   "visible_dir": visible_paths(config["fixed_mount_points"], directory)[0],
                   "slurm_conf": policy.slurm_conf})
    try:
        os.makedirs(run_dir(policy.home), mode=0o700, exist_ok=True)
        os.makedirs(staging, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise unprepared(exc, directory) from None
    return config


# ------------------------------------------------------------ the user's allocation
ADOPTED = "adopted"     # the ledger's kind of an allocation the user brought


def allocation_wanted(environ, explicit: str | None, *, job: bool) -> tuple[str, bool] | None:
    """The allocation this launch adopts (docs/chaperon.md "Interactive work
    on compute nodes"): the one named by --allocation (explicit), else the
    job the launcher itself runs in (SLURM_JOB_ID of the launcher's own
    environment: `salloc`, `srun --pty`, a portal's interactive job). Never
    a job launch's (--job, or a launch the chaperon's job wrapper started:
    AGENT_SANDBOX_JOB_SESSION): those run in a job of the ledger already.
    Only the launcher's environment or command line, both the user's, name
    it: nothing inside a sandbox reaches them (a nested launch execs, and
    its SLURM_JOB_ID is only ever checked against the ledger)."""
    if explicit:
        return explicit, True
    if job or environ.get("AGENT_SANDBOX_JOB_SESSION"):
        return None
    found = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    return (found, False) if found else None


def check_allocation(job: str, config: dict) -> str | None:
    """Why `job` cannot be adopted, or None: Slurm (the real squeue, as the
    chaperon runs it) must say it is this user's own running job — a stale
    SLURM_JOB_ID, a job that ended or is still queued, another user's job
    are not adopted. One squeue call, only for a launch that names a job."""
    import subprocess

    if not (job.isascii() and job.isdigit()):
        return f"{job!r} is not a Slurm job id (digits; a step or array task cannot be adopted)"
    squeue = (config.get("slurm_binaries") or {}).get("squeue")
    if not squeue:
        return "squeue is not installed on this host"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME", "USER")}
    if config.get("slurm_conf"):
        env["SLURM_CONF"] = config["slurm_conf"]
    try:
        result = subprocess.run(
            [squeue, "--noheader", "--states=all", f"--jobs={job}", "--format=%A|%U|%T"],
            env=env, cwd="/", stdin=subprocess.DEVNULL, capture_output=True, timeout=15)
    except subprocess.TimeoutExpired:
        return "squeue did not answer within 15 s (the Slurm controller is busy or down)"
    except OSError as exc:
        return f"squeue could not run ({exc.strerror or exc})"
    for line in result.stdout.decode(errors="replace").splitlines():
        found, _, rest = line.strip().partition("|")
        uid, _, state = rest.partition("|")
        if found != job:
            continue
        if uid != str(os.getuid()):
            return f"job {job} is not yours (it belongs to uid {uid})"
        if state != "RUNNING":
            return f"job {job} is {state.lower() or 'not running'}, not running"
        return None
    return f"Slurm does not know job {job} (it ended, or the id is wrong)"


def adopt_allocation(config: dict, job: str) -> None:
    """Record `job` in the ledger as this session's (kind "adopted"): its
    steps may run from inside, sandboxed like every step, and only this
    session's (chaperon/ledger.py: an adopted job is in no other session's
    scope). Raises OSError (LedgerError) when the ledger cannot be written."""
    from chaperon.ledger import Ledger

    Ledger(config["state_dir"], config["session_id"], config["project_dir"]).record(
        job, "-", kind=ADOPTED)


def unprepared(exc: OSError, directory: str):
    """The refusal when the session's directories cannot be made."""
    from agent_sandbox.errors import SandboxError

    return SandboxError(
        f"cannot prepare the Slurm proxy (chaperon) — {exc.strerror or exc} at "
        f"{exc.filename or directory}: its session directory and named pipes live "
        "in ~/.local/state/agent-sandbox-run and the job staging directory in "
        "~/.local/share/agent-sandbox. Free space or fix the permissions there, or "
        "set CHAPERON=false to run without Slurm; the command was not run.")


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
    """One session's chaperon, started on demand (issue 19): `start` prepares
    the directory and the announcement FIFO and holds the FIFO's read end,
    so a stub can announce itself from the first instant; a watcher thread
    starts the chaperon process when the first announcement arrives (the
    stub meanwhile waits, within its timeout, for its request FIFO to be
    opened). A command that never calls Slurm never pays for the chaperon's
    start, its imports or its CPU. The announcement stays unread in the FIFO
    and the descriptor is inherited, so the chaperon reads exactly what the
    stub wrote. The watcher thread lives until `stop`: the chaperon's
    parent-death signal fires when the thread that started it ends."""

    def __init__(self, directory: str, staging: str, session_id: str, config: dict,
                 announce_fd: int):
        import _thread

        self.directory = directory
        self.staging = staging
        self.pid = None                 # the chaperon process once started (`status`)
        self.session_id = session_id    # the id its audit log and ledger records carry
        self.lock = _thread.allocate_lock()   # pid, record and stopping change under it
        self._record = None             # the registry record to name the pid in
        self._stopping = False
        self._config = config
        self._announce = announce_fd
        self._wake_read, self._wake_write = os.pipe()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        _thread.start_new_thread(self._watch, ())

    @classmethod
    def open(cls, config: dict) -> "ChaperonSession":
        """The session of `config` (session_config), as the compile planned
        it or as the plan cache stored it with this session's ids: its
        directory, FIFO and staging directory made now, in the session
        parent (session_parent, made and swept before)."""
        from chaperon.wire.session import ANNOUNCE_FIFO, CONN_DIR

        directory, staging = config["session_dir"], config["staging_dir"]
        made = False
        try:
            os.mkdir(directory, 0o700)
            made = True
            os.mkfifo(os.path.join(directory, ANNOUNCE_FIFO), 0o600)
            os.mkdir(os.path.join(directory, CONN_DIR), 0o700)
            # Also for bwrap: one older than 0.5.0 cannot give a generated
            # file an executable mode (no --perms), so its view links the
            # stub here (backends/bwrap.py _without_perms).
            _write_stubs(directory, cls.stub_script(config["python"]))
            os.makedirs(staging, mode=0o700, exist_ok=True)
            # Opened now (not inheritable: nothing else started before the
            # chaperon gets it), so the FIFO has a reader from the first
            # instant: a stub called while the chaperon is not yet running
            # waits for its answer instead of being told it is gone.
            announce_fd = os.open(os.path.join(directory, ANNOUNCE_FIFO),
                                  os.O_RDWR | os.O_NONBLOCK)
        except OSError as exc:
            if made:
                import shutil

                shutil.rmtree(directory, ignore_errors=True)
            raise unprepared(exc, directory) from None
        return cls(directory, staging, config["session_id"],
                   dict(config, launcher_pid=os.getpid(), announce_fd=announce_fd), announce_fd)

    @property
    def config(self) -> dict:
        """What `open` needs to make this session again (the plan cache)."""
        return {k: v for k, v in self._config.items() if k not in ("launcher_pid", "announce_fd")}

    # ------------------------------------------------------------ the watcher
    def _watch(self) -> None:
        import select

        # Signals for the launcher go to its main thread, which forwards them
        # to the command: never woken in this one (its child unblocks them).
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            ready = select.select([self._announce, self._wake_read], [], [])[0]
            with self.lock:
                if self._announce in ready and not self._stopping:
                    self._spawn()
                    if self.pid and self._record:
                        from agent_sandbox.services import registry

                        registry.set_chaperon(self._record, self.pid)
                # The chaperon holds its own copy now: once it is gone, a stub
                # is told so at once (no reader: ENXIO) instead of waiting.
                os.close(self._announce)
            if self.pid:
                select.select([self._wake_read], [], [])   # until stop()
        finally:
            self._done.release()

    def _spawn(self) -> None:
        """Start the chaperon with the announcement FIFO and its configuration
        pipe, the only descriptors it inherits from us (SPAWN_LOCK: the
        backend is never spawned while they are inheritable)."""
        import json   # here, at the first Slurm call: not on a launch's path

        from agent_sandbox.errors import say
        from agent_sandbox.process.spawn import SPAWN_LOCK

        read_fd, write_fd = os.pipe()
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "USER", "LOGNAME")}
        if self._config.get("slurm_conf"):   # the site's Slurm, for every real command
            env["SLURM_CONF"] = self._config["slurm_conf"]
        argv = [sys.executable, "-I", "-m", "chaperon.server", "--config-fd", str(read_fd)]
        try:
            with SPAWN_LOCK:
                os.set_inheritable(read_fd, True)
                os.set_inheritable(self._announce, True)
                try:
                    self.pid = os.posix_spawn(sys.executable, argv, env, setpgroup=0,
                                              setsigmask=(),
                                              setsigdef=(signal.SIGINT, signal.SIGTERM,
                                                         signal.SIGPIPE))
                finally:
                    os.set_inheritable(self._announce, False)
                    os.close(read_fd)
        except OSError as exc:
            os.close(write_fd)
            say(f"cannot start the Slurm proxy (chaperon) — {exc}; Slurm commands in this "
                "sandbox fail. Restart it, or set CHAPERON=false to run without Slurm.")
            return
        with os.fdopen(write_fd, "wb") as handle:
            try:
                handle.write(json.dumps(self._config).encode())
            except BrokenPipeError:
                pass   # it died at once; the stub is told when it finds no reader

    def attach(self, record: str | None) -> None:
        """The registry record that names this session's chaperon pid once it
        runs (None: the record is about to go, leave it alone)."""
        with self.lock:
            self._record = record
            if record and self.pid:
                from agent_sandbox.services import registry

                registry.set_chaperon(record, self.pid)

    @staticmethod
    def stub_script(python: str) -> bytes:
        """The stub every Slurm name inside points to: the helper's
        interpreter (`python`: backends/helperpython.py's choice for this
        policy, shown read-only inside) in isolated mode, importing only our
        stdlib-only client code."""
        from agent_sandbox.backends.helperpython import shebang_line

        site = os.path.dirname(PACKAGE_DIR)
        return (shebang_line(python) + "\n"
                "import sys\n"
                f"sys.path.insert(0, {site!r})\n"
                "from stubs.client import main\n"
                "sys.exit(main())\n").encode()

    def stop(self) -> None:
        """Never delays the exit: a chaperon that was never needed was never
        started; one that runs gets SIGTERM (it logs its stop and exits; the
        second SIGTERM of its parent-death signal is ignored) and is not
        waited for. The directory goes here, so it is gone when we return."""
        with self.lock:
            self._stopping = True
            self._record = None
            pid = self.pid
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        os.write(self._wake_write, b"x")
        self._done.acquire()     # the watcher wakes on the pipe at once
        os.close(self._wake_read)
        os.close(self._wake_write)
        if os.path.lexists(self.directory) and not _remove_unused(self.directory):
            from agent_sandbox.paths import remove_tree

            remove_tree(self.directory)


def _remove_unused(directory: str) -> bool:
    """Remove the directory of a chaperon that never ran (the FIFO and an
    empty connection directory; bwrap has no stubs on disk) without
    importing shutil (~2 ms); False when it holds anything else."""
    from chaperon.wire.session import ANNOUNCE_FIFO, CONN_DIR

    try:
        os.unlink(os.path.join(directory, ANNOUNCE_FIFO))
        os.rmdir(os.path.join(directory, CONN_DIR))
        os.rmdir(directory)
    except OSError:
        return False
    return True


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
    from agent_sandbox.traits import traits
    from agent_sandbox.paths import state_dir

    return {
        "session_id": policy.session_id, "project_dir": policy.project_dir,
        # The session a job's steps belong to (jobs/share.py shape): this
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
        # The backend mounts the session dir and stubs at fixed places
        # (chaperon/wire/session.visible_paths).
        "fixed_mount_points": traits(policy.backend).fixed_mount_points,
        # The compute side gives at least what this session gives: its backend,
        # pinned for every job and task, unless the admin allows weaker ones.
        "job_backend": None if settings.JOB_ALLOW_WEAKER_BACKEND else policy.backend,
        "launcher": [sys.executable, "-I", "-m", "agent_sandbox"],
        # "python": the helper's interpreter (backends/helperpython.py) for
        # the stubs, the job wrapper and jobstart — set by the compile once
        # the policy is final (launch/run.py prepare; cli/app.py outside).
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
