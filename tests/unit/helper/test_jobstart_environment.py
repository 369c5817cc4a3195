"""jobstart's environment: the submission's, restored inside the job's sandbox
as the real Slurm would give it (PATH behind this sandbox's stubs, a private
per-job TMPDIR, what Slurm and the sandbox set here never overridden)."""
from __future__ import annotations

import os
import stat

from agent_sandbox.paths import helper_module

jobstart = helper_module("jobstart")

HERE = {"PATH": "/run/agent-sandbox/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/home/u",
        "AGENT_SANDBOX": "1", "SLURM_JOB_ID": "4242", "CUDA_VISIBLE_DEVICES": "0",
        "AGENT_SANDBOX_CHAPERON": "/run/agent-sandbox/chaperon", "TMPDIR": "/tmp"}
KEY = "0123456789abcdef" * 2    # the job's secret (spec "tmp_key", chaperon/submit.py)
SUBMITTED = {"PATH": "/opt/tool/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/tool/lib",
             "BASH_FUNC_module%%": "() {  echo mod\n}", "MODULEPATH": "/m",
             "LOADEDMODULES": "tool/1", "CONDA_PREFIX": "/c", "HOME": "/elsewhere",
             "CUDA_VISIBLE_DEVICES": "7", "BASH_ENV": "/p/env.sh"}


def test_the_submitted_environment_is_restored_around_what_slurm_and_the_sandbox_set():
    env = jobstart.job_environment({"env": SUBMITTED, "workdir": "/p", "tmp_key": KEY}, HERE)
    assert env["PATH"] == "/run/agent-sandbox/bin:/opt/tool/bin:/usr/bin:/bin"
    for name in ("LD_LIBRARY_PATH", "BASH_FUNC_module%%", "MODULEPATH", "LOADEDMODULES",
                 "CONDA_PREFIX", "BASH_ENV"):
        assert env[name] == SUBMITTED[name]
    assert env["HOME"] == "/home/u" and env["CUDA_VISIBLE_DEVICES"] == "0"   # never overridden
    assert env["TMPDIR"] == f"/tmp/agent-sandbox-job-4242-{KEY}"
    info = os.lstat(env["TMPDIR"])
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
    # The tasks of one job (the same key) share it.
    assert jobstart.job_environment({"env": {}, "workdir": "/p", "tmp_key": KEY},
                                    HERE)["TMPDIR"] == env["TMPDIR"]
    os.rmdir(env["TMPDIR"])


def test_the_stubs_of_another_backend_stay_first():
    here = dict(HERE, PATH="/s/agent-sandbox-x/bin:/usr/bin", AGENT_SANDBOX_CHAPERON="/s/agent-sandbox-x",
                SLURM_JOB_ID="4243")
    env = jobstart.job_environment({"env": {"PATH": "/a:/b"}, "workdir": "/p"}, here)
    assert env["PATH"] == "/s/agent-sandbox-x/bin:/a:/b"
    os.rmdir(env["TMPDIR"])


def test_without_a_submitted_path_the_sandbox_path_stays():
    env = jobstart.job_environment({"env": {}, "workdir": "/p"}, dict(HERE, SLURM_JOB_ID="4244"))
    assert env["PATH"] == HERE["PATH"]
    os.rmdir(env["TMPDIR"])


def test_a_tmpdir_another_user_or_a_symlink_holds_is_never_used(tmp_path):
    planted = "/tmp/agent-sandbox-job-4245"
    os.symlink(str(tmp_path), planted)
    try:
        env = jobstart.job_environment({"env": {}, "workdir": "/p"},
                                       dict(HERE, SLURM_JOB_ID="4245"))
        assert env["TMPDIR"] != planted and env["TMPDIR"].startswith(planted + ".")
        assert not os.path.islink(env["TMPDIR"])
        assert stat.S_IMODE(os.lstat(env["TMPDIR"]).st_mode) == 0o700
        os.rmdir(env["TMPDIR"])
    finally:
        os.unlink(planted)


def test_a_directory_planted_under_a_guessable_name_is_never_the_jobs(tmp_path):
    """Finding 6 (review-jobs.md): another sandbox of the same user (PRIVATE_TMP=false)
    made agent-sandbox-job-<next id> 0700 and planted a file there; the job
    must not take it. Its name holds the job's secret key, and without a
    key a fresh directory is made."""
    planted = tmp_path / "agent-sandbox-job-4248"
    planted.mkdir(mode=0o700)
    (planted / "planted").write_text("x")
    here = dict(HERE, SLURM_JOB_ID="4248", TMPDIR=str(tmp_path))
    for spec in ({"env": {}, "workdir": "/p", "tmp_key": KEY}, {"env": {}, "workdir": "/p"},
                 {"env": {}, "workdir": "/p", "tmp_key": "../x"}):
        got = jobstart.job_environment(spec, here)["TMPDIR"]
        assert got != str(planted) and os.listdir(got) == [], got
        assert os.path.dirname(got) == str(tmp_path) and not os.path.islink(got)


def test_the_job_directory_lies_in_the_sandboxs_own_tmpdir(tmp_path):
    """landlock cannot make /tmp private: the session's $TMPDIR is the place."""
    env = jobstart.job_environment({"env": {}, "workdir": "/p", "tmp_key": KEY},
                                   dict(HERE, SLURM_JOB_ID="4246", TMPDIR=str(tmp_path)))
    assert env["TMPDIR"] == f"{tmp_path}/agent-sandbox-job-4246-{KEY}"
    env = jobstart.job_environment({"env": {}, "workdir": "/p", "tmp_key": KEY},
                                   dict(HERE, SLURM_JOB_ID="4247", TMPDIR="/nonexistent/t"))
    assert env["TMPDIR"] == f"/tmp/agent-sandbox-job-4247-{KEY}"
    os.rmdir(env["TMPDIR"])


def test_outside_a_slurm_job_the_sandboxs_tmpdir_stays():
    env = jobstart.job_environment({"env": {}, "workdir": "/p"},
                                   {k: v for k, v in HERE.items() if k != "SLURM_JOB_ID"})
    assert env["TMPDIR"] == "/tmp"
