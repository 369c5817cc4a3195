"""The launch lifecycle's protocol (launch/lifecycle.py): services open in
their declared order onto one undo stack, each pushes its own undo, and a
service that fails leaves the earlier ones undone and nothing later opened —
the error mapped to 125 at the edge."""
import contextlib

import pytest

from agent_sandbox.errors import SETUP_FAILED, PolicyError, mapped
from agent_sandbox.launch import lifecycle
from agent_sandbox.launch.lifecycle import Launch, Service, Undo, open_services


class Recorded(Service):
    """A service that writes what happens to it into `log`."""

    def __init__(self, name: str, log: list, *, wanted: bool = True, fails: bool = False):
        self.name, self.log, self._wanted, self.fails = name, log, wanted, fails

    def wanted(self, launch):
        return self._wanted

    def sweep(self, launch):
        self.log.append(("sweep", self.name))

    def open(self, stack, launch):
        if self.fails:
            raise PolicyError(f"{self.name} cannot open — a test. Nothing to do.",
                              reason="test")
        self.log.append(("open", self.name))
        stack.callback(self.log.append, ("close", self.name))


def launch() -> Launch:
    return Launch(["true"], {})


def test_services_open_in_order_and_close_in_reverse():
    log: list = []
    services = [Recorded("a", log), Recorded("b", log, wanted=False), Recorded("c", log)]
    with Undo() as stack:
        open_services(stack, launch(), services)
        assert log == [("sweep", "a"), ("open", "a"), ("sweep", "c"), ("open", "c")]
        log.clear()
    assert log == [("close", "c"), ("close", "a")]


def test_a_failing_service_undoes_the_earlier_and_opens_no_later_one():
    log: list = []
    services = [Recorded("a", log), Recorded("b", log), Recorded("c", log, fails=True),
                Recorded("d", log)]

    def one_launch() -> int:
        with Undo() as stack:
            open_services(stack, launch(), services)
            log.append(("spawned",))     # never reached
            return 0

    assert mapped(one_launch) == SETUP_FAILED == 125
    assert log == [("sweep", "a"), ("open", "a"), ("sweep", "b"), ("open", "b"),
                   ("sweep", "c"), ("close", "b"), ("close", "a")]


def test_an_unwanted_service_is_neither_swept_nor_opened():
    log: list = []
    with Undo() as stack:
        open_services(stack, launch(), [Recorded("a", log, wanted=False)])
    assert log == []


def test_the_undo_runs_when_the_command_fails_after_the_services():
    log: list = []
    with pytest.raises(RuntimeError):
        with Undo() as stack:
            open_services(stack, launch(), [Recorded("a", log), Recorded("b", log)])
            raise RuntimeError("the spawn")
    assert log[-2:] == [("close", "b"), ("close", "a")]


def test_the_declared_order():
    # The chaperon and the egress proxy before the holder is told of them;
    # registered before the git snapshot; the subreaper last, so its sweep is
    # the first undo (before the git check's report and the unregistering).
    # The agent's placeholder keys are approved once the egress plan holds
    # this session's (issue 36).
    assert [s.name for s in lifecycle.SERVICES] == [
        "chaperon", "egress", "agent keys", "job shm", "job holder", "announce", "registry", "git check",
        "home writes", "subreaper"]
    assert all(isinstance(s, Service) for s in lifecycle.SERVICES)


class Prepared:
    chaperon = egress = None


def test_services_a_plain_launch_does_not_want():
    plain = launch()
    plain.prepared = Prepared()
    assert not lifecycle.Chaperon().wanted(plain)
    assert not lifecycle.Egress().wanted(plain)
    assert not lifecycle.JobShm().wanted(plain)      # not a job's shared launch
    assert not lifecycle.Holder().wanted(plain)


def test_the_holder_is_told_the_opened_chaperon_and_the_policy():
    told: list = []
    held = Launch(["true"], {}, on_prepared=lambda chaperon, policy: told.append(
        (chaperon, policy)))
    held.chaperon, held.policy = "session", "policy"
    with Undo() as stack:
        open_services(stack, held, [lifecycle.Holder()])
    assert told == [("session", "policy")]


def test_the_spawn_hooks_attach_only_what_is_there():
    assert lifecycle.egress_ready in lifecycle.AT_SPAWN
    assert lifecycle.egress_ready(launch()) is None   # no egress proxy: nothing to wait for


def test_the_agent_copy_is_discarded_while_session_processes_survive(monkeypatch):
    from agent_sandbox.agents import copy as agentcopy

    done: list = []
    monkeypatch.setattr(agentcopy, "finish", lambda record: done.append(("finish", record)))
    monkeypatch.setattr(agentcopy, "discard", lambda record, why: done.append(("discard",
                                                                               record)))
    copied = launch()
    with Undo() as stack:
        lifecycle.AGENT_COPY._held(stack, copied, "/r.json")
        copied.survivors.append(4242)
    assert done == [("discard", "/r.json")]
    done.clear()
    with Undo() as stack:
        lifecycle.AGENT_COPY._held(stack, launch(), "/r.json")
    assert done == [("finish", "/r.json")]


def test_the_orphan_is_reaped_only_when_there_is_one(monkeypatch):
    from agent_sandbox.process import reap

    reaped: list = []
    monkeypatch.setattr(reap, "reap_orphan", lambda pid, wait=0.0: reaped.append(pid))
    plain = launch()
    lifecycle.reap_orphan(plain)
    plain.orphans.append(77)
    lifecycle.reap_orphan(plain)
    assert reaped == [77]


@pytest.mark.parametrize("stack", [Undo, contextlib.ExitStack], ids=["Undo", "ExitStack"])
def test_the_undo_stack_behaves_as_contextlib_exitstack(stack):
    # Every undo runs, last first; one that fails replaces the error in
    # flight (chained to it) and the rest still run.
    log: list = []

    def fails(name):
        log.append(name)
        raise OSError(name)

    with pytest.raises(OSError) as raised:
        with stack() as undo:
            undo.callback(log.append, "first")
            undo.callback(fails, "second")
            undo.callback(log.append, "third")
            raise ValueError("the launch")
    assert log == ["third", "second", "first"]
    assert str(raised.value) == "second"
    assert isinstance(raised.value.__context__, ValueError)
    log.clear()
    with stack() as undo:
        undo.callback(log.append, "only")
    assert log == ["only"]


def test_the_allocation_to_adopt_comes_only_from_the_launchers_side():
    from agent_sandbox.services.chaperon import allocation_wanted

    assert allocation_wanted({}, "12", job=False) == ("12", True)
    assert allocation_wanted({"SLURM_JOB_ID": "7"}, None, job=False) == ("7", False)
    assert allocation_wanted({"SLURM_JOBID": "7"}, None, job=False) == ("7", False)
    assert allocation_wanted({}, None, job=False) is None
    # A job's own launches (the chaperon's wrapper, --job) run in a ledger job already.
    assert allocation_wanted({"SLURM_JOB_ID": "7"}, None, job=True) is None
    assert allocation_wanted({"SLURM_JOB_ID": "7", "AGENT_SANDBOX_JOB_SESSION": "s"}, None,
                             job=False) is None


def test_a_job_id_that_is_not_one_is_not_asked_of_slurm():
    from agent_sandbox.services.chaperon import check_allocation

    assert "not a Slurm job id" in check_allocation("12_3", {"slurm_binaries": {}})
    assert "squeue is not installed" in check_allocation("12", {"slurm_binaries": {}})
