"""Accounting shows no environment or script outside the scope (issue 11,
item 7), with AccountingStoreFlags=job_env,job_script (scripts/slurm-
cluster.sh): a job the user submitted outside the sandbox, with a marker in
its environment and script, leaves no trace in sacct --env-vars, -B, --json
or --yaml inside, while a job of the sandbox shows its own script."""
from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from tests.conftest import SLURM_SCRIPT
from tests.integration.test_scope import outside

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def test_env_and_script_of_a_job_outside_the_scope_stay_hidden(user, project, sessions):
    flags = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True)
    if "job_env,job_script" not in flags.stdout:
        # Another checkout's cluster script rewrote slurm.conf since the
        # session started: ours puts the flags back (a reconfigure).
        subprocess.run(["bash", str(SLURM_SCRIPT), "start"], capture_output=True, check=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    marker = f"private{uuid.uuid4().hex[:8]}"
    env_marker = f"ENV{marker}"
    submitted = outside(user, "sbatch", "--parsable", "--export=ALL," + f"ADV_MARK={env_marker}",
                        input=f"#!/bin/sh\necho script{marker}\n")
    job = submitted.stdout.strip()
    assert job.isdigit(), submitted
    deadline = time.monotonic() + 60
    while True:   # the real sacct, outside, has both once the job is recorded
        env = outside(user, "sacct", "-j", job, "--env-vars").stdout
        script = outside(user, "sacct", "-j", job, "-B").stdout
        if env_marker in env and f"script{marker}" in script:
            break
        assert time.monotonic() < deadline, (env, script)
        time.sleep(0.5)
    session = sessions(project)
    own = session.run("sbatch", "--parsable", "--wait", "--wrap", f"echo own{marker}")
    assert own.returncode == 0, own
    own_id = own.stdout.strip()
    try:
        for argv in (["sacct", "-j", job, "--env-vars"], ["sacct", "-j", job, "-B"],
                     ["sacct", "-j", f"{job}.batch", "--env-vars"],
                     ["sacct", f"--jobs={job},{own_id}", "--batch-script"],
                     ["sacct", "-j", job, "--json"], ["sacct", "-j", job, "--yaml"],
                     ["sacct", "-j", job, "-B", "--json"], ["sacct", "-j", job, "-B", "-P"]):
            inside = session.run(*argv)
            assert marker not in inside.stdout + inside.stderr, (argv, inside)
        hidden = session.run("sacct", "-j", job, "-B")
        assert (hidden.returncode, hidden.stdout) == (0, "")       # as for a job that never was
        assert session.run("sacct", "-j", job, "-X", "-n", "-o", "jobid").stdout.split() == [job]
        # In scope: shown (Slurm holds the chaperon's wrapper as the script).
        deadline = time.monotonic() + 30
        while f"Batch Script for {own_id}\n" not in session.run("sacct", "-j", own_id,
                                                                 "-B").stdout:
            assert time.monotonic() < deadline, "the sandbox's own script never showed"
            time.sleep(0.5)
    finally:
        outside(user, "scancel", own_id)
