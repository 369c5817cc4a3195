"""The compute-side plan cache (plancache/jobs.py, issue 19) as an attacker
sees it: a job's per-task variables are put into a cached plan at every hit,
so a job must not get, through the cache, a value the configuration pins —
an agent names its job (srun -J, sbatch -J) after the admin's value, lets
the launch be cached, and hopes the next job's own name replaces it."""
from __future__ import annotations

import pytest

from tests.support.install import INSTALLED

pytestmark = pytest.mark.usefixtures("slurm_cluster")


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_pinned_slurm_variable_keeps_its_value_after_a_cached_job(user, project, admin,
                                                                    backend):
    admin("SANDBOX_ENV=(SLURM_JOB_NAME=pinned)\nCHAPERON=false\n")

    def job(name: str) -> str:
        result = user.run(["srun", "-N1", "-n1", "-J", name, INSTALLED, "run", "--job",
                           "--backend", backend, "--project-dir", project, "--", "sh", "-c",
                           "echo $SLURM_JOB_NAME"], cwd=project, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout.strip()

    assert [job("pinned"), job("pinned")] == ["pinned", "pinned"]   # as the admin pinned it
    assert job("other") == "pinned"
