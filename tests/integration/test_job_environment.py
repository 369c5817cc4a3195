"""The job's environment is the one the real Slurm gives (SPEC §9 "The job's
environment is Slurm's"): the same submission made outside any sandbox and
from inside one, on the two-node cluster, compared variable by variable.
The only differences allowed are the policy's: credentials removed, the
sandbox's own variables, the stubs first on PATH, a private per-job TMPDIR,
SLURM_CONF (the real configuration is unreachable inside) and what differs
between any two jobs (their ids)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.launcher import SECRET_ENV

pytestmark = pytest.mark.usefixtures("slurm_multinode")

# An exported shell function is set by `env` right before the submission (the
# cluster's login side runs through /bin/sh, which drops such names).
FUNCTION = 'BASH_FUNC_module%%=() {  echo "module-ran $*"\n}'
SUBMITTED = {
    "PATH": "/opt/hpc2tool/bin:/usr/local/bin:/usr/bin:/bin",
    "LD_LIBRARY_PATH": "/opt/hpc2tool/lib", "TMPDIR": "/var/tmp",
    "MODULEPATH": "/apps/modules", "LOADEDMODULES": "tool/1.0", "_LMFILES_": "/apps/modules/t",
    "CONDA_PREFIX": "/opt/conda/envs/x", "CONDA_DEFAULT_ENV": "x", "MY_SETTING": "42",
}
JOB_SPECIFIC = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID", "_"}
# AGENT_SANDBOX_JOB_SESSION: which session submitted the job (jobs/share.py,
# set by the chaperon's wrapper: a task joins only that session's sandbox).
SANDBOX_OWN = {"AGENT_SANDBOX", "AGENT_SANDBOX_CHAPERON", "AGENT_SANDBOX_SESSION",
               "AGENT_SANDBOX_JOB_SESSION", "SANDBOX_BACKEND", "SANDBOX_PROJECT_DIR",
               "SANDBOX_QUIET"}


def sandbox_own(inside: dict) -> set:
    """The sandbox's own variables, the package caches' (policy/caches.py)
    and jobstart's MPI defaults (JOB_ENV; on landlock LANDLOCK_JOB_ENV, Open
    MPI's session directory and the job's shared-memory directory,
    jobs/shm.py)."""
    from agent_sandbox.paths import helper_module
    from agent_sandbox.policy.caches import inside_env

    jobstart = helper_module("jobstart")
    # The package tools' variables naming the sandbox's own cache (issue 27:
    # the user's caches are never writable inside, a job's sandbox included).
    own = SANDBOX_OWN | set(jobstart.JOB_ENV) | set(inside_env("/cache"))
    if inside.get("SANDBOX_BACKEND") == "landlock":
        own |= set(jobstart.LANDLOCK_JOB_ENV) | {"OMPI_MCA_orte_top_session_dir",
                                                 "OMPI_MCA_btl_vader_backing_directory",
                                                 jobstart.SHM_ENV}
    return own
# The job script: its environment, NUL-separated (values may hold newlines),
# and proof that the exported shell function is a function in the job.
SCRIPT = "#!/bin/bash\nenv -0 > $1.env\nmodule load x > $1.module 2>&1\nexit 0\n"


def write(user, path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, user.uid, user.gid)


def read_env(path: Path) -> dict[str, str]:
    assert path.exists(), f"{path} was not written"
    return dict(item.split("=", 1) for item in path.read_text().split("\0") if "=" in item)


def submit_both(cluster, user, project: Path, *options: str, backend: str = "bwrap",
                ) -> tuple[dict, dict]:
    """The same submission outside and from inside a sandbox: (outside, inside)."""
    env = user.env(**SUBMITTED)
    write(user, project / "job.sh", SCRIPT, 0o755)
    outside = cluster.run_as(user, ["env", FUNCTION, "sbatch", "--wait", "-o", "outside.out", *options,
                                    "job.sh", "outside"], cwd=project, env=env)
    assert outside.returncode == 0, outside.stdout + outside.stderr
    inside = cluster.run_as(user, ["env", FUNCTION, INSTALLED, "run", "--backend", backend,
                                   "--", "sbatch", "--wait", "-o",
                                   "inside.out", *options, "job.sh", "inside"], cwd=project, env=env)
    assert inside.returncode == 0, inside.stdout + inside.stderr
    return read_env(project / "outside.env"), read_env(project / "inside.env")


def assert_slurms_environment(outside: dict, inside: dict) -> None:
    removed = {name for name in outside if name in SECRET_ENV and name != "ANTHROPIC_API_KEY"}
    removed.add("SLURM_CONF")
    stubs = ("/run/agent-sandbox/bin" if inside["SANDBOX_BACKEND"] == "bwrap" else
             inside["AGENT_SANDBOX_CHAPERON"] + "/bin")
    assert inside["PATH"] == f"{stubs}:{outside['PATH']}"
    # The job's private directory; its name carries the job's secret key.
    assert re.fullmatch(rf".*/agent-sandbox-job-{inside['SLURM_JOB_ID']}-[0-9a-f]{{32}}",
                        inside["TMPDIR"]), inside["TMPDIR"]
    assert set(inside) - set(outside) == sandbox_own(inside) - set(outside)
    assert set(outside) - set(inside) == removed
    for name, value in outside.items():
        if name in removed | JOB_SPECIFIC | {"PATH", "TMPDIR"}:
            continue
        assert inside[name] == value, name


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_the_job_environment_is_the_one_slurm_gives(slurm_multinode, user, project, backend):
    outside, inside = submit_both(slurm_multinode, user, project, backend=backend)
    assert inside["SANDBOX_BACKEND"] == backend
    assert_slurms_environment(outside, inside)
    for name in SUBMITTED:
        if name not in ("PATH", "TMPDIR"):
            assert inside[name] == SUBMITTED[name], name
    assert inside["BASH_FUNC_module%%"] == outside["BASH_FUNC_module%%"]
    assert (project / "outside.module").read_text() == "module-ran load x\n"
    assert (project / "inside.module").read_text() == "module-ran load x\n"


@pytest.mark.parametrize("export", ["NONE", "MY_SETTING,LD_LIBRARY_PATH"])
def test_export_none_and_a_list_give_what_slurm_gives(slurm_multinode, user, project, export):
    """The real sbatch then also loads the login environment (--get-user-env):
    the job gets it too, made inside its sandbox."""
    outside, inside = submit_both(slurm_multinode, user, project, f"--export={export}")
    # The submitter's MODULEPATH does not pass (a login shell's own may: the
    # test extras install environment-modules, whose profile.d script sets one).
    assert outside["SLURM_GET_USER_ENV"] == "1"
    assert outside.get("MODULEPATH") != SUBMITTED["MODULEPATH"], outside.get("MODULEPATH")
    assert_slurms_environment(outside, inside)
    assert ("MY_SETTING" in inside) == (export != "NONE")


def test_an_srun_task_gets_the_environment_slurm_gives(slurm_multinode, user, project):
    """srun from a login shell and from a login-side sandbox: the task's
    environment, variable by variable (Slurm's own task variables aside,
    which name the step and its ports)."""
    env = user.env(**SUBMITTED)
    tasks = {}
    for name, prefix in (("outside", []), ("inside", [INSTALLED, "run", "--"])):
        result = slurm_multinode.run_as(user, ["env", FUNCTION, *prefix, "srun", "-N1",
                                               "/usr/bin/env", "-0"], cwd=project, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        tasks[name] = {k: v for k, v in (item.split("=", 1) for item in
                                         result.stdout.split("\0") if "=" in item)
                       if not k.startswith("SLURM_")}
    outside, inside = tasks["outside"], tasks["inside"]
    removed = {name for name in outside if name in SECRET_ENV and name != "ANTHROPIC_API_KEY"}
    assert inside["PATH"] == "/run/agent-sandbox/bin:" + outside["PATH"]
    assert inside["TMPDIR"].startswith("/tmp/agent-sandbox-job-")
    assert set(inside) - set(outside) == sandbox_own(inside) - set(outside)
    assert set(outside) - set(inside) == removed
    for name, value in outside.items():
        if name not in removed | {"PATH", "TMPDIR", "_"}:
            assert inside[name] == value, name
    assert inside["BASH_FUNC_module%%"] == outside["BASH_FUNC_module%%"]


def test_a_step_inside_the_job_gets_the_jobs_environment(slurm_multinode, user, project):
    """srun inside a sandboxed batch job: its task sees the batch script's
    environment (Slurm's step variables aside), as with the real srun."""
    write(user, project / "steps.sh", "#!/bin/bash\nenv -0 > batch.env\n"
          "srun -n1 /usr/bin/env -0 > step.env\n", 0o755)
    result = slurm_multinode.run_as(user, ["env", FUNCTION, INSTALLED, "run", "--", "sbatch",
                                           "--wait", "-o", "steps.out", "steps.sh"],
                                    cwd=project, env=user.env(**SUBMITTED))
    assert result.returncode == 0, result.stdout + result.stderr
    batch, step = (read_env(project / f"{name}.env") for name in ("batch", "step"))
    own, slurm = {"_", "SHLVL"}, ("SLURM_", "SRUN_")    # the shell's, Slurm's
    assert {k for k in step if not k.startswith(slurm)} - own == \
        {k for k in batch if not k.startswith(slurm)} - own
    for name, value in batch.items():
        if not name.startswith(slurm) and name not in own | {"AGENT_SANDBOX_SESSION"}:
            assert step[name] == value, name
    assert step["LD_LIBRARY_PATH"] == SUBMITTED["LD_LIBRARY_PATH"]
