"""The bwrap backend: a Policy becomes a bubblewrap argv.

bubblewrap's protection is entirely determined by its arguments, so this
module is where the sandbox's security lives. It is pure: policy in, Plan out.
The filesystem comes from fsview (mount order included), made cheaper for
bwrap without changing it (policy/mountcost.py); this module adds the
namespaces, the process options and the file-descriptor payloads (seccomp
filter, filtered passwd files, the session marker, seeded home files).

Secrets never go into the argv: /proc/PID/cmdline is world-readable on most
login nodes, so the environment reaches the sandbox through execve's envp
(the launcher starts bwrap with exactly the scrubbed environment) rather than
through --setenv.
"""
from __future__ import annotations

import marshal
import os

from agent_sandbox.traits import TRAITS
from agent_sandbox.backends.base import HELPER_PYTHON
from agent_sandbox.backends.base import (PROPAGATION_GAP, SCOPING_ABI, FdRef,
                                         FunctionBackend, Guarantees,
                                         Payload, Plan, PlanContext, egress_guarantee,
                                         fd_hygiene, metadata_guarantee, helper_argv,
                                         namespace_scoping,
                                         self_protection,
                                         own_network, relay_args, socket_guarantee,
                                         version_text)
from agent_sandbox.errors import PolicyError
from agent_sandbox.paths import helper_module
from agent_sandbox.policy.mountcost import economize
from agent_sandbox.policy.resolve import Policy
from agent_sandbox.policy.view import (Bind, Data, Dev, DevBind, File, Proc, RemountRo, RoBind,
                                       Symlink, Tmpfs, mount_ops)

NAME = "bwrap"
BWRAP = "bwrap"
# bubblewrap makes the sandbox's mounts slaves of the host's ("so that we
# still receive mounts from the real root"): on a host whose / is shared
# (every systemd host) a mount made there after the start — an automount the
# agent triggers by looking below an autofs directory under READONLY_MOUNTS,
# a FUSE mount — appears inside with the host's flags, writable. bwrap 0.8
# has no option against it, so with PRIVATE_MOUNTS it runs in a user and
# mount namespace of its own whose mounts are private: nothing propagates
# into what it copies (util-linux's unshare, mapping the user to itself;
# bwrap nests its own namespaces inside as before). The price: an automount
# not yet mounted at the start answers ELOOP inside. A setuid bwrap keeps the
# host's propagation: in a user namespace it would lose its privileges.
# The oldest bubblewrap the plans are compiled for, and the options they use
# that came later (the version that brought each: bubblewrap's NEWS). Every
# other option of a plan is in 0.4.0. Without --disable-userns the seccomp
# filter refuses new user namespaces (USERNS_DENY in policy/seccomp.py);
# without --perms tmpfs, generated and copied files get bwrap's own modes.
MIN_VERSION = (0, 4, 0)
SINCE = {"--disable-userns": (0, 8, 0), "--perms": (0, 5, 0)}


def supports(features, option: str) -> bool:
    """Whether the installed bwrap (base.Features; None: unknown, the newest
    assumed) has `option`."""
    from agent_sandbox.backends.base import has_option

    return features is None or has_option(features, option, SINCE[option])


def needs_userns_filter(features) -> bool:
    """The seccomp filter must refuse nested user namespaces itself."""
    return not supports(features, "--disable-userns")


def too_old(features) -> str:
    """Why the installed bwrap cannot run any plan ("" when it can)."""
    if features is not None and features.version and features.version < MIN_VERSION:
        return (f"{features.text or 'bubblewrap ' + version_text(features.version)} is too old: "
                f"the sandbox needs bubblewrap {version_text(MIN_VERSION)} or newer")
    return ""


PRIVATE_MOUNTS = ("/usr/bin/unshare", "--user", "--map-current-user", "--mount",
                  "--propagation", "private", "--")


def private_mounts(unshare: str = PRIVATE_MOUNTS[0], helper_python: str = "") -> list:
    """PRIVATE_MOUNTS with the unshare the admin names (UNSHARE_PATH); with
    `helper_python`, the helper that does the same where unshare has no
    --map-current-user (util-linux < 2.35: helper/privmounts.py)."""
    if helper_python:
        from agent_sandbox.paths import helper_path

        return [helper_python, "-I", "-S", helper_path("privmounts"), "--"]
    return [unshare or PRIVATE_MOUNTS[0], *PRIVATE_MOUNTS[1:]]


def guarantees(policy: Policy, *, landlock_abi: int = 0, setuid: bool = False, keep_fds=(),
               features=None):
    """(provides, partial, cannot) for this policy on a kernel with the given
    Landlock ABI (scoping is layered in through the helper from ABI 6), for
    a bwrap that is `setuid` or not, of the version `features` says."""
    g = Guarantees()
    for name in ("fs.hidden", "fs.write_confined", "fs.protected", "env.scrubbed",
                 "pid.isolated", "slurm.boundary", "tty.safe"):
        g.yes(name)
    if not policy.private_mounts:
        g.partial("fs.write_confined", PROPAGATION_GAP + "PRIVATE_MOUNTS=false")
    elif setuid:
        g.partial("fs.write_confined", PROPAGATION_GAP + "a setuid bwrap keeps the host's "
                  "mount propagation (install it without the setuid bit)")
    nested = "" if supports(features, "--disable-userns") else (
        f" (and {_name(features)} has no --disable-userns (0.8.0), which the filter stands "
        "in for: nested user namespaces are allowed)")
    g.either("seccomp", policy.seccomp, "SECCOMP=false in the configuration" + nested)
    g.either("ipc.isolated", policy.private_ipc, "PRIVATE_IPC=false in the configuration")
    g.either("passwd.filtered", policy.filter_passwd and "/etc" in policy.system_readonly,
             "FILTER_PASSWD=false in the configuration")
    namespace_scoping(g, policy, landlock_abi)
    socket_guarantee(g, policy)
    egress_guarantee(g, policy)
    self_protection(g, policy)
    metadata_guarantee(g)
    fd_hygiene(g, keep_fds)
    return g.split()


def _name(features) -> str:
    if features is not None and features.text:
        return features.text
    if features is not None and features.version:
        return f"bubblewrap {version_text(features.version)}"
    return "this bubblewrap"


def _without_perms(ops) -> list:
    """The view for a bwrap without --perms (before 0.5.0): an executable
    generated file (the Slurm stub) cannot be made, so its place is a
    symlink to the stub the chaperon's session directory holds
    (services/chaperon.py writes it with its mode); every other mode is
    bwrap's own (PERMS_NOTE)."""
    from chaperon.wire.session import BIN_DIR, SANDBOX_DIR

    return [Symlink(f"{SANDBOX_DIR}/{BIN_DIR}/.stub", op.dest)
            if isinstance(op, Data) and op.mode & 0o111 and op.payload == "stub" else op
            for op in ops]


def perms_note(features) -> str:
    return (f"{_name(features)} has no --perms (0.5.0): its tmpfs directories are 0755 (/tmp "
            "and /dev/shm not 1777, the home not 0700), generated read-only files 0600 and "
            "copied files 0666 — only your own uid is mapped inside, so these modes give no "
            "one else access; the Slurm stubs run from the session directory")


def _mount_args(ops, perms: bool = True) -> list:
    args: list = []
    for op in ops:
        mode = ["--perms", f"{op.mode:04o}"] if perms and hasattr(op, "mode") else []
        if isinstance(op, (RoBind, Bind, DevBind)):
            args += [f"--{op.kind}", op.src, op.dest]
        elif isinstance(op, Tmpfs):
            args += [*mode, "--tmpfs", op.dest]
        elif isinstance(op, Symlink):
            args += ["--symlink", op.target, op.dest]
        elif isinstance(op, (Proc, Dev)):
            args += [f"--{op.kind}", op.dest]
        elif isinstance(op, Data):
            args += [*mode, "--ro-bind-data", FdRef(op.payload), op.dest]
        elif isinstance(op, File):
            args += [*mode, "--file", FdRef(op.payload), op.dest]
        elif isinstance(op, RemountRo):
            args += ["--remount-ro", op.dest]
        else:  # pragma: no cover - a programming error, never user input
            raise ValueError(f"unknown mount operation {op!r}")
    return args


def plan(policy: Policy, command: list[str], payloads: dict[str, Payload], *,
         context: PlanContext) -> Plan:
    """`payloads` carries the data the launcher prepared that is not a pure
    function of the policy (filtered passwd files, seccomp bytes, the marker);
    seeded home files are added here as host paths.

    With Landlock ABI 6 the sandbox is also scoped (abstract unix sockets,
    signals). Normally the launcher applies the scopes to the
    thread that spawns bwrap, so bwrap and everything in it start inside the
    domain at no cost. For a setuid bwrap (context.program_setuid) the
    command starts through the helper instead, which applies them inside the namespaces (a Python start, ~10 ms);
    because the spawning thread's no_new_privs would take bwrap's privileges.
    Either way bwrap keeps loading seccomp itself."""
    landlock_abi, python = context.landlock_abi, context.python or HELPER_PYTHON
    scope_with = "helper" if context.program_setuid else "spawn"
    # The same view with fewer and cheaper mounts (bwrap rereads the mount
    # table at every bind): policy/mountcost.py.
    ops = economize(mount_ops(policy), context.host_mounts)
    features = context.features
    perms = supports(features, "--perms")
    if not perms:
        ops = _without_perms(ops)
    payloads = dict(payloads)
    for index, path in enumerate(policy.home_seeded):
        # dotfile managers make these symlinks; the policy checked the target
        payloads[f"seed-{index}"] = Payload(path=os.path.realpath(path))

    private = policy.private_mounts and not context.program_setuid
    via_helper = python if context.private_mounts_via == "helper" else ""
    argv: list = [*(private_mounts(policy.unshare, via_helper) if private else ()),
                  context.program,
                  "--unshare-user", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if policy.private_ipc:
        argv.append("--unshare-ipc")
    if own_network(policy):
        argv.append("--unshare-net")     # only loopback (bwrap brings it up)
    # --sync-fd: bwrap's init keeps the launcher's session lock open while the
    # sandbox lives, also when the launcher was SIGKILLed before init armed
    # its parent-death signal (services/registry.py hold).
    if supports(features, "--disable-userns"):
        argv.append("--disable-userns")
    argv += ["--die-with-parent", "--new-session",
             "--json-status-fd", FdRef("status"), "--sync-fd", FdRef("hold")]
    if policy.seccomp:
        argv += ["--seccomp", FdRef("seccomp")]
    argv += _mount_args(ops, perms)
    argv += ["--chdir", policy.workdir, "--"]
    spawn_ruleset = None
    helper_scopes = landlock_abi >= SCOPING_ABI and scope_with == "helper"
    relay = relay_args(policy)
    if helper_scopes or context.terminal or relay:
        # A relayed terminal needs setsid + TIOCSCTTY inside (bwrap's own
        # --new-session leaves the command in init's session), the egress
        # relay must listen before the command starts: the helper.
        if helper_scopes:
            payloads["landlock"] = Payload(data=landlock_scope(landlock_abi))
        elif landlock_abi >= SCOPING_ABI:
            spawn_ruleset = scope_ruleset(landlock_abi)
        # With the relay, a lifeline too: bwrap's inner process binds itself
        # to the outer one (--die-with-parent) only right before exec, so a
        # launcher killed during bwrap's setup would leave sandbox and relay
        # running; the helper's watcher sees the launcher gone and ends them.
        argv += helper_argv(python=python, landlock=helper_scopes,
                            controlling_tty=context.terminal, lifeline=bool(relay),
                            keep_fds=context.keep_fds, relay=relay) + list(command)
    else:
        if landlock_abi >= SCOPING_ABI:
            spawn_ruleset = scope_ruleset(landlock_abi)
        # env(1) gives the shell's exit codes: 127 not found, 126 not executable.
        argv += ["/usr/bin/env", "--"] + list(command)

    used = {a.name for a in argv if isinstance(a, FdRef)} - {"status", "lifeline", "hold"}
    missing = used - set(payloads)
    if missing:  # pragma: no cover - a programming error
        raise ValueError(f"plan needs payloads it was not given: {sorted(missing)}")
    provides, partial, cannot = guarantees(policy, landlock_abi=landlock_abi,
                                           setuid=context.program_setuid,
                                           keep_fds=context.keep_fds, features=features)
    return Plan(backend=NAME, argv=tuple(argv),
                payloads={k: v for k, v in payloads.items() if k in used},
                env=dict(policy.env), provides=provides, cannot=cannot, mounts=tuple(ops),
                status_fd="status", partial=partial, spawn_ruleset=spawn_ruleset,
                lifeline_fd="lifeline" if relay else None, hold_fd="hold",
                notes=() if perms else (perms_note(features),))


def scope_ruleset(abi: int) -> dict:
    """A ruleset that handles no filesystem or network access, only the
    scopes: the namespaces already give the filesystem view."""
    landlock = helper_module("landlock")

    return landlock.ruleset(abi, scoped=landlock.SCOPE_ABSTRACT_UNIX | landlock.SCOPE_SIGNAL)


def landlock_scope(abi: int) -> bytes:
    """scope_ruleset as the helper's --landlock payload."""
    return marshal.dumps(scope_ruleset(abi))


def probe_argv(path: str = BWRAP, features=None) -> list[str]:
    """A trivial sandbox with the namespaces and options a real launch
    needs, for the version `features` says."""
    return [path, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try",
            *(("--disable-userns",) if supports(features, "--disable-userns") else ()),
            "--ro-bind", "/", "/", "--die-with-parent", "--new-session", "--", "/bin/true"]


def private_mounts_probe_argv(path: str = BWRAP, features=None,
                              unshare: str = PRIVATE_MOUNTS[0],
                              helper_python: str = "") -> list[str]:
    """The probe behind PRIVATE_MOUNTS: where unprivileged user namespaces are
    allowed for bwrap but not for util-linux's unshare (an AppArmor policy),
    bwrap works and PRIVATE_MOUNTS cannot. With `helper_python`: the
    helper's way, for an unshare older than 2.35."""
    return private_mounts(unshare, helper_python) + probe_argv(path, features)


def refuse(policy: Policy, *, context: PlanContext) -> None:
    old = too_old(context.features)
    if old:
        raise PolicyError(f"bwrap at {context.program} cannot be used — {old}. Install a "
                          "newer bubblewrap, name it with BWRAP_PATH in the admin "
                          "configuration, or use --backend landlock.",
                          reason="backend_too_old")
    if policy.private_mounts and not context.program_setuid and context.private_mounts_failure:
        fix = context.private_mounts_fix or (
            "ask your admin to allow unprivileged user namespaces for /usr/bin/unshare")
        if "PRIVATE_MOUNTS=false" not in fix:
            fix += (". Or set PRIVATE_MOUNTS=false (in ~/.config/agent-sandbox/sandbox.conf or "
                    "the environment; mounts the host makes after the start then appear "
                    "inside: fs.write_confined partial)")
        raise PolicyError(
            "PRIVATE_MOUNTS=true, but bwrap cannot run in a mount namespace of its own here "
            f"(`unshare --user --mount` failed: {context.private_mounts_failure}) — "
            f"{fix}; or use --backend landlock.", reason="private_mounts_unavailable")


# A blanked copy of a home file stands in for it (--ro-bind-data from a descriptor).
BACKEND = FunctionBackend(NAME, BWRAP, traits=TRAITS[NAME], guarantees=guarantees,
                          plan=plan, probe_argv=probe_argv, refuse=refuse)
BACKEND.private_mounts_probe_argv = private_mounts_probe_argv
BACKEND.needs_userns_filter = needs_userns_filter
