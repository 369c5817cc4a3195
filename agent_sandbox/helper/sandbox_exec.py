"""The exec'd helper: the last step between a backend and the command.

Started as ``<python> -I -S -c <boot> <this directory> [options] -- CMD
ARGS`` (backends/base.helper_command; <python>: the helper-interpreter
rule's choice, backends/helperpython.py) so that it starts fast (imported,
so from cached bytecode) and nothing in the environment (PYTHONPATH,
PYTHONHOME, user site) can change what it runs; it imports only builtin
modules and landlock.py from its own (root-owned, read-only) directory.

In order, each step only when asked for:
  read the payload descriptors (environment, Landlock ruleset, seccomp BPF,
  seeded files) and close them → write seeded files → (--join-ns: not
  dumpable, enter, drop capabilities, no_new_privs, seccomp) → chdir → setsid →
  (--controlling-tty: take stdin as controlling terminal) → start the
  watcher → PR_SET_NO_NEW_PRIVS → Landlock → seccomp → start the relay →
  report "helper-exec" on the status descriptor → close every descriptor
  but stdin, stdout, stderr and the kept ones → exec the command.

Exit codes: 125 when a step fails (the command did not run), 126/127 as the
shell uses them when the command cannot be executed or is not found;
otherwise the process *is* the command.

Options (descriptors are inherited file descriptor numbers):
  --env FD          the command's environment, NUL-separated NAME=VALUE
                    (firejail is setuid: the kernel strips LD_* and friends
                    from what it passes on, so the exact environment travels
                    here instead; never in argv, which every user can read)
  --landlock FD     a marshalled ruleset (see landlock.ruleset)
  --landlock-dir FD one more writable directory of that ruleset, by the
                    descriptor the launcher opened and checked (a landlock
                    job's shared-memory directory, jobs/shm.py): never
                    looked up by name again; closed before exec
  --seccomp FD      a BPF program (struct sock_filter array)
  --notify FD SUP   a second BPF program whose SECCOMP_RET_USER_NOTIF calls
                    the landlock supervisor decides (process/supervisor.py):
                    loaded last, with a new listener whose number is written
                    to descriptor SUP (the launcher takes it by pidfd_getfd);
                    the helper then waits for the supervisor's first answer
                    and closes its own copy before exec; a unix datagram
                    socket among the descriptors the command keeps (0-2,
                    --keep-fd) is refused: its sendmsg() could reach any
                    datagram socket, which the supervisor cannot see
  --argv FD         the command, NUL-separated, instead of after `--`
                    (firejail refuses more than 127 arguments in all)
  --seed FD PATH    copy the descriptor's bytes to PATH (replacing a file)
  --chdir DIR       working directory of the command
  --new-session     setsid(): no controlling terminal, so no TIOCSTI into it
  --controlling-tty setsid(), then make stdin — the launcher's relayed
                    pseudo-terminal, never the user's own terminal — the
                    controlling terminal (TIOCSCTTY), so a shell has job
                    control; the watcher then ends the whole session
  --lifeline FD     start a watcher that SIGKILLs what is left of the sandbox
                    when the command exits (as bwrap does by ending the PID
                    namespace) or when FD reaches EOF, i.e. the launcher is
                    gone (setuid firejail cannot inherit a parent-death
                    signal; without a PID namespace nothing else would)
  --cleanup DIR     the watcher removes DIR once the sandbox has ended (the
                    landlock backend's per-session $TMPDIR, also when the
                    launcher was killed and could not)
  --pid-namespace   the helper runs in a PID namespace of its own (firejail):
                    the watcher then kills every process in it, not only the
                    command's process group — only after checking that PID 1
                    really is firejail
  --status FD       where "helper-exec" is reported just before exec
  --keep-fd FD      an inherited descriptor the command keeps (repeatable;
                    `agent-sandbox run --keep-fd`); all others above 2 are
                    closed before exec, whatever the backend passed on
  --max-abi N       use at most Landlock ABI N (tests simulate old kernels)
  --degrade         on an older ABI apply what it knows and report the rest
                    (default: refuse, exit 125, because the plan's guarantee
                    report promised it)
  --probe           apply a trivial ruleset and exit 0 (the backend probe)
  --join-ns SPEC    join a running sandbox (the job's sandbox on this node,
                    jobs/share.py): SPEC lists its namespaces as
                    kind:inode,…; the process verifies it is in every one of
                    them, drops every capability and sets no_new_privs
                    before the steps above (joinns.py)
  --join FD         with --join-ns: a pidfd of the sandbox's init to setns
                    into (bwrap), then fork into its PID namespace; without
                    it the backend joined already (firejail --join)
  --relay PORT SOCK start the egress relay (netrelay.py, NETWORK_MODE=allowlist)
                    on 127.0.0.1:PORT, carrying connections to the proxy's
                    Unix socket SOCK; it runs confined like the command
                    (started after Landlock and seccomp), is not the command's
                    child (a shell's `wait` must not wait for it), and the
                    command starts only once it listens (else exit 125)
"""
import _signal as signal   # the builtin core: `signal` would import enum (~4 ms)
import marshal
import os
import sys

PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV = 1 << 5     # 5.19: no restart after a signal
SYS_SECCOMP = {"x86_64": 317, "aarch64": 277, "riscv64": 277, "ppc64le": 358, "s390x": 348}
# Signals the launcher forwards to the command's process group; the lifeline
# watcher shares that group and must survive them.
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH",
             "SIGCONT", "SIGTSTP", "SIGTTIN", "SIGTTOU")


class SetupError(Exception):
    pass


def _landlock():
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import landlock

    return landlock


def _joinns():
    _landlock()                      # puts this directory on sys.path
    import joinns

    return joinns


def join(opts: dict, bpf: "bytes | None") -> int:
    """Enter the job's sandbox (--join-ns, --join), then drop every
    capability, set no_new_privs and load the seccomp filter `bpf`: returns,
    in the joined process, the host pid the launcher signals (this helper's
    own: with a fork, the parent's, which leads the process group both are
    in). The parent of a fork only relays the child's end."""
    joinns = _joinns()
    try:
        spec = joinns.parse_spec(opts["join_ns"])
        report = os.getpid()
        joinns.prepare()
        # Before setns: from the fork on this process is a same-uid member of
        # the sandbox, and until seccomp is on a member could ptrace it or
        # rewrite its memory (/proc/PID/mem, process_vm_writev) and strip the
        # filter it is about to load. Not dumpable, it can do neither; the
        # flag survives setns and fork, and exec resets it (so the task's
        # ranks can use CMA with each other).
        joinns.non_dumpable()
        if opts["join"] is not None:
            joinns.enter(opts["join"], spec)
            child = os.fork()
            if child:
                try:      # hardening only: no process of the sandbox can see it
                    joinns.drop_capabilities()
                except (joinns.JoinError, OSError):
                    pass
                relay(child)
            joinns._prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        joinns.verify(spec)
        joinns.drop_capabilities()
        # At once, before chdir, the watcher and the rest (see main).
        _landlock().no_new_privs()
        if bpf is not None:
            load_seccomp(bpf)
    except (joinns.JoinError, OSError) as exc:
        raise SetupError(str(exc)) from None
    return report


def relay(child: int) -> None:
    """The fork's parent (outside the PID namespace): wait for the joined
    process and end as it ended. Forwarded signals reach the whole process
    group, the child included, so they are ignored here."""
    for name in FORWARDED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    close_inherited(())
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) != signal.SIGKILL:   # SIGKILL has no handler to reset
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def _read_fd(fd: int) -> bytes:
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise SetupError(f"cannot read descriptor {fd} — {exc.strerror}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def parse(argv: list[str]) -> dict:
    opts = {"env": None, "landlock": None, "seccomp": None, "seeds": [], "chdir": None,
            "new_session": False, "controlling_tty": False, "lifeline": None, "status": None,
            "max_abi": None,
            "degrade": False, "probe": False, "pid_namespace": False, "argv": None,
            "cleanup": None, "keep_fds": [], "relay": None, "command": [], "join": None,
            "join_ns": None, "landlock_dirs": [], "notify": None}
    i = 0
    try:
        while i < len(argv):
            arg = argv[i]
            if arg == "--":
                opts["command"] = argv[i + 1:]
                break
            if arg in ("--env", "--landlock", "--seccomp", "--lifeline", "--status", "--argv",
                       "--join"):
                opts[arg[2:]] = int(argv[i + 1])
                i += 2
            elif arg == "--seed":
                opts["seeds"].append((int(argv[i + 1]), argv[i + 2]))
                i += 3
            elif arg in ("--chdir", "--cleanup", "--join-ns"):
                opts[arg[2:].replace("-", "_")] = argv[i + 1]
                i += 2
            elif arg == "--notify":
                opts["notify"] = (int(argv[i + 1]), int(argv[i + 2]))
                i += 3
            elif arg == "--relay":
                opts["relay"] = (int(argv[i + 1]), argv[i + 2])
                i += 3
            elif arg == "--keep-fd":
                opts["keep_fds"].append(int(argv[i + 1]))
                i += 2
            elif arg == "--landlock-dir":
                opts["landlock_dirs"].append(int(argv[i + 1]))
                i += 2
            elif arg == "--max-abi":
                opts["max_abi"] = int(argv[i + 1])
                i += 2
            elif arg in ("--new-session", "--controlling-tty", "--degrade", "--probe",
                         "--pid-namespace"):
                opts[arg[2:].replace("-", "_")] = True
                i += 1
            else:
                raise SetupError(f"unknown helper option {arg}")
    except (IndexError, ValueError):
        raise SetupError(f"bad helper arguments near {argv[i]!r}") from None
    if not opts["command"] and not opts["probe"] and opts["argv"] is None:
        raise SetupError("no command given to the helper")
    return opts


def write_seed(data: bytes, path: str) -> None:
    """A copy of a home file in the sandbox's private home. Not fatal when it
    cannot be written: it is a convenience, never a restriction."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        sys.stderr.write(f"agent-sandbox: warning: {path} could not be copied into the "
                         f"sandbox — {exc.strerror}\n")


def _own_pid_namespace() -> bool:
    try:
        with open("/proc/1/comm", "rb") as handle:
            return handle.read().strip() == b"firejail"
    except OSError:
        return False


def _wait(lifeline: int, pidfd, command: int) -> None:
    """Until the launcher is gone (EOF on `lifeline`) or `command` has exited."""
    import select

    fds = [lifeline] + ([pidfd] if pidfd is not None else [])
    while True:
        # Without pidfd (kernel < 5.3) the command's exit is polled.
        ready, _, _ = select.select(fds, [], [], None if pidfd is not None else 0.1)
        if lifeline in ready:
            try:
                if not os.read(lifeline, 512):
                    return
            except OSError:
                return
        if pidfd is not None and pidfd in ready:
            return
        if pidfd is None:
            try:
                with open(f"/proc/{command}/stat", "rb") as handle:
                    if handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                        return
            except (OSError, IndexError):
                return


def take_terminal(fd: int) -> None:
    """Make the terminal on `fd` this new session's controlling terminal;
    the session's process group becomes its foreground group. Fails closed:
    a relayed session without its terminal would have no job control and a
    Ctrl-Z could not reach it."""
    import fcntl
    import termios

    try:
        fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
    except OSError as exc:
        raise SetupError(f"cannot take the session's terminal — {exc.strerror}") from None


def _session_members(session: int) -> list[int]:
    """Every process (but this one) whose session id is `session`."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
                if int(fields[3]) == session:
                    members.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return members


def start_watcher(lifeline: int, *, whole_namespace: bool, whole_session: bool = False,
                  cleanup: "str | None" = None) -> None:
    """A grandchild (so the command never sees it as its child) that waits for
    the command (this process, once it execs) to exit or the launcher to go,
    then kills the command's process group — or, in a PID namespace of its
    own, every process in it. With job control (`whole_session`) the jobs have
    process groups of their own: then every process of the command's session.
    Forked before Landlock and seccomp apply, so the command can neither
    signal it nor hide from it (nor leave the session: setsid needs a new
    process group leader, which is still in the session until it calls it —
    a race the PID namespace of bwrap and firejail closes; landlock has none)."""
    command = os.getpid()
    group = os.getpgid(0)
    session = os.getsid(0)
    whole_namespace = whole_namespace and _own_pid_namespace()
    try:
        pidfd = os.pidfd_open(command)
    except (AttributeError, OSError):
        pidfd = None
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                os.setpgid(0, 0)   # out of the group it kills (and that gets forwarded signals)
                for name in FORWARDED:
                    signal.signal(getattr(signal, name), signal.SIG_IGN)
                null = os.open("/dev/null", os.O_RDWR)
                for std in (0, 1, 2):
                    os.dup2(null, std)
                keep = sorted(fd for fd in (lifeline, pidfd) if fd is not None)
                low = 3
                for fd in keep:
                    os.closerange(low, fd)
                    low = fd + 1
                os.closerange(low, 65536)
                _wait(lifeline, pidfd, command)
                try:
                    if whole_namespace:
                        os.kill(-1, signal.SIGKILL)   # all but PID 1 and this watcher
                    elif whole_session:
                        for member in _session_members(session):
                            try:
                                os.kill(member, signal.SIGKILL)
                            except OSError:
                                pass
                    else:
                        os.killpg(group, signal.SIGKILL)
                except OSError:
                    pass
                if cleanup:
                    import shutil   # rmtree works on descriptors: planted links are not followed

                    shutil.rmtree(cleanup, ignore_errors=True)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    os.close(lifeline)
    if pidfd is not None:
        os.close(pidfd)


def start_relay(port: int, socket_path: str) -> None:
    """Listen on 127.0.0.1:port (and [::1]) here, then fork the relay
    (netrelay.serve_on) as a grandchild that serves those sockets — so the
    command, which this process becomes, never has it as a child. Bound
    before the fork: the command starts at once (a connection it makes
    before the relay accepts waits in the backlog), the relay's imports are
    off its path, and a port that cannot be bound (landlock: another user's
    on the host's loopback) fails the launch now. Our copies of the sockets
    are not inheritable: the command does not get them."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import netrelay

    try:
        bound = netrelay.listeners(port)
    except OSError as exc:
        raise SetupError(f"the egress relay cannot listen on 127.0.0.1:{port} — "
                         f"{exc.strerror or exc} (proxy socket {socket_path}); on landlock "
                         "that port is on the host's loopback and another process holds "
                         "it: launch again (a new port is chosen), or use the bwrap or "
                         "firejail backend, whose relay has a network of its own") from None
    keep = sorted(sock.fileno() for sock in bound)
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                null = os.open("/dev/null", os.O_RDWR)
                for std in (0, 1, 2):
                    os.dup2(null, std)
                _close_all_but(keep)
                for name in FORWARDED:   # the command's Ctrl-C is not the relay's
                    signal.signal(getattr(signal, name), signal.SIG_IGN)
                netrelay.serve_on(bound, socket_path)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    for sock in bound:
        sock.close()


def _close_all_but(keep: list[int]) -> None:
    low = 3
    for fd in keep + [65536]:
        if fd >= low:
            os.closerange(low, fd)
        low = fd + 1


def load_seccomp(bpf: bytes) -> None:
    landlock = _landlock()
    fprog, program = _fprog(bpf)    # `program` keeps the array fprog points into alive
    _, prctl, c_long, get_errno = landlock._bind()
    if prctl(c_long(PR_SET_SECCOMP), c_long(SECCOMP_MODE_FILTER), fprog, c_long(0),
             c_long(0)) != 0:
        raise SetupError(f"cannot load the seccomp filter — {os.strerror(get_errno())}")


def _fprog(bpf: bytes):
    """(struct sock_fprog bytes, the array they point into: keep it alive)."""
    import _ctypes
    import _struct

    if not bpf or len(bpf) % 8:
        raise SetupError(f"the seccomp program is malformed ({len(bpf)} bytes)")

    class Byte(_ctypes._SimpleCData):
        _type_ = "B"

    class Program(_ctypes.Array):
        _type_ = Byte
        _length_ = len(bpf)

    program = Program.from_buffer_copy(bpf)
    return _struct.pack("@HP", len(bpf) // 8, _ctypes.addressof(program)), program


def load_notify(bpf: bytes, report: int) -> None:
    """Load the supervisor's filter with a new listener, hand the listener's
    number to the launcher on `report`, wait until the supervisor answers a
    first supervised call (fchmod(-1): it has the listener then), and close
    this copy: the listener never stays inside the sandbox."""
    landlock = _landlock()
    number = SYS_SECCOMP.get(os.uname().machine)
    if number is None:
        raise SetupError(f"no seccomp syscall number known for {os.uname().machine}")
    fprog, program = _fprog(bpf)
    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
    try:
        try:
            listener = landlock._check(landlock.syscall(number, SECCOMP_SET_MODE_FILTER, flags,
                                                        fprog), "seccomp")
        except OSError as exc:
            if exc.errno != 22:        # EINVAL: a kernel before 5.19 lacks the second flag
                raise
            listener = landlock._check(landlock.syscall(
                number, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, fprog),
                "seccomp")
    except OSError as exc:
        if exc.errno == 16:            # EBUSY: a listener exists above (Linux allows one)
            raise SetupError("cannot load the supervisor's seccomp filter — another seccomp "
                             "supervisor already watches this process (a container runtime's, "
                             "or a test's kernel simulation), and Linux allows only one: "
                             "Landlock's supervisor cannot run under it. Use the bwrap or "
                             "firejail backend here") from None
        raise SetupError(f"cannot load the supervisor's seccomp filter — {exc.strerror}") \
            from None
    del program
    os.write(report, b"%d\n" % listener)
    os.close(report)
    try:
        os.fchmod(-1, 0)               # answered by the supervisor (EBADF), or waits
    except OSError:
        pass
    os.close(listener)


def apply_landlock(spec: dict, *, max_abi, degrade: bool) -> None:
    landlock = _landlock()
    kernel = landlock.abi_version()
    abi = kernel if max_abi is None else min(kernel, max_abi)
    applied, lost = landlock.downgrade(spec, abi)
    if lost:
        planned = spec.get("abi", 0)
        text = "; ".join(lost)
        if not degrade:
            raise SetupError(
                f"the plan needs Landlock ABI {planned} but this kernel offers ABI {abi}, "
                f"which lacks: {text}. Run `agent-sandbox run --dry-run -- true` on this host "
                "to see what it can enforce, or use another backend")
        sys.stderr.write(f"agent-sandbox: Landlock ABI {abi} (planned {planned}) — not "
                         f"enforced: {text}\n")
    if applied["fs"] or applied["net"] or applied["scoped"]:
        try:
            landlock.restrict_self(applied)
        except OSError as exc:
            raise SetupError(f"cannot apply the Landlock ruleset — {exc}") from None


def probe() -> int:
    landlock = _landlock()
    abi = landlock.abi_version()
    if abi < 1:
        raise SetupError("this kernel has no Landlock (or it is disabled at boot)")
    landlock.no_new_privs()
    landlock.restrict_self(landlock.ruleset(abi, fs=landlock.fs_rights(abi),
                                            paths=[(landlock.READ, "/")]))
    return 0


def close_inherited(keep) -> None:
    """Close every descriptor above stderr except `keep` (close_range(2) where
    the kernel has it: os.closerange uses it), so nothing the caller, the
    backend or this helper held reaches the command (SPEC §5 fd.clean)."""
    low = 3
    for fd in sorted({fd for fd in keep if fd >= low}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(os.sysconf("SC_OPEN_MAX"), 65536))


def refuse_unix_datagrams(keep) -> None:
    """Where the supervisor runs no unix datagram socket may be inside (the
    notify filter refuses to make one): sendmsg() names its destination in
    memory, where the supervisor cannot check it. The descriptors the command
    keeps (0-2 and --keep-fd: close_inherited closes the rest) are the only
    ones that arrive from outside; one of them being such a socket fails the
    launch."""
    import stat

    for fd in sorted({0, 1, 2} | set(keep)):
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
        except OSError:
            continue
        import socket

        probe = socket.socket(fileno=os.dup(fd))
        try:
            datagram = probe.family == socket.AF_UNIX and probe.type == socket.SOCK_DGRAM
        finally:
            probe.close()
        if datagram:
            raise SetupError(
                f"descriptor {fd} is a unix datagram socket, which could send to any datagram "
                "socket outside (sendmsg() names its destination where the landlock supervisor "
                "cannot check it). Give the command a pipe, a file or a stream socket instead, "
                "or use --backend bwrap")


def execute(command: list[str], env: dict) -> int:
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        sys.stderr.write(f"agent-sandbox: {command[0]}: command not found\n")
        return 127
    except OSError as exc:
        sys.stderr.write(f"agent-sandbox: {command[0]}: {exc.strerror.lower()}\n")
        return 126


def main(argv: list[str]) -> int:
    try:
        if "--join-ns" in argv:
            # Under `firejail --join` this process is in the sandbox already:
            # not dumpable first thing, so no member can rewrite it (join()).
            joinns = _joinns()
            try:
                joinns.non_dumpable()
            except joinns.JoinError as exc:
                raise SetupError(str(exc)) from None
        opts = parse(argv)
        if opts["probe"]:
            return probe()
        env = os.environ
        if opts["env"] is not None:
            raw = _read_fd(opts["env"])
            env = dict(item.split("=", 1) for item in
                       os.fsdecode(raw).split("\0") if "=" in item)
        if opts["argv"] is not None:
            opts["command"] = [os.fsdecode(a) for a in _read_fd(opts["argv"]).split(b"\0")]
        spec = None
        if opts["landlock"] is not None:
            spec = marshal.loads(_read_fd(opts["landlock"]))
            if opts["landlock_dirs"]:
                rw = _landlock().READ | _landlock().WRITE
                spec = dict(spec, paths=tuple(spec["paths"]) + tuple(
                    (rw, fd) for fd in opts["landlock_dirs"]))
        bpf = _read_fd(opts["seccomp"]) if opts["seccomp"] is not None else None
        for fd, path in opts["seeds"]:
            write_seed(_read_fd(fd), path)
        report = os.getpid()
        if opts["join_ns"] is not None:
            report = join(opts, bpf)
            bpf = None                  # loaded by join()
        if opts["chdir"]:
            try:
                os.chdir(opts["chdir"])
            except OSError as exc:
                raise SetupError(f"cannot enter {opts['chdir']} — {exc.strerror}") from None
        if opts["new_session"] or opts["controlling_tty"]:
            try:
                os.setsid()
            except OSError as exc:   # a process group leader cannot: a launcher bug
                raise SetupError(f"cannot start a new session — {exc.strerror}") from None
        if opts["controlling_tty"]:
            take_terminal(0)
        if opts["lifeline"] is not None:
            start_watcher(opts["lifeline"], whole_namespace=opts["pid_namespace"],
                          whole_session=opts["controlling_tty"], cleanup=opts["cleanup"])
        if spec is not None or bpf is not None or opts["join_ns"] is not None \
                or opts["notify"] is not None:
            _landlock().no_new_privs()
        if spec is not None:
            apply_landlock(spec, max_abi=opts["max_abi"], degrade=opts["degrade"])
        if bpf is not None:
            load_seccomp(bpf)
        if opts["notify"] is not None:
            load_notify(_read_fd(opts["notify"][0]), opts["notify"][1])
            refuse_unix_datagrams(opts["keep_fds"])
        if opts["relay"] is not None:
            start_relay(*opts["relay"])
        if opts["status"] is not None:
            os.write(opts["status"], b'{"helper-exec": %d}\n' % report)
            os.close(opts["status"])
        close_inherited(opts["keep_fds"])
    except (SetupError, OSError) as exc:
        sys.stderr.write(f"agent-sandbox: the sandbox helper could not set up — {exc}. The "
                         "command was not run.\n")
        return 125
    return execute(opts["command"], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
