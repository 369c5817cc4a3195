"""Jobs on the multi-node cluster (scripts/slurm-multinode.sh), submitted from
inside a sandbox by an unprivileged user: a job spans nodes sandboxed on each,
and a node that cannot give what the login side gave refuses the job, saying
so in the job's own output file (SPEC §9, "The compute side gives at least
what the login side gave")."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import INSTALLED

pytestmark = pytest.mark.usefixtures("slurm_multinode")


def sandboxed_sbatch(cluster, user, project: Path, *args: str, env=None):
    """`sbatch --wait ARGS` from inside a sandbox on the cluster's login side: its
    exit code is the job's."""
    return cluster.run_as(user, [INSTALLED, "run", "--", "sbatch", "--wait", *args],
                          cwd=project, env=env)


def read_output(path: Path) -> str:
    assert path.exists(), f"{path} was not created"
    return path.read_text()


def test_a_two_node_job_runs_sandboxed_on_both_nodes(slurm_multinode, user, project):
    result = sandboxed_sbatch(
        slurm_multinode, user, project, "-N2", "-o", "two.out",
        "--wrap", 'srun sh -c \'echo "$(hostname) AGENT_SANDBOX=$AGENT_SANDBOX"\'')
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(read_output(project / "two.out").split("\n"))
    assert [line for line in lines if line] == ["n1 AGENT_SANDBOX=1", "n2 AGENT_SANDBOX=1"]
