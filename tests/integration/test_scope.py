"""Scoped Slurm views and control for real (issue 6): the unprivileged test user
in real bwrap jails, the real Slurm cluster behind the chaperon, jobs from
outside, from a sandbox of another project, of another user, and of two
sandboxes of one project at the same time.

Each sandbox is a `Session` (tests/support/clusters.py): one long-running
sandbox that runs the commands a test hands it, so two sandboxes can be alive
at once and many commands cost one launch.
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.clusters import Result, as_other, outside, state

pytestmark = pytest.mark.usefixtures("slurm_cluster")

NOWHERE = "67000000"     # a job id no job has: the real commands' "does not exist"


def nonexistent(user, *argv) -> Result:
    """What the real command answers for a job that does not exist, with the
    id to compare written as JOBID."""
    real = outside(user, *argv)
    return Result(real.returncode, real.stdout.replace(NOWHERE, "JOBID"),
                  real.stderr.replace(NOWHERE, "JOBID"))


def same_as_missing(result: Result, missing: Result, job: str) -> bool:
    return (result.returncode, result.stdout.replace(job, "JOBID"),
            result.stderr.replace(job, "JOBID")) == (
        missing.returncode, missing.stdout, missing.stderr)


def new_project(user) -> Path:
    path = user.project / f"p{uuid.uuid4().hex[:8]}"
    path.mkdir()
    os.chown(path, user.uid, user.gid)
    return path


# ------------------------------------------------------------------------- visibility
def test_project_scope_hides_and_protects_other_jobs_user_scope_shows_them(
        user, project, other_user, sessions, jobs):
    mine = sessions(project)                               # SLURM_SCOPE=project (default)
    elsewhere = sessions(new_project(user))
    own = mine.submit("--job-name=own")
    other_project = elsewhere.submit("--job-name=elsewhere")
    from_outside = outside(user, "sbatch", "--parsable", "--hold", "--job-name=outside",
                           "--wrap", "true").stdout.strip()
    foreign = as_other(other_user, "sbatch", "--parsable", "--hold", "--wrap",
                       "true").stdout.strip()
    jobs += [own, other_project, from_outside, foreign]
    assert all(j.isdigit() for j in jobs), jobs

    listed = mine.run("squeue", "-h", "-o", "%i").stdout.split()
    assert listed == [own]
    assert elsewhere.run("squeue", "-h", "-o", "%i").stdout.split() == [other_project]

    missing = {
        "squeue": nonexistent(user, "squeue", "-j", NOWHERE),
        "show": nonexistent(user, "scontrol", "show", "job", NOWHERE),
        "sstat": nonexistent(user, "sstat", "-j", NOWHERE),
        "scancel": nonexistent(user, "scancel", NOWHERE),
        "hold": nonexistent(user, "scontrol", "hold", NOWHERE),
        "update": nonexistent(user, "scontrol", "update", f"JobId={NOWHERE}", "TimeLimit=5"),
    }
    assert missing["squeue"].returncode == 1 and "Invalid job id" in missing["squeue"].stderr
    for job in (other_project, from_outside, foreign):
        before = state(job)
        checks = {
            "squeue": mine.run("squeue", "-j", job),
            "show": mine.run("scontrol", "show", "job", job),
            "sstat": mine.run("sstat", "-j", job),
            "scancel": mine.run("scancel", job),
            "hold": mine.run("scontrol", "hold", job),
            "update": mine.run("scontrol", "update", f"JobId={job}", "TimeLimit=5"),
        }
        for name, result in checks.items():
            assert same_as_missing(result, missing[name], job), (job, name, result,
                                                                 missing[name])
        assert state(job) == before, job          # untouched: still held, same limit
        assert mine.run("scontrol", "show", "job").stdout.count("JobId=") == 1

    # The own job is visible and controllable.
    assert mine.run("scontrol", "show", "job", own).stdout.startswith(f"JobId={own} ")
    assert mine.run("scontrol", "update", f"JobId={own}", "TimeLimit=5").returncode == 0
    assert state(own).split("|")[2] == "5:00"

    # User scope: every job of the user, none of another user's.
    wide = sessions(project, SLURM_SCOPE="user")
    seen = set(wide.run("squeue", "-h", "-o", "%i").stdout.split())
    assert {own, other_project, from_outside} <= seen and foreign not in seen
    shown = wide.run("scontrol", "show", "job", from_outside)
    assert shown.returncode == 0 and shown.stdout.startswith(f"JobId={from_outside} ")
    assert same_as_missing(wide.run("squeue", "-j", foreign), missing["squeue"], foreign)
    assert wide.run("scontrol", "hold", from_outside).returncode == 0   # already held: fine
    assert wide.run("scontrol", "release", from_outside).returncode == 0
    assert "JobHeldUser" not in state(from_outside)


def test_session_scope_separates_two_sandboxes_of_one_project(user, project, sessions, jobs):
    first = sessions(project, SLURM_SCOPE="session")
    second = sessions(project, SLURM_SCOPE="session")     # both alive at once
    a = first.submit()
    b = second.submit()
    jobs += [a, b]
    assert first.run("squeue", "-h", "-o", "%i").stdout.split() == [a]
    assert second.run("squeue", "-h", "-o", "%i").stdout.split() == [b]
    missing = nonexistent(user, "squeue", "-j", NOWHERE)
    assert same_as_missing(first.run("squeue", "-j", b), missing, b)
    assert first.run("scancel", b).returncode == 0
    assert "PENDING" in state(b)
    project_wide = sessions(project)
    assert sorted(project_wide.run("squeue", "-h", "-o", "%i").stdout.split()) == sorted([a, b])


# ------------------------------------------------------------------------- the tag
FORMATS = [["-o", "%i %k"], ["-o", "%i|%10k|%.10k|%.3k|%3k|%k|"], ["-o", "%k"],
           ["-O", "jobid,comment"], ["-O", "comment:.12,name:5x,comment:3"],
           ["-O", "comment,jobid"], ["-h", "-o", "%.20k%j"]]


@pytest.mark.parametrize("comment", ["my note", None, "50% done, ok/no: #1"])
def test_the_tag_never_shows_and_the_user_comment_does(user, project, sessions, jobs,
                                                       comment):
    """Every comment format shows exactly what Slurm shows for a job whose
    comment is the user's own (a twin job submitted outside with it)."""
    session = sessions(project)
    options = [f"--comment={comment}"] if comment else []
    job = session.submit("--job-name=twin", *options)
    twin = outside(user, "sbatch", "--parsable", "--hold", "--job-name=twin", *options,
                   "--wrap", "true").stdout.strip()
    jobs += [job, twin]
    tag = outside(user, "squeue", "-h", "-j", job, "-o", "%k").stdout.strip()
    assert tag.startswith("chaperon:sid=") and tag.endswith(":END"), tag   # Slurm holds it

    for fmt in FORMATS:
        inside = session.run("squeue", "-j", job, *fmt)
        real = outside(user, "squeue", "-j", twin, *fmt)
        assert inside.returncode == real.returncode == 0
        assert inside.stdout.replace(job, "JOB") == real.stdout.replace(twin, "JOB"), (
            fmt, inside.stdout, real.stdout)
    everything = session.run("squeue", "-o", "%all")
    assert everything.returncode == 0 and "chaperon:" not in everything.stdout
    assert f"|{comment or '(null)'}|" in everything.stdout
    for args in (["show", "job", job], ["-o", "show", "job", job], ["show", "job"]):
        shown = session.run("scontrol", *args)
        assert shown.returncode == 0 and "chaperon:" not in shown.stdout, shown
        if comment:
            assert f"Comment={comment} " in shown.stdout
        else:
            assert "Comment=" not in shown.stdout
    for flag in ("--json", "--yaml"):
        inside = session.run("squeue", flag)
        assert inside.returncode == 0 and "chaperon:" not in inside.stdout
    data = json.loads(session.run("squeue", "--json").stdout)
    assert [j["job_id"] for j in data["jobs"]] == [int(job)]
    assert data["jobs"][0]["comment"] == (comment or "")


def test_sacct_shows_the_user_comment_not_the_tag(user, project, sessions):
    session = sessions(project)
    done = session.run("sbatch", "--parsable", "--wait", "--job-name=twin", "--comment=my note",
                       "--wrap", "true")
    assert done.returncode == 0, done
    job = done.stdout.strip()
    twin = outside(user, "sbatch", "--parsable", "--wait", "--job-name=twin",
                   "--comment=my note", "--wrap", "true").stdout.strip()
    deadline = time.monotonic() + 60
    while not ("chaperon:" in outside(user, "sacct", "-n", "-X", "-P", "-j", job, "-o",
                                      "comment").stdout
               and outside(user, "sacct", "-n", "-X", "-P", "-j", twin, "-o",
                           "comment,jobname").stdout.strip() == "my note|twin"):
        assert time.monotonic() < deadline, "the jobs never fully reached the accounting"
        time.sleep(0.5)
    recent = "--starttime=now-10minutes"     # not an older job that had the same id
    for fmt in (["-o", "jobid,comment"], ["-o", "jobid,comment%40,jobname"],
                ["-o", "comm%-5,jobid"], ["-n", "-o", "comment,state"],
                ["-P", "-o", "jobid,comment"], ["-p", "-o", "comment,jobid"]):
        inside = session.run("sacct", "-X", recent, "-j", job, *fmt)
        real = outside(user, "sacct", "-X", recent, "-j", twin, *fmt)
        assert "chaperon:" not in inside.stdout, inside
        assert inside.stdout.replace(job, "JOB") == real.stdout.replace(twin, "JOB"), fmt
    for flag in ("--json", "--yaml"):
        inside = session.run("sacct", "-X", "-j", job, flag)
        assert inside.returncode == 0 and "chaperon:" not in inside.stdout
        assert "my note" in inside.stdout
    everything = session.run("sacct", "-X", "-j", job, "-o", "ALL")
    assert everything.returncode == 0 and "chaperon:" not in everything.stdout


# ------------------------------------------------------------------------- control
def test_scancel_with_filters_cancels_only_in_scope_jobs(user, project, sessions, jobs):
    session = sessions(project)
    mine = [session.submit("--job-name=sweep") for _ in range(2)]
    theirs = outside(user, "sbatch", "--parsable", "--hold", "--job-name=sweep", "--wrap",
                     "true").stdout.strip()
    keep = session.submit("--job-name=keep")
    jobs += [*mine, theirs, keep]
    result = session.run("scancel", "--name=sweep")
    assert result.returncode == 0, result
    assert all("CANCELLED" in state(j) for j in mine)
    assert "PENDING" in state(theirs) and "PENDING" in state(keep)
    result = session.run("scancel", "-u", user.name)        # yourself: only in scope
    assert result.returncode == 0, result
    assert "CANCELLED" in state(keep) and "PENDING" in state(theirs)


def test_scontrol_update_takes_safe_keys_only(user, project, sessions, jobs):
    session = sessions(project)
    job = session.submit("--time=30", "--comment=first")
    other = outside(user, "sbatch", "--parsable", "--hold", "--wrap", "true").stdout.strip()
    jobs += [job, other]
    assert session.run("scontrol", "update", f"JobId={job}", "TimeLimit=20").returncode == 0
    raised = session.run("scontrol", "update", f"JobId={job}", "TimeLimit=40")
    assert raised.returncode == 1 and "lower a job's time limit" in raised.stderr
    assert session.run("scontrol", "update", f"JobId={job}", "TimeLimit+=5").returncode == 1
    assert session.run("scontrol", "update", f"JobId={job}", "TimeLimit-=5").returncode == 0
    assert state(job).split("|")[2] == "15:00"
    assert session.run("scontrol", "update", f"JobId={job}", "Name=renamed").returncode == 0
    assert state(job).endswith("|renamed")
    assert session.run("scontrol", "update", f"JobId={job}", "Comment=second").returncode == 0
    held = outside(user, "squeue", "-h", "-j", job, "-o", "%k").stdout.strip()
    assert held.startswith("chaperon:sid=") and held.endswith(",user=second:END")
    assert "Comment=second " in session.run("scontrol", "show", "job", job).stdout
    refused = session.run("scontrol", "update", f"JobId={job}", f"Dependency=afterok:{other}")
    assert refused.returncode == 1 and "not a job this sandbox can see" in refused.stderr
    own = session.submit()
    jobs.append(own)
    assert session.run("scontrol", "update", f"JobId={job}",
                       f"Dependency=afterok:{own}").returncode == 0
    for words in (["update", f"JobId={job}", "UserId=0"],
                  ["update", f"JobId={job}", "WorkDir=/tmp"],
                  ["update", f"JobId={job}", "Priority=100000"],
                  ["update", "JobName=renamed", "TimeLimit=1"],
                  ["update", "NodeName=vm", "State=DRAIN"],
                  ["shutdown"], ["reconfigure"], ["token"], ["show", "assoc_mgr"],
                  ["create", "reservation"]):
        result = session.run("scontrol", *words)
        assert result.returncode == 1, words
        assert re.match(r"agent-sandbox: scontrol: .+ — .+\. .+", result.stderr), result


def test_array_tasks_with_their_own_ids_are_in_scope(user, project, sessions, jobs):
    session = sessions(project)
    array = session.submit("--array=0-2")
    jobs.append(array)
    # Changing one task splits it off with a job id of its own.
    changed = session.run("scontrol", "update", f"JobId={array}_1", "Name=split")
    assert changed.returncode == 0, changed
    own_id = outside(user, "squeue", "-h", "-r", "-j", array, "-o", "%A %i").stdout
    split = [line.split()[0] for line in own_id.splitlines() if line.endswith(f"{array}_1")]
    assert split and split[0] != array, own_id
    jobs.append(split[0])
    shown = session.run("squeue", "-h", "-j", split[0], "-o", "%i")
    assert shown.stdout.strip() == f"{array}_1", shown
    assert session.run("scontrol", "show", "job", split[0]).returncode == 0


# ------------------------------------------------------------------------- refusals
REFUSED = [
    ["sacct", "--allusers"], ["sacct", "-a"], ["sacct", "--user=asother"],
    ["sacct", "--accounts=research"], ["sacctmgr", "show", "user"],
    ["sacctmgr", "list", "associations"], ["sacctmgr", "add", "user", "x"], ["sacctmgr"],
    ["scontrol", "shutdown"], ["scontrol"], ["squeue", "-u", "asother"],
    ["squeue", "--account=research"], ["scancel", "-u", "asother"], ["scancel", "-i", "1"],
    ["sshare", "-a"], ["sprio", "-u", "asother"], ["squeue", "-M", "other"],
]


def test_refusals_and_the_allowed_reads(user, project, sessions, jobs):
    session = sessions(project)
    job = session.submit()
    jobs.append(job)
    for argv in REFUSED + [["scontrol", "update", f"JobId={job}", "UserId=0"]]:
        result = session.run(*argv)
        assert result.returncode == 1, (argv, result)
        assert re.fullmatch(rf"agent-sandbox: {argv[0]}: .+ — .+\. .+\n", result.stderr), (
            argv, result.stderr)
    for argv in (["sacct", "-u", user.name, "-X"], ["sacct", f"--uid={user.uid}"],
                 ["squeue", "--me"], ["squeue", "-u", user.name],
                 ["sacctmgr", "show", "cluster"], ["sacctmgr", "show", "qos"],
                 ["sacctmgr", "show", "tres"], ["sacctmgr", "show", "configuration"],
                 ["sinfo"], ["sdiag"], ["sshare"], ["sprio"], ["scontrol", "show", "partition"],
                 ["scontrol", "show", "hostnames", "vm,n[1-2]"], ["scontrol", "ping"]):
        result = session.run(*argv)
        assert result.returncode == 0, (argv, result)
        if argv[0] in ("sacctmgr", "sinfo", "sshare"):
            # Node states and fair-share usage move while earlier jobs end:
            # the two answers must agree once the cluster holds still.
            for _ in range(3):
                real = outside(user, *argv)
                if result.stdout == real.stdout:
                    break
                time.sleep(1)
                result = session.run(*argv)
            assert result.stdout == real.stdout, (argv, result.stdout, real.stdout)
    assert session.run("scontrol", "show", "hostnames", "/etc/passwd").returncode == 1


@pytest.mark.parametrize("command", ["salloc", "sattach", "sbcast", "scrontab", "scrun",
                                     "strigger", "sreport"])
def test_every_refused_stub_exits_1_with_a_message(user, project, command):
    result = user.sandbox(command, "--help", cwd=project)
    assert result.returncode == 1
    assert re.fullmatch(rf"agent-sandbox: {command}: {command} is refused — .+\. .+\n",
                        result.stderr), result.stderr


# ------------------------------------------------------------------------- srun and outside
def test_srun_allocation_is_recorded_and_tagged(user, project, sessions):
    session = sessions(project, SLURM_SCOPE="session")
    result = session.run("srun", "--comment=step note", "/bin/sh", "-c", "echo $SLURM_JOB_ID")
    assert result.returncode == 0, result
    job = result.stdout.strip()
    assert job.isdigit()
    ledger = user.home / ".local/state/agent-sandbox/ledger"
    records = [json.loads(line) for path in ledger.rglob("*.jsonl")
               for line in path.read_text().splitlines()]
    assert any(r.get("job") == job and r.get("kind") == "allocation" for r in records)
    listed = session.run("squeue", "-h", "-t", "all", "-o", "%i %k", "-j", job)
    assert listed.stdout.strip() in ("", f"{job} step note"), listed   # purged or shown
    assert "chaperon:" not in listed.stdout


PROBE = ("echo AGENT_SANDBOX=${AGENT_SANDBOX:-unset}; "
         "ls ~/.ssh >/dev/null 2>&1 && echo ssh=visible || echo ssh=hidden")


def test_agent_sandbox_sbatch_from_outside_runs_the_job_sandboxed(user, project, sessions,
                                                                 jobs):
    result = user.run([INSTALLED, "sbatch", "--parsable", "--wait", "--wrap", PROBE],
                      cwd=project, timeout=120)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip()
    output = project / f"slurm-{job}.out"
    deadline = time.monotonic() + 30
    while not (output.exists() and output.read_text().strip()):
        assert time.monotonic() < deadline, f"{output} was not written"
        time.sleep(0.2)
    assert output.read_text().split() == ["AGENT_SANDBOX=1", "ssh=hidden"]
    # The same validation as inside: a denied option is refused with its reason.
    refused = user.run([INSTALLED, "sbatch", "--chdir=/tmp", "--wrap", "true"], cwd=project)
    assert refused.returncode == 1 and refused.stderr.startswith("agent-sandbox: sbatch: ")
    # Tagged and recorded for the project: a sandbox of the project sees it, untagged.
    held = user.run([INSTALLED, "sbatch", "--parsable", "--hold", "--comment=from outside",
                     "--wrap", "true"], cwd=project)
    assert held.returncode == 0, held.stderr
    jobs.append(held.stdout.strip())
    assert outside(user, "squeue", "-h", "-j", jobs[-1], "-o", "%k").stdout.startswith(
        "chaperon:sid=")
    listed = sessions(project).run("squeue", "-h", "-o", "%i %k")
    assert listed.stdout == f"{jobs[-1]} from outside\n", listed
    srun = user.run([INSTALLED, "srun", "/bin/sh", "-c", PROBE], cwd=project, timeout=120)
    assert srun.returncode == 0, srun.stderr
    assert srun.stdout.split() == ["AGENT_SANDBOX=1", "ssh=hidden"]


def test_submissions_depend_only_on_jobs_in_scope(user, project, sessions, jobs):
    """sbatch and srun --dependency, in every spelling and in #SBATCH lines,
    name only jobs the sandbox can see — like scontrol update Dependency=."""
    session = sessions(project)
    own = session.submit()
    other = outside(user, "sbatch", "--parsable", "--hold", "--wrap", "true").stdout.strip()
    jobs += [own, other]
    for spelling in ([f"--dependency=afterok:{other}"], ["-d", f"afterany:{own}:{other}"],
                     [f"--dependency=afterok:{own},afternotok:{other}"]):
        refused = session.run("sbatch", "--parsable", "--hold", *spelling, "--wrap", "true")
        assert refused.returncode == 1, (spelling, refused)
        assert refused.stderr.startswith("agent-sandbox: sbatch: a dependency on job "), refused
    script = project / "dep.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH --dependency=afterok:{other}\ntrue\n")
    os.chown(script, user.uid, user.gid)
    refused = session.run("sbatch", "--parsable", "--hold", "dep.sh")
    assert refused.returncode == 1 and "not a job this sandbox can see" in refused.stderr
    srun = session.run("srun", f"--dependency=afterok:{other}", "true", timeout=60)
    assert srun.returncode == 1 and "not a job this sandbox can see" in srun.stderr
    accepted = session.run("sbatch", "--parsable", "--hold", f"--dependency=afterok:{own}",
                           "--wrap", "true")
    assert accepted.returncode == 0, accepted
    jobs.append(accepted.stdout.strip())
    assert f"afterok:{own}" in outside(user, "squeue", "-h", "-j", accepted.stdout.strip(),
                                       "-o", "%E").stdout
