"""The bwrap backend: a Policy becomes a bubblewrap argv.

bubblewrap's protection is entirely determined by its arguments, so this
module is where the sandbox's security lives. It is pure: policy in, Plan out.
The filesystem comes from fsview (mount order included); this module adds the
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

from agent_sandbox.policy.view import mount_ops
from agent_sandbox.policy.resolve import Policy
from agent_sandbox.backends.base import (HELPER_PYTHON, SCOPING_ABI, FdRef, Guarantees, Payload, Plan, fd_hygiene,
                                         helper_argv, scoping)
from agent_sandbox.paths import helper_module

NAME = "bwrap"
# A blanked copy of a home file stands in for it (--ro-bind-data from a descriptor).
BINDS_GENERATED_FILES = True
BWRAP = "bwrap"


def guarantees(policy: Policy, *, landlock_abi: int = 0):
    """(provides, partial, cannot) for this policy on a kernel with the given
    Landlock ABI (scoping is layered in through the helper from ABI 6)."""
    g = Guarantees()
    for name in ("fs.hidden", "fs.write_confined", "fs.protected", "env.scrubbed",
                 "pid.isolated", "slurm.boundary", "self.protected", "tty.safe"):
        g.yes(name)
    g.either("seccomp", policy.seccomp, "SECCOMP=false in the configuration")
    g.either("ipc.isolated", policy.private_ipc, "PRIVATE_IPC=false in the configuration")
    g.either("passwd.filtered", policy.filter_passwd and "/etc" in policy.system_readonly,
             "FILTER_PASSWD=false in the configuration")
    # Outside processes have no PID inside the namespace, so they cannot be
    # named; abstract unix sockets live in the network namespace.
    scoping(g, landlock_abi, signals=(True, ""),
            abstract_unix=(policy.network_isolated,
                           "abstract unix sockets live in the network namespace, shared "
                           "with the host while NETWORK_MODE=open"))
    fd_hygiene(g, policy)
    return g.split()


def _mount_args(ops) -> list:
    args: list = []
    for op in ops:
        kind = op[0]
        if kind in ("ro-bind", "bind", "dev-bind"):
            args += [f"--{kind}", op[1], op[2]]
        elif kind == "tmpfs":
            args += ["--perms", f"{op[2]:04o}", "--tmpfs", op[1]]
        elif kind == "symlink":
            args += ["--symlink", op[1], op[2]]
        elif kind in ("proc", "dev"):
            args += [f"--{kind}", op[1]]
        elif kind == "ro-data":
            args += ["--perms", f"{op[3]:04o}", "--ro-bind-data", FdRef(op[1]), op[2]]
        elif kind == "file":
            args += ["--perms", f"{op[3]:04o}", "--file", FdRef(op[1]), op[2]]
        elif kind == "remount-ro":
            args += ["--remount-ro", op[1]]
        else:  # pragma: no cover - a programming error, never user input
            raise ValueError(f"unknown mount operation {kind}")
    return args


def plan(policy: Policy, command: list[str], *, payloads: dict[str, Payload],
         bwrap_path: str = BWRAP, landlock_abi: int = 0, python: str = HELPER_PYTHON,
         scope_with: str = "spawn") -> Plan:
    """`payloads` carries the data the launcher prepared that is not a pure
    function of the policy (filtered passwd files, seccomp bytes, the marker);
    seeded home files are added here as host paths.

    With Landlock ABI 6 the sandbox is also scoped (abstract unix sockets,
    signals). scope_with="spawn": the launcher applies the scopes to the
    thread that spawns bwrap, so bwrap and everything in it start inside the
    domain at no cost. scope_with="helper": the command starts through the
    helper, which applies them inside the namespaces (a Python start, ~10 ms);
    needed when bwrap is setuid, because the spawning thread's no_new_privs
    would take its privileges. Either way bwrap keeps loading seccomp itself."""
    ops = mount_ops(policy)
    payloads = dict(payloads)
    for index, path in enumerate(policy.home_seeded):
        # dotfile managers make these symlinks; the policy checked the target
        payloads[f"seed-{index}"] = Payload(path=os.path.realpath(path))

    argv: list = [bwrap_path, "--unshare-user", "--unshare-pid", "--unshare-uts",
                  "--unshare-cgroup-try"]
    if policy.private_ipc:
        argv.append("--unshare-ipc")
    if policy.network_isolated:
        argv.append("--unshare-net")
    argv += ["--disable-userns", "--die-with-parent", "--new-session",
             "--json-status-fd", FdRef("status")]
    if policy.seccomp:
        argv += ["--seccomp", FdRef("seccomp")]
    argv += _mount_args(ops)
    argv += ["--chdir", policy.workdir, "--"]
    spawn_ruleset = None
    if landlock_abi >= SCOPING_ABI and scope_with == "helper":
        payloads["landlock"] = Payload(data=landlock_scope(landlock_abi))
        argv += helper_argv(python=python, landlock=True,
                            keep_fds=policy.keep_fds) + list(command)
    else:
        if landlock_abi >= SCOPING_ABI:
            spawn_ruleset = scope_ruleset(landlock_abi)
        # env(1) gives the shell's exit codes: 127 not found, 126 not executable.
        argv += ["/usr/bin/env", "--"] + list(command)

    used = {a.name for a in argv if isinstance(a, FdRef)} - {"status"}
    missing = used - set(payloads)
    if missing:  # pragma: no cover - a programming error
        raise ValueError(f"plan needs payloads it was not given: {sorted(missing)}")
    provides, partial, cannot = guarantees(policy, landlock_abi=landlock_abi)
    return Plan(backend=NAME, argv=tuple(argv),
                payloads={k: v for k, v in payloads.items() if k in used},
                env=dict(policy.env), provides=provides, cannot=cannot, mounts=tuple(ops),
                status_fd="status", partial=partial, spawn_ruleset=spawn_ruleset)


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


def find(path_env: str | None = None) -> str | None:
    for directory in (path_env or os.environ.get("PATH", "/usr/bin:/bin")).split(":"):
        candidate = os.path.join(directory, BWRAP)
        if directory.startswith("/") and os.access(candidate, os.X_OK):
            return candidate
    return None
