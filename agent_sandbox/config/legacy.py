"""The keys of the bash original's sandbox.conf that this product does not
have, in one table, and their translation into ours.

Its installer writes ~/.config/agent-sandbox/sandbox.conf, the same path we
read, and SPEC §4 promises that such a file loads unchanged. Keys both share
(ALLOWED_PROJECT_PARENTS, HOME_ACCESS, SLURM_SCOPE, …) need nothing; every
other key it defines is in LEGACY below, either *mapped* (a function from
its value to assignments of our keys) or *inert* (accepted, no effect, with
the reason). Either way a file gets ONE warning per key naming the key and
why, so a person knows what changed. Fail closed: a mapped value we cannot
deliver becomes the stricter value we can (the original's `filtered` and
`proxied` network modes become `isolated`), never a weaker one; its
NETWORK_FILTER_FALLBACK=open (fall back to an open network) is not honoured.

Pure: `translate(key, value)` returns (assignments, warning); config/load.py
applies them in the layer the key appeared in, and `migrate(text)` rewrites
a whole file in our terms for `agent-sandbox config migrate`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple


class Legacy(NamedTuple):
    """One key of the bash original: `to_ours` maps its value to our
    assignments (None: inert), `why` is the warning's reason."""

    why: str
    to_ours: Callable[[object], tuple[tuple[str, object], ...]] | None = None


class LegacyValueError(ValueError):
    """A legacy key with a value the original did not allow either."""


_NETWORK_MODES = {"open": "open", "isolated": "isolated",
                  "filtered": "isolated", "proxied": "isolated"}


def _network_mode(value) -> tuple[tuple[str, object], ...]:
    mode = str(value).strip().lower()
    if mode not in _NETWORK_MODES:
        raise LegacyValueError(f"NETWORK_FILTER_MODE={value} is not one of "
                               f"{', '.join(_NETWORK_MODES)}")
    return (("NETWORK_MODE", _NETWORK_MODES[mode]),)


_NO_NETWORK_FILTER = ("no per-host network filter exists yet (NETWORK_MODE is open or "
                      "isolated); nothing is blocked by it. Use NETWORK_MODE=isolated to cut "
                      "the network")

LEGACY: dict[str, Legacy] = {
    "NETWORK_FILTER_MODE": Legacy(
        "mapped to NETWORK_MODE: open → open, isolated → isolated; filtered and proxied "
        "become isolated (the stricter mode this product can enforce). Set NETWORK_MODE "
        "yourself to choose", _network_mode),
    "NETWORK_FILTER_FALLBACK": Legacy(
        "no effect: no mode ever falls back here — a network mode that cannot be enforced "
        "becomes isolated, never open"),
    "NETWORK_BLOCKLIST": Legacy(f"no effect: {_NO_NETWORK_FILTER}"),
    "NETWORK_BLOCKLIST_EXCEPT": Legacy(f"no effect: {_NO_NETWORK_FILTER}"),
    "NETWORK_MAIL_BLOCK": Legacy(f"no effect: {_NO_NETWORK_FILTER}"),
    "BIND_DEV_PTS": Legacy("no effect: every sandbox has its own /dev/pts already"),
    "SUPPRESS_AGENT_WARNINGS": Legacy(
        "no effect: agent warnings are not suppressed; SANDBOX_QUIET=true silences the "
        "launcher's notes"),
    "HIDE_FROM_SANDBOX": Legacy(
        "no effect: the sandbox never sees its own configuration; hide paths with "
        "EXTRA_BLOCKED_PATHS and variables with BLOCKED_ENV_VARS"),
    "SANDBOX_MODULES": Legacy(
        "no effect: no environment modules are loaded for you; load them before "
        "starting agent-sandbox"),
    "SANDBOX_NPROC_LIMIT": Legacy(
        "no effect: no process limit is set; use `ulimit -u` before starting "
        "agent-sandbox"),
    "LANDLOCK_REQUIRED_ABI": Legacy(
        "no effect: the landlock backend checks the ABI it needs itself; use "
        "REQUIRE=(…) to refuse launches without a guarantee"),
    "LANDLOCK_HARD_REQUIREMENT": Legacy(
        "no effect: use ALLOWED_BACKENDS and REQUIRE=(…) to refuse launches without "
        "a guarantee"),
    "MOUNT_GUARD": Legacy("no effect: mounts live in the sandbox's own namespace and "
                          "cannot change under it"),
    "MOUNT_GUARD_INTERVAL": Legacy("no effect: there is no mount guard (see MOUNT_GUARD)"),
    "CLEANUP_MATERIALIZED_BLOCKED_FILES": Legacy(
        "no effect: blocked files are never copied, so there is nothing to clean up"),
}


def translate(key: str, value) -> tuple[tuple[tuple[str, object], ...], str]:
    """Our assignments for the original's `key=value`, and the warning.
    Raises LegacyValueError for a value the original did not allow."""
    entry = LEGACY[key]
    assignments = entry.to_ours(value) if entry.to_ours else ()
    return assignments, f"{key} (a key of the bash agent-sandbox): {entry.why}"


def _shell(value) -> str:
    import shlex

    if isinstance(value, tuple):
        return "(" + " ".join(shlex.quote(v) for v in value) + ")"
    return shlex.quote(str(value))


def migrate(assignments) -> str:
    """The file of `assignments` (config/syntax.Assignment, in file order) in
    our terms: shared keys as they were, mapped keys translated, inert keys
    commented out with the reason. Raises LegacyValueError."""
    lines = ["# Migrated from a sandbox.conf of the bash agent-sandbox by "
             "`agent-sandbox config migrate`."]
    for item in assignments:
        op = "+=" if item.append else "="
        if item.key not in LEGACY:
            lines.append(f"{item.key}{op}{_shell(item.value)}")
            continue
        ours, warning = translate(item.key, item.value)
        lines.append(f"# {item.key}{op}{_shell(item.value)} — {LEGACY[item.key].why}")
        lines.extend(f"{key}={_shell(value)}" for key, value in ours)
    return "\n".join(lines) + "\n"
