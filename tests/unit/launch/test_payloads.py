"""launch/payloads.py: when the bound-file verdict may be remembered."""
from __future__ import annotations

from time import time_ns

from agent_sandbox.launch.payloads import _settled


def _key(ctime_ns: int) -> tuple:
    return (1, 2, 0o100644, 10, ctime_ns, ctime_ns)


def test_a_verdict_is_kept_only_for_files_older_than_their_tick():
    now = time_ns()
    second = now - now % 1_000_000_000
    assert _settled([("a", "a", _key(now - 500_000_001)), ("b", "b", None)])
    assert not _settled([("a", "a", _key(now - 1_000))])              # just written
    assert not _settled([("a", "a", _key(second - 1_000_000_000))])   # whole seconds
    assert _settled([("a", "a", _key(second - 3_000_000_000))])
