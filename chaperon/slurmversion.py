"""Which Slurm the chaperon talks to (issue 32): the version of the real
sbatch/srun, found without running them where possible.

`sbatch --version` reads slurm.conf first on some versions and fails where a
login node has none (configless without sackd, a broken config). Instead:

1. the binary's RUNPATH directories (read from the file: Debian's
   /usr/lib/<arch>/slurm-wlm) and the usual library directories next to the
   binary's prefix name `libslurmfull.so` / `libslurm.so.N`; the library holds
   SLURM_VERSION_STRING ("24.11.5") as a NUL-terminated literal — one read of
   a ~2 MB file (about 10 ms);
2. else `BINARY --version` with a clean environment and a 5 s limit.

The answer is cached per process with the binary's and the library's
identity (device, inode, size, mtime): a Slurm upgrade is seen at the next
command, and a session asks once.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess

_VERSION = re.compile(rb"\x00((?:1[7-9]|[2-4]\d)\.(?:0[1-9]|1[0-2])\.\d{1,3})\x00")
_RUNPATH = re.compile(rb"\x00(/[\x21-\x39\x3b-\x7e]*(?::/[\x21-\x39\x3b-\x7e]*)*)\x00")
_PRINTED = re.compile(r"slurm(?:-wlm)?\s+(\d+\.\d+(?:\.\d+)?)")
_MAX_BINARY = 64 << 20
_cache: dict = {}


def _identity(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(_MAX_BINARY)
    except OSError:
        return b""


def libraries(binary: str, data: bytes | None = None) -> list[str]:
    """Candidate Slurm libraries of `binary`, most likely first."""
    data = _read(binary) if data is None else data
    dirs = []
    for found in _RUNPATH.findall(data):
        for part in found.decode("ascii", "replace").split(":"):
            if "slurm" in part and part not in dirs:
                dirs.append(part)
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(binary)))
    for sub in ("lib/slurm", "lib64/slurm", "lib/*/slurm-wlm", "lib/slurm-wlm", "lib", "lib64",
                "lib/*"):
        dirs.extend(sorted(glob.glob(os.path.join(prefix, sub))))
    out = []
    for directory in dirs:
        for name in ("libslurmfull.so", "libslurm.so.*", "libslurmfull-*.so"):
            for path in sorted(glob.glob(os.path.join(directory, name))):
                if path not in out and os.path.isfile(path):
                    out.append(path)
    return out


def from_library(path: str) -> str | None:
    found = _VERSION.search(_read(path))
    return found.group(1).decode() if found else None


def from_run(binary: str) -> str | None:
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, timeout=5,
                              env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    found = _PRINTED.search(done.stdout.decode("utf-8", "replace"))
    return found.group(1) if found else None


def detect(binary: str | None) -> tuple[str | None, str]:
    """(version such as "24.11.5" or None, how it was found)."""
    if not binary:
        return None, "no sbatch or srun"
    key = _identity(binary)
    if key is None:
        return None, f"{binary} is missing"
    hit = _cache.get(key)
    if hit is not None and all(_identity(p) == ident for p, ident in hit[2]):
        return hit[0], hit[1]
    version, how, seen = None, "", []
    for library in libraries(binary):
        seen.append((library, _identity(library)))
        version = from_library(library)
        if version:
            how = f"the version string in {library}"
            break
    if not version:
        version = from_run(binary)
        how = f"`{os.path.basename(binary)} --version`" if version else "not found"
    _cache[key] = (version, how, tuple(seen))
    return version, how
