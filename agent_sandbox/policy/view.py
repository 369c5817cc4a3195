"""The filesystem view of a policy as an ordered list of mount operations.

bwrap (and firejail after it) build the sandbox's filesystem from scratch:
nothing exists inside unless an operation puts it there, and a later operation
on a path wins over an earlier one. "Hidden" must mean *does not exist*
(ENOENT), not "an empty directory", so a hidden path is never masked after the
fact; instead every grant that would contain one is *carved*: the granted
directory becomes a tmpfs with the same mode, and each of its entries is
granted again, recursively, except the hidden ones. Symlinks are recreated as
symlinks (never followed when they are a grant's own entries), so a link that
points at a hidden path dangles inside.

The decision "is this path hidden, and what must be carved out of a grant"
is made once, here, by carve_walk(): bwrap's mount list (ViewBuilder below),
firejail's whitelist and Landlock's rule set all walk their grants with it
and differ only in what they emit for each step (a tmpfs and binds, whitelist
lines, rules). hidden_inside() says which hidden paths lie in granted trees
(firejail can only blacklist those outside $HOME).

Operations are typed (RoBind, Bind, DevBind, Tmpfs, Symlink, Proc, Dev, Data,
File, RemountRo; ProfileLine and Rule for the firejail profile and the
Landlock rules that --dry-run lists in their place). Each is a named tuple
whose first field is its kind, so it still reads as (kind, *args):
  ro-bind SRC DEST | bind SRC DEST | dev-bind SRC DEST | tmpfs DEST MODE |
  symlink TARGET DEST | proc DEST | dev DEST | ro-data PAYLOAD DEST MODE |
  file PAYLOAD DEST MODE | remount-ro DEST
Payloads are named blobs the launcher hands over as file descriptors.

The order below is load-bearing: system, devices, /tmp, /run, home, then the
writable binds, then the read-only overlays that must win over them
(protected paths, the install dir, the user config tree), and finally the
read-only remounts of carved tmpfs directories.
"""
from __future__ import annotations

import os
import stat
from typing import Callable, Iterator, NamedTuple, Union

from agent_sandbox.policy.resolve import MARKER_PATH, Policy, _is_within


# ---------------------------------------------------------------- mount operations
class RoBind(NamedTuple("RoBind", [("kind", str), ("src", str), ("dest", str)])):
    """The host's SRC at DEST, read-only."""
    __slots__ = ()

    def __new__(cls, src: str, dest: str):
        return super().__new__(cls, "ro-bind", src, dest)


class Bind(NamedTuple("Bind", [("kind", str), ("src", str), ("dest", str)])):
    """The host's SRC at DEST, writable."""
    __slots__ = ()

    def __new__(cls, src: str, dest: str):
        return super().__new__(cls, "bind", src, dest)


class DevBind(NamedTuple("DevBind", [("kind", str), ("src", str), ("dest", str)])):
    """A device node, usable."""
    __slots__ = ()

    def __new__(cls, src: str, dest: str):
        return super().__new__(cls, "dev-bind", src, dest)


class Tmpfs(NamedTuple("Tmpfs", [("kind", str), ("dest", str), ("mode", int)])):
    """An empty directory (a carved grant, /run, a private /tmp)."""
    __slots__ = ()

    def __new__(cls, dest: str, mode: int):
        return super().__new__(cls, "tmpfs", dest, mode)


class Symlink(NamedTuple("Symlink", [("kind", str), ("target", str), ("dest", str)])):
    """A symlink recreated as a symlink (never followed)."""
    __slots__ = ()

    def __new__(cls, target: str, dest: str):
        return super().__new__(cls, "symlink", target, dest)


class Proc(NamedTuple("Proc", [("kind", str), ("dest", str)])):
    __slots__ = ()

    def __new__(cls, dest: str):
        return super().__new__(cls, "proc", dest)


class Dev(NamedTuple("Dev", [("kind", str), ("dest", str)])):
    __slots__ = ()

    def __new__(cls, dest: str):
        return super().__new__(cls, "dev", dest)


class Data(NamedTuple("Data", [("kind", str), ("payload", str), ("dest", str),
                               ("mode", int)])):
    """A read-only file holding a payload (filtered passwd, the marker, a blanked copy)."""
    __slots__ = ()

    def __new__(cls, payload: str, dest: str, mode: int):
        return super().__new__(cls, "ro-data", payload, dest, mode)


class File(NamedTuple("File", [("kind", str), ("payload", str), ("dest", str),
                               ("mode", int)])):
    """A writable copy of a payload (a seeded home file)."""
    __slots__ = ()

    def __new__(cls, payload: str, dest: str, mode: int):
        return super().__new__(cls, "file", payload, dest, mode)


class RemountRo(NamedTuple("RemountRo", [("kind", str), ("dest", str)])):
    """DEST (a tmpfs made above) becomes read-only."""
    __slots__ = ()

    def __new__(cls, dest: str):
        return super().__new__(cls, "remount-ro", dest)


# The kinds of the two operations that carry a backend's own form of the
# view rather than a mount (launch/report.py prints them by kind).
PROFILE_LINE_KIND = "firejail"
RULE_KIND = "landlock"


class ProfileLine(NamedTuple("ProfileLine", [("kind", str), ("line", str)])):
    """One line of the firejail profile (what firejail's view lists)."""
    __slots__ = ()

    def __new__(cls, line: str):
        return super().__new__(cls, PROFILE_LINE_KIND, line)


class Rule(NamedTuple("Rule", [("kind", str), ("access", int), ("path", str)])):
    """One Landlock rule: ACCESS (a bit set) beneath PATH."""
    __slots__ = ()

    def __new__(cls, access: int, path: str):
        return super().__new__(cls, RULE_KIND, access, path)


Op = Union[RoBind, Bind, DevBind, Tmpfs, Symlink, Proc, Dev, Data, File, RemountRo]   # not `|`: Python 3.9


# ---------------------------------------------------------------- the carve walker
def _within_any(path: str, paths) -> bool:
    return any(_is_within(path, p) for p in paths)


def _contains_any(path: str, paths) -> bool:
    return any(_is_within(p, path) and p != path for p in paths)


def beneath(path: str, paths) -> bool:
    """`path` lies in one of `paths`, as named or once resolved (a symlinked
    parent cannot smuggle it out)."""
    return _within_any(path, paths) or _within_any(os.path.realpath(path), paths)


def is_hidden(path: str, hidden) -> bool:
    """The one notion of hidden: `path` is, or lies in, a hidden path, as
    named or once resolved."""
    return beneath(path, hidden)


class Grant(NamedTuple):
    """Grant `path` whole: nothing below it is hidden or excepted."""
    path: str
    real: str


class Carve(NamedTuple):
    """`path` is a directory holding something hidden or excepted: it is not
    granted itself; its entries follow (None: it cannot be listed), then Leave."""
    path: str
    real: str
    entries: tuple[str, ...] | None


class Leave(NamedTuple):
    path: str


class Link(NamedTuple):
    """A symlink whose target is not hidden (one to a hidden path is skipped)."""
    path: str
    target: str          # as written in the link


class Stop(NamedTuple):
    """A path the caller's `stop` picked out: it decides itself (not descended)."""
    path: str


Step = Union[Grant, Carve, Leave, Link, Stop]   # not `|`: Python 3.9


def carve_walk(path: str, hidden, *, around=(), stop: Callable[[str], bool] | None = None
               ) -> Iterator[Step]:
    """The one walk of a grant around hidden paths (SPEC §8: hidden means the
    path does not exist inside; Landlock can only leave it out).

    Hidden paths (as named or resolved) yield nothing. `stop(path)` picks out
    paths the caller handles itself (seeded and generated files, a read-only
    exception below a writable grant, a path firejail would interpret). A
    symlink yields Link unless its target is hidden; a missing path yields
    nothing. A directory that contains a hidden path or one of `around`
    (paths that are not hidden but need their own treatment) yields Carve,
    its entries walked the same way, then Leave; anything else yields Grant."""
    if is_hidden(path, hidden):
        return
    if stop is not None and stop(path):
        yield Stop(path)
        return
    if os.path.islink(path):
        yield Link(path, os.readlink(path))
        return
    if not os.path.lexists(path):
        return
    real = os.path.realpath(path)
    exceptions = tuple(hidden) + tuple(around)
    if os.path.isdir(real) and (_contains_any(path, exceptions)
                                or _contains_any(real, exceptions)):
        try:
            entries: tuple[str, ...] | None = tuple(sorted(os.listdir(real)))
        except OSError:
            entries = None
        yield Carve(path, real, entries)
        for name in entries or ():
            yield from carve_walk(os.path.join(path, name), hidden, around=around, stop=stop)
        yield Leave(path)
        return
    yield Grant(path, real)


def shown_hidden(policy) -> tuple[str, ...]:
    """What a mount view leaves out: the hidden paths, and the pathname
    sockets found in the trees it shows from the host (policy/sockets.py:
    a read-only mount does not stop connect(), only absence does)."""
    return tuple(policy.hidden) + tuple(policy.sockets)


def hidden_inside(hidden, trees) -> tuple[str, ...]:
    """The existing hidden paths that lie in one of the granted `trees`."""
    return tuple(h for h in hidden if os.path.lexists(h) and _within_any(h, trees))


def _mode(path: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o755


class ViewBuilder:
    def __init__(self, policy: Policy):
        self.policy = policy
        self.hidden = shown_hidden(policy)
        self.ops: list[Op] = []
        self.remounts: list[str] = []
        self.seeded = policy.home_seeded if policy.home_access != "write" else ()
        # Home files that held a secret: bound from a blanked copy (boundfiles.py).
        self.generated = {path: (payload, mode) for path, payload, mode
                          in policy.generated_files}

    def _hidden(self, path: str) -> bool:
        return is_hidden(path, self.hidden)

    def grant(self, path: str, mode: str) -> None:
        """Make `path` show the host's, read-only ("ro") or writable ("rw"),
        minus hidden paths: a carved directory becomes a tmpfs with the same
        mode holding its entries again (remounted read-only after for "ro").
        Seeded files are left out (a `file` op creates them); a file with a
        generated stand-in is bound from its payload."""
        for step in carve_walk(path, self.hidden, around=tuple(self.seeded) + tuple(self.generated),
                               stop=lambda p: p in self.seeded or p in self.generated):
            if isinstance(step, Grant):
                self.ops.append(RoBind(step.path, step.path) if mode == "ro"
                                else Bind(step.path, step.path))
            elif isinstance(step, Carve):
                self.ops.append(Tmpfs(step.path, _mode(step.path)))
            elif isinstance(step, Leave):
                if mode == "ro":
                    self.remounts.append(step.path)
            elif isinstance(step, Link):
                self.ops.append(Symlink(step.target, step.path))
            elif step.path in self.generated and step.path not in self.seeded:
                payload, file_mode = self.generated[step.path]
                self.ops.append(Data(payload, step.path, file_mode))

    def carve(self, path: str, mode: str) -> None:
        """Carve `path` whatever it holds (the home in read and write mode:
        its top level is a tmpfs for the seeded files)."""
        self.ops.append(Tmpfs(path, _mode(path)))
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            entries = []
        for name in entries:
            self.grant(os.path.join(path, name), mode)
        if mode == "ro":
            self.remounts.append(path)

    # ------------------------------------------------------------------ parts
    def system(self) -> None:
        for path in self.policy.system_readonly:
            self.grant(path, "ro")
        for path in self.policy.slurm_binaries:
            self.ops.append(RoBind("/dev/null", path))

    def slurm_config(self) -> None:
        """The Slurm configuration directories, emptied — after the home and
        writable trees, so that a site directory in one of them is masked too."""
        for path in self.policy.slurm_masks:
            self.ops.append(Tmpfs(path, 0o755))
            self.remounts.append(path)

    def devices(self) -> None:
        self.ops.append(Proc("/proc"))
        self.ops.append(Dev("/dev"))
        for device in self.policy.devices:
            self.ops.append(DevBind(device, device))
        if self.policy.private_ipc:
            self.ops.append(Tmpfs("/dev/shm", 0o1777))
        elif os.path.isdir("/dev/shm"):
            self.ops.append(Bind("/dev/shm", "/dev/shm"))

    def identity(self) -> None:
        if self.policy.filter_passwd and "/etc" in self.policy.system_readonly:
            for name in ("passwd", "group", "nsswitch.conf"):
                self.ops.append(Data(f"etc-{name}", f"/etc/{name}", 0o644))

    def temp(self) -> None:
        for path in ("/tmp", "/var/tmp"):
            if self.policy.private_tmp:
                if path == "/tmp" or os.path.isdir(path):
                    self.ops.append(Tmpfs(path, 0o1777))
            elif os.path.isdir(path):
                self.ops.append(Bind(path, path))

    def run(self) -> None:
        self.ops.append(Tmpfs("/run", 0o755))
        for path in self.policy.run_binds:
            self.grant(path, "ro")
        self.ops.append(Data("marker", MARKER_PATH, 0o444))
        if self.policy.chaperon_dir:
            from chaperon.wire.session import SANDBOX_DIR, STUB_BIN, STUB_COMMANDS

            self.ops.append(Bind(self.policy.chaperon_dir, SANDBOX_DIR))
            self.ops.append(Data("stub", f"{STUB_BIN}/.stub", 0o755))
            for name in STUB_COMMANDS:
                self.ops.append(Symlink(".stub", f"{STUB_BIN}/{name}"))
        if self.policy.egress_socket:
            # Only the egress proxy's socket, never its directory (docs/network.md).
            from agent_sandbox.names import EGRESS_SOCKET

            self.ops.append(Bind(self.policy.egress_socket, EGRESS_SOCKET))

    def home(self) -> None:
        policy = self.policy
        home = policy.home
        self.ops.append(Tmpfs(home, _mode(home)))
        access = policy.home_access
        if access in ("read", "write"):
            self.ops.pop()
            self.carve(home, "ro" if access == "read" else "rw")
            if access == "read":
                self.remounts.remove(home)   # its top level stays a tmpfs for seeded files
        else:
            for path in policy.home_readonly:
                self.grant(path, "ro")
        for index, path in enumerate(self.seeded):
            payload = self.generated.get(path, (f"seed-{index}",))[0]
            self.ops.append(File(payload, path, 0o644))
        if access == "restricted":
            self.remounts.append(home)

    def writable(self) -> None:
        for path in self.policy.home_writable + self.policy.extra_writable:
            if is_hidden(path, self.policy.hidden):
                # Only the launcher puts a hidden path here (the resolver drops
                # configured ones): an agent's session copy in the always-hidden
                # run directory (agentcopy.copies_dir), bound alone, exactly.
                self.ops.append(Bind(path, path))
            else:
                self.grant(path, "rw")
        self.ops.append(Bind(self.policy.project_dir, self.policy.project_dir))

    def writable_roots(self) -> tuple[str, ...]:
        roots = (self.policy.project_dir,) + self.policy.home_writable + self.policy.extra_writable
        if self.policy.home_access == "write":
            roots += (self.policy.home,)
        return roots

    def only_protected(self, path: str, roots) -> bool:
        """A pinned directory that does not exist yet: the placeholders make
        it holding nothing but protected paths (the `.git` of a project that
        is no repository: hooks/, config, config.worktree, commondir). With
        nothing else of the view below it, one read-only bind of it shows the
        same entries, read-only, and pins it, where the pin and a bind per
        entry took five mounts. Stricter in one way only: nothing new can be
        made in it — and git cannot make a repository there anyway (its
        hooks/ and config are read-only: `git init` fails). Another existing
        one is never listed here: the placeholders change it at every launch,
        and the plan cache would key on that."""
        if path in roots:
            return False
        # One that holds exactly another running session's placeholders (the
        # `.git` of a project that is no repository while a session of it
        # runs) is read-only as a whole too, or this session could make the
        # project a repository (docs/shared-channels.md §7).
        if os.path.lexists(path) and not self._placeholders_only(path):
            return False
        below = [p.path for p in self.policy.protected if _contains_any(path, (p.path,))]
        others = [p for pair in self.policy.session_files for p in pair]
        others += [n for n, _ in self.policy.notes] + list(self.policy.readonly_overlays)
        others += list(self.policy.hidden) + [p for p in (self.policy.staging_dir,) if p]
        return bool(below) and not any(_is_within(p, path) for p in others)

    def _placeholders_only(self, path: str) -> bool:
        """`path` is a `.git` directory (not a link) of no repository (no
        HEAD: read before anything else, so a repository's listing never keys
        the plan cache) whose every entry is a protected path's untouched
        placeholder: an empty directory, or a file holding exactly the
        placeholder. Only a `.git`: the listing of another pinned directory
        (`.claude`, whose placeholders come and go with each launch) would
        make every launch a plan-cache miss."""
        if os.path.basename(path) != ".git" or os.path.islink(path) \
                or not os.path.isdir(path) or os.path.lexists(os.path.join(path, "HEAD")):
            return False
        expected = {p.path: p for p in self.policy.protected
                    if os.path.dirname(p.path) == path}
        try:
            names = os.listdir(path)
        except OSError:
            return False
        for name in names:
            item = expected.get(os.path.join(path, name))
            if item is None or os.path.islink(item.path):
                return False
            try:
                if item.is_dir:
                    if not os.path.isdir(item.path) or os.listdir(item.path):
                        return False
                else:
                    with open(item.path, "rb") as handle:
                        if handle.read(len(item.placeholder) + 1) != item.placeholder:
                            return False
            except OSError:
                return False
        return True

    def overlays(self) -> None:
        roots = self.writable_roots()
        whole = []
        for path in self.policy.pinned:
            # Bound onto itself (a mount point cannot be renamed or removed:
            # EBUSY), before the read-only binds of the control files in it.
            if any(_is_within(path, w) for w in whole):
                continue   # read-only, and pinned, with the whole directory
            if any(_is_within(path, r) for r in roots) and not self._hidden(path):
                if self.only_protected(path, roots):
                    whole.append(path)
                    self.ops.append(RoBind(path, path))
                else:
                    self.ops.append(Bind(path, path))
        for item in self.policy.protected:
            if self._hidden(item.path) or not any(_is_within(item.path, r) for r in roots):
                continue
            if any(_is_within(item.path, w) for w in whole):
                continue   # read-only with the whole directory
            if os.path.islink(item.path):
                continue   # reported as a warning by the policy checks
            # An agent's session copy (agents/copy.py) is bound writable
            # in its place: what the agent saves there is merged back at exit.
            copy = next((c for c, dest in self.policy.session_files
                         if dest == item.path), None)
            self.ops.append(Bind(copy, item.path) if copy else RoBind(item.path, item.path))
        for path in self.policy.readonly_overlays:
            self.grant(path, "ro")
        if self.policy.staging_dir:
            self.ops.append(RoBind(self.policy.staging_dir, self.policy.staging_dir))
        for path, payload in self.policy.notes:
            if not self._hidden(path):
                self.ops.append(Data(payload, path, 0o444))

    def build(self) -> list[Op]:
        self.system()
        self.devices()
        self.identity()
        self.temp()
        self.run()
        self.home()
        self.writable()
        self.slurm_config()
        self.overlays()
        self.ops.extend(RemountRo(path) for path in self.remounts)
        # The root itself is a tmpfs bwrap made; without this, /planted or
        # /var/x would be writable (if discarded) instead of failing.
        self.ops.append(RemountRo("/"))
        return self.ops


def mount_ops(policy: Policy) -> list[Op]:
    return ViewBuilder(policy).build()


def placeholder_candidates(policy: Policy, mounted=None) -> tuple:
    """Protected paths in the writable surface, whether they exist or not:
    the launcher makes those missing *when it starts the sandbox* (another
    session's placeholder, there when the policy was made, may be gone)."""
    from agent_sandbox.policy.resolve import Protected

    roots = ViewBuilder(policy).writable_roots()
    # A note a plan mounts over its path (`mounted`: the plan's destinations;
    # bwrap's) needs a mount point there: in a directory the sandbox shows
    # read-only from the host (HOME_ACCESS=read, a HOME_READONLY entry) bwrap
    # cannot make one, so a missing note gets a placeholder too (an empty
    # file, removed with the project's others).
    shown = policy.home_readonly + ((policy.home,) if policy.home_access == "read" else ())
    mounted = frozenset(mounted or ())

    def needs_one(note) -> bool:
        parent = os.path.dirname(note.path)
        if any(_is_within(note.path, r) for r in roots):
            return True
        return (note.path in mounted and parent != policy.home and os.path.isdir(parent)
                and any(_is_within(parent, r) for r in shown))

    notes = tuple(Protected(path, False, os.path.lexists(path)) for path, _ in policy.notes)
    return tuple(p for p in policy.protected if any(_is_within(p.path, r) for r in roots)
                 and not policy.is_hidden(p.path)) + tuple(
        n for n in notes if not policy.is_hidden(n.path) and needs_one(n))


def placeholders(policy: Policy) -> tuple:
    """Protected paths that are missing but lie in the writable surface: the
    launcher creates them before the sandbox starts (a bind needs a mount
    point) and removes them at exit if they are still empty."""
    return tuple(p for p in placeholder_candidates(policy) if not p.exists)
