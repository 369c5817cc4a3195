"""The job's environment restored inside its sandbox (issue 15 item 1) is
an attack surface: the agent sets loader and interpreter hooks (LD_PRELOAD,
PYTHONPATH, BASH_ENV) and names another Slurm configuration before it
submits. The hooks must act only inside the job's sandbox — never in what
runs outside it (slurmstepd, a TaskProlog, the wrapper, the launcher,
jobstart itself): the environment Slurm stores for the job has none of them
— and the configuration the chaperon uses stays the site's."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.install import INSTALLED

pytestmark = pytest.mark.usefixtures("slurm_multinode")

STATE = "/var/spool/slurm-multinode/slurmctld"    # scripts/slurm-multinode.sh
SECOND = "/etc/agent-sandbox-slurm-multinode/slurm.conf"


def write(user, path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, user.uid, user.gid)


def test_loader_variables_reach_only_the_sandboxed_job(slurm_multinode, user, project):
    """LD_PRELOAD, PYTHONPATH, BASH_ENV set inside the sandbox are set in the
    job inside its sandbox only: the environment Slurm stores for the job
    (what slurmstepd, a TaskProlog and the wrapper get) has none of them."""
    write(user, project / "hook.sh", 'echo "BASH_ENV-RAN AGENT_SANDBOX=$AGENT_SANDBOX"\n')
    write(user, project / "job.sh", "#!/bin/bash\nenv > job.env\n", 0o755)
    env = user.env(BASH_ENV=f"{project}/hook.sh", PYTHONPATH=str(project),
                   LD_PRELOAD="/nonexistent/hook.so")
    result = slurm_multinode.run_as(
        user, [INSTALLED, "run", "--", "sbatch", "--parsable", "--hold", "job.sh"],
        cwd=project, env=env)
    job = result.stdout.strip().split("\n")[-1]
    assert result.returncode == 0 and job.isdigit(), result.stdout + result.stderr
    try:
        stored = Path(f"{STATE}/hash.{int(job) % 10}/job.{job}/environment").read_bytes()
        names = {item.split(b"=", 1)[0].decode() for item in stored.split(b"\0") if item}
        assert "SLURM_JOB_NAME" in names or "PATH" in names, names   # the file is the job's
        assert not names & {"BASH_ENV", "PYTHONPATH", "LD_PRELOAD"}, names
    finally:
        slurm_multinode.run_as(user, ["scancel", job], cwd=project)
    result = slurm_multinode.run_as(
        user, [INSTALLED, "run", "--", "sbatch", "--wait", "-o", "hook.out", "job.sh"],
        cwd=project, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    job_env = (project / "job.env").read_text()
    assert f"BASH_ENV={project}/hook.sh" in job_env and "LD_PRELOAD=/nonexistent" in job_env
    ran = [line for line in (project / "hook.out").read_text().split("\n")
           if "BASH_ENV-RAN" in line]
    assert ran and all(line.endswith("AGENT_SANDBOX=1") for line in ran), ran


def test_a_slurm_config_named_inside_is_never_used(user, project):
    """Outside the multinode fixture's namespace the site's config is the
    single-node cluster's; the agent names the second cluster's inside."""
    result = user.sandbox("env", f"SLURM_CONF={SECOND}", "sbatch", "--wait", "-o", "job.out",
                          "--wrap", 'echo "cluster=$SLURM_CLUSTER_NAME"', cwd=project,
                          timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "job.out").read_text() == "cluster=agentsandbox\n"


def test_gpus_named_inside_bind_no_device(slurm_multinode, user, project):
    """The agent names GPU indices itself (the variables slurmstepd sets for
    an allocation with GPUs) and submits without asking for one: its job and
    task get no GPU device — only Slurm's own values count, and the chaperon
    never hands the caller's to Slurm."""
    gpu = "/dev/agent-sandbox-gpu0"
    forged = user.env(SLURM_JOB_GPUS="0", SLURM_STEP_GPUS="0", CUDA_VISIBLE_DEVICES="0")
    probe = f"test -e {gpu} && echo gpu=bound || echo gpu=absent"
    result = slurm_multinode.run_as(
        user, [INSTALLED, "run", "--", "sbatch", "--wait", "-o", "job.out", "--wrap",
               f"{probe}; srun sh -c '{probe}'"], cwd=project, env=forged)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "job.out").read_text().split() == ["gpu=absent", "gpu=absent"]
