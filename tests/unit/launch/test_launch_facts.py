"""Decisions apart from launch facts (issue 28): the Policy (compiled, the
plan cache's template) holds no per-launch fact. The descriptors a command
keeps (--keep-fd, Slurm's PMI_FD) and the relayed terminal reach the
backends in their PlanContext and select the plan cache's slot (its key);
a landlock job's shared-memory directory is the lifecycle's Launch.job_shm."""
from __future__ import annotations

import pytest

from agent_sandbox.backends.base import PlanContext
from agent_sandbox.launch.lifecycle import Launch
from agent_sandbox.plancache.plans import Cache, freeze, thaw
from agent_sandbox.policy.model import Policy
from tests.support.plans import BACKENDS, PLAN_HOME, plan_for, policy_for

pytestmark = pytest.mark.home(**PLAN_HOME)     # the `home` fixture's layout

LAUNCH_FACTS = ("keep_fds", "terminal", "job_shm")
KEPT = 987      # a descriptor number nothing else in a plan or policy spells


def test_a_policy_has_no_launch_fact_and_the_launch_has_them():
    assert not set(LAUNCH_FACTS) & set(Policy._fields)
    assert {"keep_fds", "terminal"} <= set(PlanContext._fields)
    launch = Launch(["true"], {}, keep_fds=(KEPT,), terminal=True)
    assert (launch.keep_fds, launch.terminal, launch.job_shm) == ((KEPT,), True, None)


@pytest.mark.parametrize("name", BACKENDS)
def test_the_cached_template_holds_no_launch_fact_but_its_plan_follows_the_launch(home, name):
    """Frozen as the plan cache stores a compiled launch, the policy spells
    neither the kept descriptor nor the terminal; the plan made for them
    does (the helper's --keep-fd / --controlling-tty, the fd.clean line), so
    the cache keys its slot by them (run._template's options)."""
    policy = policy_for(home, backend=name)
    plan = plan_for(name, policy, keep_fds=(KEPT,), terminal=True)
    thawed = thaw(freeze({"policy": policy, "plan": plan}), str, bytes, {})
    assert thawed["policy"] == policy and type(thawed["policy"]) is Policy
    assert not set(LAUNCH_FACTS) & set(thawed["policy"]._fields)
    assert str(KEPT) not in repr(thawed["policy"])
    assert dict(thawed["plan"].partial)["fd.clean"] == f"kept by --keep-fd: {KEPT}"
    assert "--controlling-tty" in [str(a) for a in thawed["plan"].argv]
    plain = plan_for(name, policy)
    assert "fd.clean" in plain.provides
    assert "--controlling-tty" not in [str(a) for a in plain.argv]


def test_the_plan_caches_slot_is_chosen_by_the_launch_facts(home):
    """A hit never reads the launch facts back from the template: a launch
    with other kept descriptors or no terminal has another slot."""
    def path(keep_fds, terminal):
        return Cache((str(home / "proj"), None, keep_fds, terminal, False, None),
                     {"PATH": "/usr/bin:/bin"}, str(home)).path

    slots = {path((), False), path((KEPT,), False), path((), True), path((KEPT,), True)}
    assert len(slots) == 4
    assert path((KEPT,), True) == path((KEPT,), True)
