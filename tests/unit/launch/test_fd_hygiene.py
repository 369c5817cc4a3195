"""Unit tests for descriptor hygiene: the launcher's sealing of inherited
descriptors, the --keep-fd check, and the helper's close before exec."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent_sandbox.process import spawn as launcher
from agent_sandbox.errors import PolicyError
from agent_sandbox.paths import helper_module
sandbox_exec = helper_module("sandbox_exec")


def test_seal_marks_every_other_descriptor_close_on_exec():
    kept, stray = os.open("/dev/null", os.O_RDONLY), os.open("/dev/null", os.O_RDONLY)
    try:
        os.set_inheritable(kept, True)
        os.set_inheritable(stray, True)
        launcher._seal_inherited({kept})
        assert os.get_inheritable(kept) and not os.get_inheritable(stray)
    finally:
        os.close(kept)
        os.close(stray)


def test_keep_fd_must_name_an_open_descriptor():
    fd = os.open("/dev/null", os.O_RDONLY)
    os.close(fd)
    with pytest.raises(PolicyError, match=f"--keep-fd {fd}: descriptor {fd} is not open"):
        launcher.keep_fds_checked([fd])
    with pytest.raises(PolicyError, match="not a descriptor number"):
        launcher.keep_fds_checked([-1])
    assert launcher.keep_fds_checked([2, 0, 1, 1]) == ()      # stdio always passes


def test_helper_parses_keep_fd():
    opts = sandbox_exec.parse(["--keep-fd", "7", "--keep-fd", "9", "--", "true"])
    assert opts["keep_fds"] == [7, 9] and opts["command"] == ["true"]


def test_helper_closes_all_but_stdio_and_kept_before_exec():
    script = ("import os, sys; sys.path.insert(0, sys.argv[1]); import sandbox_exec\n"
              "a = os.open('/dev/null', 0); b = os.open('/dev/null', 0); c = os.open('/dev/null', 0)\n"
              "sandbox_exec.close_inherited([b])\n"
              "def is_open(fd):\n"
              "    try:\n        os.fstat(fd)\n        return True\n"
              "    except OSError:\n        return False\n"
              "print([fd for fd in (a, b, c) if is_open(fd)], b)\n")
    here = os.path.dirname(sandbox_exec.__file__)
    result = subprocess.run([sys.executable, "-I", "-S", "-c", script, here],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    listed, kept = result.stdout.rsplit(" ", 1)
    assert listed == f"[{kept.strip()}]", result.stdout


def test_only_slurms_pmi2_socket_is_kept_for_a_task(tmp_path):
    import socket

    left, right = socket.socketpair()
    key = open(tmp_path / "key", "w")
    try:
        task = {"SLURM_STEP_ID": "0"}
        assert launcher.slurm_task_fds({**task, "PMI_FD": str(left.fileno())}) == (left.fileno(),)
        assert launcher.slurm_task_fds({**task, "PMI_FD": str(key.fileno())}) == ()   # not a socket
        assert launcher.slurm_task_fds({"PMI_FD": str(left.fileno())}) == ()          # not a task
        assert launcher.slurm_task_fds({**task, "PMI_FD": "²"}) == ()
        assert launcher.slurm_task_fds({**task, "PMI_FD": "999"}) == ()               # not open
    finally:
        left.close()
        right.close()
        key.close()
