"""GPUs and hardware in jobs (SPEC §5 devices and /sys; issue 15 item 3): the
devices of a job's allocated GRES reach it inside its sandbox without the
user listing them, DEVICES_BLACKLIST still applies, /sys is read-only
inside, and doctor on a node warns when GPUs are allocated but none would be
bound. The two-node cluster gives n1 and n2 one GPU each: a fake device with
the major/minor of /dev/null (scripts/slurm-multinode.sh)."""
from __future__ import annotations

import pytest

from tests.support.install import INSTALLED

pytestmark = pytest.mark.usefixtures("slurm_multinode")

GPU = "/dev/agent-sandbox-gpu0"
PROBE = (f'test -c {GPU} && echo x > {GPU} && echo "gpu=usable" || echo "gpu=absent"; '
         'test -d /sys/class && echo "sys=shown"; touch /sys/x 2>/dev/null || echo "sys=ro"')


def job(cluster, user, project, *options: str) -> list[str]:
    result = cluster.run_as(user, [INSTALLED, "run", "--", "sbatch", "--wait", "-o", "job.out",
                                   *options, "--wrap", PROBE + "; srun sh -c '" + PROBE.replace(
                                       "=", "=task-").replace("'", "") + "'"], cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    return (project / "job.out").read_text().split()


def test_the_allocated_gpu_reaches_the_job_and_its_tasks(slurm_multinode, user, project):
    assert job(slurm_multinode, user, project, "--gres=gpu:1") == [
        "gpu=usable", "sys=shown", "sys=ro", "gpu=task-usable", "sys=task-shown", "sys=task-ro"]


def test_a_job_without_gpus_gets_no_gpu_device(slurm_multinode, user, project):
    assert job(slurm_multinode, user, project)[::3] == ["gpu=absent", "gpu=task-absent"]


def test_the_admin_deny_list_still_applies(slurm_multinode, user, project, admin):
    admin("DEVICES_BLACKLIST=(/dev/agent-sandbox-gpu*)\n")
    assert job(slurm_multinode, user, project, "--gres=gpu:1")[::3] == [
        "gpu=absent", "gpu=task-absent"]


def test_doctor_warns_on_a_node_where_allocated_gpus_would_not_be_bound(slurm_multinode, user,
                                                                        project, admin):
    def doctor() -> str:
        result = slurm_multinode.run_as(user, ["srun", "--gres=gpu:1", INSTALLED, "doctor"],
                                        cwd=project)
        return next((line for line in result.stdout.split("\n") if " gpus " in line),
                    result.stdout + result.stderr)

    assert doctor().split()[:2] == ["GO", "gpus"]
    admin("DEVICES_BLACKLIST=(/dev/agent-sandbox-gpu*)\n")
    line = doctor()
    assert line.split()[:2] == ["GAPS", "gpus"], line
    assert "GPU(s) 0 allocated here, but no GPU device would be bound" in line
    assert GPU in line
