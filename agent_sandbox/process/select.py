"""Which backend runs this launch: the requested one, or with `auto` the
first of names.BACKENDS that is allowed, installed and passes a real probe
(a trivial sandbox). A probe's *passed* verdict is cached in the hidden
state directory while nothing it depends on changes (boot, every binary it
ran, the userns sysctls, the AppArmor state, the namespace and seccomp state
this launcher runs in); a failure is never remembered — its cause (a
library installed later, a sysctl, a profile) may be gone at the next
launch, and no key could name every such cause. A failure says its cause
and fix from one table (backends/hints.py).

What the backend's program supports (its --version and --help,
program_features) is cached with the binary's identity: its stat, which the
plan cache records too (plancache/plans.py records every stat of a compile).
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

    def find(n):
        backend = BACKENDS[n]
        if hasattr(backend, "locate"):
            return backend.locate(path_env, getattr(settings, f"{n.upper()}_PATH", ""))
        return backend.find(path_env)

    def probe(n, path):
        verdict = probe_backend(n, path, home)
        if (verdict[0] and settings.PRIVATE_MOUNTS
                and hasattr(BACKENDS[n], "private_mounts_probe_argv")):
            # auto treats a bwrap that cannot run as the configuration
            # demands (PRIVATE_MOUNTS) like a failed probe
            verdict = private_mounts_probe(n, path, home, settings.UNSHARE_PATH)
        return verdict

    try:
        selection = select(name, settings.ALLOWED_BACKENDS, find=find, probe=probe,
                           origin=origin)
    except Unavailable as exc:
        raise BackendUnavailable(str(exc)) from None
    return selection._replace(features=program_features(selection.name, selection.path, home))


def private_mounts_probe(name: str, path: str, home: str,
                         unshare: str = "/usr/bin/unshare") -> tuple:
    """The PRIVATE_MOUNTS probe (bwrap in a user and mount namespace of its
    own, backends/bwrap.py) — passed for a setuid bwrap, which keeps the
    host's propagation and says so in its report."""
    try:
        if os.stat(path).st_mode & 0o4000:
            return True, ""
    except OSError:
        pass
    try:
        python = helper_python()
    except Exception:   # noqa: BLE001 - no helper interpreter: unshare's way only
        python = ""
    way, cause, fix = private_mounts_way(name, path, home, unshare, python)
    if way:
        return True, ""
    return False, f"PRIVATE_MOUNTS=true, but {cause}", fix


def private_mounts_way(name: str, path: str, home: str, unshare: str,
                       python: str) -> tuple:
    """(how, "", "") when bwrap can run in a private mount namespace here —
    "unshare" (util-linux's) or "helper" (helper/privmounts.py, where
    unshare has no --map-current-user: util-linux < 2.35) —, else
    ("", cause, fix)."""
    from agent_sandbox.backends import BACKENDS

    backend, features = BACKENDS[name], program_features(name, path, home)
    passed, detail, *hint = probe_backend(
        name, path, home, kind="private-mounts",
        argv=backend.private_mounts_probe_argv(path, features, unshare))
    if passed:
        return "unshare", "", ""
    if "--map-current-user" in detail and python:
        helped, helper_detail, *helper_hint = probe_backend(
            name, path, home, kind="private-mounts-helper",
            argv=backend.private_mounts_probe_argv(path, features, helper_python=python))
        if helped:
            return "helper", "", ""
        return "", f"{detail}, and the helper's own namespace failed: {helper_detail}", \
            helper_hint[0] if helper_hint else ""
    return "", detail, hint[0] if hint else ""


def landlock_abi() -> int:
    landlock = helper_module("landlock")

    return landlock.abi_version()


def _stat_of(p):
    try:
        st = os.stat(p)
    except OSError:
        return (p,)
    return (p, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode,
            st.st_uid)


def _read(p, size: int = 8192) -> bytes:
    try:
        with open(p, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


USERNS_SYSCTLS = ("/proc/sys/user/max_user_namespaces",
                  "/proc/sys/kernel/unprivileged_userns_clone",
                  "/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
# The AppArmor state a userns restriction depends on: whether it is on, and
# the loaded policy (a profile granting userns to a program is loaded later).
APPARMOR_STATE = ("/sys/module/apparmor/parameters/enabled",
                  "/sys/kernel/security/apparmor/revision",
                  "/sys/kernel/security/apparmor/profiles")


def _apparmor_state() -> tuple:
    import hashlib

    return tuple(hashlib.sha256(_read(p, 1 << 20)).hexdigest()[:16] for p in APPARMOR_STATE)


def _probe_inputs(name: str, path: str, argv=()) -> tuple:
    """Everything a probe's verdict depends on. A cached verdict is reused only
    while all of it is unchanged: a reboot, another binary (each one the probe
    runs: the backend's, /usr/bin/unshare, the command inside), a changed
    userns sysctl or AppArmor policy, or running inside another sandbox
    (other user namespace, seccomp, no_new_privs) all mean a fresh probe."""
    stat_of, read = _stat_of, _read

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
    sysctls = tuple(read(p) for p in USERNS_SYSCTLS)
    # each program the probe runs: the first (bwrap, unshare, the helper's
    # python and its script) and the command inside
    ran = tuple(stat_of(a) for a in dict.fromkeys([*argv[:4], argv[-1]])
                if a.startswith("/")) if argv else ()
    return (__version__, name, stat_of(path), read("/proc/sys/kernel/random/boot_id"), userns,
            os.getuid(), tuple(status), sysctls, _apparmor_state(), ran, extra)


def probe_facts(name: str, path: str, features=None):
    """What hints.explain weighs beside a failed probe's output."""
    from agent_sandbox.backends.hints import Facts

    values = [_read(p, 64).decode("ascii", "replace").strip() for p in USERNS_SYSCTLS]
    return Facts(name, path, features.text if features is not None else "", *values)


def program_features(name: str, path: str, home: str):
    """What the backend's program supports (backends/base.py Features: its
    --version and --help), cached with the binary's identity; None for a
    backend without a program of its own (landlock). A program that prints
    no version is asked again at the next launch."""
    from agent_sandbox.traits import traits
    from agent_sandbox.backends.base import Features, parse_features
    from agent_sandbox.config.load import load_cache, store_cache

    if traits(name).landlock_enforced:
        return None
    inputs = (__version__, "features", _stat_of(path))
    cache = _probe_cache(f"{name}-features", home)
    cached = load_cache(cache, inputs)
    if isinstance(cached, tuple) and len(cached) == 3:
        return Features(tuple(cached[0]), frozenset(cached[1]), cached[2])
    import subprocess

    texts = []
    for flag in ("--version", "--help"):
        try:
            result = subprocess.run([path, flag], stdin=subprocess.DEVNULL,
                                    capture_output=True, cwd="/",
                                    env={"PATH": "/usr/bin:/bin"}, timeout=10)
            texts.append((result.stdout + result.stderr).decode("utf-8", "replace"))
        except (OSError, subprocess.TimeoutExpired):
            texts.append("")
    features = parse_features(*texts)
    if features.version:
        store_cache(cache, inputs, (features.version, tuple(sorted(features.options)),
                                    features.text))
    return features


def _probe_cache(name: str, home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), "cache", f"probe-{name}.marshal")


def probe_backend(name: str, path: str, home: str, *, argv=None,
                  kind: str = "") -> tuple:
    """Run the backend's trivial sandbox (or `argv`, a probe of one of its
    options, cached under its `kind`); (passed, detail) or, failed,
    (False, the observed cause, its fix) from backends/hints.py."""
    from agent_sandbox.backends import BACKENDS
    from agent_sandbox.config.load import load_cache, store_cache

    features = program_features(name, path, home)
    argv = list(argv or BACKENDS[name].probe_argv(path, features))
    inputs = _probe_inputs(name, path, argv) + (kind, tuple(argv))
    cache = _probe_cache(f"{name}-{kind}" if kind else name, home)
    cached = load_cache(cache, inputs)
    if isinstance(cached, tuple) and len(cached) == 2 and cached[0] is True:
        return cached
    import subprocess

    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
                                env={"PATH": "/usr/bin:/bin"}, timeout=30)
        output = result.stderr.decode("utf-8", "replace")
        passed = result.returncode == 0
        if not passed and not output.strip():
            output = f"exit status {result.returncode}"
    except subprocess.TimeoutExpired as exc:
        passed, output = False, str(exc)
    except OSError as exc:
        passed, output = False, str(exc)
    if passed:
        # Only a pass is remembered: a failure's cause (a missing library
        # installed since, a sysctl, an AppArmor profile) is not among the
        # inputs, so a remembered failure could outlive it.
        store_cache(cache, inputs, (True, ""))
        return True, ""
    from agent_sandbox.backends.hints import explain

    _rule, cause, fix = explain(output, probe_facts(name, argv[0], features))
    return False, cause, fix

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
    for kind in ("", "private-mounts", "private-mounts-helper"):
        try:
            os.unlink(_probe_cache(f"{backend}-{kind}" if kind else backend, home))
        except OSError:
            pass
