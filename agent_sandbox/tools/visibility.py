"""doctor's view of what a sandbox on this host would show of the host:
the top-level directories that exist here but not inside (site software
trees, scratch file systems a job may need), and, in a Slurm job with GPUs,
whether their devices would be bound (issue 15 items 3 and 4).

Both compare the host with the policy (pure but for listing / and reading
gres.conf) and never fail a launch: they are GO, or GAPS with the fix.
"""
from __future__ import annotations

import os

from agent_sandbox.tools.checks import GAPS, GO, Item

# Inside every sandbox whatever the policy says (the backends make them).
ALWAYS_SHOWN = ("/proc", "/dev", "/tmp", "/run", "/sys", "/var")


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def invisible_tops(policy, entries=None) -> list[str]:
    """Top-level directories of the host that no grant of `policy` shows."""
    granted = (list(policy.system_readonly) + list(policy.extra_writable)
               + list(policy.home_writable) + list(policy.readonly_overlays)
               + [policy.home, policy.project_dir] + list(ALWAYS_SHOWN)
               + [p for p in (policy.staging_dir, policy.chaperon_dir) if p])
    out = []
    for name in sorted(os.listdir("/") if entries is None else entries):
        top = "/" + name
        if os.path.islink(top) or not os.path.isdir(top):
            continue   # a symlink shows as its target does
        if not any(_within(g, top) or _within(top, g) for g in granted):
            out.append(top)
    return out


def site_paths_item(policy) -> Item:
    if policy is None:
        return Item("site paths", GO, "no policy (see config)")
    hidden = invisible_tops(policy)
    if not hidden:
        return Item("site paths", GO, "every top-level directory of this host is visible "
                    "inside", data={"invisible": []})
    return Item("site paths", GO, f"not visible inside: {' '.join(hidden)}",
                "if jobs need one: READONLY_MOUNTS+=(DIR) to read it, "
                "EXTRA_WRITABLE_PATHS+=(DIR/your-part) to write", data={"invisible": hidden})


def automount_item(policy, mounts) -> Item:
    """Automounter directories (autofs) the sandbox shows read-only: with
    PRIVATE_MOUNTS a share not mounted when the sandbox starts is unreachable
    inside (ELOOP); without it, one mounted later is as writable inside as on
    the host (docs/backends.md). `mounts`: mountinfo.parse_mountinfo rows."""
    if policy is None:
        return Item("automounts", GO, "no policy (see config)")
    shown = list(policy.system_readonly)
    points = sorted({point for point, fstype, _, _ in mounts if fstype == "autofs"
                     and any(_within(point, top) for top in shown)})
    if not points:
        return Item("automounts", GO, "no automounter directory below the read-only trees",
                    data={"autofs": []})
    listed = " ".join(points)
    from agent_sandbox.traits import TRAITS

    known = TRAITS.get(policy.backend)
    if known is not None and not known.mount_namespace:
        return Item("automounts", GO, f"autofs at {listed}: {known.display_name} shares the "
                    "host's mounts "
                    "and confines writes by path", data={"autofs": points})
    if policy.private_mounts:
        return Item("automounts", GAPS,
                    f"autofs at {listed}: a share not mounted when a sandbox starts answers "
                    "'Too many levels of symbolic links' inside (PRIVATE_MOUNTS keeps mounts "
                    "made after the start out)",
                    "look at what the session needs before starting (ls DIR/NAME), or set "
                    "PRIVATE_MOUNTS=false if these shares are read-only (CVMFS)",
                    data={"autofs": points, "private_mounts": True})
    return Item("automounts", GAPS,
                f"autofs at {listed}: with PRIVATE_MOUNTS=false a share mounted after the start "
                "appears inside as the host mounts it — writable if the share is",
                "PRIVATE_MOUNTS=true (shares then must be mounted before the start)",
                data={"autofs": points, "private_mounts": False})


def gpu_item(policy, environ) -> Item | None:
    """In a job or task with GPUs: would their devices be bound? None when
    Slurm allocated no GPU here."""
    from agent_sandbox.policy import gres

    indices = gres.allocated(environ) if "SLURM_JOB_ID" in environ else []
    if not indices or policy is None:
        return None
    files = gres.devices(environ, policy.slurm_conf)
    bound = [d for d in files if d in policy.devices]
    shown = ",".join(map(str, indices))
    if bound:
        return Item("gpus", GO, f"GPU(s) {shown} allocated: {' '.join(bound)} bound inside",
                    data={"allocated": indices, "bound": bound})
    why = ("DEVICES_BLACKLIST removes " + " ".join(files) if files else
           f"the node's gres.conf ({gres.conf_dir(policy.slurm_conf)}/gres.conf) names no "
           "existing device file for them")
    return Item("gpus", GAPS, f"GPU(s) {shown} allocated here, but no GPU device would be "
                f"bound inside: {why}", "list the GPUs' device files in gres.conf (File=) or "
                "in DEVICES=(/dev/nvidia*); ask the site admin about DEVICES_BLACKLIST",
                data={"allocated": indices, "bound": []})
