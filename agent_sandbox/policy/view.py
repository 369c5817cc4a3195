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

Operations are small tuples: (kind, *args). Kinds:
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

from agent_sandbox.policy.resolve import MARKER_PATH, Policy, _is_within

Op = tuple


def _mode(path: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o755


class ViewBuilder:
    def __init__(self, policy: Policy):
        self.policy = policy
        self.hidden = policy.hidden
        self.ops: list[Op] = []
        self.remounts: list[str] = []
        self.seeded = policy.home_seeded if policy.home_access != "write" else ()
        # Home files that held a secret: bound from a blanked copy (boundfiles.py).
        self.generated = {path: (payload, mode) for path, payload, mode
                          in getattr(policy, "generated_files", ())}

    def _hidden(self, path: str) -> bool:
        return any(_is_within(path, h) for h in self.hidden)

    def _contains(self, path: str, paths) -> bool:
        return any(_is_within(h, path) and h != path for h in paths)

    def grant(self, dest: str, mode: str, src: str | None = None) -> None:
        """Make `dest` show the host's `src` (default: dest itself) read-only
        ("ro") or writable ("rw"), minus hidden paths. Both the path as named
        and its real path are checked, so a symlinked parent cannot smuggle a
        hidden path in. Seeded files are left out: a `file` op creates them."""
        src = src or dest
        if self._hidden(dest) or self._hidden(src) or dest in self.seeded:
            return
        if src in self.generated:
            payload, file_mode = self.generated[src]
            self.ops.append(("ro-data", payload, dest, file_mode))
            return
        if os.path.islink(src):
            target = os.readlink(src)
            resolved = os.path.realpath(src)
            if not self._hidden(resolved):
                self.ops.append(("symlink", target, dest))
            return
        if not os.path.lexists(src):
            return
        real = os.path.realpath(src)
        if self._hidden(real):
            return
        needs_carving = (self._contains(src, self.hidden) or self._contains(dest, self.hidden)
                         or self._contains(real, self.hidden) or self._contains(dest, self.seeded)
                         or self._contains(src, self.generated))
        if not needs_carving or not os.path.isdir(src):
            self.ops.append(("ro-bind" if mode == "ro" else "bind", src, dest))
            return
        self.carve(dest, mode, src)

    def carve(self, dest: str, mode: str, src: str) -> None:
        self.ops.append(("tmpfs", dest, _mode(src)))
        try:
            entries = sorted(os.listdir(src))
        except OSError:
            entries = []
        for name in entries:
            self.grant(os.path.join(dest, name), mode, os.path.join(src, name))
        if mode == "ro":
            self.remounts.append(dest)

    # ------------------------------------------------------------------ parts
    def system(self) -> None:
        for path in self.policy.system_readonly:
            self.grant(path, "ro")
        for path in self.policy.slurm_masks:
            self.ops.append(("tmpfs", path, 0o755))
            self.remounts.append(path)
        for path in self.policy.slurm_binaries:
            self.ops.append(("ro-bind", "/dev/null", path))

    def devices(self) -> None:
        self.ops.append(("proc", "/proc"))
        self.ops.append(("dev", "/dev"))
        for device in self.policy.devices:
            self.ops.append(("dev-bind", device, device))
        if self.policy.private_ipc:
            self.ops.append(("tmpfs", "/dev/shm", 0o1777))
        elif os.path.isdir("/dev/shm"):
            self.ops.append(("bind", "/dev/shm", "/dev/shm"))

    def identity(self) -> None:
        if self.policy.filter_passwd and "/etc" in self.policy.system_readonly:
            for name in ("passwd", "group", "nsswitch.conf"):
                self.ops.append(("ro-data", f"etc-{name}", f"/etc/{name}", 0o644))

    def temp(self) -> None:
        for path in ("/tmp", "/var/tmp"):
            if self.policy.private_tmp:
                if path == "/tmp" or os.path.isdir(path):
                    self.ops.append(("tmpfs", path, 0o1777))
            elif os.path.isdir(path):
                self.ops.append(("bind", path, path))

    def run(self) -> None:
        self.ops.append(("tmpfs", "/run", 0o755))
        for path in self.policy.run_binds:
            self.grant(path, "ro")
        self.ops.append(("ro-data", "marker", MARKER_PATH, 0o444))
        if self.policy.chaperon_dir:
            from chaperon.wire.session import SANDBOX_DIR, STUB_BIN, STUB_COMMANDS

            self.ops.append(("bind", self.policy.chaperon_dir, SANDBOX_DIR))
            self.ops.append(("ro-data", "stub", f"{STUB_BIN}/.stub", 0o755))
            for name in STUB_COMMANDS:
                self.ops.append(("symlink", ".stub", f"{STUB_BIN}/{name}"))

    def home(self) -> None:
        policy = self.policy
        home = policy.home
        self.ops.append(("tmpfs", home, _mode(home)))
        access = policy.home_access
        if access in ("read", "write"):
            self.ops.pop()
            self.carve(home, "ro" if access == "read" else "rw", home)
            if access == "read":
                self.remounts.remove(home)   # its top level stays a tmpfs for seeded files
        else:
            for path in policy.home_readonly:
                self.grant(path, "ro")
        for index, path in enumerate(self.seeded):
            payload = self.generated.get(path, (f"seed-{index}",))[0]
            self.ops.append(("file", payload, path, 0o644))
        if access == "restricted":
            self.remounts.append(home)

    def writable(self) -> None:
        for path in self.policy.home_writable + self.policy.extra_writable:
            self.grant(path, "rw")
        self.ops.append(("bind", self.policy.project_dir, self.policy.project_dir))

    def writable_roots(self) -> tuple[str, ...]:
        roots = (self.policy.project_dir,) + self.policy.home_writable + self.policy.extra_writable
        if self.policy.home_access == "write":
            roots += (self.policy.home,)
        return roots

    def overlays(self) -> None:
        roots = self.writable_roots()
        for path in self.policy.pinned:
            # Bound onto itself (a mount point cannot be renamed or removed:
            # EBUSY), before the read-only binds of the control files in it.
            if any(_is_within(path, r) for r in roots) and not self._hidden(path):
                self.ops.append(("bind", path, path))
        for item in self.policy.protected:
            if self._hidden(item.path) or not any(_is_within(item.path, r) for r in roots):
                continue
            if os.path.islink(item.path):
                continue   # reported as a warning by the policy checks
            self.ops.append(("ro-bind", item.path, item.path))
        for path in self.policy.readonly_overlays:
            self.grant(path, "ro")
        if self.policy.staging_dir:
            self.ops.append(("ro-bind", self.policy.staging_dir, self.policy.staging_dir))
        for path, payload in self.policy.notes:
            if not self._hidden(path):
                self.ops.append(("ro-data", payload, path, 0o444))

    def build(self) -> list[Op]:
        self.system()
        self.devices()
        self.identity()
        self.temp()
        self.run()
        self.home()
        self.writable()
        self.overlays()
        self.ops.extend(("remount-ro", path) for path in self.remounts)
        # The root itself is a tmpfs bwrap made; without this, /planted or
        # /var/x would be writable (if discarded) instead of failing.
        self.ops.append(("remount-ro", "/"))
        return self.ops


def mount_ops(policy: Policy) -> list[Op]:
    return ViewBuilder(policy).build()


def placeholder_candidates(policy: Policy) -> tuple:
    """Protected paths in the writable surface, whether they exist or not:
    the launcher makes those missing *when it starts the sandbox* (another
    session's placeholder, there when the policy was made, may be gone)."""
    from agent_sandbox.policy.resolve import Protected

    roots = ViewBuilder(policy).writable_roots()
    notes = tuple(Protected(path, False, os.path.lexists(path)) for path, _ in policy.notes)
    return tuple(p for p in policy.protected + notes
                 if any(_is_within(p.path, r) for r in roots) and not policy.is_hidden(p.path))


def placeholders(policy: Policy) -> tuple:
    """Protected paths that are missing but lie in the writable surface: the
    launcher creates them before the sandbox starts (a bind needs a mount
    point) and removes them at exit if they are still empty."""
    return tuple(p for p in placeholder_candidates(policy) if not p.exists)
