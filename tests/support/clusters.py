"""The Slurm clusters the tests run against, and long-lived sandboxes that
talk to them.

`slurm_cluster` is a real single-node cluster (scripts/slurm-cluster.sh),
`slurm_multinode` a multi-node one on this host (scripts/slurm-multinode.sh);
both are brought up by the first test that asks (idempotent) and stopped by
scripts/test.sh. A `Session` (the `sessions` fixture) is one long-running
sandbox (`agent-sandbox run -- python3 DRIVER`) that runs the commands a test
hands it through files in the project, so two sandboxes can be alive at once
and many commands cost one launch; `jobs` cancels the held jobs a test
submitted. A cluster that cannot be started fails the test; none is skipped."""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.install import INSTALLED, PREFIX
from tests.support.launcher import SandboxUser


# --- Slurm: a real single-node cluster (scripts/slurm-cluster.sh) -----------------

SLURM_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-cluster.sh"


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


def sandboxed_sbatch(cluster, user, project: Path, *args: str, env=None, options=()):
    """`sbatch --wait ARGS` from inside a sandbox (`run OPTIONS`) on the cluster's
    login side: its exit code is the job's."""
    return cluster.run_as(user, [INSTALLED, "run", *options, "--", "sbatch", "--wait", *args],
                          cwd=project, env=env)


def read_output(path: Path) -> str:
    assert path.exists(), f"{path} was not created"
    return path.read_text()



# --- Sessions: long-lived sandboxes that run Slurm commands ----------------------

DRIVER = r'''
import json, os, subprocess, sys, time
box = sys.argv[1]
open(os.path.join(box, "ready"), "w").close()
while True:
    for name in sorted(os.listdir(box)):
        if not name.endswith(".cmd"):
            continue
        path = os.path.join(box, name)
        with open(path) as handle:
            spec = json.load(handle)
        os.unlink(path)
        if spec is None:
            sys.exit(0)
        r = subprocess.run(spec["argv"], capture_output=True, input=spec["input"].encode())
        result = {"rc": r.returncode, "out": r.stdout.decode("utf-8", "replace"),
                  "err": r.stderr.decode("utf-8", "replace")}
        tmp = os.path.join(box, name[:-4] + ".tmp")
        with open(tmp, "w") as handle:
            json.dump(result, handle)
        os.rename(tmp, os.path.join(box, name[:-4] + ".res"))
    time.sleep(0.02)
'''


class Result:
    def __init__(self, rc, out, err):
        self.returncode, self.stdout, self.stderr = rc, out, err

    def __repr__(self):
        return f"Result(rc={self.returncode}, out={self.stdout!r}, err={self.stderr!r})"


class Session:
    """One sandbox kept alive; `run(*argv)` executes inside it."""

    def __init__(self, user, project: Path, **env):
        self.user = user
        self.box = project / f".box-{uuid.uuid4().hex[:8]}"
        self.box.mkdir()
        os.chown(self.box, user.uid, user.gid)
        self.count = 0
        self.proc = subprocess.Popen(
            [INSTALLED, "run", "--", "/usr/bin/python3", "-c", DRIVER, str(self.box)],
            user=user.uid, group=user.gid, extra_groups=[], env=user.env(**env),
            cwd=str(project), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not (self.box / "ready").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the sandbox did not start: {self.proc.stderr.read()}")
            time.sleep(0.05)

    def run(self, *argv, input: str = "", timeout: float = 90) -> Result:
        self.count += 1
        name = f"{self.count:05d}"
        tmp = self.box / f"{name}.tmp-cmd"
        tmp.write_text(json.dumps({"argv": [str(a) for a in argv], "input": input}))
        tmp.chmod(0o644)
        tmp.rename(self.box / f"{name}.cmd")
        result = self.box / f"{name}.res"
        deadline = time.monotonic() + timeout
        while not result.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"the sandbox ended: {self.proc.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{argv} did not finish within {timeout}s")
            time.sleep(0.02)
        data = json.loads(result.read_text())
        result.unlink()
        return Result(data["rc"], data["out"], data["err"])

    def submit(self, *options: str) -> str:
        result = self.run("sbatch", "--parsable", "--hold", *options, "--wrap", "true")
        assert result.returncode == 0, result
        return result.stdout.strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                path = self.box / "zzzzz.cmd"
                path.write_text("null")
                path.chmod(0o644)
                self.proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def outside(user, *argv, input=None) -> subprocess.CompletedProcess:
    """A real Slurm command as the test user, outside any sandbox."""
    return subprocess.run([str(a) for a in argv], user=user.uid, group=user.gid,
                          extra_groups=[], env=user.env(), capture_output=True, text=True,
                          cwd=str(user.home), input=input, timeout=120)


def as_other(other_user, *argv) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": other_user.pw_dir, "USER": other_user.pw_name}
    return subprocess.run([str(a) for a in argv], user=other_user.pw_uid,
                          group=other_user.pw_gid, extra_groups=[], env=env,
                          capture_output=True, text=True, cwd="/tmp", timeout=120)


def state(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-t", "all", "-o", "%T|%r|%l|%j", "-j", job],
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def sessions(user):
    opened: list[Session] = []

    def start(project: Path, **env) -> Session:
        session = Session(user, project, **env)
        opened.append(session)
        return session

    yield start
    for session in opened:
        session.close()


@pytest.fixture
def jobs(user, other_user):
    """Held jobs to clean up: ids appended by the test."""
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


@pytest.fixture
def allocation(user, slurm_cluster):
    """A running allocation the test user made outside any sandbox (`salloc
    --no-shell -n1`, as a user does before starting an agent in it); cancelled
    after the test. One CPU of the node: steps run in it."""
    made = outside(user, "salloc", "--no-shell", "-n1", "-t", "5", "--immediate=60",
                   "--job-name=adopt-me")
    found = [w for w in made.stderr.split() if w.isdigit()]
    assert made.returncode == 0 and found, f"salloc failed: {made.stderr}"
    job = found[0]
    try:
        yield job
    finally:
        subprocess.run(["scancel", job], capture_output=True)
