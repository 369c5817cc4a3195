"""The site's Slurm configuration path (SPEC §9: the chaperon uses the site's
configuration — its own environment outside the sandbox, or the admin file —
never one named from inside). The two-node cluster is a second cluster on
this host (/etc/agent-sandbox-slurm-multinode/slurm.conf); the default
configuration (/etc/slurm) is the single-node cluster's. Run without the
multinode fixture's mount namespace: only the configuration path decides."""
from __future__ import annotations

import pytest

from tests.support.install import INSTALLED

pytestmark = pytest.mark.usefixtures("slurm_multinode")

SECOND = "/etc/agent-sandbox-slurm-multinode/slurm.conf"
JOB = 'echo "cluster=$SLURM_CLUSTER_NAME node=$SLURMD_NODENAME sandbox=$AGENT_SANDBOX"'


def sandboxed_job(user, project, *, env=None, inner=()):
    """`sbatch --wait` from inside a sandbox; the job's one output line."""
    result = user.sandbox(*inner, "sbatch", "--wait", "-o", "job.out", "--wrap", JOB,
                          cwd=project, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return (project / "job.out").read_text().strip()


def test_the_slurm_conf_of_the_launchers_environment_reaches_a_second_cluster(user, project):
    assert sandboxed_job(user, project, env=user.env(SLURM_CONF=SECOND)) == \
        "cluster=asmultinode node=n1 sandbox=1"


def test_the_site_config_is_unreachable_inside(user, project):
    result = user.sandbox("/bin/sh", "-c", 'ls -A /etc/agent-sandbox-slurm-multinode; '
                          'echo "SLURM_CONF=${SLURM_CONF-unset}"', cwd=project,
                          env=user.env(SLURM_CONF=SECOND))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "SLURM_CONF=unset\n"


def test_the_admin_file_names_the_site_config(user, project, admin):
    admin(f"SLURM_CONF_PATH={SECOND}\n")
    assert sandboxed_job(user, project) == "cluster=asmultinode node=n1 sandbox=1"


def test_only_the_admin_sets_the_config_path(user, project):
    user.set_config(f"SLURM_CONF_PATH={SECOND}\n")
    result = user.sandbox("true", cwd=project)
    assert result.returncode == 0, result.stderr
    assert f"SLURM_CONF_PATH={SECOND} from " in result.stderr and "ignored" in result.stderr
    # The job's own sandbox reads the same user file and says so in the job's output.
    lines = sandboxed_job(user, project).split("\n")
    assert lines[-1].startswith("cluster=agentsandbox "), lines
    assert all("ignored" in line for line in lines[:-1]), lines


def test_a_submission_from_a_normal_shell_uses_the_site_config(user, project, admin):
    """`agent-sandbox sbatch` outside any sandbox runs the handlers in-process:
    the same site configuration."""
    admin(f"SLURM_CONF_PATH={SECOND}\n")
    result = user.run([INSTALLED, "sbatch",
                       "--wait", "-o", "job.out", "--wrap", JOB], cwd=project, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "job.out").read_text().strip() == "cluster=asmultinode node=n1 sandbox=1"

