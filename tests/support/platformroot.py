"""Real other distributions on this machine's kernel (issue 30): a Debian
root made by scripts/platform-root.sh (debootstrap, cached under
/var/cache/agent-sandbox-roots), entered with pivot_root in a mount namespace
of its own; inside, an unprivileged user of the root's own /etc/passwd
installs the product with the root's python3 from a wheelhouse (offline) and
the smoke cases of tests/probes/platform_smoke.py run as that user.

AGENT_SANDBOX_TEST_PLATFORM_SUITES: the suites (default "bullseye": Debian 11,
Python 3.9, bubblewrap 0.4.1, firejail 0.9.64); "sid" brings Python 3.14.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.install import PREFIX

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "platform-root.sh"
SMOKE = REPO / "tests" / "probes" / "platform_smoke.py"
# What each suite brings (docs/platforms.md's measured rows, checked by
# tests/unit/test_platforms_doc.py and, against the root, by test_platform_roots.py).
CLAIMED = {"bullseye": {"python3": "3.9.", "bubblewrap": "0.4.1", "firejail": "0.9.64",
                        "util-linux": "2.36"},
           "trixie": {"python3": "3.13.", "bubblewrap": "0.12", "firejail": "0.9.74"},
           "sid": {"python3": "3.14.", "bubblewrap": "0.13", "firejail": "0.9.80"}}
SUITES = os.environ.get("AGENT_SANDBOX_TEST_PLATFORM_SUITES", "bullseye").split()


def script(*args, timeout=900) -> str:
    if os.geteuid() != 0:
        pytest.fail("the platform roots need root (debootstrap, mount namespaces): run as root")
    result = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True,
                            timeout=timeout,
                            env={**os.environ, "AGENT_SANDBOX_HOST_PYTHON":
                                 f"{PREFIX}/venv/bin/python"})
    assert result.returncode == 0, f"platform-root.sh {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


class PlatformRoot:
    """One suite's root, its user set up; `smoke(case, backend)` runs one
    case inside and returns its JSON."""

    def __init__(self, suite: str, state: Path):
        self.suite = suite
        self.path = Path(script("build", suite))
        self.versions = dict(line.split(" ", 1) for line in
                             (self.path / ".versions").read_text().splitlines())
        self.wheelhouse = script("wheels", suite)
        self.state = state

    def inside(self, *argv, timeout=300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(SCRIPT), "run", self.suite, "--state", str(self.state),
             "--ro", f"{self.wheelhouse}:/wheels", "--ro", f"{SMOKE}:/smoke.py", "--", *argv],
            capture_output=True, text=True, timeout=timeout)

    def smoke(self, case: str, *args, timeout=300) -> dict:
        result = self.inside("python3", "/smoke.py", case, *args, timeout=timeout)
        assert result.returncode == 0, f"the smoke driver failed ({case}): {result.stderr}"
        try:
            return json.loads(result.stdout)
        except ValueError:
            pytest.fail(f"the smoke driver printed no JSON ({case}): {result.stdout!r} "
                        f"{result.stderr}")


@pytest.fixture(scope="module", params=SUITES)
def platform_root(request, tmp_path_factory):
    root = PlatformRoot(request.param, tmp_path_factory.mktemp(f"root-{request.param}"))
    made = root.smoke("setup", "/wheels", timeout=900)
    assert made["rc"] == 0 and made["stdout"].startswith("agent-sandbox "), made
    print(f"{request.param}: {root.versions}", file=sys.stderr)
    return root
