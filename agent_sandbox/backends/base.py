"""The backend contract (Backend, PlanContext) and what every backend
produces: a Plan, and the guarantee report.

Every backend answers the same questions in the same order (STYLE.md, "One
shape per backend"): where is its program (find), does a trivial sandbox work
here (probe_argv, run and cached by the launcher), what does it guarantee for
a policy (guarantees), does it refuse the policy (refuse), and what is its
plan (plan, with one signature: what differs between backends travels in a
PlanContext). The backends are instances of this protocol, listed once in
backends.BACKENDS.

A Plan is data: the argv (with FdRef placeholders where a file descriptor
number goes), the payloads those descriptors carry, the environment the
sandbox starts with, and the guarantees provided, partly provided and
missing. The launcher turns payloads into real descriptors and renders the
argv; --dry-run renders it with the placeholder names.

The helper (sandbox_exec.py) is shared by the backends that need code to run
between the sandbox's setup and the command (Landlock, seccomp outside bwrap,
the environment through firejail); helper_argv() is the one place its command
line is built.
"""
from __future__ import annotations

import os
from typing import NamedTuple, Protocol

from agent_sandbox.traits import Traits
from agent_sandbox.names import GUARANTEES as GUARANTEE_TEXT  # noqa: E402
SCOPING_ABI = 6          # Landlock scopes abstract unix sockets and signals
HELPER_PYTHON = "/usr/bin/python3"
# The payload (and FdRef) carrying the helper's Landlock ruleset: helper_argv
# names each after its flag, here --landlock.
RULESET_PAYLOAD = "landlock"


class PlanContext(NamedTuple):   # not a dataclass: dataclasses imports inspect (~4 ms a launch)
    """The facts a plan needs beyond the policy, the command and the payloads:
    about this host and the selected program, gathered by the launcher."""
    program: str                    # the backend's program (landlock: the helper's python)
    landlock_abi: int = 0           # 0: no Landlock
    python: str = ""                # the helper's interpreter (helperpython.py); "": the default's
    # The program is setuid (bwrap: the spawning thread's no_new_privs would
    # take its privileges, so Landlock scoping goes through the helper inside).
    program_setuid: bool = False
    root_entries: tuple[str, ...] | None = None   # os.listdir("/"); None: read it (firejail)
    # The host's mount points (/proc/self/mountinfo), a set or a
    # mountinfo.MountPoints keeping the questions asked; None: read them
    # (bwrap's mount costs).
    host_mounts: object = None
    # Why the backend cannot run in a mount namespace of its own here
    # (bwrap's PRIVATE_MOUNTS probe); "": it can, or it was not asked.
    private_mounts_failure: str = ""
    private_mounts_fix: str = ""    # what to do about it (backends/hints.py)
    # How: "unshare" (util-linux's, 2.35+), "helper" (helper/privmounts.py,
    # where unshare has no --map-current-user).
    private_mounts_via: str = "unshare"
    # This launch's facts, never the Policy's (a compiled Policy is the
    # cache's; these are the plan cache's key, launch/run.py _template):
    # the inherited descriptors the command keeps (--keep-fd and Slurm's
    # PMI_FD, spawn.kept_fds), and whether the launcher relays a
    # pseudo-terminal the command takes as controlling terminal.
    keep_fds: tuple[int, ...] = ()
    terminal: bool = False
    # What the installed program supports (its --version and --help, read
    # by the launcher and cached with the binary's identity,
    # process/select.py program_features); None: unknown, the newest assumed.
    features: "Features | None" = None


class Features(NamedTuple):
    """What an installed backend program supports: its version (a tuple of
    ints, () when it printed none) and the options its --help names. A
    backend asks `has(option, since)`: named in --help, or the version is
    at least `since` (a --help that leaves options out is not taken as the
    program lacking them)."""
    version: tuple = ()
    options: frozenset = frozenset()
    text: str = ""                  # the version line as printed ("bubblewrap 0.4.1")

    def has(self, option: str, since: tuple) -> bool:
        return option in self.options or (bool(self.version) and self.version >= since)

    @property
    def known(self) -> bool:
        return bool(self.version or self.options)


def parse_features(version_text: str, help_text: str) -> Features:
    """Features from a program's --version and --help output (pure)."""
    import re

    line = next((ln.strip() for ln in version_text.splitlines() if ln.strip()), "")
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", line)
    version = tuple(int(x) for x in match.groups(default="0")) if match else ()
    options = frozenset(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9.-]*[a-z0-9])", help_text))
    return Features(version, options, line)


def version_text(version: tuple) -> str:
    return ".".join(str(x) for x in version)


class Backend(Protocol):
    """A sandbox backend: Policy → Plan. Pure but for find (the PATH) and
    plan's look at the tree it carves (policy/view.carve_walk)."""
    name: str
    traits: "Traits"                # what it is (agent_sandbox/traits.py)
    # A blanked copy of a home file can stand in for it (traits.generated_files).
    binds_generated_files: bool

    def find(self, path_env: str | None = None) -> str | None:
        """The backend's program, or None when it is not installed."""

    def probe_argv(self, path: str) -> list[str]:
        """A trivial sandbox with the options every launch relies on."""

    def guarantees(self, policy, *, landlock_abi: int = 0, keep_fds=()) -> tuple:
        """(provides, partial, cannot) for the policy on a kernel with this ABI,
        the command keeping the descriptors `keep_fds`."""

    def refuse(self, policy, *, context: PlanContext) -> None:
        """Raise PolicyError when the backend cannot honour the policy here."""

    def plan(self, policy, command: list[str], payloads: dict, *,
             context: PlanContext) -> "Plan":
        """The Plan; `payloads` carries what the launcher prepared that is not
        a pure function of the policy (seccomp, passwd files, the marker)."""


class FunctionBackend:
    """A Backend made of a backend module's functions (each module ends with
    `BACKEND = FunctionBackend(...)`). find() defaults to a PATH search for
    `program` and refuse() to accepting every policy."""

    def __init__(self, name: str, program: str, *, traits: "Traits",
                 guarantees, plan, probe_argv, find=None, refuse=None) -> None:
        self.name, self.program, self.traits = name, program, traits
        self.binds_generated_files = traits.generated_files
        self.guarantees, self.plan, self.probe_argv = guarantees, plan, probe_argv
        if find is not None:
            self.find = find
        if refuse is not None:
            self.refuse = refuse

    def find(self, path_env: str | None = None) -> str | None:
        """The first `program` on PATH that the user (so no sandbox of theirs)
        cannot have written: it runs outside the sandbox (paths.runnable_outside)."""
        return self.locate(path_env)[0]

    def locate(self, path_env: str | None = None, configured: str = "") -> tuple:
        """(program, "") or (None, why not; "": not on PATH): the admin's `configured` path
        (BWRAP_PATH, FIREJAIL_PATH) when set, else the first `program` on
        PATH that the user cannot have written. A candidate passed over
        because the user can write it is named in the why."""
        from agent_sandbox.paths import runnable_outside

        key = f"{self.name.upper()}_PATH"
        if configured:
            if not os.access(configured, os.X_OK):
                return None, f"{key}={configured} in the admin configuration is not an executable"
            if not runnable_outside(configured):
                return None, (f"{key}={configured} is writable by you (it runs outside the "
                              "sandbox, so a session could replace it)")
            return configured, ""
        skipped = []
        for directory in (path_env or os.environ.get("PATH", "/usr/bin:/bin")).split(":"):
            candidate = os.path.join(directory, self.program)
            if directory.startswith("/") and os.access(candidate, os.X_OK):
                if runnable_outside(candidate):
                    return candidate, ""
                if candidate not in skipped:
                    skipped.append(candidate)
        if skipped:
            return None, (f"not found on PATH but for {', '.join(skipped)}, skipped: you can "
                          "write it (it runs outside the sandbox, so a session could replace "
                          f"it) — have it installed root-owned, or the admin name one with {key}")
        return None, ""

    def refuse(self, policy, *, context: PlanContext) -> None:
        return None



# fs.write_confined's gap where the host's mount propagation reaches the
# sandbox (bwrap without PRIVATE_MOUNTS, firejail): the reason follows.
PROPAGATION_GAP = ("a mount the host makes below a read-only path after the start (an "
                   "automount, a FUSE mount) is writable inside if the host's is: ")


class Guarantees:
    """Collects yes / partial / no per guarantee, in GUARANTEE_TEXT order."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, str]] = {}

    def yes(self, name: str) -> None:
        self.rows[name] = ("yes", "")

    def partial(self, name: str, why: str) -> None:
        self.rows[name] = ("partial", why)

    def no(self, name: str, why: str) -> None:
        self.rows[name] = ("no", why)

    def either(self, name: str, ok: bool, why: str) -> None:
        self.yes(name) if ok else self.no(name, why)

    def split(self):
        """(provides, partial, cannot) as the Plan carries them."""
        order = [g for g in GUARANTEE_TEXT if g in self.rows]
        provides = tuple(g for g in order if self.rows[g][0] == "yes")
        partial = tuple((g, self.rows[g][1]) for g in order if self.rows[g][0] == "partial")
        cannot = tuple((g, self.rows[g][1]) for g in order if self.rows[g][0] == "no")
        return provides, partial, cannot


def self_protection(g: Guarantees, policy) -> None:
    """self.protected: every backend keeps the install (readonly_overlays)
    and the user config tree read-only inside, even below a writable grant.
    Two ways around that are reported, each naming what and the fix:
    - a file of the install with another name (a hard link: uv links
      installs from its cache) is read-only only by that path
      (services/linkcheck.py install_links, docs/install.md);
    - what runs *before* the next sandbox is more than the install: the
      entry point the shell finds (a pip --user script or a pipx / uv tool
      link in ~/.local/bin), its target, the interpreter. One of them in a
      writable grant (HOME_ACCESS=write makes all of the home one) and not
      below a read-only overlay is writable inside."""
    from agent_sandbox.paths import is_within
    from agent_sandbox.policy.view import ViewBuilder

    gaps = []
    count, sample = policy.install_links or (0, ())
    if count:
        gaps.append(f"{count} file(s) of the install have another name (hard links, e.g. "
                    f"{sample[0] if sample else '?'}): read-only inside by their path, not "
                    "their inode — a write through a name the sandbox can reach elsewhere "
                    "changes the launcher. Reinstall it as copies (UV_LINK_MODE=copy; "
                    "docs/install.md)")
    launcher = policy.launcher_paths
    # Each grant by its name and by its real path: the launcher paths are
    # resolved, and a grant named through a symlink writes its target.
    roots = tuple(dict.fromkeys(name for root in ViewBuilder(policy).writable_roots()
                                for name in (root, os.path.realpath(root)))) if launcher else ()
    exposed = [p for p in launcher
               if any(is_within(p, r) for r in roots)
               and not any(is_within(p, o) for o in policy.readonly_overlays)]
    if exposed:
        why = ("HOME_ACCESS=write" if policy.home_access == "write"
               and any(is_within(p, policy.home) for p in exposed) else "a writable path")
        gaps.append(f"{', '.join(exposed)} (what your next `agent-sandbox` runs first) is "
                    f"writable inside ({why}): a session could change it. Install "
                    "agent-sandbox outside the writable trees (a site or /opt install), or use "
                    "HOME_ACCESS=read or tmpwrite")
    if gaps:
        g.partial("self.protected", "; ".join(gaps))
    else:
        g.yes("self.protected")


def metadata_guarantee(g: Guarantees) -> None:
    """metadata.confined on a backend with a mount view: what is not
    writable inside is a read-only mount (chmod, chown, utime and the xattr
    calls answer EROFS) or not there at all (hidden), so metadata follows
    fs.write_confined exactly — call it after that row is set."""
    state, why = g.rows.get("fs.write_confined", ("no", "fs.write_confined is not given"))
    if state == "yes":
        g.yes("metadata.confined")
    else:
        (g.partial if state == "partial" else g.no)(
            "metadata.confined", "read-only mounts refuse chmod, chown, utime and xattr "
            "changes, with the same gap as fs.write_confined: " + why)


def fd_hygiene(g: Guarantees, kept: tuple) -> None:
    """fd.clean: the launcher marks every descriptor it did not open close-on-exec
    and the helper closes the rest before exec; `--keep-fd N` is the only way
    in, so the report names what was kept (`kept`: PlanContext.keep_fds)."""
    if kept:
        g.partial("fd.clean", "kept by --keep-fd: " + " ".join(map(str, kept)))
    else:
        g.yes("fd.clean")


def scoping(g: Guarantees, abi: int, *, abstract_unix: tuple[bool, str] | None = None,
            signals: tuple[bool, str] | None = None) -> None:
    """abstract_unix.scoped / signals.scoped: Landlock scoping when the ABI has
    it, else what the backend itself gives (ok, why-not)."""
    for name, own in (("abstract_unix.scoped", abstract_unix), ("signals.scoped", signals)):
        if abi >= SCOPING_ABI:
            g.yes(name)
        elif own and own[0]:
            g.yes(name)
        else:
            why = own[1] if own else ""
            g.no(name, (why + "; " if why else "") +
                 f"Landlock scoping needs ABI {SCOPING_ABI}, this kernel has "
                 f"{abi if abi else 'no Landlock'}")


def namespace_scoping(g: Guarantees, policy, abi: int) -> None:
    """scoping() for a backend with a PID and (unless the network is open) a
    network namespace: outside processes have no PID inside, so they cannot be
    named; abstract unix sockets live in the network namespace."""
    scoping(g, abi, signals=(True, ""),
            abstract_unix=(own_network(policy),
                           "abstract unix sockets live in the network namespace, shared "
                           "with the host while NETWORK_MODE=open"))


def socket_guarantee(g: Guarantees, policy, *, extra: tuple[str, ...] = ()) -> None:
    """unix_sockets.confined on a backend with a mount view: the sockets in
    the trees shown from the home (and the resolver's where no name may
    resolve) do not exist inside; what is shown unsearched is named
    (policy/sockets.py), `extra`: what the backend itself keeps. Never
    more than partial: a bind shows sockets the host makes after the start."""
    from agent_sandbox.policy.sockets import report

    g.partial("unix_sockets.confined", report(policy, extra=extra))


def own_network(policy) -> bool:
    """bwrap and firejail give the sandbox a network namespace of its own
    (only loopback) unless NETWORK_MODE=open."""
    return policy.network_mode != "open" or policy.network_isolated


def egress_guarantee(g: Guarantees, policy) -> None:
    """net.egress_filtered on a backend with a network namespace: isolated has
    no network, allowlist only the relay to the egress proxy."""
    mode = policy.network_mode
    if mode == "open" and not policy.network_isolated:
        g.no("net.egress_filtered", "NETWORK_MODE=open: every host is reachable (set "
             "NETWORK_MODE=allowlist)")
    else:
        g.yes("net.egress_filtered")


def relay_args(policy) -> tuple:
    """The helper's --relay PORT SOCKET for the relay inside (allowlist mode),
    with the socket as the sandbox sees it."""
    if policy.egress_socket is None:
        return ()
    from agent_sandbox.names import EGRESS_SOCKET

    inside = EGRESS_SOCKET if policy.backend == "bwrap" else policy.egress_socket
    return (policy.relay_port, inside)


# The helper is imported rather than run as a script: a script is compiled on
# every start (~4 ms), an imported module comes from its cached bytecode.
HELPER_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); import sandbox_exec; "
               "sys.exit(sandbox_exec.main(sys.argv[2:]))")


def helper_path() -> str:
    from agent_sandbox.paths import helper_path as path

    return path("sandbox_exec")


def helper_command(python: str = HELPER_PYTHON) -> list[str]:
    """How the helper starts: isolated (-I: no PYTHON* variables, no user
    site, no script directory on sys.path) and without site (-S)."""
    return [python, "-I", "-S", "-c", HELPER_BOOT, os.path.dirname(helper_path())]


def helper_argv(*, python: str = HELPER_PYTHON, env: bool = False, landlock: bool = False,
                seccomp: bool = False, seeds=(), chdir: str | None = None,
                new_session: bool = False, controlling_tty: bool = False,
                lifeline: bool = False,
                status: bool = False, pid_namespace: bool = False,
                argv_fd: bool = False, cleanup: str | None = None,
                keep_fds=(), relay=(), notify: bool = False) -> list:
    """The helper's command line up to (and including) the `--` before the
    command. Payload names: env, landlock, seccomp, seed-N, lifeline, status,
    argv (the command itself, when the backend limits its own argv).
    `pid_namespace`: the helper runs in a PID namespace of its own, so its
    watcher may clear the whole namespace when the command exits.
    `keep_fds`: inherited descriptors the command keeps (--keep-fd); every
    other one above stderr is closed before exec. `controlling_tty`: stdin is
    the launcher's relayed pseudo-terminal, taken as controlling terminal in
    a new session (job control). `relay`: (port, socket) of the egress relay
    started before the command (relay_args)."""
    argv: list = helper_command(python)
    for flag, wanted in (("--env", env), ("--landlock", landlock), ("--seccomp", seccomp),
                         ("--lifeline", lifeline), ("--status", status), ("--argv", argv_fd)):
        if wanted:
            argv += [flag, FdRef(flag[2:])]
    if notify:
        argv += ["--notify", FdRef("notify"), FdRef("supervise")]
    for name, path in seeds:
        argv += ["--seed", FdRef(name), path]
    if chdir:
        argv += ["--chdir", chdir]
    if controlling_tty:
        argv.append("--controlling-tty")
    elif new_session:
        argv.append("--new-session")
    if pid_namespace:
        argv.append("--pid-namespace")
    if cleanup:
        argv += ["--cleanup", cleanup]
    for fd in keep_fds:
        argv += ["--keep-fd", str(fd)]
    if relay:
        argv += ["--relay", str(relay[0]), relay[1]]
    return argv + ["--"]


def env_payload(env: dict) -> "Payload":
    """The command's environment for `--env` (NUL-separated NAME=VALUE)."""
    return Payload(data=b"\0".join(os.fsencode(f"{k}={v}") for k, v in env.items()))


def argv_payload(command) -> "Payload":
    """The command for `--argv` (NUL-separated arguments)."""
    return Payload(data=b"\0".join(os.fsencode(a) for a in command))


class FdRef(NamedTuple):
    """Where a payload's file descriptor number goes in the argv (after
    `prefix`, for options such as --profile=/proc/self/fd/N)."""
    name: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"{self.prefix}<fd:{self.name}>"


class Payload(NamedTuple):
    """Bytes handed to the backend through a file descriptor: literal data, or
    the contents of a host file the launcher opens (seeded home files); or
    `fd`, a descriptor the launcher opened and checked already (a landlock
    job's shared-memory directory), handed on as a duplicate."""
    data: bytes | None = None
    path: str | None = None
    fd: int | None = None


class Plan(NamedTuple):
    backend: str
    argv: tuple                     # str | FdRef
    payloads: dict                  # name → Payload
    env: dict                       # never printed: it holds API keys
    provides: tuple[str, ...]
    cannot: tuple[tuple[str, str], ...]   # (guarantee, why not)
    mounts: tuple = ()              # the ordered view, for --dry-run
    status_fd: str | None = None    # payload-less fd the backend reports status on
    partial: tuple[tuple[str, str], ...] = ()   # (guarantee, what is missing)
    notes: tuple[str, ...] = ()     # where the backend does the policy differently
    # The key of the JSON status document that proves the command was reached
    # (else a failure is the backend's, reported as 125): bwrap's exit-code
    # (its --json-status-fd, which also reports child-pid), the helper's
    # helper-exec.
    started: str = "exit-code"
    lifeline_fd: str | None = None  # read end of a pipe the launcher holds open
    # A descriptor the sandbox's init keeps open for the sandbox's whole life
    # (never the command's): the launcher's session lock, services/registry.py hold.
    hold_fd: str | None = None
    scratch_dirs: tuple[str, ...] = ()   # created 0700 before the launch, removed after
    own_session: bool = False       # the helper calls setsid(): spawn without a new group
    view_title: str = "mounts in order"   # what `mounts` lists, for --dry-run
    chosen_because: str = ""        # why this backend (set by the launcher)
    # A Landlock ruleset (landlock.ruleset) the launcher applies to the thread
    # that spawns the backend, so the whole sandbox starts inside the domain.
    spawn_ruleset: dict | None = None
    # The landlock supervisor's rules (process/supervisor.py Rules.from_plan):
    # the helper loads the "notify" payload and reports its listener on the
    # payload-less descriptor "supervise"; None: no supervisor.
    supervise: dict | None = None

    def __repr__(self) -> str:
        return f"Plan(backend={self.backend!r}, argv={self.argv!r})"

    def missing(self, required) -> tuple[str, ...]:
        """Required guarantees not fully provided (partial is not enough)."""
        return tuple(g for g in required if g not in self.provides)
