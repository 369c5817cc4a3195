"""The compiled plan cache on the compute side (plancache/jobs.py, issue 19
item 3): a job's or step's launch on a node reuses the plan an earlier job
compiled there — with this task's own Slurm values, equal to a fresh
compile — and never the plan of another node.

The launches run in real Slurm steps (srun as the test user, in a
directory shaped like the chaperon's stage, as the chaperon runs them), and
as a whole through the chaperon: a session's later jobs and steps compile
nothing."""
from __future__ import annotations

import json
import marshal
import os
import re
import shutil
from pathlib import Path

import pytest

from agent_sandbox.paths import staging_root
from chaperon.paths import project_hash
from tests.support.install import INSTALLED, PREFIX

PROBE = Path(__file__).with_name("jobcache_probe.py")
PYTHON = f"{PREFIX}/venv/bin/python"
HIT = "plan:      from the compiled plan cache"
MISS = "plan:      compiled now"
# Without Slurm's proxy a probe's fresh compile and a launch's compile
# are the same plan (the chaperon's directory is the session's own).
BASE = "CHAPERON=false\n"


def plans(user) -> Path:
    return user.home / ".local/state/agent-sandbox/cache/plans"


def stage(user, project: Path) -> Path:
    """A fresh directory like the chaperon's stage of one submission."""
    path = Path(staging_root(str(user.home))) / project_hash(str(project)) / os.urandom(8).hex()
    path.mkdir(parents=True)
    for part in [path, *path.parents]:
        if part == user.home:
            break
        os.chown(part, user.uid, user.gid)
    return path


def srun(user, project, *argv, cwd=None):
    """`srun ARGV` (one task, a job of its own) from a new stage."""
    result = user.run(["srun", "-N1", "-n1", *argv], cwd=cwd or stage(user, project),
                      timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def probe(user, project, mode: str, backend: str) -> dict:
    return json.loads(srun(user, project, PYTHON, PROBE, mode, project, backend).stdout)


@pytest.mark.usefixtures("slurm_cluster")
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_cached_job_launch_equals_a_fresh_compile_with_its_own_ids(user, project, backend):
    user.set_config(BASE)
    shutil.rmtree(plans(user), ignore_errors=True)
    options = [] if backend == "auto" else ["--backend", backend]
    for _ in range(2):      # the first may probe the backend (a process: not stored)
        srun(user, project, INSTALLED, "run", "--job", *options, "--project-dir", project,
             "--", "true")
    out = probe(user, project, "plan", backend)
    assert out["cache"] == "JobCache"
    assert out["cached"] is not None, "the job launch did not come from the cache"
    assert out["cached"] == out["fresh"]
    env = out["cached"]["plan"]["env"]
    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_TASK_PID", "SLURM_SUBMIT_DIR"):
        assert env[name] == out["environ"][name], name
    assert "fd.clean" in out["cached"]["plan"]["provides"]     # it keeps no descriptor


@pytest.mark.usefixtures("slurm_cluster")
@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_joining_tasks_cached_policy_equals_a_fresh_resolve(user, project, backend):
    """A task that joins its node's sandbox resolves the policy (the shape it
    must match, its environment): from the cache, with its own values."""
    user.set_config(BASE)
    shutil.rmtree(plans(user), ignore_errors=True)
    for _ in range(2):
        srun(user, project, INSTALLED, "run", "--job", "--job-shared", "--backend", backend,
             "--project-dir", project, "--", "true")
    out = probe(user, project, "join", backend)
    assert out["cached"] is not None, "the joining task's policy did not come from the cache"
    assert out["cached"] == out["fresh"]
    env = out["cached"]["policy"]["env"]
    assert env["SLURM_JOB_ID"] == out["environ"]["SLURM_JOB_ID"]
    assert env["SLURM_TASK_PID"] == out["environ"]["SLURM_TASK_PID"]


def dry_run_line(result) -> str:
    [line] = [line for line in result.stdout.splitlines() if line.startswith("plan:      ")]
    return line


NODE_VARIABLES = ("SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR", "HOSTNAME")


def test_a_job_launch_on_another_node_does_not_use_this_nodes_plan(slurm_multinode, user,
                                                                   project):
    """n1 and n2 share this host's kernel (one boot id) and file systems but
    for /tmp; each slurmd has its own host name. With the variables that name
    the node removed, the launches differ only in the host: n2 compiles its
    own plan, stored beside n1's, whose keys differ in the host name."""
    user.set_config(BASE)
    shutil.rmtree(plans(user), ignore_errors=True)

    def on(node, *options):
        argv = ["srun", "-w", node, "-N1", "-n1", "env", *(f"-u{v}" for v in NODE_VARIABLES),
                INSTALLED, "run", "--job", *options, "--project-dir", project, "--", "true"]
        result = slurm_multinode.run_as(user, argv, cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    on("n1")
    on("n1")
    assert dry_run_line(on("n1", "--dry-run")).startswith(HIT)
    [n1_entry] = plans(user).iterdir()
    assert dry_run_line(on("n2", "--dry-run")).startswith(MISS)
    on("n2")
    on("n2")
    assert dry_run_line(on("n2", "--dry-run")).startswith(HIT)
    assert dry_run_line(on("n1", "--dry-run")).startswith(HIT)
    entries = sorted(plans(user).iterdir())
    assert len(entries) == 2 and n1_entry in entries
    contexts = [marshal.loads(path.read_bytes())[1] for path in entries]
    differ = [(a, b) for a, b in zip(*contexts) if a != b]
    assert len(differ) == 1, differ          # the host, and nothing else
    nodes = {uname[1] for uname in differ[0]}
    assert nodes == {"n1", "n2"}, differ


SCRIPT = """#!/bin/sh
echo "batch $SLURM_JOB_ID $AGENT_SANDBOX_SESSION"
srun sh -c 'echo "step $SLURM_JOB_ID.$SLURM_STEP_ID $AGENT_SANDBOX_SESSION ${OMPI_MCA_btl_vader_backing_directory:-none}"; touch "$OMPI_MCA_btl_vader_backing_directory/x" 2>/dev/null && echo shm-writable'
date +%s.%N > "$1"
"""
JOB = re.compile(r"^Submitted batch job (\d+)$", re.M)


@pytest.mark.usefixtures("slurm_cluster")
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_sessions_later_jobs_and_steps_compile_nothing(user, project, backend):
    """Through the chaperon: three jobs with a step each, from one session.
    The later jobs' batch and step launches store nothing (every entry
    predates the end of the second job) and each job's script and step see
    their own job and step ids and a session of their own."""
    user.set_config("")
    shutil.rmtree(plans(user), ignore_errors=True)
    user.write(str((project / "job.sh").relative_to(user.home)), SCRIPT, 0o755)
    submit = " && ".join(f"sbatch --wait -o job{i}.out job.sh end{i}" for i in range(3))
    result = user.run([INSTALLED, "run", "--backend", backend, "--", "sh", "-c", submit],
                      cwd=project, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = JOB.findall(result.stdout)
    assert len(jobs) == 3, result.stdout
    sessions = set()
    for i, job in enumerate(jobs):
        lines = (project / f"job{i}.out").read_text().split("\n")
        batch, step = lines[0].split(), lines[1].split()
        assert batch[:2] == ["batch", job] and step[:2] == ["step", f"{job}.0"], lines
        if backend == "landlock":
            # The job's shared-memory directory is granted to a step's launch
            # from the cache too (jobshm.with_job_shm after the cache).
            assert step[3].startswith("/dev/shm/agent-sandbox-job-") and "shm-writable" in lines
        sessions.add(batch[2])
    assert len(sessions) == 3, sessions
    written = [path.stat().st_mtime for path in plans(user).iterdir()]
    end = float((project / "end1").read_text())
    # The session's, and its jobs' and steps' (on landlock too: a step's
    # shared-memory directory is granted after the cache, jobs/shm.py).
    assert len(written) >= 3, written
    assert max(written) <= end, (written, end)
