"""jobstart's environment for a task (helper/jobstart.py): the MPI defaults
each backend's jobs need, never overriding what the user set."""
from __future__ import annotations

from agent_sandbox.paths import helper_module

jobstart = helper_module("jobstart")
SPEC = {"workdir": "/p", "env": {}}


def test_every_job_keeps_pmix_data_in_its_own_memory():
    env = jobstart.job_environment(SPEC, {"SANDBOX_BACKEND": "bwrap"})
    assert env["PMIX_MCA_gds"] == "hash"
    assert not any(name.startswith("OMPI_MCA_") for name in env)


def test_landlock_jobs_share_memory_through_the_jobs_directory_without_single_copy():
    env = jobstart.job_environment(SPEC, {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/tmp/t1",
                                          "AGENT_SANDBOX_JOB_SHM": "/dev/shm/j"})
    assert env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none"
    assert env["OMPI_MCA_btl_vader_backing_directory"] == "/dev/shm/j"
    assert "OMPI_MCA_btl" not in env        # vader stays on
    assert env["OMPI_MCA_orte_top_session_dir"] == "/tmp/t1/ompi"


def test_a_landlock_launch_without_the_directory_keeps_ranks_on_tcp():
    env = jobstart.job_environment(SPEC, {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/tmp/t1"})
    assert env["OMPI_MCA_btl"] == "^vader"
    assert "OMPI_MCA_btl_vader_backing_directory" not in env


def test_a_tasks_shared_memory_directory_is_its_nodes_not_the_batch_nodes():
    here = "/dev/shm/agent-sandbox-job-7-" + "1" * 32
    current = {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/t", "AGENT_SANDBOX_JOB_SHM": here}
    batch_node = {"OMPI_MCA_btl_vader_backing_directory": here[:-32] + "2" * 32}
    env = jobstart.job_environment({**SPEC, "env": batch_node}, current)
    assert env["OMPI_MCA_btl_vader_backing_directory"] == here
    chosen = {"OMPI_MCA_btl_vader_backing_directory": "/p/shm"}     # the user's own wins
    env = jobstart.job_environment({**SPEC, "env": chosen}, current)
    assert env["OMPI_MCA_btl_vader_backing_directory"] == "/p/shm"


def test_a_tasks_session_directory_is_its_own_not_the_batch_scripts():
    spec = {**SPEC, "env": {"OMPI_MCA_orte_top_session_dir": "/tmp/batch/ompi"}}
    env = jobstart.job_environment(spec, {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/tmp/t2"})
    assert env["OMPI_MCA_orte_top_session_dir"] == "/tmp/t2/ompi"


def test_the_users_own_settings_win():
    spec = {**SPEC, "env": {"OMPI_MCA_btl": "self,tcp", "PMIX_MCA_gds": "ds21"}}
    env = jobstart.job_environment(spec, {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/t"})
    assert env["OMPI_MCA_btl"] == "self,tcp" and env["PMIX_MCA_gds"] == "ds21"
