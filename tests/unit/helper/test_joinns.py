"""Joining a job's sandbox, the helper's side (helper/joinns.py): the
namespace list, the check that the process is where it should be, and the
capability drop, each in a child process where it changes something."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent_sandbox.paths import HELPER_DIR, helper_module

joinns = helper_module("joinns")
sandbox_exec = helper_module("sandbox_exec")


def own(*kinds) -> dict:
    return {kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind in kinds}


def test_the_namespace_list_is_parsed_strictly():
    assert joinns.parse_spec("user:1,mnt:2,pid:3") == {"user": 1, "mnt": 2, "pid": 3}
    for bad in ("time:1", "mnt:x", "mnt", "mnt:1,,pid:2", ""):
        with pytest.raises(joinns.JoinError):
            joinns.parse_spec(bad)


def test_the_process_must_be_in_every_listed_namespace():
    joinns.verify(own("user", "mnt", "ipc", "pid", "uts", "net", "cgroup"))
    wrong = own("mnt", "pid")
    wrong["pid"] += 1
    with pytest.raises(joinns.JoinError, match="pid namespace is not the job sandbox's"):
        joinns.verify(wrong)


def test_entering_through_a_pidfd_that_is_no_process_fails_closed():
    read, write = os.pipe()
    try:
        with pytest.raises(joinns.JoinError, match="cannot enter the job's sandbox"):
            joinns.enter(read, {"mnt": 1})
    finally:
        os.close(read)
        os.close(write)


def test_no_capability_survives_the_drop():
    """Run as root (the test suite is), so there is something to drop."""
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import joinns; "
              "joinns.drop_capabilities(); "
              "print([l for l in open('/proc/self/status') if l.startswith('Cap')])")
    result = subprocess.run([sys.executable, "-I", "-c", script, HELPER_DIR],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("0000000000000000") == 5, result.stdout


def test_the_helper_takes_the_join_options():
    opts = sandbox_exec.parse(["--join", "7", "--join-ns", "user:1,mnt:2", "--", "true"])
    assert opts["join"] == 7 and opts["join_ns"] == "user:1,mnt:2"
    assert opts["command"] == ["true"]
