"""The install the user's next `agent-sandbox` runs, seen from a session
(docs/shared-channels.md §7), as the unprivileged user on each backend: with
HOME_ACCESS=write the entry point a pipx / uv tool install leaves in
~/.local/bin is writable inside, and the report must say self.protected:
partial, naming it. The test fails on the code it was found against.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.install import INSTALLED

BACKENDS = ["bwrap", "firejail", "landlock"]


def _own(path: Path, user) -> None:
    os.lchown(path, user.uid, user.gid)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_user_install_in_the_writable_home_is_reported(user, project, backend):
    """HOME_ACCESS=write: the entry point a pipx / uv tool install leaves in
    ~/.local/bin is writable inside — a session can replace what the user's
    next `agent-sandbox` runs. The report said self.protected: yes."""
    entry = user.home / ".local" / "bin" / "agent-sandbox"
    entry.parent.mkdir(parents=True, exist_ok=True)
    _own(entry.parent, user)
    if entry.is_symlink() or entry.exists():
        entry.unlink()
    entry.symlink_to(INSTALLED)
    _own(entry, user)
    try:
        env = user.env(HOME_ACCESS="write", PATH=f"{entry.parent}:/usr/local/bin:/usr/bin:/bin")
        report = user.run([entry, "run", "--dry-run", "--backend", backend, "--", "true"],
                          env=env, cwd=project)
        assert report.returncode == 0, report.stderr
        row = next(line for line in report.stdout.splitlines() if "self.protected" in line)
        assert row.split()[0] == "partial", row
        assert f"{entry} (what your next `agent-sandbox` runs first) is writable" in row
        # … and it is: the session can put its own file in its place.
        swap = user.run([entry, "run", "--backend", backend, "--", "/bin/sh", "-c",
                         f"ln -sf /bin/true {entry}.new && mv -f {entry}.new {entry} "
                         "&& echo swapped"], env=env, cwd=project)
        assert "swapped" in swap.stdout, swap.stderr
    finally:
        if entry.is_symlink() or entry.exists():
            entry.unlink()
