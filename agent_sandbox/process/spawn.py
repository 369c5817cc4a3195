"""Plan → running process: payloads become inheritable descriptors, every
other descriptor is sealed (fd.clean), the backend is spawned (with Landlock
scoping applied to the spawning thread where the kernel allows), signals are
forwarded to the command's process group, and the outcome becomes an exit
code (125 for a setup failure the backend or helper reported). An
interactive session (`terminal`) gets a pseudo-terminal of its own, relayed
by process/terminal.py, imported only then.
"""
from __future__ import annotations

import os
import _signal as signal   # the C module: signal.py's enums import 1 ms a launch

from agent_sandbox.errors import SETUP_FAILED, BackendUnavailable, PolicyError, say
from agent_sandbox.process.select import forget_probe
from agent_sandbox.paths import helper_module

# The status key of a plan whose backend reports its init's pid (bwrap's
# --json-status-fd: child-pid first, exit-code when the command ended).
INIT_REPORTED = "exit-code"

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGCONT)
# Held while descriptors are briefly inheritable for one child: the backend
# must never inherit the chaperon's, started from another thread (services/chaperon.py).
SPAWN_LOCK = __import__("_thread").allocate_lock()
RESET_SIGNALS = FORWARDED_SIGNALS + (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTSTP,
                                     signal.SIGTTIN, signal.SIGTTOU)


def _payload_fd(name: str, payload) -> int:
    """An inheritable descriptor the backend reads the payload from."""
    if payload.fd is not None:
        fd = os.dup(payload.fd)
    elif payload.path is not None:
        fd = os.open(payload.path, os.O_RDONLY | os.O_NOFOLLOW)
    else:
        fd = os.memfd_create(name, 0)
        os.write(fd, payload.data)
        os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


def render_argv(argv, fds: dict) -> list[str]:
    """The argv with each descriptor reference (backends/base.py FdRef: a
    name and a prefix, every other item is a string) as its number."""
    return [a if isinstance(a, str) else a.prefix + str(fds[a.name]) for a in argv]


def keep_fds_checked(requested) -> tuple[int, ...]:
    """The descriptors `--keep-fd` names, each open now (0-2 always pass)."""
    kept = []
    for fd in requested:
        if fd < 0:
            raise PolicyError(f"--keep-fd {fd} is not a descriptor number — give a number "
                              "of 3 or more.", reason="bad_keep_fd")
        if fd > 2:
            try:
                os.fstat(fd)
            except OSError:
                raise PolicyError(f"--keep-fd {fd}: descriptor {fd} is not open in the "
                                  "launcher — nothing to keep. Open it before starting "
                                  f"agent-sandbox (e.g. `{fd}<file`) or drop the option.",
                                  reason="bad_keep_fd") from None
            kept.append(fd)
    return tuple(sorted(set(kept)))


def kept_fds(requested, environ) -> tuple[int, ...]:
    """The inherited descriptors this launch's command keeps: `requested`
    (--keep-fd, each checked open) and Slurm's PMI_FD (slurm_task_fds),
    sorted — a launch fact (backends.PlanContext.keep_fds), never the
    Policy's."""
    return tuple(sorted(set(keep_fds_checked(requested) + slurm_task_fds(environ))))


def slurm_task_fds(environ) -> tuple[int, ...]:
    """The one descriptor Slurm itself hands a task: PMI-2's socket, named by
    PMI_FD (srun --mpi=pmi2), which MPI needs inside. Kept only when this
    launch is a Slurm task (SLURM_STEP_ID set by slurmstepd) and the
    descriptor is a socket: a key file a caller left open never is one. The
    chaperon never passes a caller's PMI_FD to srun (an allow-list), so the
    value comes from slurmstepd."""
    import stat

    value = environ.get("PMI_FD", "")
    if not (value.isascii() and value.isdigit()) or "SLURM_STEP_ID" not in environ:
        return ()
    fd = int(value)
    try:
        return (fd,) if fd > 2 and stat.S_ISSOCK(os.fstat(fd).st_mode) else ()
    except OSError:
        return ()


def _seal_inherited(keep) -> None:
    """Mark every descriptor above stderr close-on-exec except `keep` (our
    payloads and --keep-fd): whatever the caller left open (a key file on fd
    9, a socket) must not reach the backend and the sandbox (fd.clean). Only
    the flag in this process's table changes, never the caller's."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:                       # no /proc: every possible number
        fds = range(3, os.sysconf("SC_OPEN_MAX"))
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, fd in keep)
            except OSError:
                pass                      # not open (the listing's own descriptor)


def run_plan(plan, keep_fds=(), *, terminal: bool = False, title: str = "",
             after_spawn=None, orphans: list | None = None, hold: int | None = None) -> int:
    """Start the backend with the plan's payloads and environment, forward
    signals to the command, return its exit code (125 for setup failures).
    `keep_fds`: caller descriptors the command keeps (--keep-fd).
    `terminal`: run on a relayed pseudo-terminal (the plan's helper takes it
    as controlling terminal), the outer terminal titled `title`.
    `after_spawn(gone)`: called once the backend runs (the egress proxy's
    readiness, checked while the sandbox starts), with a descriptor that
    becomes readable when the backend has exited (a pidfd; None where the
    kernel has none), so it need not wait for what no longer matters; a
    SandboxError from it kills the sandbox, waits for it, and is raised.
    `orphans`: gets the pid of bwrap's sandbox init, which outlives bwrap by
    the namespace's teardown (the caller reaps it last, process/reap.py).
    `hold`: the session's lock (registry.hold), given to a plan that names a
    `hold_fd` (its sandbox keeps it open while it lives); /dev/null without one."""
    pty = relay = None
    if terminal:
        from agent_sandbox.process import terminal as relay

        pty = relay.open_pty()
    try:
        return _run_plan(plan, keep_fds, pty, relay, title, after_spawn, orphans, hold)
    finally:
        if pty:
            pty.close()


def _run_plan(plan, keep_fds, pty, relay, title: str, after_spawn=None,
              orphans: list | None = None, hold: int | None = None) -> int:
    fds: dict[str, int] = {}
    ours: list[int] = []        # our ends of pipes, open for the sandbox's lifetime
    read_status = None
    scratch = _make_scratch_dirs(plan.scratch_dirs)
    try:
        if plan.status_fd:
            read_status, write_status = os.pipe()
            os.set_inheritable(write_status, True)
            fds[plan.status_fd] = write_status
        if plan.lifeline_fd:
            # The helper's watcher sees EOF once the launcher is gone.
            read_life, write_life = os.pipe()
            os.set_inheritable(read_life, True)
            fds[plan.lifeline_fd] = read_life
            ours.append(write_life)
        if plan.supervise is not None:
            # The helper writes its supervisor listener's number here.
            read_supervise, write_supervise = os.pipe()
            os.set_inheritable(write_supervise, True)
            fds["supervise"] = write_supervise
            ours.append(read_supervise)
        if plan.hold_fd:
            fds[plan.hold_fd] = (os.dup(hold) if hold is not None
                                 else os.open("/dev/null", os.O_RDONLY))
            os.set_inheritable(fds[plan.hold_fd], True)
        name = ""
        for name, payload in plan.payloads.items():
            fds[name] = _payload_fd(name, payload)
    except OSError as exc:
        for fd in list(fds.values()) + ours + ([read_status] if read_status else []):
            os.close(fd)
        _remove_scratch_dirs(scratch)
        raise BackendUnavailable(f"cannot prepare the sandbox's input {name or 'pipes'} — "
                                 f"{exc}. The command was not run.") from None
    argv = render_argv(plan.argv, fds)
    launcher = _pdeathsig_wrapper() + argv
    try:
        # A helper that calls setsid() must not lead a process group already.
        group = {} if plan.own_session else {"setpgroup": 0}
        if pty:
            group["file_actions"] = [(os.POSIX_SPAWN_DUP2, pty.slave, std)
                                     for std in (0, 1, 2) if std < 2 or os.isatty(2)]
        spawn = _spawn_scoped if plan.spawn_ruleset else _spawn
        with SPAWN_LOCK:
            _seal_inherited(set(fds.values()) | set(keep_fds))
            pid, release = spawn(plan.spawn_ruleset, launcher, plan.env,
                                 setsigdef=RESET_SIGNALS, **group)
    except BaseException as exc:
        for fd in ours + ([read_status] if read_status else []):
            os.close(fd)
        _remove_scratch_dirs(scratch)
        if not isinstance(exc, OSError):
            raise
        raise BackendUnavailable(f"cannot start {argv[0]} — {exc.strerror}. Install it or "
                                 "choose another backend; the command was not run.") from None
    finally:
        for fd in fds.values():
            os.close(fd)
        if pty:
            pty.close_slave()

    if plan.supervise is not None:
        _supervise(plan, pid, ours.pop())

    status_text: list[str] = []

    def forward(signum, _frame):
        target = _command_group(plan, pid, read_status, status_text)
        try:
            os.killpg(target or pid, signum)
        except OSError:
            try:
                os.kill(pid, signum)
            except OSError:
                pass

    # With a relay, window size and SIGCONT are the relay's (the kernel
    # signals the inner foreground job when the pty's size changes).
    forwarded = [s for s in FORWARDED_SIGNALS
                 if not pty or s not in (signal.SIGWINCH, signal.SIGCONT)]
    previous = {s: signal.signal(s, forward) for s in forwarded}
    try:
        if after_spawn is not None:
            try:
                try:
                    gone = os.pidfd_open(pid)
                except OSError:
                    gone = None
                try:
                    after_spawn(gone)
                finally:
                    if gone is not None:
                        os.close(gone)
            except BaseException:
                for target in (lambda: os.killpg(pid, signal.SIGKILL),
                               lambda: os.kill(pid, signal.SIGKILL)):
                    try:
                        target()
                        break
                    except OSError:
                        continue
                os.waitpid(pid, 0)
                raise
        if pty:
            status = relay.relay(pty, pid, title=title)
        else:
            _, status = os.waitpid(pid, 0)
    finally:
        release()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for fd in ours:
            os.close(fd)
        _remove_scratch_dirs(scratch)
    _drain(read_status, status_text)
    os.close(read_status)
    if orphans is not None and plan.started == INIT_REPORTED:    # bwrap
        orphans.append(_init_pid_in("".join(status_text)))
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return 128 - code                    # the backend itself was killed
    text = "".join(status_text)
    if code != 0 and _status_value(text, plan.started) is None:
        say(_backend_failure_hint(plan.backend, text))
        forget_probe(plan.backend)
        return SETUP_FAILED
    return code


def _supervise(plan, pid: int, report: int) -> None:
    """The landlock supervisor in a thread of this launcher (an ancestor of
    the whole sandbox), process/supervisor.py. If it fails, the sandbox dies:
    its process group is killed (the helper's watcher and the reaper end the
    rest) — it never runs unsupervised."""
    from agent_sandbox.process import supervisor

    def failed(reason: str) -> None:
        say(f"the landlock supervisor failed ({reason}) — the sandbox was killed, as it "
            "never runs unsupervised. Report this; use --backend bwrap or firejail meanwhile.")
        for target in (lambda: os.killpg(pid, signal.SIGKILL),
                       lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except OSError:
                pass

    supervisor.start(pid, report, plan.supervise, failed)


def _spawn(_ruleset, argv: list[str], env: dict, **kwargs):
    """(pid, release): `release` is called once the child has been waited for."""
    return os.posix_spawn(argv[0], argv, env, **kwargs), lambda: None


def _spawn_scoped(ruleset: dict, argv: list[str], env: dict, **kwargs):
    """posix_spawn from a thread that first puts itself into the Landlock
    domain `ruleset` (no_new_privs and Landlock are per thread): the child and
    everything it starts are inside, this launcher's own thread is not, and no
    code runs between fork and exec. Costs a thread, not a process start.

    The thread stays alive until `release` (after the child was waited for):
    a parent-death signal (setpriv, bwrap --die-with-parent) fires when the
    parent *thread* ends, and must fire only when the launcher does."""
    import _thread

    landlock = helper_module("landlock")

    started, hold = _thread.allocate_lock(), _thread.allocate_lock()
    started.acquire()
    hold.acquire()
    outcome: dict = {}

    def work():
        try:
            try:
                landlock.no_new_privs()
                landlock.restrict_self(ruleset)
            except OSError as exc:
                raise BackendUnavailable(f"cannot apply the Landlock scoping the plan promised "
                                         f"— {exc}. The command was not run.") from None
            outcome["pid"] = os.posix_spawn(argv[0], argv, env, **kwargs)
        except BaseException as exc:   # handed to the launcher's thread
            outcome["error"] = exc
            hold.release()
        finally:
            started.release()
        # Then it only waits: the launcher's signals (SIGWINCH for the
        # relayed terminal, those it forwards to the command) go to the main
        # thread, whose select() they interrupt — not to this one, where
        # their handler would wait for the main thread's next wake-up. (After
        # the spawn: the child must not inherit the mask.)
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        hold.acquire()

    _thread.start_new_thread(work, ())
    started.acquire()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["pid"], hold.release


def _make_scratch_dirs(paths) -> list[str]:
    """Private directories the plan names (landlock's per-session $TMPDIR):
    created exclusively, so a path someone else prepared is never used."""
    made = []
    try:
        for path in paths:
            os.mkdir(path, 0o700)
            made.append(path)
    except OSError as exc:
        _remove_scratch_dirs(made)
        raise BackendUnavailable(f"cannot create the private directory {path} — "
                                 f"{exc.strerror}. The command was not run.") from None
    return made


def _remove_scratch_dirs(paths) -> None:
    if paths:
        import shutil   # rmtree works on descriptors: planted symlinks are not followed

        for path in paths:
            shutil.rmtree(path, ignore_errors=True)


def _command_group(plan, pid: int, fd, sink: list) -> int | None:
    """The host pid leading the command's process group: bwrap's sandbox init,
    or the helper (which called setsid before it became the command)."""
    from agent_sandbox.traits import traits

    if plan.started == INIT_REPORTED:
        return _sandbox_init_pid(fd, sink)
    if fd is None:
        return None
    _drain(fd, sink)
    reported = _status_value("".join(sink), "helper-exec")
    if not isinstance(reported, int) or isinstance(reported, bool):
        return None
    # firejail's PID namespace: the helper reported its pid in there.
    return _host_pid(pid, reported) if traits(plan.backend).helper_pid_namespaced else reported


def descendants(root: int):
    """(pid, fields of /proc/PID/status split on whitespace) for every
    descendant of `root`, found through each thread's children list; a
    process that vanishes or cannot be read is passed over (its children
    are still walked when they can be listed)."""
    todo, seen = [root], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current != root:
            try:
                with open(f"/proc/{current}/status", "rb") as handle:
                    fields = {name: value.split() for name, _, value in
                              (line.partition(b":") for line in handle)}
            except OSError:
                fields = None
            if fields is not None:
                yield current, fields
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", "rb") as handle:
                    todo += [int(c) for c in handle.read().split()]
        except (OSError, ValueError):
            continue


def _host_pid(root: int, ns_pid: int) -> int | None:
    """The descendant of `root` whose pid in its own namespace is `ns_pid`."""
    wanted = str(ns_pid).encode()
    for pid, fields in descendants(root):
        inner = fields.get(b"NSpid", [])
        if len(inner) > 1 and inner[-1] == wanted:
            return pid
    return None


def _backend_failure_hint(backend: str, status: str) -> str:
    from agent_sandbox.traits import traits

    if traits(backend).reports_init_pid:     # the status tells which stage failed
        return _setup_failure_hint(status)
    return (f"the {backend} backend could not set up the sandbox (its message is above). "
            f"Check `agent-sandbox run --backend {backend} --dry-run -- true` and "
            "`agent-sandbox doctor`, or choose another backend; the command was not run.")


def _pdeathsig_wrapper() -> list[str]:
    """bwrap's --die-with-parent ties the command to bwrap; setpriv ties bwrap
    to us, so a SIGKILLed launcher leaves no sandbox behind."""
    for path in ("/usr/bin/setpriv", "/bin/setpriv"):
        if os.access(path, os.X_OK):
            return [path, "--pdeathsig", "KILL", "--"]
    return []


def _drain(fd: int, sink: list) -> None:
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            return
        sink.append(chunk.decode("utf-8", "replace"))


def _sandbox_init_pid(fd, sink: list) -> int | None:
    """The host pid of the sandbox's init, which leads the command's process
    group (bwrap reports it as child-pid on the status fd)."""
    if fd is None:
        return None
    _drain(fd, sink)
    return _init_pid_in("".join(sink))


def _status_documents(status: str):
    """The JSON objects of a status stream, one a line (bwrap's
    --json-status-fd, the helper's --status); a line that is not one (cut
    short while the sandbox runs) is passed over."""
    from agent_sandbox import jsonlite

    for line in status.splitlines():
        try:
            document = jsonlite.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict):
            yield document


def _status_value(status: str, key: str):
    """The value of `key` in the first status document that has it, or None."""
    return next((d[key] for d in _status_documents(status) if key in d), None)


def _init_pid_in(status: str) -> int | None:
    """bwrap's `child-pid` in its JSON status documents."""
    try:
        return int(_status_value(status, "child-pid"))
    except (ValueError, TypeError):
        return None


def _setup_failure_hint(status: str) -> str:
    if _status_value(status, "child-pid") is None:
        return ("bwrap could not create the sandbox's namespaces (its message is above) — "
                "unprivileged user namespaces are probably disabled on this host. Ask your "
                "admin to enable them (sysctl user.max_user_namespaces > 0, "
                "kernel.unprivileged_userns_clone=1, no AppArmor userns restriction for bwrap) "
                "or use another backend; the command was not run.")
    return ("bwrap could not set up the sandbox's filesystem (its message is above) — a path "
            "in the plan changed while starting. Run again; if it persists, check "
            "`agent-sandbox run --dry-run -- true`. The command was not run.")
