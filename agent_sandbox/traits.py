"""What each backend is, declared once as data (issue 28, item 4: "traits,
not names"): the launcher, the tools and the policy's callers ask a trait —
does the sandbox have a PID namespace of its own, can it show a host path at
another path inside, how does a task join a job's sandbox — and never compare
a backend's name. A fourth backend is one more row here, not an edit of every
place that once asked "is this bwrap?".

A table rather than an attribute set in each backend's module: a cached
launch (plancache/plans.py) imports no backend module, yet spawn, reap and
the services ask these questions; this module imports nothing. Each backend
module hands its row to its FunctionBackend (`BACKEND.traits`), and the
registry (backends/__init__.py) answers `traits(name)` for a name alone (a
policy, a plan, SANDBOX_BACKEND inside a sandbox).
"""
from __future__ import annotations



class Traits:
    """One backend's answers, read-only. Each field is named for what it
    means to the caller; the docs' table (docs/backends.md, "Traits, not
    names") lists them per backend. A slotted class, not a NamedTuple or a
    dataclass: those build code at import (namedtuple's exec, dataclasses'
    inspect), this costs nothing on a launch's path."""
    # How a person reads it (doctor's rows, messages).
    display_name: str
    # What to do when its program is not found / when its trivial probe fails.
    install_hint: str
    probe_hint: str
    # The sandbox has a PID namespace of its own: processes outside are
    # invisible, and its orphans do not come back to the launcher.
    pid_namespace: bool
    # ... a user namespace of its own (joining the sandbox needs setns(user)).
    user_namespace: bool
    # ... a mount namespace of its own (private /run and /tmp; mounts the host
    # makes after the start are not seen, or seen as the backend decides).
    mount_namespace: bool
    # ... a network namespace of its own: a fixed port on its loopback is
    # free and reachable from inside only (the egress relay).
    network_namespace: bool
    # A host path can be shown at another, fixed path inside (bind src→dest):
    # the egress socket, the chaperon's directory and stubs, session copies of
    # project files. Without it the sandbox sees host paths where they are.
    fixed_mount_points: bool
    # A blanked or generated copy of a file can stand in for it
    # (--ro-bind-data): filtered passwd/group, secrets blanked in bound files.
    generated_files: bool
    # The plan can carry launch/run.COMMAND_SLOT in the command's place (the
    # plan cache stores plans without their command).
    command_slot: bool
    # How a Slurm task enters its job's sandbox on a node (jobs/join.py):
    # "setns" — the helper joins the namespaces itself through a pidfd;
    # "program" — through the backend's program (firejail --join=PID);
    # "" — it does not: every task is a sandbox of its own.
    job_join: str
    # The backend's status descriptor reports the sandbox init's host pid
    # (bwrap's JSON child-pid), which leads the command's process group, and
    # the status tells a setup failure before the namespaces from one after.
    reports_init_pid: bool
    # The launcher must be a child subreaper: orphans of a sandbox without a
    # PID namespace come back to it, or the sandbox's init outlives the
    # backend's process by the teardown of its namespaces.
    needs_subreaper: bool
    # The helper's "helper-exec" status reports its pid in the sandbox's PID
    # namespace (it starts inside it), not the host's.
    helper_pid_namespaced: bool
    # The confinement is the kernel's Landlock ruleset applied by the helper
    # (no program of its own: no --version; its reach is the Landlock ABI).
    landlock_enforced: bool
    # Evidence, beside the session's read-only marker file, that a process
    # runs inside this backend's sandbox (process/nesting.py): "pid1" — PID 1
    # is the user's own process; "state-dir" — the user's own state directory
    # refuses them; "" — the marker alone.
    inside_evidence: str
    # Host files a cached probe verdict depends on beyond the program itself.
    probe_inputs: tuple[str, ...]
    # How a Slurm job runs on this backend, for --dry-run ("" — the shared
    # sandbox's line, launch/report.JOB_SHARED).
    job_line: str

    __slots__ = tuple(__annotations__)

    def __init__(self, **values) -> None:
        for name in self.__slots__:
            object.__setattr__(self, name, values.pop(name))    # each one declared
        if values:
            raise TypeError(f"not a trait: {', '.join(sorted(values))}")

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"a backend's traits are read-only ({name})")

    def __repr__(self) -> str:
        return f"Traits({self.display_name})"

    @property
    def joins_job_sandboxes(self) -> bool:
        return bool(self.job_join)


TRAITS = {
    "bwrap": Traits(
        display_name="bubblewrap",
        install_hint="install bubblewrap (apt-get install bubblewrap)",
        probe_hint="unprivileged user namespaces are probably disabled on this host "
                   "(user.max_user_namespaces, kernel.unprivileged_userns_clone, an AppArmor "
                   "userns restriction); ask your admin to enable them",
        pid_namespace=True, user_namespace=True, mount_namespace=True, network_namespace=True,
        fixed_mount_points=True, generated_files=True, command_slot=True, job_join="setns",
        reports_init_pid=True, needs_subreaper=True, helper_pid_namespaced=False,
        landlock_enforced=False, inside_evidence="", probe_inputs=(), job_line=""),
    "firejail": Traits(
        display_name="firejail",
        install_hint="install firejail (apt-get install firejail)",
        probe_hint="firejail may not allow this user (/etc/firejail/firejail.users) or be too "
                   "old (0.9.72 or newer is needed)",
        pid_namespace=True, user_namespace=False, mount_namespace=True, network_namespace=True,
        fixed_mount_points=False, generated_files=False, command_slot=True, job_join="program",
        reports_init_pid=False, needs_subreaper=False, helper_pid_namespaced=True,
        landlock_enforced=False, inside_evidence="pid1",
        probe_inputs=("/etc/firejail/firejail.config", "/etc/firejail/firejail.users"),
        job_line=""),
    "landlock": Traits(
        display_name="landlock",
        install_hint="it needs Linux 5.13+ with Landlock enabled (lsm=…,landlock) and a "
                     "Python 3.9+ the user cannot write (the launcher's or /usr/bin/python3)",
        probe_hint="the kernel refused a trivial Landlock ruleset",
        pid_namespace=False, user_namespace=False, mount_namespace=False,
        network_namespace=False, fixed_mount_points=False, generated_files=False,
        command_slot=True, job_join="", reports_init_pid=False, needs_subreaper=True,
        helper_pid_namespaced=False, landlock_enforced=True, inside_evidence="state-dir",
        probe_inputs=(),
        job_line="every task is a sandbox of its own (no namespaces to share) and "
                 "cross-memory attach between ranks is denied — Open MPI runs without "
                 "single-copy (OMPI_MCA_btl_vader_single_copy_mechanism=none), its session "
                 "directory in $TMPDIR; ranks on one node share memory through a per-job "
                 "directory in /dev/shm that only the job's sandboxes on that node may write "
                 "(OMPI_MCA_btl_vader_backing_directory; no single-copy/CMA)"),
}


def traits(name: str) -> Traits:
    """What the backend `name` is: what callers ask instead of comparing its
    name. Here, not in backends/: a cached launch imports no backend module."""
    return TRAITS[name]
