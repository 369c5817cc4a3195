"""The firejail backend: a Policy becomes firejail options plus the helper.

firejail (setuid root) starts from the host's filesystem and changes it by
options; for an unprivileged user it cannot bind arbitrary paths, so the view
is built from what it offers, in an order that is load-bearing (firejail
applies --read-only/--read-write in command-line order, later wins):

1. --blacklist every top-level directory the policy does not show (EACCES;
   bwrap would not mount them at all).
2. --whitelist: a whitelisted path's top directory (/run, /var, $HOME, …)
   becomes a tmpfs holding only the whitelisted entries, so everything else
   there does not exist (ENOENT). $HOME is always whitelisted (a sentinel
   entry that never exists forces the tmpfs), entry by entry, carved around
   hidden paths by the one walker (policy/view.carve_walk); /run keeps only the DNS paths, /var only
   /var/tmp. Symlinks are never whitelisted: firejail would whitelist their
   targets too, which could empty another top-level directory.
3. --read-only for the system trees and read-only home entries, then
   --read-write for writable paths below them, then --read-only again for
   protected paths and the install/config overlays, which must win.
4. --blacklist for the Slurm config and binaries, and for hidden paths that
   cannot be whitelisted away (outside $HOME): those answer EACCES, and the
   report says fs.hidden is partial.

firejail copies /etc/skel's shell rc file into a whitelisted home before it
binds the user's own, so a granted ~/.bashrc (.zshrc, .cshrc) is instead
copied in by the helper (a copy: writes to it are discarded).

firejail refuses more than 127 arguments, so the path options go into a
generated profile (--profile=/proc/self/fd/N) and the command to the helper
on a descriptor. It expands globs, $-macros and ~ in those paths, so a path
with such characters is never passed: a grant is dropped (and reported), a
restriction refuses the launch.

The command starts through the helper: the environment arrives on a
descriptor (setuid execution strips LD_* and friends; argv is world-readable),
then seccomp (our filter, covering the 32-bit ABIs and the ioctl/personality
argument rules that firejail's list syntax cannot express), Landlock scoping
when the kernel has ABI 6, setsid, and a lifeline watcher that kills the
sandbox's processes when the command exits or the launcher dies (a setuid
program cannot inherit a parent-death signal, and firejail's own
--deterministic-shutdown waits 100 ms).
"""
from __future__ import annotations

import glob
import os

from agent_sandbox.traits import TRAITS
from agent_sandbox.backends.base import HELPER_PYTHON
from agent_sandbox.backends.base import (PROPAGATION_GAP, SCOPING_ABI, FdRef, FunctionBackend,
                                         Guarantees,
                                         Payload, Plan, PlanContext, argv_payload, env_payload,
                                         egress_guarantee, fd_hygiene, metadata_guarantee,
                                         helper_argv,
                                         namespace_scoping, own_network, relay_args,
                                         self_protection, socket_guarantee, version_text)
from agent_sandbox.errors import PolicyError
from agent_sandbox.policy.resolve import Policy, _is_within
from agent_sandbox.policy.view import (Grant, ProfileLine, Stop, ViewBuilder, carve_walk,
                                       hidden_inside, is_hidden, shown_hidden)

NAME = "firejail"
FIREJAIL = "firejail"
SKEL_FILES = (".bashrc", ".zshrc", ".cshrc")
SENTINEL = ".agent-sandbox-no-such-entry"
# Top-level entries firejail manages itself or the view always has.
OWN_TOPS = ("proc", "sys", "dev", "run", "tmp", "var")
# firejail --private-dev keeps these device classes unless told otherwise.
DEVICE_CLASSES = (
    ("--no3d", ("/dev/dri", "/dev/nvidia")),
    ("--nosound", ("/dev/snd",)),
    ("--novideo", ("/dev/video",)),
    ("--nodvd", ("/dev/sr", "/dev/cdrom", "/dev/dvd")),
    ("--notv", ("/dev/dvb",)),
    ("--nou2f", ("/dev/hidraw",)),
    ("--noinput", ("/dev/input",)),
)
FIXED = ("--quiet", "--tab", "--keep-fd=all", "--deterministic-exit-code", "--nonewprivs",
         "--caps.drop=all", "--restrict-namespaces", "--private-dev")
# The oldest firejail the plans are compiled for, and the options they use
# that came later (firejail's RELNOTES). Before 0.9.68 firejail closes no
# inherited descriptor (so --keep-fd is not needed); --tab only completes
# paths in an interactive shell; without --restrict-namespaces the seccomp
# filter refuses new user namespaces (policy/seccomp.py USERNS_DENY); without
# --noinput /dev/input is not among --private-dev's classes anyway.
MIN_VERSION = (0, 9, 64)
SINCE = {"--keep-fd": (0, 9, 68), "--tab": (0, 9, 70), "--restrict-namespaces": (0, 9, 72),
         "--noinput": (0, 9, 66), "--deterministic-exit-code": (0, 9, 64)}


def supports(features, option: str) -> bool:
    from agent_sandbox.backends.base import has_option

    return features is None or has_option(features, option, SINCE[option])


def fixed_args(features) -> list:
    """FIXED, less what this firejail does not have (each stood in for above)."""
    return [a for a in FIXED if a.split("=", 1)[0] not in SINCE
            or supports(features, a.split("=", 1)[0])]


def needs_userns_filter(features) -> bool:
    return not supports(features, "--restrict-namespaces")


def too_old(features) -> str:
    if features is not None and features.version and features.version < MIN_VERSION:
        return (f"{features.text or 'firejail ' + version_text(features.version)} is too old: "
                f"the sandbox needs firejail {version_text(MIN_VERSION)} or newer")
    return ""
# Characters firejail interprets in path options (glob, macros, escapes) or
# that would break a profile line.
UNSAFE = frozenset("*?[]$\\\n\r\t")


def safe(path: str) -> bool:
    return path == path.strip() and not path.startswith("~") and not UNSAFE & set(path)


def _top(path: str) -> str:
    return "/" + path.strip("/").split("/", 1)[0]


class View:
    """The filesystem options, built in the order described above."""

    def __init__(self, policy: Policy, root_entries):
        self.policy = policy
        self.hidden = shown_hidden(policy)
        self.root_entries = root_entries
        self.whitelist: list[str] = []
        self.readonly: list[str] = []     # step 3, first part
        self.late_readonly: list[str] = []
        self.readwrite: list[str] = []
        self.blacklist_late: list[str] = []
        self.seeds: list[str] = []        # home files the helper copies in
        self.blacklisted_hidden: list[str] = []
        self.skipped: list[str] = []      # grants dropped: firejail would interpret them

    def _hidden(self, path: str) -> bool:
        return is_hidden(path, self.hidden)

    # ---------------------------------------------------------------- home
    def home_entry(self, path: str, readonly: bool) -> None:
        """Whitelist one home path (carving around hidden paths below it).
        Symlinks are never whitelisted; paths firejail would interpret, the
        shell rc files and seeded files are handled by _own."""
        for step in carve_walk(path, self.hidden, stop=self._is_own):
            if isinstance(step, Grant):
                self.whitelist.append(step.path)
                if readonly:
                    self.readonly.append(step.path)
            elif isinstance(step, Stop):
                self._own(step.path)

    def _is_own(self, path: str) -> bool:
        return (not safe(path) or self._is_skel(path)
                or (path in self.policy.home_seeded
                    and self.policy.home_access in ("tmpwrite", "read")))

    def _is_skel(self, path: str) -> bool:
        return os.path.dirname(path) == self.policy.home and \
            os.path.basename(path) in SKEL_FILES

    def _own(self, path: str) -> None:
        if os.path.islink(path) or not os.path.lexists(path):
            return
        if not safe(path):
            self.skipped.append(path)
        elif self._is_skel(path):
            self.seeds.append(path)
        # else: a seeded file the helper copies in

    def home(self) -> None:
        policy = self.policy
        home = policy.home
        self.whitelist.append(os.path.join(home, SENTINEL))   # the tmpfs home, always
        access = policy.home_access
        if access in ("read", "write"):
            try:
                entries = sorted(os.listdir(home))
            except OSError:
                entries = []
            for name in entries:
                self.home_entry(os.path.join(home, name), readonly=access == "read")
        else:
            for path in policy.home_readonly:
                self.home_entry(path, readonly=True)
        for path in policy.home_seeded:
            if access == "restricted":
                self.home_entry(path, readonly=True)    # the real file, read-only
            elif access != "write" and not self._hidden(path):
                self.seeds.append(path)
        if access == "restricted":
            self.readonly.insert(0, home)
            for path in self.seeds:
                if os.path.dirname(path) == home:
                    self.readwrite.append(path)         # so the helper can write the copy

    # ---------------------------------------------------------------- all
    def grant_outside_home(self, path: str) -> None:
        """A path the sandbox needs that lies outside $HOME: under a system
        tree it is already visible; elsewhere its top directory is emptied to it."""
        if any(_is_within(path, s) for s in self.policy.system_readonly):
            return
        if not safe(path):
            self.skipped.append(path)
        elif not _is_within(path, self.policy.home):
            self.whitelist.append(path)

    def build(self) -> list[str]:
        policy = self.policy
        home = policy.home
        writable = list(policy.home_writable) + list(policy.extra_writable)
        chaperon = policy.chaperon_dir
        staging = policy.staging_dir
        writable.append(policy.project_dir)
        overlays = list(policy.readonly_overlays) + ([staging] if staging else [])
        needed = (list(policy.system_readonly) + writable + overlays + list(policy.devices)
                  + [home])
        tops = {_top(p) for p in needed} | {"/" + t for t in OWN_TOPS}
        early_blacklist = [f"/{name}" for name in self.root_entries
                           if f"/{name}" not in tops and not os.path.islink(f"/{name}")]

        for path in policy.run_binds:
            # carved like a home entry: the resolver's sockets are left out
            # where no name may resolve (policy/sockets.py)
            self.whitelist += [s.path for s in carve_walk(path, self.hidden)
                               if isinstance(s, Grant)]
        self.whitelist.append("/run/" + SENTINEL)
        self.whitelist.append("/var/tmp")
        self.home()
        if chaperon:
            # The session dir lies in an always-hidden directory on purpose
            # (no other session's is reachable); only this one is whitelisted.
            self.whitelist.append(chaperon)
        if staging:
            # The same for the project's staging directory (read-only: late_readonly).
            self.whitelist.append(staging)
        egress = policy.egress_socket
        if egress:
            # The egress proxy's directory (same reason; it holds the socket only).
            self.whitelist.append(os.path.dirname(egress))
        for path in writable:
            if _is_within(path, home):
                if not self._hidden(path):
                    self.home_writable(path)
                else:
                    # an agent's session copy in the run directory (as the
                    # chaperon's directory: this one alone; view.py writable)
                    self.whitelist.append(path)
            else:
                self.grant_outside_home(path)
        for path in overlays:
            if _is_within(path, home):
                self.home_entry(path, readonly=True)
            else:
                self.grant_outside_home(path)

        ro_trees = list(policy.system_readonly) + [p for p in self.readonly]
        self.readonly = list(policy.system_readonly) + self.readonly
        for path in writable:
            if os.path.lexists(path) and any(_is_within(path, t) for t in ro_trees):
                self.readwrite.append(path)    # e.g. below the read-only restricted home
        if chaperon and any(_is_within(chaperon, t) for t in ro_trees):
            # Made by the launch's lifecycle after the compile, before the
            # spawn (launch/lifecycle.py): writable whether or not it exists yet.
            self.readwrite.append(chaperon)
        roots = writable + ([home] if policy.home_access == "write" else [])
        view = ViewBuilder(policy)
        for path in policy.pinned:
            # read-only then read-write: firejail binds the path onto itself
            # for the first, so it becomes a mount point (rename: EBUSY).
            if any(_is_within(path, r) for r in roots) and not self._hidden(path):
                # A directory that will hold only placeholders (the `.git` of a
                # project that is no repository) stays read-only as a whole, as
                # on bwrap: the project cannot become a repository meanwhile.
                if view.only_protected(path, view.writable_roots()):
                    self.late_readonly.append(path)
                else:
                    self.readonly.append(path)
                    self.readwrite.append(path)
        for item in policy.protected:   # missing ones get a placeholder before the launch
            if not self._hidden(item.path) and any(_is_within(item.path, r) for r in roots) \
                    and not os.path.islink(item.path):
                self.late_readonly.append(item.path)
        self.late_readonly += [p for p in overlays if os.path.exists(p)]

        # Hidden paths in a granted tree outside $HOME cannot be carved out of
        # it (no whitelist there): blacklisted, so they answer EACCES.
        for path in hidden_inside(policy.hidden, ro_trees + writable):
            if not _is_within(path, home):
                self.blacklist_late.append(path)
                self.blacklisted_hidden.append(path)
        self.blacklist_late += list(policy.slurm_masks) + list(policy.slurm_binaries)

        self.seeds = list(dict.fromkeys(self.seeds))
        self.readwrite = [p for p in self.readwrite if safe(p) or self.skipped.append(p)]
        lines = []
        for kind, paths in (("blacklist", early_blacklist), ("whitelist", self.whitelist),
                            ("read-only", self.readonly), ("read-write", self.readwrite),
                            ("read-only", self.late_readonly),
                            ("blacklist", self.blacklist_late)):
            for path in dict.fromkeys(paths):
                if not safe(path):
                    raise PolicyError(
                        f"{path!r} must be kept {kind.replace('-', ' ')} on the firejail "
                        "backend but contains a character firejail interprets (a glob, $, "
                        "\\, ~ or whitespace), so it would apply the rule to other paths. "
                        "Rename it, or use --backend bwrap or landlock.",
                        reason="firejail_unsafe_path")
                lines.append(f"{kind} {path}")
        return lines

    def home_writable(self, path: str) -> None:
        """A writable entry below $HOME: whitelisted (carved if need be)."""
        before = len(self.readonly)
        self.home_entry(path, readonly=False)
        del self.readonly[before:]


def device_args(policy: Policy) -> tuple[list[str], list[str], list[str]]:
    """(--no* flags, profile lines blacklisting devices of a kept class that
    the policy does not grant, devices firejail's --private-dev cannot provide)."""
    args, lines, unavailable = [], [], []
    for device in policy.devices:
        if not any(device.startswith(p) for _, prefixes in DEVICE_CLASSES for p in prefixes):
            unavailable.append(device)
    for flag, prefixes in DEVICE_CLASSES:
        wanted = [d for d in policy.devices if d.startswith(prefixes)]
        if not wanted:
            args.append(flag)
            continue
        present = sorted({p for prefix in prefixes for p in glob.glob(prefix + "*")})
        lines += [f"blacklist {p}" for p in present if p not in wanted and safe(p)
                  and not any(_is_within(w, p) for w in wanted)]
    return args, lines, unavailable


def guarantees(policy: Policy, *, landlock_abi: int = 0, blacklisted_hidden=(), keep_fds=(),
               features=None):
    g = Guarantees()
    if blacklisted_hidden:
        g.partial("fs.hidden", "these hidden paths outside $HOME can only be blacklisted "
                  "(EACCES, name visible): " + " ".join(blacklisted_hidden))
    else:
        g.yes("fs.hidden")
    for name in ("fs.protected", "env.scrubbed", "pid.isolated",
                 "slurm.boundary", "tty.safe"):
        g.yes(name)
    # firejail makes its mounts slaves of the host's and has no option
    # against it; setuid, it cannot run in a user namespace of ours (bwrap does).
    g.partial("fs.write_confined", PROPAGATION_GAP
              + ("firejail keeps the host's mount propagation (bwrap and landlock do not)"
                 if policy.private_mounts else "PRIVATE_MOUNTS=false"))
    nested = "" if supports(features, "--restrict-namespaces") else (
        f" (and {(features.text if features is not None else '') or 'this firejail'} has no "
        "--restrict-namespaces (0.9.72), which the filter stands in for: nested user "
        "namespaces are allowed)")
    g.either("seccomp", policy.seccomp, "SECCOMP=false in the configuration" + nested)
    g.either("ipc.isolated", policy.private_ipc, "PRIVATE_IPC=false in the configuration")
    if policy.filter_passwd:
        g.partial("passwd.filtered", "firejail reduces /etc/passwd and /etc/group to system "
                  "accounts and you, and the NSS daemons' sockets are unreachable, but "
                  "nsswitch.conf is the host's: an NSS module that asks LDAP over the "
                  "network still answers")
    else:
        g.no("passwd.filtered", "FILTER_PASSWD=false in the configuration")
    namespace_scoping(g, policy, landlock_abi)
    socket_guarantee(g, policy, extra=("/dev/log, the system log's socket, where the host "
                                       "has one (firejail's --private-dev keeps it)",))
    egress_guarantee(g, policy)
    self_protection(g, policy)
    metadata_guarantee(g)
    fd_hygiene(g, keep_fds)
    return g.split()


def notes(policy: Policy, view: View, unavailable) -> tuple[str, ...]:
    out = []
    if view.skipped:
        out.append("not granted, because firejail would interpret a character in the path "
                   "(glob, $, \\, ~, whitespace): " + " ".join(map(repr, view.skipped)))
    granted = {os.path.basename(p) for p in view.seeds}
    out.append("firejail puts /etc/skel's " + "/".join(SKEL_FILES[:1]) + " in the private "
               "home; a granted shell rc file is copied over it (writes to it are discarded"
               + (", also with HOME_ACCESS=write)" if policy.home_access == "write" else ")")
               + ("" if granted & set(SKEL_FILES) else ", and yours is not granted"))
    if policy.home_access == "read":
        out.append("HOME_ACCESS=read: the top level of $HOME is a tmpfs (as on bwrap); its "
                   "entries are read-only")
    if unavailable:
        out.append("DEVICES not available on firejail (--private-dev has no such class): "
                   + " ".join(unavailable))
    return tuple(out)


def plan(policy: Policy, command: list[str], payloads: dict[str, Payload], *,
         context: PlanContext) -> Plan:
    """`payloads` may carry "seccomp"; context.root_entries is os.listdir("/")
    (given so tests can give their own)."""
    landlock_abi, python = context.landlock_abi, context.python or HELPER_PYTHON
    root_entries = context.root_entries
    view = View(policy, sorted(os.listdir("/")) if root_entries is None else root_entries)
    lines = view.build()
    devices, device_lines, unavailable = device_args(policy)
    devices = [d for d in devices if d != "--noinput" or supports(context.features, d)]
    lines += device_lines
    old = too_old(context.features)
    if old:
        raise PolicyError(f"firejail at {context.program} cannot be used — {old}. Install a "
                          "newer firejail, have the admin name one with FIREJAIL_PATH, or use "
                          "--backend bwrap or landlock.", reason="backend_too_old")
    argv: list = [context.program, *fixed_args(context.features)]
    argv.append("--ipc-namespace") if policy.private_ipc else argv.append("--keep-dev-shm")
    argv.append("--private-tmp") if policy.private_tmp else argv.append("--keep-var-tmp")
    if own_network(policy):
        argv.append("--net=none")      # a network namespace with only loopback
    argv += devices + [FdRef("profile", prefix="--profile=/proc/self/fd/")]

    ours = {"profile": Payload(data=("\n".join(lines) + "\n").encode()),
            "env": env_payload(policy.env), "argv": argv_payload(command)}
    seeds = []
    for index, path in enumerate(view.seeds):
        ours[f"seed-{index}"] = Payload(path=os.path.realpath(path))
        seeds.append((f"seed-{index}", path))
    if policy.seccomp:
        ours["seccomp"] = payloads["seccomp"]
    scoped = landlock_abi >= SCOPING_ABI
    if scoped:
        from agent_sandbox.backends.bwrap import landlock_scope

        ours["landlock"] = Payload(data=landlock_scope(landlock_abi))
    argv += ["--", *helper_argv(python=python, env=True, landlock=scoped,
                                seccomp=policy.seccomp, seeds=seeds, chdir=policy.workdir,
                                new_session=True, controlling_tty=context.terminal,
                                lifeline=True, status=True,
                                pid_namespace=True, argv_fd=True,
                                keep_fds=context.keep_fds, relay=relay_args(policy))]
    provides, partial, cannot = guarantees(policy, landlock_abi=landlock_abi,
                                           blacklisted_hidden=view.blacklisted_hidden,
                                           keep_fds=context.keep_fds,
                                           features=context.features)
    # firejail itself gets a minimal environment; the command's comes on --env.
    spawn_env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    for name in ("TERM", "LANG", "LC_ALL"):
        if name in policy.env:
            spawn_env[name] = policy.env[name]
    return Plan(backend=NAME, argv=tuple(argv), payloads=ours, env=spawn_env,
                provides=provides, cannot=cannot, partial=partial,
                mounts=tuple(ProfileLine(line) for line in lines),
                view_title="firejail profile (--profile), in order", status_fd="status",
                started="helper-exec", lifeline_fd="lifeline",
                notes=notes(policy, view, unavailable))


def probe_argv(path: str = FIREJAIL, features=None) -> list[str]:
    """A trivial sandbox with the options every launch relies on."""
    return [path, "--noprofile", *fixed_args(features), "--ipc-namespace", "--private-tmp",
            "--whitelist=/var/tmp", "--", "/bin/true"]


# No blanked copy of a home file: an unprivileged user cannot bind one.
BACKEND = FunctionBackend(NAME, FIREJAIL, traits=TRAITS[NAME], guarantees=guarantees,
                          plan=plan, probe_argv=probe_argv)
BACKEND.needs_userns_filter = needs_userns_filter
