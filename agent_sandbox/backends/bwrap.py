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

import os

from ..fsview import mount_ops
from ..policy import Policy
from .base import GUARANTEE_TEXT, FdRef, Payload, Plan

NAME = "bwrap"
BWRAP = "bwrap"


def guarantees(policy: Policy) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    provides = ["fs.hidden", "fs.write_confined", "env.scrubbed", "pid.isolated",
                "slurm.boundary", "self.protected", "tty.safe"]
    cannot: list[tuple[str, str]] = []

    def either(name: str, ok: bool, why: str) -> None:
        if ok:
            provides.append(name)
        else:
            cannot.append((name, why))

    either("seccomp", policy.seccomp, "SECCOMP=false in the configuration")
    either("ipc.isolated", policy.private_ipc, "PRIVATE_IPC=false in the configuration")
    either("passwd.filtered", policy.filter_passwd and "/etc" in policy.system_readonly,
           "FILTER_PASSWD=false in the configuration")
    # Outside processes have no PID inside the namespace, so they cannot be named.
    provides.append("signals.scoped")
    either("abstract_unix.scoped", policy.network_isolated,
           "abstract unix sockets live in the network namespace, shared with the host "
           "while NETWORK_MODE=open (Landlock scoping is not layered in yet)")
    order = list(GUARANTEE_TEXT)
    return tuple(sorted(provides, key=order.index)), tuple(cannot)


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
         bwrap_path: str = BWRAP) -> Plan:
    """`payloads` carries the data the launcher prepared that is not a pure
    function of the policy (filtered passwd files, seccomp bytes, the marker);
    seeded home files are added here as host paths."""
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
    # env(1) gives the shell's exit codes: 127 not found, 126 not executable.
    argv += ["/usr/bin/env", "--"] + list(command)

    used = {a.name for a in argv if isinstance(a, FdRef)} - {"status"}
    missing = used - set(payloads)
    if missing:  # pragma: no cover - a programming error
        raise ValueError(f"plan needs payloads it was not given: {sorted(missing)}")
    provides, cannot = guarantees(policy)
    return Plan(backend=NAME, argv=tuple(argv),
                payloads={k: v for k, v in payloads.items() if k in used},
                env=dict(policy.env), provides=provides, cannot=cannot, mounts=tuple(ops),
                status_fd="status")


def probe_argv() -> list[str]:
    """A trivial sandbox with the namespaces a real launch needs."""
    return [BWRAP, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--ro-bind", "/", "/", "--die-with-parent", "--", "/bin/true"]


def find() -> str | None:
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
        candidate = os.path.join(directory, BWRAP)
        if directory.startswith("/") and os.access(candidate, os.X_OK):
            return candidate
    return None
