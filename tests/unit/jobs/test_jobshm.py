"""A landlock job's shared-memory directory, the parts that need no Slurm
(jobs/shm.py): its secret name, the spec it is read from, the checks on
an existing entry and the last-out cleanup, on a directory standing in for
/dev/shm. The real thing: tests/integration/test_mpi.py and
tests/adversarial/test_landlock_job_shm.py."""
from __future__ import annotations

import json
import os
import sys

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.jobs import shm as jobshm
from agent_sandbox.paths import helper_module, helper_path

KEY = "0123456789abcdef" * 2


def test_the_name_gives_away_neither_the_key_nor_another_nodes_name():
    one = jobshm.directory("42", KEY, "n1")
    assert one.startswith("/dev/shm/agent-sandbox-job-42-") and KEY not in one
    assert one == jobshm.directory("42", KEY, "n1")
    assert one != jobshm.directory("42", KEY, "n2")
    assert one != jobshm.directory("42", "f" * 32, "n1")


def test_the_key_is_read_only_from_a_jobstart_launchs_spec(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"workdir": "/p", "tmp_key": KEY}))
    launch = ["/usr/bin/python3", "-IS", helper_path("jobstart"), str(spec)]
    assert jobshm.spec_key(launch) == KEY
    assert jobshm.spec_key(["/usr/bin/python3", "-IS", "/elsewhere/jobstart.py", str(spec)]) \
        is None
    assert jobshm.spec_key(launch + ["more"]) is None
    # The helper rule's other candidate, this launcher's own Python (issue 29);
    # no other interpreter makes a job's launch.
    own = [os.path.realpath(sys.executable)] + launch[1:]
    assert jobshm.spec_key(own) == KEY
    assert jobshm.spec_key(["/tmp/python3"] + launch[1:]) is None
    spec.write_text(json.dumps({"workdir": "/p", "tmp_key": "../../etc"}))
    assert jobshm.spec_key(launch) is None
    link = tmp_path / "link.json"
    link.symlink_to(spec)
    assert jobshm.spec_key(launch[:3] + [str(link)]) is None


def test_the_first_task_makes_it_0700_and_the_next_one_takes_it(tmp_path):
    path = str(tmp_path / "job")
    old = os.umask(0o022)
    try:
        first = jobshm.JobShm.open(path)
    finally:
        os.umask(old)
    assert oct(os.stat(path).st_mode & 0o7777) == "0o700"
    second = jobshm.JobShm.open(path)
    (tmp_path / "job" / "vader_segment.n1.0").write_bytes(b"x")
    first.release()                      # the second task still runs: kept
    assert os.path.isdir(path)
    second.release()                     # the last one out removes it
    assert not os.path.lexists(path)


@pytest.mark.parametrize("plant,why", [
    (lambda p, t: os.symlink(str(t), p), "is a symbolic link"),
    (lambda p, t: os.mkdir(p, 0o755), "has mode 0755, not 0700"),
    (lambda p, t: (os.mkdir(p, 0o700), os.chown(p, 65534, 65534)), "belongs to uid 65534"),
    (lambda p, t: open(p, "w").close(), "cannot be opened as a directory"),
])
def test_a_planted_entry_is_refused(tmp_path, plant, why):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    path = str(tmp_path / "job")
    plant(path, target)
    with pytest.raises(PolicyError) as refused:
        jobshm.JobShm.open(path)
    assert why in str(refused.value) and refused.value.reason == "job_shm_refused"


def test_cleanup_follows_no_symlink(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    path = tmp_path / "job"
    held = jobshm.JobShm.open(str(path))
    (path / "to-dir").symlink_to(outside)
    (path / "sub").mkdir()
    (path / "sub" / "to-file").symlink_to(outside / "keep")
    held.release()
    assert not path.exists() and (outside / "keep").read_text() == "mine"


def test_a_directory_removed_under_a_new_task_is_made_again(tmp_path, monkeypatch):
    """The last task out removed it after the next one opened it: the next
    one sees a link count of 0 once it holds its lock, and makes a new one."""
    path = str(tmp_path / "job")
    real_open = jobshm._open_checked
    calls = []

    def racing(name):
        fd = real_open(name)
        if not calls:
            os.rmdir(name)
        calls.append(name)
        return fd

    monkeypatch.setattr(jobshm, "_open_checked", racing)
    held = jobshm.JobShm.open(path)
    assert len(calls) == 2 and os.path.isdir(path)
    assert os.fstat(held.fd).st_ino == os.stat(path).st_ino
    held.release()


def test_jobstart_knows_the_launchers_variable_and_names():
    jobstart = helper_module("jobstart")
    assert jobshm.SHM_ENV == jobstart.SHM_ENV
    assert jobshm.directory("42", KEY, "n1").startswith(jobstart.SHM_PREFIX)
