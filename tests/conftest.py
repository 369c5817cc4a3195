"""Shared fixtures: an unprivileged user with secrets, and a way to run the
installed agent-sandbox as that user.

The integration tests must prove the jail works for an ordinary user, so they
run the installed console script (scripts/install.sh puts it in
/opt/agent-sandbox) as a user created here, never as root. A missing piece of
the system makes the test fail with a message naming it; nothing is skipped.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# Overridable so that two checkouts can be tested side by side on one machine,
# each with its own install prefix, admin directory (AGENT_SANDBOX_TEST_ADMIN_DIR,
# given to install.sh as AGENT_SANDBOX_ADMIN_DIR) and users (never two runs with
# the same ones).
PREFIX = os.environ.get("AGENT_SANDBOX_TEST_PREFIX", "/opt/agent-sandbox")
INSTALLED = f"{PREFIX}/venv/bin/agent-sandbox"
TEST_USER = os.environ.get("AGENT_SANDBOX_TEST_USER", "astest")
OTHER_USER = os.environ.get("AGENT_SANDBOX_TEST_OTHER_USER", "asother")
SECRET_ENV = {
    "GH_TOKEN": "ghp_secret_token_value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "VAULT_TOKEN": "vault-secret",
    "ANTHROPIC_API_KEY": "sk-ant-kept-value",
}
SECRET_FILES = {
    ".ssh/id_rsa": "PRIVATE KEY",
    ".ssh/config": "Host *",
    ".aws/credentials": "[default]\naws_secret_access_key=x\n",
    ".gnupg/secring.gpg": "gpg",
    ".netrc": "machine example.org password hunter2\n",
    ".config/gh/hosts.yml": "oauth_token: gho_x\n",
    ".docker/config.json": "{}",
    ".kube/config": "apiVersion: v1",
}
HIDDEN = [".ssh", ".ssh/id_rsa", ".aws", ".aws/credentials", ".gnupg", ".netrc",
          ".config/gh", ".config/gh/hosts.yml", ".docker/config.json", ".kube",
          ".local/state/agent-sandbox"]


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        if os.geteuid() != 0:
            pytest.fail(f"the tests must run as root to create the test user {name} "
                        "(run scripts/test.sh as root)")
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
        return pwd.getpwnam(name)


# The plan cache does not store a compile that read a file changed less than
# RACY_NS (0.1 s, plancache/plans.py) before it: a test that edits a
# configuration and expects the next launches to hit the cache would pass
# or fail by the machine's speed. So a launch waits until the test's last
# write through these fixtures is older than that.
SETTLED_S = 0.12
_last_write = [0.0]


def wrote() -> None:
    """A test wrote a file by itself: the next launch settles after it."""
    _last_write[0] = time.monotonic()


def kill_launcher_when_ready(user, project: Path, argv: list, ready: Path, env) -> None:
    """Start `argv` (a launch) as `user` in `project`; once the session has
    made `ready`, SIGKILL the launcher — what a killed terminal or an OOM kill
    leaves for the next launch and `status` to clean up."""
    proc = subprocess.Popen(argv, user=user.uid, group=user.gid, extra_groups=[], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(0.3)    # the sandbox dies with its launcher


def remove_entries(home: Path, entries) -> None:
    """Remove each of `entries` below `home` (a file, a link — never
    followed — or a tree): the agent tests' state, before and after."""
    for entry in entries:
        path = home / entry
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)


def settle() -> None:
    """Wait until the last file written through the fixtures has aged past
    the plan cache's racy window (SETTLED_S)."""
    wait = _last_write[0] + SETTLED_S - time.monotonic()
    if wait > 0:
        time.sleep(wait)


@dataclass
class SandboxUser:
    name: str
    uid: int
    gid: int
    home: Path

    @property
    def project(self) -> Path:
        return self.home / "proj"

    def env(self, **extra: str) -> dict[str, str]:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
               "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8",
               "SANDBOX_QUIET": "1", **SECRET_ENV}
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def run(self, argv, *, env=None, cwd=None, input=None, timeout=60, text=True,
            **kwargs) -> subprocess.CompletedProcess:
        settle()
        return subprocess.run(
            [str(a) for a in argv], user=self.uid, group=self.gid, extra_groups=[],
            env=env if env is not None else self.env(), cwd=str(cwd or self.project),
            input=input, capture_output=True, text=text, timeout=timeout, **kwargs)

    def sandbox(self, *command, options=(), **kwargs) -> subprocess.CompletedProcess:
        """`agent-sandbox run OPTIONS -- COMMAND` as this user."""
        return self.run([INSTALLED, "run", *options, "--", *command], **kwargs)

    def write(self, relative: str, content: str, mode: int = 0o644) -> Path:
        path = self.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)
        _last_write[0] = time.monotonic()
        for parent in [path, *path.parents]:
            if parent == self.home.parent:
                break
            os.chown(parent, self.uid, self.gid)
        return path

    def set_config(self, text: str) -> None:
        self.write(".config/agent-sandbox/sandbox.conf", text)


@pytest.fixture(scope="session")
def installed() -> str:
    if not os.access(INSTALLED, os.X_OK):
        pytest.fail(f"{INSTALLED} is missing — run scripts/install.sh (or scripts/test.sh) "
                    "as root first")
    if shutil.which("bwrap") is None:
        pytest.fail("bwrap is not installed — apt-get install bubblewrap (scripts/install.sh)")
    return INSTALLED


@pytest.fixture(scope="session")
def other_user() -> pwd.struct_passwd:
    return _ensure_user(OTHER_USER)


@pytest.fixture(scope="session")
def user(installed, other_user) -> SandboxUser:
    entry = _ensure_user(TEST_USER)
    sandbox_user = SandboxUser(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
    home = sandbox_user.home
    for relative in (".config/agent-sandbox", ".local/state/agent-sandbox"):
        shutil.rmtree(home / relative, ignore_errors=True)
    for relative, content in SECRET_FILES.items():
        sandbox_user.write(relative, content, 0o600)
    sandbox_user.write(".bashrc", "# test user's bashrc\n")
    sandbox_user.write(".gitconfig", "[user]\n\tname = Test User\n")
    sandbox_user.write(".config/other/settings.txt", "visible when .config is granted\n")
    shutil.rmtree(sandbox_user.project, ignore_errors=True)
    sandbox_user.project.mkdir()
    os.chown(sandbox_user.project, sandbox_user.uid, sandbox_user.gid)
    (home / ".ssh").chmod(0o700)
    return sandbox_user


@pytest.fixture
def project(user) -> Path:
    """A fresh, empty project directory below the user's home."""
    import uuid

    path = user.project / f"p{uuid.uuid4().hex[:8]}"
    path.mkdir()
    os.chown(path, user.uid, user.gid)
    yield path
    user.set_config("")


@pytest.fixture
def probes(user, project) -> Path:
    """tests/probes copied into the project, where the sandboxed user can read them."""
    target = project / "probes"
    shutil.copytree(Path(__file__).parent / "probes", target)
    for path in [target, *target.iterdir()]:
        os.chown(path, user.uid, user.gid)
    return target


# --- Slurm: a real single-node cluster (scripts/slurm-cluster.sh) -----------------

SLURM_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "slurm-cluster.sh"


@dataclass(frozen=True)
class SlurmCluster:
    """What the tests need to know of the running cluster."""
    node: str
    partitions: tuple[str, ...]      # the default partition first
    default_partition: str


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """Bring the real Slurm cluster up (idempotent, quick when it already runs).

    A cluster that cannot be started fails the test with the script's output; the
    test is never skipped. scripts/test.sh stops the cluster after the run."""
    if os.geteuid() != 0:
        pytest.fail("the Slurm tests must run as root to start the cluster "
                    "(run scripts/test.sh as root)")
    try:
        result = subprocess.run(["bash", str(SLURM_SCRIPT), "start"], capture_output=True,
                                text=True, timeout=900, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{SLURM_SCRIPT} start did not finish within {exc.timeout}s:\n"
                    f"{exc.stdout or ''}{exc.stderr or ''}")
    if result.returncode != 0:
        pytest.fail(f"{SLURM_SCRIPT} start failed (exit {result.returncode}):\n"
                    f"{result.stdout}{result.stderr}")
    info = subprocess.run(["sinfo", "-h", "-o", "%P %N"], capture_output=True, text=True,
                          timeout=30)
    if info.returncode != 0 or not info.stdout.strip():
        pytest.fail(f"sinfo failed after the cluster started: {info.stdout}{info.stderr}")
    partitions, nodes = [], set()
    default = None
    for line in info.stdout.split("\n"):
        if not line.strip():
            continue
        name, nodelist = line.split()
        if name.endswith("*"):
            name = name[:-1]
            default = name
        partitions.append(name)
        nodes.add(nodelist)
    if default is None or len(nodes) != 1:
        pytest.fail(f"unexpected sinfo output (want one node, a default partition):\n"
                    f"{info.stdout}")
    partitions.sort(key=lambda p: p != default)
    return SlurmCluster(node=nodes.pop(), partitions=tuple(partitions),
                        default_partition=default)


# --- Slurm: a multi-node cluster on this host (scripts/slurm-multinode.sh) ----------

MULTINODE_SCRIPT = SLURM_SCRIPT.with_name("slurm-multinode.sh")


@dataclass(frozen=True)
class MultinodeCluster:
    """The multi-node cluster: partition `multi` (nodes n1 n2, the default),
    `nobwrap` (n3: bwrap hidden), `noinstall` (n4: the install hidden)."""
    nodes: tuple[str, ...] = ("n1", "n2")
    node_without_bwrap: str = "n3"
    node_without_install: str = "n4"

    def run_as(self, user: SandboxUser, argv, *, env=None, cwd=None, timeout=120,
               ) -> subprocess.CompletedProcess:
        """ARGV as USER on the login side of this cluster: a private mount
        namespace with its config at /etc/slurm, so the launcher, its chaperon
        and the real Slurm commands all talk to it."""
        return subprocess.run(
            ["bash", str(MULTINODE_SCRIPT), "run", "setpriv", f"--reuid={user.uid}",
             f"--regid={user.gid}", "--clear-groups", "--", *[str(a) for a in argv]],
            env=env if env is not None else user.env(), cwd=str(cwd or user.project),
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def slurm_multinode(slurm_cluster) -> MultinodeCluster:
    """Bring the multi-node cluster up (idempotent; it needs the single-node
    cluster's Slurm packages and munged). scripts/test.sh stops it."""
    env = {**os.environ, "AGENT_SANDBOX_PREFIX": PREFIX}
    try:
        result = subprocess.run(["bash", str(MULTINODE_SCRIPT), "start"], capture_output=True,
                                text=True, timeout=120, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{MULTINODE_SCRIPT} start did not finish within {exc.timeout}s:\n"
                    f"{exc.stdout or ''}{exc.stderr or ''}")
    if result.returncode != 0:
        pytest.fail(f"{MULTINODE_SCRIPT} start failed (exit {result.returncode}):\n"
                    f"{result.stdout}{result.stderr}")
    return MultinodeCluster()


# The admin directory of the install under test (install.sh's AGENT_SANDBOX_ADMIN_DIR):
# parallel runs with their own installs keep their admin files apart.
ADMIN_DIR = Path(os.environ.get("AGENT_SANDBOX_TEST_ADMIN_DIR", "/etc/agent-sandbox"))
ADMIN_FILE = ADMIN_DIR / "sandbox.conf"


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
        _last_write[0] = time.monotonic()

    yield write
    ADMIN_FILE.unlink(missing_ok=True)
    if created_dir:
        ADMIN_DIR.rmdir()


@pytest.fixture
def no_session_dirs(user):
    """A file (owned by the user) where the chaperon's session directories
    go, so none can be made; the real directory comes back afterwards."""
    parent = user.home / ".local/state/agent-sandbox-run"
    moved = parent.with_name("agent-sandbox-run.moved")
    if parent.exists():
        parent.rename(moved)
    parent.write_text("not a directory")
    os.chown(parent, user.uid, user.gid)
    yield parent
    parent.unlink(missing_ok=True)
    if moved.exists():
        moved.rename(parent)
