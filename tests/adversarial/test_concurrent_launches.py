"""Concurrent launches (SPEC §8 "Concurrency"): eight sandboxes of one
project started at the same moment all start, five rounds over, on every
backend, and the last one to end leaves the project as it found it."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.install import INSTALLED

BACKENDS = ["bwrap", "firejail", "landlock"]
AT_ONCE, ROUNDS = 8, 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_launches_at_once_all_succeed(user, project, backend):
    subprocess.run(["git", "init", "-q", str(project)], user=user.uid, group=user.gid,
                   extra_groups=[], check=True, capture_output=True)
    before = sorted(os.listdir(project)), sorted(os.listdir(project / ".git"))
    for round_number in range(ROUNDS):
        procs = [subprocess.Popen([INSTALLED, "run", "--", "true"], user=user.uid,
                                  group=user.gid, extra_groups=[], cwd=project,
                                  env=user.env(SANDBOX_BACKEND=backend),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(AT_ONCE)]
        results = [(p.wait(timeout=60), p.stderr.read().decode()) for p in procs]
        failed = [r for r in results if r[0] != 0]
        assert not failed, (round_number, failed)
        after = sorted(os.listdir(project)), sorted(os.listdir(project / ".git"))
        assert after == before, (round_number, before, after)
