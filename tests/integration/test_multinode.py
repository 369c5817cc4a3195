"""Jobs on the multi-node cluster (scripts/slurm-multinode.sh), submitted from
inside a sandbox by an unprivileged user: a job spans nodes sandboxed on each,
and a node that cannot give what the login side gave refuses the job, saying
so in the job's own output file (SPEC §9, "The compute side gives at least
what the login side gave")."""
from __future__ import annotations


import pytest

from tests.support.clusters import read_output, sandboxed_sbatch
from tests.support.install import INSTALLED

pytestmark = pytest.mark.usefixtures("slurm_multinode")


def test_a_two_node_job_runs_sandboxed_on_both_nodes(slurm_multinode, user, project):
    result = sandboxed_sbatch(
        slurm_multinode, user, project, "-N2", "-o", "two.out",
        "--wrap", 'srun sh -c \'echo "$(hostname) AGENT_SANDBOX=$AGENT_SANDBOX"\'')
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(read_output(project / "two.out").split("\n"))
    assert [line for line in lines if line] == ["n1 AGENT_SANDBOX=1", "n2 AGENT_SANDBOX=1"]


def test_a_node_without_the_install_writes_why_into_the_output_file(slurm_multinode, user,
                                                                    project):
    result = sandboxed_sbatch(slurm_multinode, user, project, "-p", "noinstall",
                              "-o", "job.out", "--wrap", "echo the-script-ran")
    assert result.returncode != 0, result.stdout + result.stderr
    text = read_output(project / "job.out")
    assert text.startswith("agent-sandbox: the job did not start on node n4"), text
    assert "Install agent-sandbox on every compute node" in text
    assert text.count("\n") == 1 and "the-script-ran" not in text
    assert not (project / "job.out").is_symlink()


def test_the_default_output_file_gets_the_line_too(slurm_multinode, user, project):
    result = cluster_sbatch_parsable(slurm_multinode, user, project, "-p", "noinstall",
                                     "--wrap", "true")
    job = result.stdout.strip()
    assert job.isdigit(), result.stdout + result.stderr
    text = read_output(project / f"slurm-{job}.out")
    assert text.startswith("agent-sandbox: the job did not start on node n4"), text


def cluster_sbatch_parsable(cluster, user, project, *args):
    return cluster.run_as(user, [INSTALLED, "run", "--", "sbatch", "--wait", "--parsable",
                                 *args], cwd=project)


def test_a_node_that_lacks_the_login_backend_refuses_the_job(slurm_multinode, user, project):
    result = sandboxed_sbatch(slurm_multinode, user, project, "-p", "nobwrap",
                              "-o", "job.out", "--wrap", "echo AGENT_SANDBOX=$AGENT_SANDBOX")
    assert result.returncode != 0, result.stdout + result.stderr
    text = read_output(project / "job.out")
    assert text.startswith("agent-sandbox: the job did not start on node n3 (it must run on "
                           "bwrap, as the session that submitted it): "), text
    assert "AGENT_SANDBOX" not in text and text.count("\n") == 1


def test_the_admin_may_allow_a_weaker_backend_for_jobs(slurm_multinode, user, project, admin):
    admin("JOB_ALLOW_WEAKER_BACKEND=true\n")
    result = sandboxed_sbatch(slurm_multinode, user, project, "-p", "nobwrap",
                              "-o", "job.out", "--wrap", "echo AGENT_SANDBOX=$AGENT_SANDBOX")
    assert result.returncode == 0, result.stdout + result.stderr
    assert read_output(project / "job.out") == "AGENT_SANDBOX=1\n"


def test_a_user_cannot_allow_a_weaker_backend_for_jobs(slurm_multinode, user, project):
    user.set_config("JOB_ALLOW_WEAKER_BACKEND=true\n")
    result = sandboxed_sbatch(slurm_multinode, user, project, "-p", "nobwrap",
                              "-o", "job.out", "--wrap", "echo AGENT_SANDBOX=$AGENT_SANDBOX")
    assert result.returncode != 0, result.stdout + result.stderr
    assert read_output(project / "job.out").startswith(
        "agent-sandbox: the job did not start on node n3")
