"""Adopting the user's allocation (docs/chaperon.md "Interactive work on
compute nodes") is the user's act, outside: the agent must not get a job it
was not given. Real Slurm, real bwrap, the unprivileged test user.

- SLURM_JOB_ID inside is the agent's to set: naming the user's running
  allocation in srun's environment does not make it usable (the launcher
  adopts only from its own environment or --allocation).
- An allocation one session adopted is that session's: another sandbox of
  the same project (another agent, started outside the allocation) cannot
  run steps in it, nor see it. (Recorded with the project's jobs, it would
  be: the test fails when the ledger counts adopted jobs for the project.)
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def test_the_agent_cannot_adopt_the_users_allocation_by_naming_it(user, project, allocation,
                                                                   sessions):
    agent = sessions(project)                 # started outside any allocation
    step = agent.run("env", f"SLURM_JOB_ID={allocation}", f"SLURM_JOBID={allocation}",
                     "srun", "true")
    assert step.returncode != 0 and f"a step in job {allocation} is refused" in step.stderr, step
    assert f"--allocation {allocation}" in step.stderr, step     # the refusal names the way


def test_an_adopted_allocation_is_the_adopting_sessions_alone(user, project, allocation,
                                                                sessions):
    adopter = sessions(project, SLURM_JOB_ID=allocation)
    assert adopter.run("srun", "true").returncode == 0
    other = sessions(project)                 # same project, not in the allocation
    step = other.run("env", f"SLURM_JOB_ID={allocation}", "srun", "true")
    assert step.returncode != 0 and "is refused" in step.stderr, step
    listed = other.run("squeue", "--noheader", "--format=%i")
    assert allocation not in listed.stdout.split(), listed
    cancel = other.run("scancel", allocation)
    assert adopter.run("srun", "true").returncode == 0, cancel    # still there, usable
