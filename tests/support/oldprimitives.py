"""Real older sandbox programs for the real-backend tests of issue 30:
Debian 11's bubblewrap 0.4.1 and firejail 0.9.64, downloaded once from the
Debian mirror this machine uses and unpacked (dpkg-deb -x) into a
root-owned cache directory, never over the host's programs. The tests point
the admin keys BWRAP_PATH / FIREJAIL_PATH at them.

firejail 0.9.64 is setuid root and reads /etc/firejail like the host's; its
helpers (fseccomp, fcopy…) are the host's under /usr/lib/…/firejail, which
0.9.64 runs as well. bookworm's libraries satisfy both binaries.

A fresh CI machine that reaches deb.debian.org gets them in a second or two;
a machine that cannot fails the test naming what is missing (nothing is
skipped).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

MIRROR = os.environ.get("AGENT_SANDBOX_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Debian 11 (bullseye), the versions RHEL 9 / Debian 11 / Ubuntu 22.04 sites have.
PACKAGES = {
    "bwrap": ("pool/main/b/bubblewrap/bubblewrap_0.4.1-3_amd64.deb", "usr/bin/bwrap",
              "bubblewrap 0.4.1"),
    "firejail": ("pool/main/f/firejail/firejail_0.9.64.4-2+deb11u1_amd64.deb",
                 "usr/bin/firejail", "firejail version 0.9.64"),
}
CACHE = Path(os.environ.get("AGENT_SANDBOX_TEST_OLD_PRIMITIVES", "/var/cache/agent-sandbox-test"))


def _root_owned(path: Path) -> None:
    """Every directory from / to `path` root-owned and not group/world
    writable: agent-sandbox refuses a program the user could replace."""
    for part in [path, *path.parents]:
        info = part.stat()
        assert info.st_uid == 0 and not info.st_mode & 0o022, (
            f"{part} must be root-owned and writable by root only for the old-primitive "
            "fixture")


def old_program(name: str) -> str:
    """The path of the old `name` (bwrap, firejail), fetched and unpacked
    once into CACHE/<package>/ (as root)."""
    if os.geteuid() != 0:
        pytest.fail("the old-primitive fixture must run as root (it unpacks a setuid firejail)")
    url_path, inside, expect = PACKAGES[name]
    deb = os.path.basename(url_path)
    root = CACHE / deb.rsplit(".", 1)[0]
    program = root / inside
    if not program.exists():
        CACHE.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chown(CACHE, 0, 0)
        CACHE.chmod(0o755)
        download = CACHE / f"{deb}.part"
        try:
            with urllib.request.urlopen(f"{MIRROR}/{url_path}", timeout=60) as answer, \
                    open(download, "wb") as out:
                shutil.copyfileobj(answer, out)
        except OSError as exc:
            pytest.fail(f"cannot download {MIRROR}/{url_path} ({exc}): the old-primitive tests "
                        "need Debian 11's package (set AGENT_SANDBOX_TEST_DEBIAN_MIRROR to a "
                        "reachable mirror)")
        unpack = CACHE / f"{root.name}.tmp"
        shutil.rmtree(unpack, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(download), str(unpack)], check=True)
        download.unlink()
        os.chmod(unpack, 0o755)
        os.rename(unpack, root)
    _root_owned(program.parent)
    version = subprocess.run([str(program), "--version"], capture_output=True, text=True)
    assert expect in version.stdout + version.stderr, (
        f"{program} --version says {version.stdout + version.stderr!r}, not {expect}")
    return str(program)


@pytest.fixture(scope="session")
def old_bwrap() -> str:
    return old_program("bwrap")


@pytest.fixture(scope="session")
def old_firejail() -> str:
    return old_program("firejail")


# util-linux 2.32 (RHEL 8) has no `unshare --map-current-user` (2.35): a
# stand-in that answers it as 2.32 does and passes everything else on.
UNSHARE_232 = """#!/bin/sh
for arg in "$@"; do
    case "$arg" in
        --map-current-user)
            echo "unshare: unrecognized option '--map-current-user'" >&2
            echo "Try 'unshare --help' for more information." >&2
            exit 1;;
        --) break;;
    esac
done
exec /usr/bin/unshare "$@"
"""


@pytest.fixture(scope="session")
def old_unshare() -> str:
    """A root-owned stand-in for util-linux 2.32's unshare (UNSHARE_PATH)."""
    directory = CACHE / "unshare-2.32"
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    path = directory / "unshare"
    path.write_text(UNSHARE_232)
    path.chmod(0o755)
    _root_owned(path.parent)
    return str(path)
