"""A wheelhouse for installing agent-sandbox with no network: the package's
own wheel, built from this source tree, and its dependencies' wheels packed
again from what the test environment has installed.

`pip download` needs the network and pip's cache holds HTTP responses, not
wheels; an installed distribution, though, is a wheel unpacked: its files
(importlib.metadata's `files`, from RECORD) under site-packages, its tags in
its WHEEL file. Zipping them back with a fresh RECORD gives a wheel pip
installs like the one it came from (scripts outside site-packages are left
out: pip writes entry points anew from entry_points.txt).
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

LEFT_OUT = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "_", text).lower()


def repack(dist: metadata.Distribution, out: Path) -> Path:
    """dist as a wheel in `out`."""
    info = next(f for f in dist.files if f.parent.name.endswith(".dist-info")
                and f.name == "WHEEL")
    tags = [line.split(":", 1)[1].strip() for line in
            dist.read_text("WHEEL").splitlines() if line.startswith("Tag:")]
    name = _name(dist.metadata["Name"])
    parts = [".".join(dict.fromkeys(t.split("-")[i] for t in tags)) for i in range(3)]
    wheel = out / f"{name}-{dist.version}-{'-'.join(parts)}.whl"   # py2.py3-none-any
    record_name = f"{info.parent}/RECORD"
    rows = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in dist.files:
            text = str(file)
            if text.startswith("..") or "__pycache__" in file.parts or \
                    (file.parent == info.parent and file.name in LEFT_OUT):
                continue
            data = Path(file.locate()).read_bytes()
            archive.writestr(text, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            rows.append(f"{text},sha256={digest.decode()},{len(data)}")
        rows.append(f"{record_name},,")
        archive.writestr(record_name, "\n".join(rows) + "\n")
    return wheel


def closure(roots) -> list[metadata.Distribution]:
    """The installed distributions `roots` need, transitively (no extras)."""
    seen, todo, out = set(), list(roots), []
    while todo:
        name = _name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        out.append(dist)
        for text in dist.requires or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return out


def build(source: Path, out: Path, extra=("pip",)) -> Path:
    """Fill `out`; returns agent-sandbox's wheel. Built from a copy of the
    tree (setuptools writes build/ beside its sources)."""
    out.mkdir(parents=True, exist_ok=True)
    tree = out / "src"
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns(
        ".git", "tests", "benchmarks", "build", "*.egg-info", "__pycache__"))
    subprocess.run([_builder(), "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "-w", str(out), str(tree)],
                   check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    shutil.rmtree(tree)
    (wheel,) = out.glob("agent_sandbox-*.whl")
    # The install's own requirements on this Python (tomli only below 3.11),
    # no extra's: from the wheel's metadata (this Python need not have the
    # package installed: the smoke set runs on the tree, PYTHONPATH).
    wanted = [Requirement(r) for r in _requires(wheel)]
    for dist in closure([r.name for r in wanted
                         if r.marker is None or r.marker.evaluate({"extra": ""})]
                        + list(extra)):
        repack(dist, out)
    return wheel


def _builder() -> str:
    """A Python that builds the (pure) wheel offline: the install's, whose
    setuptools reads pyproject's [project] (a venv of 3.12+ has no
    setuptools, 3.9's ensurepip brings one too old, 58: it builds
    UNKNOWN-0.0.0); this one where there is no install."""
    from tests.support.install import PREFIX

    builder = f"{PREFIX}/venv/bin/python"
    return builder if os.access(builder, os.X_OK) else sys.executable


def _requires(wheel: Path) -> list:
    """Requires-Dist of a wheel's METADATA."""
    from email.parser import Parser

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist()
                    if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        meta = Parser().parsestr(archive.read(name).decode())
    return meta.get_all("Requires-Dist") or []
