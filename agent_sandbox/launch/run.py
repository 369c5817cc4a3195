"""The thin shell: from a command line to a running sandbox.

Everything that decides *what* the sandbox is happens in pure code (confload →
policy → backend plan). This module does the few things that touch the
system: reads the identity and host files the plan needs, creates the
placeholder mount points for missing protected paths, turns payloads into
file descriptors, starts the backend, forwards signals to the command, and
turns the outcome into an exit code.

Exit codes: the command's own; 125 when the sandbox could not be set up (no
backend, bad config, refused policy, backend failure); 126/127 as the shell
uses them. Nothing here ever falls back to running the command unsandboxed.
"""
from __future__ import annotations

import os
import pwd
import signal
import sys

from agent_sandbox import __version__
from agent_sandbox.errors import SETUP_FAILED, BackendUnavailable, PolicyError, SandboxError
from agent_sandbox.paths import helper_module

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGCONT)
RESET_SIGNALS = FORWARDED_SIGNALS + (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTSTP,
                                     signal.SIGTTIN, signal.SIGTTOU)
KNOWN_BACKENDS = ("bwrap", "firejail", "landlock")
MARKER_PATH = "/run/agent-sandbox/session"   # policy.MARKER_PATH, kept import-free here


def say(message: str) -> None:
    sys.stderr.write(f"agent-sandbox: {message}\n")


# ---------------------------------------------------------------- nesting
def inside_sandbox(environ) -> bool:
    """True only with the AGENT_SANDBOX=1 marker and evidence no process
    outside a sandbox has (a stray AGENT_SANDBOX=1 in a login shell is not
    enough, and nothing the sandbox can write may stand in for it):
    - bwrap: the session's marker file on a read-only mount under /run, which
      outside would need root to create;
    - firejail: PID 1 is our own process (its PID namespace); outside, PID 1
      is the system's init, owned by root;
    - landlock: our own state directory, which we may list, refuses us (the
      rules carve the always-hidden paths out of every grant; should that
      ever fail, a nested run wraps once more, which is safe)."""
    if environ.get("AGENT_SANDBOX") != "1":
        return False
    import stat

    try:
        flags = os.statvfs(MARKER_PATH).f_flag
        info = os.lstat(MARKER_PATH)
        if flags & os.ST_RDONLY and stat.S_ISREG(info.st_mode):
            return True
    except OSError:
        pass
    backend = environ.get("SANDBOX_BACKEND")
    if backend == "firejail":
        try:
            return os.stat("/proc/1").st_uid == os.getuid() != 0
        except OSError:
            return False
    if backend == "landlock":
        state = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".local", "state",
                             "agent-sandbox")
        try:
            info = os.stat(state)
            if info.st_uid != os.getuid() or info.st_mode & 0o500 != 0o500:
                return False
            os.listdir(state)
        except PermissionError:
            return True
        except OSError:
            return False
    return False


def exec_nested(command: list[str], environ) -> int:
    if environ.get("SANDBOX_QUIET", "").lower() not in ("1", "true", "yes"):
        say("already inside a sandbox — running the command under the current policy "
            "without re-wrapping")
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        say(f"{command[0]}: command not found")
        return 127
    except PermissionError:
        say(f"{command[0]}: permission denied")
        return 126


# ---------------------------------------------------------------- context
def _install_paths() -> tuple[str, ...]:
    from agent_sandbox.paths import PACKAGE_DIR

    paths = [os.path.dirname(PACKAGE_DIR)]       # site-packages or the source tree
    if sys.prefix != sys.base_prefix:
        paths.append(sys.prefix)                 # the virtual environment
    return tuple(paths)


def launch_context(project_dir: str | None, environ):
    from agent_sandbox.policy.resolve import LaunchContext

    entry = pwd.getpwuid(os.getuid())
    # The user config dir is kept read-only inside only if it exists; made
    # here so that a session with a writable home cannot create it and plant
    # a config that weakens the next launch.
    try:
        os.makedirs(os.path.join(entry.pw_dir, ".config", "agent-sandbox"), mode=0o700,
                    exist_ok=True)
    except OSError:
        pass   # a read-only home: nothing can be planted there either
    return LaunchContext(
        uid=os.getuid(), gid=os.getgid(), user=entry.pw_name, home=entry.pw_dir,
        environ=dict(environ), cwd=os.getcwd(), project_dir=project_dir,
        install_paths=_install_paths(), session_id=os.urandom(6).hex())


def choose_backend(settings, requested: str | None, *, home: str | None = None,
                   environ=None):
    """The backend to use (a backends.Selection): the requested one, or with
    auto the first of bwrap → firejail → landlock that is allowed, installed
    and passes a real probe (a trivial sandbox; the verdict is cached while
    nothing it depends on changes)."""
    from agent_sandbox.backends import Unavailable, module, select

    name = requested or settings.SANDBOX_BACKEND
    if name not in ("auto",) + KNOWN_BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r} — choose one of auto, "
                                 f"{', '.join(KNOWN_BACKENDS)}.")
    environ = os.environ if environ is None else environ
    home = home or pwd.getpwuid(os.getuid()).pw_dir
    path_env = environ.get("PATH", "/usr/bin:/bin")
    origin = getattr(settings, "origins", {}).get("SANDBOX_BACKEND", "")
    origin = {"flag": "with --backend", "env": "by SANDBOX_BACKEND in the environment"}.get(
        origin, f"by SANDBOX_BACKEND at {origin}" if origin else "")
    try:
        return select(name, settings.ALLOWED_BACKENDS,
                      find=lambda n: module(n).find(path_env),
                      probe=lambda n, path: probe_backend(n, path, home), origin=origin)
    except Unavailable as exc:
        raise BackendUnavailable(str(exc)) from None


def landlock_abi() -> int:
    landlock = helper_module("landlock")

    return landlock.abi_version()


def _probe_inputs(name: str, path: str) -> tuple:
    """Everything a probe's verdict depends on. A cached verdict is reused only
    while all of it is unchanged: a reboot, another binary, a changed sysctl or
    running inside another sandbox (other user namespace, seccomp, no_new_privs)
    all mean a fresh probe."""
    def stat_of(p):
        try:
            st = os.stat(p)
        except OSError:
            return (p,)
        return (p, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid)

    def read(p):
        try:
            with open(p, "rb") as handle:
                return handle.read(8192)
        except OSError:
            return b""

    status = [line for line in read("/proc/self/status").splitlines()
              if line.startswith((b"NoNewPrivs", b"Seccomp:"))]
    try:
        userns = os.readlink("/proc/self/ns/user")
    except OSError:
        userns = ""
    extra: tuple = ()
    if name == "firejail":
        extra = (stat_of("/etc/firejail/firejail.config"), stat_of("/etc/firejail/firejail.users"))
    elif name == "landlock":
        from agent_sandbox.backends.base import helper_path

        extra = (stat_of(helper_path()), landlock_abi())
    sysctls = tuple(read(p) for p in ("/proc/sys/user/max_user_namespaces",
                                      "/proc/sys/kernel/unprivileged_userns_clone",
                                      "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"))
    return (__version__, name, stat_of(path), read("/proc/sys/kernel/random/boot_id"), userns,
            os.getuid(), tuple(status), sysctls, extra)


def _probe_cache(name: str, home: str) -> str:
    from agent_sandbox.config.load import state_dir

    return os.path.join(state_dir(home), "cache", f"probe-{name}.marshal")


def probe_backend(name: str, path: str, home: str) -> tuple[bool, str]:
    """Run the backend's trivial sandbox; (passed, detail)."""
    from agent_sandbox.backends import module
    from agent_sandbox.config.load import load_cache, store_cache

    inputs = _probe_inputs(name, path)
    cache = _probe_cache(name, home)
    cached = load_cache(cache, inputs)
    if isinstance(cached, tuple) and len(cached) == 2:
        return cached
    import subprocess

    try:
        result = subprocess.run(module(name).probe_argv(path), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
                                env={"PATH": "/usr/bin:/bin"}, timeout=30)
        lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
        verdict = (result.returncode == 0,
                   lines[-1] if lines else f"exit status {result.returncode}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        verdict = (False, str(exc))
    store_cache(cache, inputs, verdict)
    return verdict


def helper_python() -> str:
    """The interpreter the helper runs on: Debian's, else the one behind this
    launcher (so marshal formats always agree)."""
    from agent_sandbox.backends.base import HELPER_PYTHON

    if os.access(HELPER_PYTHON, os.X_OK):
        return HELPER_PYTHON
    return os.path.realpath(sys.executable)


def backend_plan(selection, policy, command: list[str], payloads: dict, abi: int):
    """The selected backend's plan for the policy, on a kernel with Landlock ABI `abi`."""
    from agent_sandbox.backends import BACKENDS, PlanContext

    try:
        setuid = bool(os.stat(selection.path).st_mode & 0o4000)
    except OSError:
        setuid = False
    backend = BACKENDS[selection.name]
    context = PlanContext(program=selection.path, landlock_abi=abi, python=helper_python(),
                          program_setuid=setuid)
    backend.refuse(policy, context=context)
    plan = backend.plan(policy, command, payloads, context=context)
    return plan._replace(chosen_because=selection.reason)


def check_required(plan, policy, settings, abi: int) -> None:
    """REQUIRE: every listed guarantee must be fully provided, else refuse,
    naming the backends that would give it."""
    from agent_sandbox.backends import would_provide

    missing = plan.missing(policy.require)
    if not missing:
        return
    reasons = dict(plan.cannot + plan.partial)
    parts, suggestion = [], None
    for guarantee in missing:
        others = [b for b in would_provide(guarantee, policy, landlock_abi=abi,
                                           allowed=settings.ALLOWED_BACKENDS)
                  if b != plan.backend]
        if others:
            suggestion = suggestion or others[0]
            alternative = f"{' or '.join(others)} would give it"
        else:
            alternative = "no allowed backend gives it with this configuration"
        parts.append(f"{guarantee}: {reasons.get(guarantee, 'not provided')} ({alternative})")
    fix = (f"Run with --backend {suggestion} (or SANDBOX_BACKEND={suggestion})"
           if suggestion else "Change the setting named above")
    raise PolicyError(f"REQUIRE=({' '.join(policy.require)}) cannot hold on the "
                      f"{plan.backend} backend — {'; '.join(parts)}. {fix}, or remove the "
                      "entry from REQUIRE.", reason="requirement_unmet")


# ---------------------------------------------------------------- payloads
def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except OSError:
        return ""


def identity_payloads(policy) -> dict:
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.policy.passwd import filter_group, filter_nsswitch, filter_passwd, sys_id_max

    sys_uid_max, sys_gid_max = sys_id_max(_read_text("/etc/login.defs"))
    entry = pwd.getpwuid(policy.uid)
    user_entry = ":".join([entry.pw_name, "x", str(entry.pw_uid), str(entry.pw_gid),
                           entry.pw_gecos, entry.pw_dir, entry.pw_shell])
    gids = os.getgrouplist(policy.user, policy.gid)
    extra = []
    import grp

    for gid in gids:
        try:
            extra.append(f"{grp.getgrgid(gid).gr_name}:x:{gid}:")
        except KeyError:
            pass
    return {
        "etc-passwd": Payload(data=filter_passwd(
            _read_text("/etc/passwd"), uid=policy.uid, sys_uid_max=sys_uid_max,
            user_entry=user_entry).encode()),
        "etc-group": Payload(data=filter_group(
            _read_text("/etc/group"), user=policy.user, gids=gids, sys_gid_max=sys_gid_max,
            extra_entries=extra).encode()),
        "etc-nsswitch.conf": Payload(data=filter_nsswitch(
            _read_text("/etc/nsswitch.conf")).encode()),
    }


def seccomp_payload(policy, home: str):
    """The BPF program for the policy's deny list, cached in the hidden state
    directory (generating it loads libseccomp, which costs more than a launch)."""
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.config.load import load_cache, state_dir, store_cache
    from agent_sandbox.policy.seccomp import compile_filter, deny_list

    denied = deny_list(policy.seccomp_extra, no_pid_namespace=policy.backend == "landlock")
    inputs = (__version__, os.uname().machine, denied)
    path = os.path.join(state_dir(home), "cache", "seccomp.marshal")
    data = load_cache(path, inputs)
    if not isinstance(data, bytes) or not data or len(data) % 8:
        data = compile_filter(denied)
        store_cache(path, inputs, data)
    return Payload(data=data), denied


def marker_payload(policy):
    from agent_sandbox.backends.base import Payload

    text = (f"session={policy.session_id}\nbackend={policy.backend}\n"
            f"project={policy.project_dir}\n")
    return Payload(data=text.encode())


# ---------------------------------------------------------------- building
def build(command: list[str], *, project_dir: str | None, backend: str | None,
          environ, chaperon=None, profile=None) -> tuple:
    """Everything up to the plan; returns (settings, policy, plan, denied syscalls).
    `chaperon` is the running ChaperonSession whose directory the sandbox gets;
    `profile` the agent profile whose layer and note apply."""
    settings, selection, policy = resolve(project_dir=project_dir, backend=backend,
                                          environ=environ, profile=profile)
    if chaperon:
        from agent_sandbox.policy.resolve import with_chaperon

        policy = with_chaperon(policy, chaperon.directory, chaperon.staging)
    policy, plan, denied = plan_for(settings, selection, policy, command, profile=profile,
                                    chaperon=chaperon)
    return settings, policy, plan, denied


def resolve(*, project_dir: str | None, backend: str | None, environ, profile=None) -> tuple:
    """(settings, backend selection, policy): the configuration resolved for
    this user, project and host, before any payload or plan."""
    from agent_sandbox.config.load import load_settings
    from agent_sandbox.policy.resolve import resolve_policy

    ctx = launch_context(project_dir, environ)
    flags = {"SANDBOX_BACKEND": backend} if backend else {}
    settings = load_settings(home=ctx.home, user=ctx.user, environ=ctx.environ, flags=flags,
                             project_dir=ctx.project_dir or ctx.cwd, profile=profile)
    selection = choose_backend(settings, None, home=ctx.home, environ=ctx.environ)
    return settings, selection, resolve_policy(settings, ctx, backend=selection.name)


def plan_for(settings, selection, policy, command: list[str], *, profile=None,
             chaperon=None) -> tuple:
    """(policy with the profile's note, plan, denied syscalls) for `policy`."""
    payloads = {"marker": marker_payload(policy)}
    if chaperon:
        payloads["stub"] = chaperon.stub_payload()
    if profile is not None and profile.note_path:
        policy, payloads["note-0"] = _with_note(policy, profile, slurm=chaperon is not None)
    policy, generated = check_bound_files(settings, policy, selection.name)
    payloads.update(generated)
    denied: tuple[str, ...] = ()
    if policy.seccomp:
        payloads["seccomp"], denied = seccomp_payload(policy, policy.home)
    if policy.filter_passwd and selection.name == "bwrap":   # the others cannot bind files
        payloads.update(identity_payloads(policy))
    abi = landlock_abi()
    plan = backend_plan(selection, policy, command, payloads, abi)
    check_required(plan, policy, settings, abi)
    return policy, plan, denied


def check_bound_files(settings, policy, backend: str) -> tuple:
    """(policy, payloads): the single files bound from the home, read here and
    checked for secrets by boundfiles (SECRETS_IN_BOUND_FILES)."""
    from agent_sandbox.launch import boundfiles
    from agent_sandbox.backends import module
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.policy.envfilter import removal_rule

    mode = settings.SECRETS_IN_BOUND_FILES
    contents = {} if mode == "off" else {
        path: _read_bound_file(source) for path, source in boundfiles.bound_files(policy)}
    policy, blanked = boundfiles.apply(
        policy, mode=mode, can_generate=module(backend).BINDS_GENERATED_FILES,
        contents=contents, removed=removal_rule(blocked=settings.BLOCKED_ENV_VARS,
                                                patterns=settings.BLOCKED_ENV_PATTERNS,
                                                allowed=settings.ALLOWED_ENV_VARS))
    return policy, {name: Payload(data=data) for name, data in blanked.items()}


def _read_bound_file(path: str):
    """The bytes of a home file the sandbox gets, opened once without following
    a symlink; boundfiles.TOO_LARGE above its cap; None when it cannot be read
    or is not a regular file (then nothing of it is readable inside either)."""
    import stat

    from agent_sandbox.launch.boundfiles import MAX_BYTES, TOO_LARGE

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > MAX_BYTES:
            return TOO_LARGE
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return TOO_LARGE if size > MAX_BYTES else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _with_note(policy, profile, *, slurm: bool):
    """The profile's note, after whatever the user keeps at that path."""
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.config.profiles import note_text

    existing = b""
    if not policy.is_hidden(os.path.realpath(profile.note_path)):
        try:
            with open(profile.note_path, "rb") as handle:
                existing = handle.read(1 << 20).rstrip(b"\n") + b"\n\n"
        except OSError:
            pass
    note = existing + note_text(policy, slurm=slurm).encode()
    return policy._replace(notes=((profile.note_path, "note-0"),)), Payload(data=note)


def run_profile(name: str, args: list[str], environ=None) -> int:
    """`agent-sandbox NAME [ARGS]`: run an agent with its profile applied."""
    import shutil

    from agent_sandbox.config.load import known_keys
    from agent_sandbox.config.profiles import create_state, load

    environ = os.environ if environ is None else environ
    entry = pwd.getpwuid(os.getuid())
    try:
        profile = load(name, home=entry.pw_dir, user=entry.pw_name,
                       known_keys=known_keys(entry.pw_dir, entry.pw_name))
    except SandboxError as exc:
        say(str(exc))
        return SETUP_FAILED
    command = list(profile.command) + list(args)
    if shutil.which(command[0], path=environ.get("PATH")) is None:
        say(f"{name}: {command[0]} is not installed (not found on your PATH) — "
            f"{profile.install_hint or 'install it first'}.")
        return 127
    if not inside_sandbox(environ):
        create_state(profile, entry.pw_dir)
    return run(command, environ=environ, profile=profile)


# ---------------------------------------------------------------- running
def _payload_fd(name: str, payload) -> int:
    """An inheritable descriptor the backend reads the payload from."""
    if payload.path is not None:
        fd = os.open(payload.path, os.O_RDONLY | os.O_NOFOLLOW)
    else:
        fd = os.memfd_create(name, 0)
        os.write(fd, payload.data)
        os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


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


def run_plan(plan, keep_fds=()) -> int:
    """Start the backend with the plan's payloads and environment, forward
    signals to the command, return its exit code (125 for setup failures).
    `keep_fds`: caller descriptors the command keeps (--keep-fd)."""
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
        name = ""
        for name, payload in plan.payloads.items():
            fds[name] = _payload_fd(name, payload)
    except OSError as exc:
        for fd in list(fds.values()) + ours + ([read_status] if read_status else []):
            os.close(fd)
        _remove_scratch_dirs(scratch)
        raise BackendUnavailable(f"cannot prepare the sandbox's input {name or 'pipes'} — "
                                 f"{exc}. The command was not run.") from None
    argv = plan.render(fds)
    launcher = _pdeathsig_wrapper() + argv
    _seal_inherited(set(fds.values()) | set(keep_fds))
    try:
        # A helper that calls setsid() must not lead a process group already.
        group = {} if plan.own_session else {"setpgroup": 0}
        spawn = _spawn_scoped if plan.spawn_ruleset else _spawn
        pid, release = spawn(plan.spawn_ruleset, launcher, plan.env, setsigdef=RESET_SIGNALS,
                             **group)
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

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}
    try:
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
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return 128 - code                    # the backend itself was killed
    text = "".join(status_text)
    if code != 0 and plan.started not in text:
        say(_backend_failure_hint(plan.backend, text))
        _forget_probe(plan.backend)
        return SETUP_FAILED
    return code


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
    if plan.started == '"exit-code"':
        return _sandbox_init_pid(fd, sink)
    if fd is None:
        return None
    _drain(fd, sink)
    for line in "".join(sink).splitlines():
        if '"helper-exec"' in line:
            try:
                reported = int(line.split(":")[1].strip(" }"))
            except (IndexError, ValueError):
                return None
            # firejail's PID namespace: the helper reported its pid in there.
            return _host_pid(pid, reported) if plan.backend == "firejail" else reported
    return None


def _host_pid(root: int, ns_pid: int) -> int | None:
    """The descendant of `root` whose pid in its own namespace is `ns_pid`."""
    todo, seen = [root], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/status", "rb") as handle:
                for line in handle:
                    if line.startswith(b"NSpid:"):
                        fields = line.split()[1:]
                        if current != root and len(fields) > 1 and int(fields[-1]) == ns_pid:
                            return current
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", "rb") as handle:
                    todo += [int(c) for c in handle.read().split()]
        except (OSError, ValueError):
            continue
    return None


def _backend_failure_hint(backend: str, status: str) -> str:
    if backend == "bwrap":
        return _setup_failure_hint(status)
    return (f"the {backend} backend could not set up the sandbox (its message is above). "
            f"Check `agent-sandbox run --backend {backend} --dry-run -- true` and "
            "`agent-sandbox doctor`, or choose another backend; the command was not run.")


def _forget_probe(backend: str) -> None:
    """A backend that failed to start is probed afresh next time."""
    try:
        os.unlink(_probe_cache(backend, pwd.getpwuid(os.getuid()).pw_dir))
    except OSError:
        pass


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
    import json

    for line in "".join(sink).splitlines():
        if '"child-pid"' in line:
            try:
                return int(json.loads(line)["child-pid"])
            except (ValueError, KeyError):
                return None
    return None


def _setup_failure_hint(status: str) -> str:
    if '"child-pid"' not in status:
        return ("bwrap could not create the sandbox's namespaces (its message is above) — "
                "unprivileged user namespaces are probably disabled on this host. Ask your "
                "admin to enable them (sysctl user.max_user_namespaces > 0, "
                "kernel.unprivileged_userns_clone=1, no AppArmor userns restriction for bwrap) "
                "or use another backend; the command was not run.")
    return ("bwrap could not set up the sandbox's filesystem (its message is above) — a path "
            "in the plan changed while starting. Run again; if it persists, check "
            "`agent-sandbox run --dry-run -- true`. The command was not run.")


def run(command: list[str], *, project_dir: str | None = None, backend: str | None = None,
        dry_run: bool = False, environ=None, profile=None, keep_fds=()) -> int:
    environ = os.environ if environ is None else environ
    if not command:
        say("no command given — usage: agent-sandbox run [OPTIONS] [--] CMD [ARGS…]")
        return 2
    if inside_sandbox(environ) and not dry_run:
        return exec_nested(command, environ)
    try:
        settings, selection, policy = resolve(project_dir=project_dir, backend=backend,
                                              environ=environ, profile=profile)
        policy = policy._replace(keep_fds=keep_fds_checked(keep_fds))
        if profile is not None:
            from agent_sandbox.config.profiles import ALWAYS_ENABLED

            if profile.name not in settings.ENABLED_AGENTS + ALWAYS_ENABLED:
                raise PolicyError(
                    f"the agent profile {profile.name} is not enabled — ENABLED_AGENTS is "
                    f"({' '.join(settings.ENABLED_AGENTS)}). Add ENABLED_AGENTS+=({profile.name}) "
                    "to ~/.config/agent-sandbox/sandbox.conf.", reason="profile_disabled")
        if dry_run:
            from agent_sandbox.launch.report import dry_run_report

            policy, plan, denied = plan_for(settings, selection, policy, command,
                                            profile=profile)
            sys.stdout.write(dry_run_report(policy, plan, denied))
            return 0
        from agent_sandbox.launch.chaperon import ChaperonSession, wanted

        session = None
        try:
            # The chaperon first, so the plan is built once, with its session
            # directory (a plan that then refuses stops it again below).
            if wanted(settings, policy):
                session = ChaperonSession.start(settings, policy)
                from agent_sandbox.policy.resolve import with_chaperon

                policy = with_chaperon(policy, session.directory, session.staging)
            policy, plan, _ = plan_for(settings, selection, policy, command,
                                       profile=profile, chaperon=session)
            if not plan.argv[0].startswith("/"):
                raise BackendUnavailable(
                    "bwrap is not installed (not found on PATH) — the sandbox cannot be "
                    "built. Install bubblewrap (apt-get install bubblewrap) or ask your "
                    "admin; the command was not run.")
            for warning in policy.warnings:
                say(f"warning: {warning}")
            if not policy.quiet:
                from agent_sandbox.launch.report import banner

                sys.stderr.write(banner(policy, plan))
            # The session registry (`agent-sandbox status`): written before the
            # placeholders are made (a session of the same project ending now
            # must see this one and leave them), removed whatever way it ends;
            # named by the session id the chaperon's audit log and ledger carry.
            # Both steps run under the project's lock, so that concurrent
            # launches and ends of one project never race (placeholders.py).
            from agent_sandbox.launch import gitcheck, placeholders, registry

            created, record, snapshot = [], None, None
            try:
                with placeholders.project_lock(policy.home, policy.project_dir):
                    record = registry.register(
                        policy.home, session=policy.session_id,
                        backend=plan.backend, project=policy.project_dir,
                        chaperon_pid=session.pid if session else None,
                        command=os.path.basename(command[0]))
                    placeholders.exclude(policy)
                    created = placeholders.create(policy)
                    placeholders.remember(policy.home, policy.project_dir, created)
                snapshot = gitcheck.start(policy)
                return run_plan(plan, policy.keep_fds)
            finally:
                if record is not None:   # checked while registered: recover() leaves it alone
                    gitcheck.finish(policy, snapshot)
                with placeholders.project_lock(policy.home, policy.project_dir):
                    registry.unregister(record)
                    placeholders.release(policy.home, policy.project_dir, policy.session_id,
                                         created)
        finally:
            if session:
                session.stop()
    except SandboxError as exc:
        say(str(exc))
        return SETUP_FAILED
