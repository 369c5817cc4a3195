"""The real single-node Slurm cluster of scripts/slurm-cluster.sh works: jobs of the
unprivileged test users run, complete, and show in sacct and squeue.

The chaperon's tests stand on this; these tests say the ground is there."""
from __future__ import annotations

import pwd
import re
import subprocess
import time
from pathlib import Path

from tests.support.launcher import OTHER_USER

SLURM_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def as_user(name: str, argv, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(name)
    env = {**SLURM_ENV, "HOME": entry.pw_dir, "USER": name, "LOGNAME": name}
    return subprocess.run(argv, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                          env=env, cwd=str(cwd), capture_output=True, text=True,
                          timeout=timeout)


def wait_for_state(job_id: str, want: str, timeout: float = 60) -> str:
    """Poll `sacct -j ID -n -X -o State` until it reads WANT (or a final state)."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-j", job_id, "-n", "-X", "-P", "-o", "State"],
                             capture_output=True, text=True, timeout=30)
        state = out.stdout.strip()
        if state == want or state.split(" ")[0] in {"FAILED", "CANCELLED", "TIMEOUT",
                                                    "NODE_FAIL", "OUT_OF_MEMORY"}:
            return state
        time.sleep(0.2)
    return state


def submit(name: str, cwd: Path, *args: str) -> str:
    result = as_user(name, ["sbatch", "--parsable", *args], cwd)
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    assert re.fullmatch(r"\d+", job_id), result.stdout
    return job_id


def test_job_of_the_test_user_runs_and_is_accounted(slurm_cluster, user, project):
    job_id = submit(user.name, project, "--wrap", "echo hi")
    assert wait_for_state(job_id, "COMPLETED") == "COMPLETED"
    output = project / f"slurm-{job_id}.out"   # default: slurm-%j.out in the submit dir
    assert output.read_text() == "hi\n"
    assert output.stat().st_uid == user.uid
    # Slurm 22.05 quirk: sacct shows COMPLETED a second or two before the job's
    # Partition is filled in, so wait for the whole record.
    want = f"{user.name}|research|{slurm_cluster.default_partition}|0:0"
    deadline = time.monotonic() + 30
    while True:
        accounted = subprocess.run(["sacct", "-j", job_id, "-n", "-X", "-P", "-o",
                                    "User,Account,Partition,ExitCode"],
                                   capture_output=True, text=True, timeout=30).stdout.strip()
        if accounted == want or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert accounted == want


def test_squeue_and_a_second_partition(slurm_cluster, user, project):
    assert slurm_cluster.default_partition == "debug"
    assert len(slurm_cluster.partitions) >= 2
    other = slurm_cluster.partitions[1]
    job_id = submit(user.name, project, "--hold", "-p", other, "-o", "/dev/null", "--wrap", "true")
    try:
        queue = as_user(user.name, ["squeue", "-h", "-j", job_id, "-o", "%i %P %T %r %u"], project)
        assert queue.returncode == 0, queue.stderr
        assert queue.stdout.split() == [job_id, other, "PENDING", "JobHeldUser", user.name]
    finally:
        subprocess.run(["scancel", job_id], check=True, timeout=30)
    assert wait_for_state(job_id, "CANCELLED").startswith("CANCELLED")


def test_a_job_of_another_user_is_visible_to_root(slurm_cluster, other_user):
    job_id = submit(other_user.pw_name, Path(other_user.pw_dir), "--hold", "-o", "/dev/null", "--wrap", "true")
    try:
        queue = subprocess.run(["squeue", "-h", "-o", "%i %u %T"], capture_output=True,
                               text=True, timeout=30)
        assert queue.returncode == 0, queue.stderr
        assert f"{job_id} {OTHER_USER} PENDING" in queue.stdout.splitlines()
    finally:
        subprocess.run(["scancel", job_id], check=True, timeout=30)


def test_status_reports_the_cluster_up(slurm_cluster):
    script = Path(__file__).resolve().parents[2] / "scripts" / "slurm-cluster.sh"
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    for daemon in ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd"):
        assert re.search(rf"^{daemon} +running \(pid \d+\)$", status.stdout, re.M), status.stdout
    assert re.search(rf"^node {slurm_cluster.node}: (idle|mixed|allocated|completing)$",
                     status.stdout, re.M), status.stdout
