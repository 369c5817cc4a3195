"""The devices of a job's allocated GPUs (SPEC §5 devices, issue 15 item 3).

A batch job or task that Slurm gave GPUs must reach them inside its sandbox
without the user listing them in DEVICES. Slurm says which GPUs by index
(SLURM_STEP_GPUS for a task, SLURM_JOB_GPUS for the batch script — set by
slurmstepd, never by the caller: the chaperon passes neither to Slurm); the
node's gres.conf says which device files those indices are: the `File=`
entries of its `Name=gpu` lines, in order. NVIDIA GPUs need their control
devices too (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset) and
the /dev/dri nodes of the same PCI device (found through
/proc/driver/nvidia/gpus/*/information and /sys/class/drm). A node whose
gres.conf names no files (AutoDetect=nvml) gets /dev/nvidia<index>.

Parsing is pure (`parse`, `hostlist`, `allocated`); `devices` reads the
node's files. The policy applies DEVICES_BLACKLIST to the result like to
DEVICES.
"""
from __future__ import annotations

import os
import re

NVIDIA_CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                  "/dev/nvidia-modeset")
_NVIDIA = re.compile(r"/dev/nvidia(\d+)")


def hostlist(expression: str) -> list[str]:
    """Slurm's host list syntax: `n[1-3,7],gpu01`, `/dev/nvidia[0-3]` (zero
    padding kept, several bracket groups allowed)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            items.append(expression[start:i])
            start = i + 1
    items.append(expression[start:])
    out: list[str] = []
    for item in filter(None, items):
        match = re.search(r"\[([^\]]*)\]", item)
        if not match:
            out.append(item)
            continue
        head, tail = item[:match.start()], item[match.end():]
        for part in match.group(1).split(","):
            low, _, high = part.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                return []   # not a host list we understand: nothing, never a guess
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                out.extend(hostlist(f"{head}{number:0{width}d}{tail}"))
    return out


def parse(text: str, node: str) -> list[str] | None:
    """The GPU device files of `node`, in index order; None when the
    node's GPUs are autodetected (no File= for them)."""
    files: list[str] = []
    autodetect = False
    for raw in text.split("\n"):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = {}
        for word in line.split():
            key, _, value = word.partition("=")
            fields[key.lower()] = value
        nodes = fields.get("nodename")
        if nodes is not None and node not in hostlist(nodes):
            continue
        if fields.get("autodetect", "off").lower() not in ("off", ""):
            autodetect = True
        if fields.get("name", "").lower() != "gpu":
            continue
        if "file" in fields:
            files.extend(hostlist(fields["file"]))
        elif "count" in fields or "type" in fields:
            autodetect = True
    return files if files or not autodetect else None


def allocated(environ) -> list[int]:
    """The GPU indices Slurm allocated to this task (or batch script)."""
    value = environ.get("SLURM_STEP_GPUS") if "SLURM_STEP_ID" in environ else None
    if value is None:
        value = environ.get("SLURM_JOB_GPUS", "")
    return [int(v) for v in value.split(",") if v.strip().isdigit()]


def _nvidia_dri(minor: int) -> list[str]:
    """The /dev/dri nodes of the PCI device whose NVIDIA minor is `minor`."""
    found = []
    base = "/proc/driver/nvidia/gpus"
    try:
        buses = os.listdir(base)
    except OSError:
        return []
    for bus in buses:
        try:
            with open(os.path.join(base, bus, "information"), encoding="utf-8") as handle:
                info = handle.read()
        except OSError:
            continue
        if not re.search(rf"^Device Minor:\s*{minor}\s*$", info, re.M):
            continue
        try:
            names = os.listdir("/sys/class/drm")
        except OSError:
            return []
        for name in names:
            if re.fullmatch(r"(card|renderD)\d+", name) and os.path.basename(
                    os.path.realpath(f"/sys/class/drm/{name}/device")).lower() == bus.lower():
                found.append(f"/dev/dri/{name}")
    return found


def conf_dir(slurm_conf: str | None) -> str:
    return os.path.dirname(slurm_conf or "/etc/slurm/slurm.conf")


def devices(environ, slurm_conf: str | None) -> tuple[str, ...]:
    """The device files of the GPUs Slurm allocated here (existing ones,
    with their NVIDIA companions); () outside a job or without GPUs."""
    indices = allocated(environ) if "SLURM_JOB_ID" in environ else []
    if not indices:
        return ()
    node = environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    try:
        with open(os.path.join(conf_dir(slurm_conf), "gres.conf"), encoding="utf-8") as handle:
            files = parse(handle.read(), node)
    except OSError:
        files = None
    if files is None:
        files = [f"/dev/nvidia{i}" for i in indices]
    else:
        files = [files[i] for i in indices if i < len(files)]
    out = list(files)
    for path in files:
        match = _NVIDIA.fullmatch(path)
        if match:
            out += list(NVIDIA_CONTROL) + _nvidia_dri(int(match.group(1)))
    return tuple(dict.fromkeys(filter(None, map(device_node, out))))


def device_node(path: str) -> str | None:
    """`path` as the real path of a character or block device under /dev, or
    None: a File= outside /dev (also through `..` or a symlink), a missing
    one or one that is not a device node is a site mistake, never bound."""
    import stat

    real = os.path.realpath(path)
    if not real.startswith("/dev/"):
        return None
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return None
    return real if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else None
