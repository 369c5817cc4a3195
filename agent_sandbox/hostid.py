"""Which host and which boot this is: the identity a record is written with
(the session registry's records, placeholders' and the agent copy's owners)
and a compiled plan is keyed on (plancache/plans.py context). On the lowest
floor because both the plan cache and the services ask it; stdlib only, and
cheap (no socket import: os.uname is what socket.gethostname returns)."""
from __future__ import annotations

import os


def host_name() -> str:
    return os.uname().nodename


def boot_id() -> str:
    """The kernel's id of this boot, "" where /proc does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as handle:
            return handle.read().decode("ascii", "replace").strip()
    except OSError:
        return ""
