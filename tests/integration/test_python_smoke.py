"""The smoke set under another Python (issue 29, "Proven by"): as the
unprivileged test user, agent-sandbox installed into a venv of the
interpreter under test from a wheel of this tree (offline: --no-index and a
wheelhouse of that interpreter's own dependencies, tests/integration/
wheelhouse.py), then `doctor`, `run` on each backend, an interactive session
through a pty, an allowlist session (its egress proxy answers), and Slurm
through the chaperon (squeue, and a batch job whose wrapper and jobstart run
on the helper's interpreter) — one launch per item.

The interpreter: AGENT_SANDBOX_SMOKE_PYTHON (an absolute path the test user
can run, e.g. scripts/test-pythons.sh's root-owned copies of pyenv's builds
or a distribution root's /usr/bin/python3.14), else the one running pytest
(the real file behind a venv's python). Run pytest itself on a Python of the
same version with the test dependencies (the wheelhouse repacks what that
environment has installed): scripts/test-pythons.sh does, in parallel with
the unit suites, for 3.9, 3.10, 3.12 and 3.13.

Parallel runs share the test user: each works in its own directory of the
user's home (smoke-<version>) and writes no user config file.
"""
from __future__ import annotations

import json
import os
import pwd
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agent_sandbox.names import BACKENDS
from tests.integration import wheelhouse
from tests.support.launcher import TEST_USER, SandboxUser

# The install (the module's first setup) takes a minute or more where
# several Pythons' sets run at once: more than the default per-test limit.
pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("AGENT_SANDBOX_SMOKE_PYTHON") or os.path.realpath(sys.executable)


def _version(python: str) -> str:
    out = subprocess.run([python, "-I", "-S", "-c",
                          "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"{python} does not run: {out.stderr}"
    return out.stdout.strip()


VERSION = _version(PYTHON)


@pytest.fixture(scope="module")
def smoke_user() -> SandboxUser:
    """The test user as it is (no reset: other Pythons' runs share it)."""
    try:
        entry = pwd.getpwnam(TEST_USER)
    except KeyError:
        pytest.fail(f"the test user {TEST_USER} does not exist — run the integration suite "
                    "once (it creates it) or set AGENT_SANDBOX_TEST_USER")
    return SandboxUser(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


@pytest.fixture(scope="module")
def place(smoke_user) -> Path:
    """This run's directory in the user's home: the venv and the project."""
    base = smoke_user.home / f"smoke-{VERSION}"
    shutil.rmtree(base, ignore_errors=True)
    (base / "proj").mkdir(parents=True)
    for path in (base, base / "proj"):
        os.chown(path, smoke_user.uid, smoke_user.gid)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def entry(smoke_user, place) -> Path:
    """agent-sandbox installed by the user into a venv of PYTHON, offline."""
    ran = smoke_user.run([PYTHON, "-I", "-c", "print(1)"], cwd=place)
    assert ran.returncode == 0, (f"the test user cannot run {PYTHON} ({ran.stderr.strip()}): "
                                 "it must be root-owned and world-readable (scripts/"
                                 "test-pythons.sh copies pyenv's builds so)")
    wheels = Path(tempfile.mkdtemp(prefix="agent-sandbox-smoke-wheels-"))
    try:
        wheel = wheelhouse.build(REPO, wheels)
        for path in [wheels, *wheels.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        env = smoke_user.env(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
                             PIP_FIND_LINKS=str(wheels), PIP_DISABLE_PIP_VERSION_CHECK="1")
        for argv in ([PYTHON, "-m", "venv", place / "venv"],
                     # --no-compile: the first launches compile what they import
                     [place / "venv/bin/pip", "install", "--quiet", "--no-compile", wheel]):
            done = smoke_user.run(argv, env=env, cwd=place, timeout=300)
            assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    return place / "venv/bin/agent-sandbox"


def sandbox(user, entry, place, *argv, env=None, timeout=120):
    result = user.run([entry, *argv], cwd=place / "proj", env=env or user.env(),
                      timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_doctor_names_this_python_for_the_launcher_and_the_helper(smoke_user, entry, place):
    result = sandbox(smoke_user, entry, place, "doctor", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    items = {item["name"]: item for item in json.loads(result.stdout)["items"]}
    platform = items["platform"]["summary"]
    # The venv's base interpreter is root-owned and shown read-only: it is
    # the helper's too, so the stubs and the jobs below run on it.
    assert f"launcher {VERSION}" in platform and f"helper {VERSION}" in platform, platform


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_on_each_backend(smoke_user, entry, place, backend):
    result = sandbox(smoke_user, entry, place, "run", "--backend", backend, "--", "sh", "-c",
                     'echo "ran $AGENT_SANDBOX"')
    assert (result.returncode, result.stdout) == (0, "ran 1\n"), result.stderr


def test_an_interactive_session_through_a_pty(smoke_user, entry, place):
    """The launcher on a terminal relays a pty of its own (the helper makes
    it the command's controlling terminal)."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [str(entry), "run", "--backend", "bwrap", "--", "sh", "-c",
         "test -t 0 && test -t 1 && echo on-a-tty; exit 7"],
        stdin=slave, stdout=slave, stderr=slave, user=smoke_user.uid, group=smoke_user.gid,
        extra_groups=[], env=smoke_user.env(TERM="dumb"), cwd=str(place / "proj"),
        start_new_session=True, preexec_fn=_take_terminal)
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:      # EIO: every holder of the terminal exited
                    break
                if not chunk:
                    break
                seen += chunk
        assert proc.wait(timeout=30) == 7, seen
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"on-a-tty" in seen and b"Traceback" not in seen, seen


def _take_terminal() -> None:
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_an_allowlist_session_reaches_its_egress_proxy(smoke_user, entry, place):
    """NETWORK_MODE=allowlist: the proxy (on this Python) answers a host not
    in ALLOWED_HOSTS with its denial."""
    result = sandbox(smoke_user, entry, place, "run", "--backend", "bwrap", "--", "curl",
                     "-s", "--max-time", "30", "http://127.0.0.2:9/",
                     env=smoke_user.env(NETWORK_MODE="allowlist"))
    assert "agent-sandbox: network: 127.0.0.2" in result.stdout, result
    assert "is not in ALLOWED_HOSTS" in result.stdout, result


def test_slurm_through_the_chaperon(smoke_user, entry, place, slurm_cluster):
    """The chaperon (on this Python) answers squeue, and a batch job runs:
    its wrapper and jobstart on the helper's interpreter, this Python."""
    out = place / "proj" / "job.out"
    result = sandbox(smoke_user, entry, place, "run", "--backend", "bwrap", "--", "sh", "-c",
                     'head -n 1 "$(command -v sbatch)"; squeue -h -u "$USER" >/dev/null && '
                     'sbatch --wait -o job.out --wrap "echo job-ran"', timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.split("\n")[0]
    assert first.startswith("#!") and first.endswith(" -IS"), result.stdout
    assert _version(first[2:-4]) == VERSION, first
    assert out.read_text() == "job-ran\n"
