"""The landlock backend: a Policy becomes a Landlock ruleset the helper applies.

No namespaces and no mounts: the process sees the host's filesystem, and
Landlock decides what it may do there. Landlock grants by allow-list and has
no deny rule, so everything follows from that:

* Read+exec on the system trees, write on the project and declared paths.
* "Hidden" means *left out*: a hidden path answers EACCES, not ENOENT. A
  directory that would contain a hidden path (or, below a writable grant, a
  read-only one such as the user config tree) is never granted itself; its
  entries are granted one by one instead, recursively ("carving", by the one
  walker: policy/view.carve_walk). A carved
  directory cannot be listed, and in a writable one nothing can be created
  at its top level.
* Symlinks are never followed when granting (as bwrap recreates them as
  links): a link reaches its target only if the target is granted itself.
* HOME_ACCESS without a mount namespace (there is no tmpfs to put in front
  of $HOME): tmpwrite and restricted grant HOME_READONLY and the seeded files
  read-only and HOME_WRITABLE writable, and nothing else in $HOME (writes
  elsewhere fail with EACCES instead of vanishing); read grants all of $HOME
  read-only minus hidden paths; write grants it writable, carved around the
  hidden paths, the user config tree and the home's protected paths (the
  agents' guarded files), which stay read-only as on bwrap and firejail.
* PRIVATE_TMP: /tmp is shared, so the sandbox gets a fresh per-session
  directory as $TMPDIR (the launcher creates and removes it) and /tmp itself
  is not granted. PRIVATE_IPC: SysV IPC is shared; /dev/shm is granted for
  regular files only, unlisted (SHM below; a job's launch also gets its own
  directory there, by descriptor: jobs/shm.py).
* PROTECTED_PATHS inside the project cannot be kept read-only: carving the
  project would forbid creating anything at its top level and in .git. This
  is reported (fs.protected: no), never silently claimed.

The helper also loads the seccomp filter, which on this backend denies ptrace
and process_vm_readv/writev (no PID namespace), calls setsid (no TIOCSTI into
the caller's terminal), and holds a lifeline so the command's process group
dies with the launcher.
"""
from __future__ import annotations

import marshal
import os

from agent_sandbox.traits import TRAITS
from agent_sandbox.backends.base import (HELPER_PYTHON, FdRef, FunctionBackend, Guarantees,
                                         Payload, Plan, PlanContext, fd_hygiene, helper_argv,
                                         helper_command, helper_path, relay_args, scoping,
                                         self_protection)
from agent_sandbox.errors import PolicyError
from agent_sandbox.paths import helper_module, user_config_dir
from agent_sandbox.policy.resolve import Policy
from agent_sandbox.policy.view import Grant, Rule, Stop, beneath, carve_walk, is_hidden

ll = helper_module("landlock")

NAME = "landlock"
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
           "/dev/ptmx", "/dev/pts")
# Reading and writing procfs files is the process's own business; another
# process's /proc entries are guarded by ptrace access checks, which Landlock
# also applies (a sandboxed process cannot ptrace-read one outside it).
# TRUNCATE: a shell's `echo 0 > /proc/self/oom_score_adj` and CUDA's cuInit
# open procfs files with O_TRUNC (without it cuInit answers 304 and no CUDA
# program sees a GPU); procfs ignores the truncation itself.
PROC = ll.READ_FILE | ll.READ_DIR | ll.WRITE_FILE | ll.TRUNCATE
# PRIVATE_IPC on landlock (docs/backends.md "Shared memory on landlock"):
# glibc's sem_open and shm_open use /dev/shm by fixed path, and without a
# mount namespace there is no private one to give. /dev/shm is granted for
# regular files only — made, opened, truncated, removed — but not listed
# (no READ_DIR), nor directories, symlinks, sockets or fifos made there, nor
# anything executed: multiprocessing's semaphores, shm_open and PyTorch's
# shared tensors work; what it exposes is in ipc.isolated's line.
SHM = ll.READ_FILE | ll.WRITE_FILE | ll.TRUNCATE | ll.MAKE_REG | ll.REMOVE_FILE
SHM_DIR = "/dev/shm"
RW = ll.READ | ll.WRITE


def scratch_tmp(policy: Policy) -> str:
    """The per-session $TMPDIR; removed by the launcher at exit and by the
    helper's watcher when the sandbox ends (so also after a killed launcher)."""
    return f"/tmp/agent-sandbox.tmp-{policy.uid}-{policy.session_id}"


def guarantees(policy: Policy, *, landlock_abi: int = 0, keep_fds=(), supervisor=None):
    """`supervisor`: whether the plan runs the supervisor (None: wherever it
    can run, as doctor and the report ask)."""
    if supervisor is None:
        supervisor = supervised(landlock_abi)
    g = Guarantees()
    g.no("fs.hidden", "Landlock leaves hidden paths out of its allow-list: they answer "
                      "EACCES, and their names stay visible")
    for name in ("env.scrubbed", "tty.safe"):
        g.yes(name)
    if 0 < landlock_abi < 3:
        g.partial("fs.write_confined", f"Landlock ABI {landlock_abi} cannot restrict "
                  "truncate(2) (ABI 3, Linux 6.2): a file outside the writable paths that "
                  "your permissions let you write can be truncated")
    else:
        g.yes("fs.write_confined")
    g.no("fs.protected", "Landlock cannot make a path read-only below a writable one "
                         "without carving it: PROTECTED_PATHS (and DENIED_WRITABLE_PATHS) "
                         "inside the project (agents' configuration included) stay "
                         "writable (those in the home are carved out read-only, also "
                         "with HOME_ACCESS=write), and the project's git "
                         "repository can be moved or rewritten: git settings that run "
                         "commands and agents' configuration are only detected and "
                         "reported when the session ends")
    g.either("seccomp", policy.seccomp, "SECCOMP=false in the configuration")
    g.no("pid.isolated", "no PID namespace: processes outside are visible (ptrace and "
                         "process_vm_readv/writev are denied)")
    g.no("ipc.isolated", "no IPC namespace: SysV IPC is shared with the host"
         + ("; /dev/shm is the host's, granted for files but not listable: POSIX "
            "semaphores and shm_open work, and a shared-memory file of your processes "
            "outside (other sessions' and jobs' included) whose name the sandbox knows or "
            "guesses can be read, written or removed" if policy.private_ipc
            else "; /dev/shm is shared (PRIVATE_IPC=false)"))
    g.no("passwd.filtered", "the host's /etc/passwd and NSS services answer")
    if supervisor:
        # The supervisor (SPEC §5a, process/supervisor.py) decides connect()
        # and the metadata calls: only the session's own sockets, never munge's;
        # its filter refuses unix datagram sockets (sendmsg names its
        # destination in memory, out of its sight).
        for name in ("slurm.boundary", "unix_sockets.confined", "metadata.confined"):
            g.yes(name)
    else:
        g.no("slurm.boundary", "the munge socket stays reachable (Landlock does not restrict "
                               "connecting to unix sockets) and no supervisor runs")
        g.no("unix_sockets.confined", "Landlock does not restrict connect() on pathname unix "
                                      "sockets and no supervisor runs (SPEC §5a)")
        g.no("metadata.confined", "Landlock does not restrict chmod, chown, utime or extended "
                                  "attributes and no supervisor runs (SPEC §5a): files you own "
                                  "outside the writable paths (hidden and read-only ones "
                                  "included) can have their mode, times and xattrs changed")
    scoping(g, landlock_abi)
    egress(g, policy, supervised=supervisor)
    self_protection(g, policy)
    fd_hygiene(g, keep_fds)
    return g.split()


def egress(g: Guarantees, policy: Policy, *, supervised: bool = False) -> None:
    """net.egress_filtered: a Landlock TCP rule names a port, not an address,
    and UDP is not restricted at all, so at most partial — unless the
    supervisor judges every connect() (TCP only to the relay on the loopback)
    and its filter refuses every inet socket but TCP's."""
    mode = policy.network_mode
    if supervised and (mode == "allowlist" or policy.network_isolated):
        g.yes("net.egress_filtered")
    elif mode == "allowlist":
        g.partial("net.egress_filtered", "Landlock lets TCP connect only to the relay's port, "
                  "but to that port on any host; UDP (DNS included) and other protocols are "
                  "not restricted, nor connect() to the resolver's and nscd's sockets in /run "
                  "(accepted by the admin: LANDLOCK_ALLOWLIST_PARTIAL)")
    elif mode == "isolated":
        g.partial("net.egress_filtered", "Landlock denies TCP bind and connect; UDP (DNS "
                  "included) and other protocols are not restricted, nor connect() to the "
                  "resolver's and nscd's sockets in /run")
    else:
        g.no("net.egress_filtered", "NETWORK_MODE=open: every host is reachable")


class Rules:
    """Collects (access, path) rules, carving around hidden paths and the
    read-only exceptions below writable grants."""

    def __init__(self, hidden, readonly):
        self.hidden = tuple(hidden)
        self.readonly = tuple(readonly)
        self.rules: list[tuple[int, str]] = []

    def _readonly(self, path: str) -> bool:
        return beneath(path, self.readonly)

    def grant(self, path: str, access: int) -> None:
        """Rules for `path` and what it holds, minus hidden paths; a writable
        grant is carved around the read-only exceptions too, which are
        granted read-only in their place."""
        writes = bool(access & ll.WRITE)
        for step in carve_walk(path, self.hidden, around=self.readonly if writes else (),
                               stop=self._readonly if writes else None):
            if isinstance(step, Grant):
                self.rules.append((access, step.real))
            elif isinstance(step, Stop):
                self.grant(step.path, access & ll.READ)


def _guarded_state(policy: Policy) -> tuple[str, ...]:
    """Protected paths inside a declared writable directory (an agent's
    writable state: opencode's plugins/ and tools/ in ~/.config/opencode, code
    it runs outside) or, with HOME_ACCESS=write, anywhere in the home (the
    agents' guarded files: ~/.claude/settings.json, ~/.claude.json,
    ~/.claude/hooks/ …, as a profile's PROTECTED_PATHS name them): carved out
    read-only like the user config tree, as bwrap and firejail bind them
    read-only. The project is not carved (nothing could be created at its
    top level): its protected paths are reported at the end instead
    (services/configcheck.py, services/gitcheck.py)."""
    roots = tuple(w for w in policy.home_writable + policy.extra_writable
                  if not is_hidden(w, policy.hidden))
    if policy.home_access == "write":
        roots += (policy.home,)
    return tuple(p.path for p in policy.protected
                 if p.path not in roots and beneath(p.path, roots)
                 and not beneath(p.path, (policy.project_dir,))   # a writable parent of it
                 and not is_hidden(p.path, policy.hidden))


def _grant_around(r: Rules, path: str, masks: tuple[str, ...]) -> None:
    """A read-only system tree minus Slurm's configuration directories
    (slurm.key, slurm.jwks, munge's key beside slurm.conf; issue 32), which
    bwrap and firejail mask: the tree entry by entry around them. A symlink
    entry gets no rule (the kernel checks its target's), and none is resolved
    here: /etc/mtab -> /proc/self/mounts would make every compile differ
    (the plan cache records what a compile resolves)."""
    inside = tuple(m for m in masks if m != path and m.startswith(path.rstrip("/") + "/"))
    if path in masks:
        return
    if not inside or os.path.islink(path) or not os.path.isdir(path):
        r.grant(path, ll.READ)
        return
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return
    for name in names:
        entry = os.path.join(path, name)
        if entry in masks or os.path.islink(entry):
            continue
        if any(m.startswith(entry + "/") for m in inside):
            _grant_around(r, entry, masks)
        else:
            r.grant(entry, ll.READ)


def rules(policy: Policy, *, tmpdir: str | None) -> list[tuple[int, str]]:
    """The filesystem rules, in the order they are listed in --dry-run."""
    config_tree = user_config_dir(policy.home)
    readonly = tuple(policy.readonly_overlays) + (config_tree,) + _guarded_state(policy)
    staging = policy.staging_dir
    if staging:
        readonly += (staging,)
    r = Rules(policy.hidden, readonly)
    for path in policy.system_readonly:
        _grant_around(r, path, tuple(policy.slurm_masks))
    r.grant("/proc", PROC)
    for path in DEVICES:
        r.grant(path, ll.DEVICE | (ll.READ_DIR if path == "/dev/pts" else 0))
    for path in policy.devices:
        r.grant(path, ll.DEVICE)
    r.grant(SHM_DIR, SHM if policy.private_ipc else RW)
    for path in policy.run_binds:
        r.grant(path, ll.READ)
    if tmpdir:
        r.rules.append((RW, tmpdir))     # created by the launcher right before
    else:
        r.grant("/tmp", RW)
        r.grant("/var/tmp", RW)
    home = policy.home
    if policy.home_access in ("read", "write"):
        r.grant(home, ll.READ if policy.home_access == "read" else RW)
    else:
        for path in policy.home_readonly:
            r.grant(path, ll.READ)
    for path in policy.home_seeded:
        r.grant(os.path.realpath(path), ll.READ)
    for path in policy.home_writable + policy.extra_writable:
        if is_hidden(path, policy.hidden):
            r.rules.append((RW, path))   # an agent's session copy (policy/view.py writable)
        else:
            r.grant(path, RW)
    chaperon = policy.chaperon_dir
    if chaperon:
        # Inside an always-hidden directory on purpose, so no other session's
        # is reachable: granted as an exact rule, past the hidden-path carving.
        r.rules.append((RW, chaperon))
    egress_socket = policy.egress_socket
    if egress_socket:
        r.rules.append((ll.READ, os.path.dirname(egress_socket)))   # the same, read-only
    r.grant(policy.project_dir, RW)
    for path in readonly:
        r.grant(path, ll.READ)
    if staging:
        # In the always-hidden staging root (no other project's is reachable):
        # an exact rule, as the chaperon's directory.
        r.rules.append((ll.READ, staging))
    return list(dict.fromkeys(r.rules))


def ruleset(policy: Policy, *, landlock_abi: int, tmpdir: str | None) -> dict:
    fs = ll.fs_rights(landlock_abi)
    net, ports = 0, ()
    if (policy.network_isolated or policy.network_mode == "allowlist") \
            and landlock_abi >= 4:
        net = ll.NET_BIND_TCP | ll.NET_CONNECT_TCP     # handled, no port granted
        if policy.relay_port and not policy.network_isolated:
            # allowlist: only the relay's port (it binds it, clients connect to it)
            ports = ((net, policy.relay_port),)
    scoped = (ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL) if landlock_abi >= 6 else 0
    return ll.ruleset(landlock_abi, fs=fs, net=net, scoped=scoped,
                      paths=rules(policy, tmpdir=tmpdir), ports=ports)


def abi_note(landlock_abi: int) -> str | None:
    """What this kernel's Landlock ABI lacks (the helper's degradation table),
    or None when it lacks nothing the sandbox uses. The banner repeats the
    part before the colon (launch/report.py)."""
    lost = list(dict.fromkeys(text for need, _, _, text in ll.FEATURES if landlock_abi < need))
    if landlock_abi <= 0 or not lost:
        return None
    return f"Landlock ABI {landlock_abi} lacks: " + "; ".join(lost)


def supervised(landlock_abi: int) -> bool:
    """The supervisor runs wherever Landlock does: every kernel with Landlock
    (5.13) has seccomp user notification (5.0), pidfd_getfd and openat2
    (5.6); a kernel built without seccomp filters fails the helper (125)."""
    return landlock_abi >= 1


def supervisor_rules(policy: Policy, spec: dict, *, tmpdir: str | None) -> dict:
    """The supervisor's rules (process/supervisor.py Rules): sockets only the
    session's own — its chaperon directory, its egress proxy's socket, its
    private $TMPDIR — and the project's where the sandbox may write; metadata
    only where the ruleset grants writing."""
    real = os.path.realpath
    sockets = tuple(real(p) for p in (policy.chaperon_dir, tmpdir) if p)
    # Metadata only beneath the real writable grants (the project, $TMPDIR,
    # HOME_WRITABLE/EXTRA_WRITABLE, /dev/shm): a grant that writes but does
    # not make files (/dev/null, /dev/pts, /dev/tty, /proc) is no place for
    # chmod — a terminal of the user's would be changed.
    writable = tuple(dict.fromkeys(
        real(path) for access, path in spec["paths"]
        if access & ll.WRITE_FILE and access & ll.MAKE_REG and isinstance(path, str)
        and not any(real(path) == root or real(path).startswith(root + "/")
                    for root in ("/proc", "/sys", "/dev/pts"))
        and (not real(path).startswith("/dev/") or real(path).startswith("/dev/shm"))))
    return {"sockets": sockets,
            "socket_files": (real(policy.egress_socket),) if policy.egress_socket else (),
            "project": real(policy.project_dir), "writable": writable,
            "network": "isolated" if policy.network_isolated else policy.network_mode,
            "relay_port": policy.relay_port or 0}


def notes(policy: Policy, *, landlock_abi: int, supervisor=None) -> tuple[str, ...]:
    if supervisor is None:
        supervisor = supervised(landlock_abi)
    out = []
    lacking = abi_note(landlock_abi)
    if lacking:
        out.append(lacking)
    if policy.home_access in ("tmpwrite", "restricted"):
        out.append(f"HOME_ACCESS={policy.home_access}: no tmpfs home without a mount "
                   "namespace — HOME_READONLY and seeded files are read-only, HOME_WRITABLE "
                   "writable, the rest of $HOME answers EACCES (writes fail instead of "
                   "vanishing)")
    elif policy.home_access == "write":
        out.append("HOME_ACCESS=write: $HOME is carved around hidden paths and the "
                   "protected ones (the agents' guarded files, the user config tree), which "
                   "stay read-only: its entries are granted one by one, so nothing new can "
                   "be created at its top level (nor at the top of a carved directory such "
                   "as ~/.claude), and an entry made there outside after the launch is not "
                   "reachable inside")
    else:
        out.append("HOME_ACCESS=read: $HOME is carved around hidden paths, so it cannot be "
                   "listed (its entries can be read)")
    if policy.private_tmp:
        out.append("PRIVATE_TMP: /tmp is the host's and not accessible; $TMPDIR is a fresh "
                   "per-session directory, removed at exit")
    if supervisor and (policy.network_mode == "allowlist"
                                     or policy.network_isolated):
        out.append("NETWORK_MODE=isolated: the supervisor refuses every inet connect()"
                   if policy.network_isolated else
                   "NETWORK_MODE=allowlist: the supervisor lets TCP connect only to the "
                   "relay on the loopback (no API key brokering: the relay listens on the "
                   "host's loopback)")
        out[-1] += "; UDP, DNS and every inet socket but TCP's are refused"
    elif policy.network_mode == "allowlist" and not policy.network_isolated:
        out.append("NETWORK_MODE=allowlist: partial — TCP only to the relay's port (on any "
                   "host); UDP, DNS and other protocols are not restricted; no API key "
                   "brokering (the relay listens on the host's loopback)")
    elif policy.network_isolated:
        out.append("NETWORK_MODE=isolated: partial — Landlock denies TCP bind and connect; "
                   "UDP and other protocols are not restricted")
    return tuple(out)


def network_refusal(policy: Policy, *, landlock_abi: int) -> str | None:
    mode = "isolated" if policy.network_isolated else policy.network_mode
    if mode == "allowlist" and not policy.landlock_partial and not supervised(landlock_abi):
        return ("NETWORK_MODE=allowlist cannot be enforced on the landlock backend: a "
                "Landlock TCP rule names a port, not an address, so any host on the proxy's "
                "port stays reachable, and UDP and DNS stay open (the site admin may accept "
                "that weaker form with LANDLOCK_ALLOWLIST_PARTIAL=true)")
    if mode != "open" and landlock_abi < 4:
        return (f"NETWORK_MODE={mode} needs Landlock ABI 4 (TCP rules) on the landlock "
                f"backend; this kernel has {landlock_abi or 'no Landlock'}")
    return None


def refuse(policy: Policy, *, context: PlanContext) -> None:
    refusal = network_refusal(policy, landlock_abi=context.landlock_abi)
    if refusal:
        raise PolicyError(f"{refusal} — running with the network open would ignore "
                          "the setting. Use --backend bwrap or firejail, or set "
                          "NETWORK_MODE=open.", reason="network_unavailable")


def plan(policy: Policy, command: list[str], payloads: dict[str, Payload], *,
         context: PlanContext) -> Plan:
    """`payloads` may carry "seccomp"; other launcher payloads (passwd files,
    the marker) have nowhere to go without a mount namespace. The helper runs
    on context.python (backends/helperpython.py's choice for this policy),
    else on context.program (find()'s, which ran the probe)."""
    python = context.python or context.program
    landlock_abi = context.landlock_abi
    tmpdir = scratch_tmp(policy) if policy.private_tmp else None
    spec = ruleset(policy, landlock_abi=landlock_abi, tmpdir=tmpdir)
    ours = {"landlock": Payload(data=marshal.dumps(spec))}
    if policy.seccomp:
        ours["seccomp"] = payloads["seccomp"]
    supervise = supervisor_rules(policy, spec, tmpdir=tmpdir) \
        if supervised(landlock_abi) and "notify" in payloads else None
    if supervise is not None:
        ours["notify"] = payloads["notify"]
    elif policy.network_mode == "allowlist" and not policy.landlock_partial:
        raise PolicyError("NETWORK_MODE=allowlist needs the landlock supervisor, which this "
                          "plan lacks — use --backend bwrap or firejail, or set "
                          "NETWORK_MODE=open.", reason="network_unavailable")
    env = dict(policy.env)
    if tmpdir:
        env["TMPDIR"] = tmpdir
    argv = helper_argv(python=python, landlock=True, seccomp=policy.seccomp,
                       chdir=policy.workdir, new_session=True,
                       controlling_tty=context.terminal, lifeline=True, status=True,
                       cleanup=tmpdir, keep_fds=context.keep_fds, relay=relay_args(policy),
                       notify=supervise is not None)
    shown = list(spec["paths"])
    # A job's shared-memory directory is granted to the plan afterwards, by
    # the launcher (jobs/shm.py with_job_shm: cached plans too).
    provides, partial, cannot = guarantees(policy, landlock_abi=landlock_abi,
                                           keep_fds=context.keep_fds,
                                           supervisor=supervise is not None)
    return Plan(backend=NAME, argv=tuple(argv + list(command)), payloads=ours, env=env,
                provides=provides, cannot=cannot, partial=partial,
                mounts=tuple(Rule(access, path) for access, path in shown),
                view_title="Landlock rules", status_fd="status", started="helper-exec",
                lifeline_fd="lifeline", scratch_dirs=(tmpdir,) if tmpdir else (),
                own_session=True, notes=notes(policy, landlock_abi=landlock_abi,
                                                    supervisor=supervise is not None),
                supervise=supervise)


def find(path_env: str | None = None, python: str | None = None) -> str | None:
    """The interpreter the helper runs on, by absolute path whatever PATH says
    (the kernel's part is the probe's): backends/helperpython.py's choice
    without a policy (one this user cannot write), so that a system python3
    too old for the helper is not probed (its failure would read as the
    kernel's). The plan runs the helper on the policy's choice."""
    if python is None:
        from agent_sandbox.backends.helperpython import helper_python

        try:
            python = helper_python()
        except PolicyError:
            return None
    return python if os.access(python, os.X_OK) and os.path.exists(helper_path()) else None


def probe_argv(python: str = HELPER_PYTHON, features=None) -> list[str]:
    return helper_command(python) + ["--probe"]


# No blanked copy of a home file: without a mount namespace only real files exist.
BACKEND = FunctionBackend(NAME, HELPER_PYTHON, traits=TRAITS[NAME],
                          guarantees=guarantees, plan=plan, probe_argv=probe_argv, find=find,
                          refuse=refuse)
