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


def test_landlock_jobs_get_open_mpi_without_single_copy_and_shared_memory():
    env = jobstart.job_environment(SPEC, {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/tmp/t1"})
    assert env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none"
    assert env["OMPI_MCA_btl"] == "^vader"
    assert env["OMPI_MCA_orte_top_session_dir"] == "/tmp/t1/ompi"


def test_a_tasks_session_directory_is_its_own_not_the_batch_scripts():
    spec = {**SPEC, "env": {"OMPI_MCA_orte_top_session_dir": "/tmp/batch/ompi"}}
    env = jobstart.job_environment(spec, {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/tmp/t2"})
    assert env["OMPI_MCA_orte_top_session_dir"] == "/tmp/t2/ompi"


def test_the_users_own_settings_win():
    spec = {**SPEC, "env": {"OMPI_MCA_btl": "self,tcp", "PMIX_MCA_gds": "ds21"}}
    env = jobstart.job_environment(spec, {"SANDBOX_BACKEND": "landlock", "TMPDIR": "/t"})
    assert env["OMPI_MCA_btl"] == "self,tcp" and env["PMIX_MCA_gds"] == "ds21"
