"""The user's own allocation (issue 36 item 3, docs/chaperon.md "Interactive
work on compute nodes"), on the real Slurm cluster as the unprivileged test
user: an allocation made outside (`salloc --no-shell`) is adopted by a
launcher started in it (SLURM_JOB_ID of the launcher's environment) or named
with --allocation, recorded in the ledger, shown by `status`, and `srun`
inside runs its steps there — each in a sandbox on the node. What cannot be
adopted says why; the refusals inside name the way."""
from __future__ import annotations

import json

import pytest

from tests.support.clusters import as_other, outside
from tests.support.install import INSTALLED

pytestmark = pytest.mark.usefixtures("slurm_cluster")

# What a step prints: its job and step, and whether it is jailed (the
# user's ~/.ssh, which the test user has, is hidden in every sandbox).
STEP = ("echo job=$SLURM_JOB_ID step=$SLURM_STEP_ID; "
        "test -e $HOME/.ssh/id_rsa && echo ssh=visible || echo ssh=hidden")


def ledger_records(user) -> list[dict]:
    records = []
    for path in (user.home / ".local/state/agent-sandbox/ledger").glob("*.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return records


def test_a_launcher_started_in_the_users_allocation_adopts_it(user, project, allocation,
                                                               sessions):
    session = sessions(project, SLURM_JOB_ID=allocation)
    step = session.run("srun", "sh", "-c", STEP)
    assert step.returncode == 0, step
    assert f"job={allocation} step=0" in step.stdout and "ssh=hidden" in step.stdout, step
    listed = session.run("squeue", "--noheader", "--format=%i")
    assert allocation in listed.stdout.split(), listed        # in the session's scope
    adopted = [r for r in ledger_records(user) if r.get("job") == allocation]
    assert [r["kind"] for r in adopted] == ["adopted"], adopted
    status = user.run([INSTALLED, "status"], cwd=user.home)
    assert f"adopted your Slurm allocation {allocation}" in status.stdout, status.stdout
    # The refusals inside say how to get an interactive shell on a node.
    pty = session.run("srun", "--pty", "true")
    assert pty.returncode != 0 and "srun --pty agent-sandbox bash" in pty.stderr, pty
    salloc = session.run("salloc", "true")
    assert salloc.returncode != 0 and "--allocation JOBID" in salloc.stderr, salloc


def test_allocation_named_on_the_command_line(user, project, allocation):
    named = user.sandbox("srun", "sh", "-c", STEP, options=("--allocation", allocation))
    assert named.returncode == 0, named
    assert f"job={allocation} step=" in named.stdout and "ssh=hidden" in named.stdout, named


def test_what_cannot_be_adopted_says_why(user, project, other_user, jobs):
    foreign = as_other(other_user, "sbatch", "--parsable", "--hold", "--wrap", "true")
    queued = outside(user, "sbatch", "--parsable", "--hold", "--wrap", "true")
    jobs += [foreign.stdout.strip(), queued.stdout.strip()]
    for job, why in ((jobs[0], "is not yours"), (jobs[1], "not running"),
                     ("67000000", "does not know job 67000000")):
        named = user.sandbox("true", options=("--allocation", job))
        assert named.returncode == 125 and why in named.stderr, (job, named)
    # Found in the environment it is a warning, and the command runs.
    stale = user.sandbox("true", env=user.env(SLURM_JOB_ID=jobs[0]))
    assert stale.returncode == 0 and "is not adopted" in stale.stderr, stale
    usage = user.run([INSTALLED, "run", "--allocation", "x1", "--", "true"])
    assert usage.returncode == 2 and "not a Slurm job id" in usage.stderr, usage
