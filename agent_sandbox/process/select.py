"""Which backend runs this launch: the requested one, or with `auto` the
first of names.BACKENDS that is allowed, installed and passes a real probe
(a trivial sandbox). A probe's verdict is cached in the hidden state
directory while nothing it depends on changes (boot, binary, sysctls, the
namespace and seccomp state this launcher runs in); a failure for lack of
resources (process limit, memory, user namespaces) is not remembered.
"""
from __future__ import annotations

import os
import pwd

from agent_sandbox import __version__
from agent_sandbox.errors import BackendUnavailable
from agent_sandbox.names import BACKENDS as KNOWN_BACKENDS
from agent_sandbox.paths import helper_module


def choose_backend(settings, requested: str | None, *, home: str | None = None,
                   environ=None):
    """The backend to use (a backends.Selection): the requested one, or with
    auto the first of bwrap → firejail → landlock that is allowed, installed
    and passes a real probe (a trivial sandbox; the verdict is cached while
    nothing it depends on changes)."""
    from agent_sandbox.backends import BACKENDS, Unavailable, select

    name = requested or settings.SANDBOX_BACKEND
    if name not in ("auto",) + KNOWN_BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r} — choose one of auto, "
                                 f"{', '.join(KNOWN_BACKENDS)}.")
    environ = os.environ if environ is None else environ
    home = home or pwd.getpwuid(os.getuid()).pw_dir
    path_env = environ.get("PATH", "/usr/bin:/bin")
    origin = settings.origins.get("SANDBOX_BACKEND", "")
    origin = {"flag": "with --backend", "env": "by SANDBOX_BACKEND in the environment"}.get(
        origin, f"by SANDBOX_BACKEND at {origin}" if origin else "")
    try:
        return select(name, settings.ALLOWED_BACKENDS,
                      find=lambda n: BACKENDS[n].find(path_env),
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
    from agent_sandbox.traits import traits

    known = traits(name)
    extra: tuple = tuple(stat_of(p) for p in known.probe_inputs)   # firejail's config
    if known.landlock_enforced:
        from agent_sandbox.backends.base import helper_path

        extra = (stat_of(helper_path()), landlock_abi())
    sysctls = tuple(read(p) for p in ("/proc/sys/user/max_user_namespaces",
                                      "/proc/sys/kernel/unprivileged_userns_clone",
                                      "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"))
    return (__version__, name, stat_of(path), read("/proc/sys/kernel/random/boot_id"), userns,
            os.getuid(), tuple(status), sysctls, extra)


def _probe_cache(name: str, home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), "cache", f"probe-{name}.marshal")


def probe_backend(name: str, path: str, home: str, *, argv=None,
                  kind: str = "") -> tuple[bool, str]:
    """Run the backend's trivial sandbox (or `argv`, a probe of one of its
    options, cached under its `kind`); (passed, detail)."""
    from agent_sandbox.backends import BACKENDS
    from agent_sandbox.config.load import load_cache, store_cache

    inputs = _probe_inputs(name, path) + (kind, tuple(argv or ()))
    cache = _probe_cache(f"{name}-{kind}" if kind else name, home)
    cached = load_cache(cache, inputs)
    if isinstance(cached, tuple) and len(cached) == 2:
        return cached
    import subprocess

    transient = False
    try:
        result = subprocess.run(argv or BACKENDS[name].probe_argv(path), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
                                env={"PATH": "/usr/bin:/bin"}, timeout=30)
        lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
        verdict = (result.returncode == 0,
                   lines[-1] if lines else f"exit status {result.returncode}")
        transient = result.returncode < 0    # killed (the OOM killer, a job's limit)
    except subprocess.TimeoutExpired as exc:
        verdict, transient = (False, str(exc)), True
    except OSError as exc:
        verdict = (False, str(exc))
    # A failure for lack of resources (the user's process limit, a cgroup's,
    # the count of user namespaces: states of the moment, not among the
    # inputs) is not remembered: it would move every later launch of this
    # boot to a weaker backend once the resources are back.
    if verdict[0] or not (transient or any(why in verdict[1] for why in TRANSIENT)):
        store_cache(cache, inputs, verdict)
    return verdict


# strerror of EAGAIN, ENOMEM, ENOSPC (clone: too many user namespaces), EMFILE, ENFILE.
TRANSIENT = ("Resource temporarily unavailable", "Cannot allocate memory",
             "No space left on device", "Too many open files")


def helper_python(policy=None) -> str:
    """The interpreter the helper runs on: the launcher's own when the sandbox
    shows it read-only, else the system python3 when new enough, else a
    refusal (backends/helperpython.py)."""
    from agent_sandbox.backends.helperpython import helper_python as rule

    return rule(policy)


def forget_probe(backend: str) -> None:
    """A backend that failed to start is probed afresh next time (its
    options' probes too)."""
    home = pwd.getpwuid(os.getuid()).pw_dir
    for kind in ("", "private-mounts"):
        try:
            os.unlink(_probe_cache(f"{backend}-{kind}" if kind else backend, home))
        except OSError:
            pass
