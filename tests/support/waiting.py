"""Waiting in tests: one helper that polls a condition until it holds or a
deadline passes (`until`), and the plan cache's racy window (`wrote`,
`settle`).

The plan cache does not store a compile that read a file changed less than
RACY_NS (0.1 s, plancache/plans.py) before it: a test that edits a
configuration and expects the next launches to hit the cache would pass or
fail by the machine's speed. So a launch through the launcher helper waits
until the test's last write through the fixtures is older than that."""
from __future__ import annotations

import time

import pytest

SETTLED_S = 0.12
_last_write = [0.0]


def wrote() -> None:
    """A test wrote a file by itself: the next launch settles after it."""
    _last_write[0] = time.monotonic()


def settle() -> None:
    """Wait until the last file written through the fixtures has aged past
    the plan cache's racy window (SETTLED_S)."""
    wait = _last_write[0] + SETTLED_S - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def until(condition, what: str, timeout: float = 60.0, *, interval: float = 0.05):
    """Poll `condition()` every `interval` seconds until it returns something
    true, and return that; past `timeout` seconds the test fails naming `what`.
    A module whose conditions pass quickly, or only for a moment, binds its own
    deadline and pace: `wait = functools.partial(until, timeout=10, interval=0.005)`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting until {what}")
        time.sleep(interval)
