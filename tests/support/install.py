"""The install under test: where scripts/install.sh put agent-sandbox (the
prefix) and its admin directory, and the fixtures that check it is there and
write its admin file for one test.

Both are overridable so that two checkouts can be tested side by side on one
machine, each with its own install prefix (AGENT_SANDBOX_TEST_PREFIX) and admin
directory (AGENT_SANDBOX_TEST_ADMIN_DIR, given to install.sh as
AGENT_SANDBOX_ADMIN_DIR). A missing piece fails the test naming it; nothing is
skipped."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.waiting import wrote

PREFIX = os.environ.get("AGENT_SANDBOX_TEST_PREFIX", "/opt/agent-sandbox")
INSTALLED = f"{PREFIX}/venv/bin/agent-sandbox"

# The admin directory of the install under test (install.sh's AGENT_SANDBOX_ADMIN_DIR):
# parallel runs with their own installs keep their admin files apart.
ADMIN_DIR = Path(os.environ.get("AGENT_SANDBOX_TEST_ADMIN_DIR", "/etc/agent-sandbox"))
ADMIN_FILE = ADMIN_DIR / "sandbox.conf"


@pytest.fixture(scope="session")
def installed() -> str:
    if not os.access(INSTALLED, os.X_OK):
        pytest.fail(f"{INSTALLED} is missing — run scripts/install.sh (or scripts/test.sh) "
                    "as root first")
    if shutil.which("bwrap") is None:
        pytest.fail("bwrap is not installed — apt-get install bubblewrap (scripts/install.sh)")
    return INSTALLED


@pytest.fixture
def admin():
    """Write the admin file (root-owned by default, 0644) for one test, then
    remove it."""
    created_dir = not ADMIN_DIR.exists()
    ADMIN_DIR.mkdir(mode=0o755, exist_ok=True)
    assert not ADMIN_FILE.exists(), "a real admin config is installed on this machine"

    def write(text: str, mode: int = 0o644, uid: int = 0):
        ADMIN_FILE.write_text(text)
        os.chown(ADMIN_FILE, uid, 0)
        ADMIN_FILE.chmod(mode)
        wrote()

    yield write
    ADMIN_FILE.unlink(missing_ok=True)
    if created_dir:
        ADMIN_DIR.rmdir()


@pytest.fixture
def slurm_boundary_optional(admin):
    """The admin's word that agent profiles may run on landlock on this Slurm
    host (SLURM_BOUNDARY_OPTIONAL=true): without it an agent launch on
    landlock is refused here, its munge socket being reachable (issue 31,
    launch/run.py implied_require; tests/adversarial/test_landlock_closed.py
    proves the refusal). For the tests of agents' own behaviour on landlock;
    when the supervisor gives landlock slurm.boundary it is no longer needed."""
    admin("SLURM_BOUNDARY_OPTIONAL=true\n")
