"""The processes of a user as /proc shows them (tests that count what a
launch leaves behind)."""
from __future__ import annotations

import os


def processes_of(uid: int) -> list[dict[str, str]]:
    """The /proc/PID/status fields (values stripped) of every process whose
    real uid is `uid`, zombies included; one that ends meanwhile is passed over."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = {k: v.strip() for k, _, v in (line.partition(":") for line in handle)}
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            found.append(fields)
    return found
