"""bwrap's sandbox init outlives bwrap's own process by an instant: bwrap
exits as soon as its init reports the command's status, and the init,
orphaned, went to PID 1. Under an init that does not reap (a container
without one, some CI hosts: this machine's) every launch left a zombie,
counted against the user's process limit (RLIMIT_NPROC counts zombies):
an agent making a launch per tool call would run out of processes. The
launcher is a child subreaper and reaps it (process/reap.py reap_orphan)."""
from __future__ import annotations

from tests.support.procs import processes_of


def _zombies(uid: int, name: str = "bwrap") -> int:
    return sum(1 for fields in processes_of(uid)
               if fields.get("State", "")[:1] == "Z" and fields.get("Name") == name)


def test_bwrap_launches_leave_no_zombie_behind(user, project):
    for _ in range(2):      # the compile (and a backend probe, when one is due) first
        assert user.sandbox("true", options=("--backend", "bwrap"), cwd=project).returncode == 0
    before = _zombies(user.uid)
    for _ in range(5):
        result = user.sandbox("true", options=("--backend", "bwrap"), cwd=project)
        assert result.returncode == 0, result.stderr
    # Zombies PID 1 reaps meanwhile only lower the count. The launcher reaps
    # the init last and waits for it 2 ms at most: one whose teardown was
    # slower on a loaded machine may still go to PID 1 — before, every one did.
    assert _zombies(user.uid) - before <= 1, f"{_zombies(user.uid) - before} new zombies"
