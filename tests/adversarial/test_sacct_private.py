"""Accounting shows no environment or script outside the scope (issue 11,
item 7), with AccountingStoreFlags=job_env,job_script (scripts/slurm-
cluster.sh): a job the user submitted outside the sandbox, with a marker in
its environment and script, leaves no trace in sacct --env-vars, -B, --json
or --yaml inside, while a job of the sandbox shows its own script. Likewise a
--wrap job submitted outside leaves its command line (sacct's SubmitLine) in
no listing inside, however the field is asked for, while a job of the
sandbox shows its own submit line as Slurm stored it."""
from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from chaperon.untag import untag_fields
from tests.support.clusters import SLURM_SCRIPT
from tests.support.clusters import outside

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


def test_submit_line_of_a_job_outside_the_scope_stays_hidden(user, project, sessions):
    marker = f"WRAPSECRET{uuid.uuid4().hex[:8]}"
    # Not held: sacct's user-wide listing shows a job once it is eligible.
    submitted = outside(user, "sbatch", "--parsable", "--wrap", f"echo {marker}")
    job = submitted.stdout.strip()
    assert job.isdigit(), submitted
    session = sessions(project)
    own = session.run("sbatch", "--parsable", "--wrap", "echo own-line")
    assert own.returncode == 0, own
    own_id = own.stdout.strip()
    try:
        line = ["-X", "-P", "-n", "-o", "SubmitLine%500"]
        window = ["-S", "now-1hours"]
        deadline = time.monotonic() + 30
        while True:   # both are in accounting once sacct outside lists them
            theirs = outside(user, "sacct", "-j", job, *line).stdout
            ours = outside(user, "sacct", "-j", own_id, *line).stdout
            listed = outside(user, "sacct", *window, "-X", "-n", "-o", "jobid%20").stdout
            if marker in theirs and ours.strip() and {job, own_id} <= set(listed.split()):
                break
            assert time.monotonic() < deadline, (theirs, ours, listed)
            time.sleep(0.3)
        for argv in (["sacct", "-j", job, "-o", "SubmitLine%200", "-p"],
                     ["sacct", "-j", job, "-o", "submitl%300"],
                     ["sacct", "-j", job, "--format", "JobID,SUBMITLINE%400", "-P"],
                     ["sacct", "-j", f"{job},{own_id}", "-o", "jobid, submitline%300"],
                     ["sacct", "-j", job, "-o", "all", "-P"],
                     ["sacct", "-j", job, "-o", "a%300", "-P"],
                     ["sacct", "-j", job, "-o", "%400"],
                     ["sacct", "-j", job, "-o", "comment,submitline%300"],
                     ["env", "SACCT_FORMAT=jobid,submitline%300", "sacct", "-j", job],
                     ["sacct", "-j", job, "--json"], ["sacct", "-j", job, "--yaml"],
                     ["sacct", *window, "-o", "jobid,submitline%400"],
                     ["sacct", *window, "-X", "-P", "-o", "SubmitL"],
                     ["sacct", *window, "-p", "-o", "submitline", "--delimiter=;"],
                     ["sacct", *window, "-o", "comment%30,submitline%300", "-n"],
                     ["sacct", *window, "-j", "", "-o", "submitline%300"],
                     ["sacct", *window, "-P", "-o", "all"],
                     ["env", "SACCT_FORMAT=submitline%300", "sacct", *window],
                     ["sacct", *window, "--json"]):
            inside = session.run(*argv)
            assert marker not in inside.stdout + inside.stderr, (argv, inside)
            assert inside.returncode == 0, (argv, inside)
        # Ordinary columns stay user-wide (SPEC §9).
        listed = session.run("sacct", *window, "-X", "-n", "-o", "jobid%20").stdout.split()
        assert job in listed and own_id in listed, listed
        # In scope: the submit line as Slurm stored it, named or listed (in
        # parsable output without the comment tag, which never shows).
        ours = untag_fields(ours.encode()).decode()
        assert session.run("sacct", "-j", own_id, *line).stdout == ours
        rows = session.run("sacct", *window, "-X", "-P", "-n", "-o", "jobid,submitline%500")
        assert f"{own_id}|{ours.strip()}" in rows.stdout.splitlines(), rows
        assert job not in rows.stdout, rows
    finally:
        outside(user, "scancel", job, own_id)


def test_submit_line_of_another_project_stays_hidden_and_the_tag_never_shows(user, project,
                                                                            sessions):
    """Issue 32: another project's --wrap job (same user) leaves its command
    line in no listing inside; the sandbox's own job's SubmitLine shows as
    Slurm stored it but without the chaperon's `--comment=chaperon:…:END`,
    in fixed-width columns too (on the old code the tag showed there)."""
    import os
    other = project.parent / f"p{uuid.uuid4().hex[:8]}"
    other.mkdir()
    os.chown(other, user.uid, user.gid)
    marker = f"OTHERPROJ{uuid.uuid4().hex[:8]}"
    elsewhere = sessions(other)
    theirs = elsewhere.run("sbatch", "--parsable", "--wrap", f"echo {marker}")
    assert theirs.returncode == 0, theirs
    job = theirs.stdout.strip()
    session = sessions(project)
    own = session.run("sbatch", "--parsable", "--comment=mine", "--wrap", "echo own-line")
    assert own.returncode == 0, own
    own_id = own.stdout.strip()
    try:
        window = ["-S", "now-1hours"]
        deadline = time.monotonic() + 30
        while True:   # both are in accounting once sacct outside lists them
            stored = outside(user, "sacct", "-j", own_id, "-X", "-P", "-n", "-o",
                             "SubmitLine%500").stdout
            hidden = outside(user, "sacct", "-j", job, "-X", "-P", "-n", "-o",
                             "SubmitLine%500").stdout.split()
            listed = outside(user, "sacct", *window, "-X", "-n", "-o", "jobid%20").stdout
            if "chaperon:sid=" in stored and hidden and {job, own_id} <= set(listed.split()):
                break
            assert time.monotonic() < deadline, (stored, listed)
            time.sleep(0.3)
        for argv in (["sacct", "-j", own_id, "-o", "submitline%500"],
                     ["sacct", "-j", own_id, "-o", "jobid, submitline%500"],
                     ["sacct", "-j", own_id, "-X", "-o", "SubmitL%-500", "-n"],
                     ["sacct", "-j", own_id, "-o", "all"],
                     ["sacct", "-j", own_id, "-o", "submitline", "-P"],
                     ["sacct", "-j", own_id, "--json"], ["sacct", "-j", own_id, "--yaml"],
                     ["sacct", *window, "-o", "jobid,submitline%500"],
                     ["sacct", *window, "-P", "-o", "all"],
                     ["sacct", "-j", f"{job},{own_id}", "-o", "submitline%500"],
                     ["sacct", *window, "--json"]):
            inside = session.run(*argv)
            assert inside.returncode == 0, (argv, inside)
            assert "chaperon:" not in inside.stdout + inside.stderr, (argv, inside.stdout)
            assert marker not in inside.stdout + inside.stderr, (argv, inside.stdout)
            # The other project's submit line (its job's files, its tag) shows nowhere.
            assert hidden[-1] not in inside.stdout, (argv, hidden, inside.stdout)
        shown = session.run("sacct", "-j", own_id, "-X", "-n", "-o", "submitline%500").stdout
        assert "--comment=mine" in shown and "--parsable" in shown, shown
        # The other project's session sees its own line, untagged.
        line = elsewhere.run("sacct", "-j", job, "-X", "-n", "-o", "submitline%500").stdout
        assert hidden[-1] in line and "chaperon:" not in line, line
    finally:
        outside(user, "scancel", job, own_id)
