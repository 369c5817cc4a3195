"""The secret part of a job's private TMPDIR name (chaperon/submit.py
tmp_key, agent_sandbox/helper/jobstart.py private_tmpdir): fresh for every
job, and a step takes the one of the job it runs in."""
from __future__ import annotations

import re

from chaperon.submit import tmp_key


def test_every_job_gets_a_fresh_unguessable_key():
    keys = {tmp_key() for _ in range(50)}
    assert len(keys) == 50 and all(re.fullmatch(r"[0-9a-f]{32}", k) for k in keys)


def test_a_step_shares_its_jobs_key_only():
    key = "ab" * 16
    env = {"TMPDIR": f"/tmp/agent-sandbox-job-42-{key}"}
    assert tmp_key(env, "42") == key
    assert tmp_key(env, "43") != key                         # another job's name
    assert tmp_key({"TMPDIR": "/tmp/agent-sandbox-job-42"}, "42") != ""   # no key: a fresh one
    assert tmp_key({"TMPDIR": f"/tmp/agent-sandbox-job-42-{key}/../x"}, "42") != key
