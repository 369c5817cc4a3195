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
                                         own_network, relay_args, socket_guarantee)
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
PRIVATE_MOUNTS = ("/usr/bin/unshare", "--user", "--map-current-user", "--mount",
                  "--propagation", "private", "--")


def guarantees(policy: Policy, *, landlock_abi: int = 0, setuid: bool = False, keep_fds=()):
    """(provides, partial, cannot) for this policy on a kernel with the given
    Landlock ABI (scoping is layered in through the helper from ABI 6) and
    for a bwrap that is `setuid` or not."""
    g = Guarantees()
    for name in ("fs.hidden", "fs.write_confined", "fs.protected", "env.scrubbed",
                 "pid.isolated", "slurm.boundary", "tty.safe"):
        g.yes(name)
    if not policy.private_mounts:
        g.partial("fs.write_confined", PROPAGATION_GAP + "PRIVATE_MOUNTS=false")
    elif setuid:
        g.partial("fs.write_confined", PROPAGATION_GAP + "a setuid bwrap keeps the host's "
                  "mount propagation (install it without the setuid bit)")
    g.either("seccomp", policy.seccomp, "SECCOMP=false in the configuration")
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


def _mount_args(ops) -> list:
    args: list = []
    for op in ops:
        if isinstance(op, (RoBind, Bind, DevBind)):
            args += [f"--{op.kind}", op.src, op.dest]
        elif isinstance(op, Tmpfs):
            args += ["--perms", f"{op.mode:04o}", "--tmpfs", op.dest]
        elif isinstance(op, Symlink):
            args += ["--symlink", op.target, op.dest]
        elif isinstance(op, (Proc, Dev)):
            args += [f"--{op.kind}", op.dest]
        elif isinstance(op, Data):
            args += ["--perms", f"{op.mode:04o}", "--ro-bind-data", FdRef(op.payload), op.dest]
        elif isinstance(op, File):
            args += ["--perms", f"{op.mode:04o}", "--file", FdRef(op.payload), op.dest]
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
    payloads = dict(payloads)
    for index, path in enumerate(policy.home_seeded):
        # dotfile managers make these symlinks; the policy checked the target
        payloads[f"seed-{index}"] = Payload(path=os.path.realpath(path))

    private_mounts = policy.private_mounts and not context.program_setuid
    argv: list = [*(PRIVATE_MOUNTS if private_mounts else ()), context.program,
                  "--unshare-user", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if policy.private_ipc:
        argv.append("--unshare-ipc")
    if own_network(policy):
        argv.append("--unshare-net")     # only loopback (bwrap brings it up)
    # --sync-fd: bwrap's init keeps the launcher's session lock open while the
    # sandbox lives, also when the launcher was SIGKILLed before init armed
    # its parent-death signal (services/registry.py hold).
    argv += ["--disable-userns", "--die-with-parent", "--new-session",
             "--json-status-fd", FdRef("status"), "--sync-fd", FdRef("hold")]
    if policy.seccomp:
        argv += ["--seccomp", FdRef("seccomp")]
    argv += _mount_args(ops)
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
                                           keep_fds=context.keep_fds)
    return Plan(backend=NAME, argv=tuple(argv),
                payloads={k: v for k, v in payloads.items() if k in used},
                env=dict(policy.env), provides=provides, cannot=cannot, mounts=tuple(ops),
                status_fd="status", partial=partial, spawn_ruleset=spawn_ruleset,
                lifeline_fd="lifeline" if relay else None, hold_fd="hold")


def scope_ruleset(abi: int) -> dict:
    """A ruleset that handles no filesystem or network access, only the
    scopes: the namespaces already give the filesystem view."""
    landlock = helper_module("landlock")

    return landlock.ruleset(abi, scoped=landlock.SCOPE_ABSTRACT_UNIX | landlock.SCOPE_SIGNAL)


def landlock_scope(abi: int) -> bytes:
    """scope_ruleset as the helper's --landlock payload."""
    return marshal.dumps(scope_ruleset(abi))


def probe_argv(path: str = BWRAP) -> list[str]:
    """A trivial sandbox with the namespaces and options a real launch needs."""
    return [path, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--disable-userns", "--ro-bind", "/", "/",
            "--die-with-parent", "--new-session", "--", "/bin/true"]


def private_mounts_probe_argv(path: str = BWRAP) -> list[str]:
    """The probe behind PRIVATE_MOUNTS: where unprivileged user namespaces are
    allowed for bwrap but not for util-linux's unshare (an AppArmor policy),
    bwrap works and PRIVATE_MOUNTS cannot."""
    return list(PRIVATE_MOUNTS) + probe_argv(path)


def refuse(policy: Policy, *, context: PlanContext) -> None:
    if policy.private_mounts and not context.program_setuid and context.private_mounts_failure:
        raise PolicyError(
            "PRIVATE_MOUNTS=true, but bwrap cannot run in a mount namespace of its own here "
            f"(`unshare --user --mount` failed: {context.private_mounts_failure}). Set "
            "PRIVATE_MOUNTS=false in ~/.config/agent-sandbox/sandbox.conf (mounts the host "
            "makes after the start then appear inside: fs.write_confined partial), use "
            "--backend landlock, or ask your admin to allow unprivileged user namespaces "
            "for /usr/bin/unshare.", reason="private_mounts_unavailable")


# A blanked copy of a home file stands in for it (--ro-bind-data from a descriptor).
BACKEND = FunctionBackend(NAME, BWRAP, traits=TRAITS[NAME], guarantees=guarantees,
                          plan=plan, probe_argv=probe_argv, refuse=refuse)
BACKEND.private_mounts_probe_argv = private_mounts_probe_argv
