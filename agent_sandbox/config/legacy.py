"""The keys of the bash original's sandbox.conf that this product does not
have, in one table, and their translation into ours.

Its installer writes ~/.config/agent-sandbox/sandbox.conf, the same path we
read, and SPEC §4 promises that such a file loads unchanged. Keys both share
(ALLOWED_PROJECT_PARENTS, HOME_ACCESS, SLURM_SCOPE, …) need nothing; every
other key it defines is in LEGACY below, either *mapped* (a function from
its value to assignments of our keys) or *inert* (accepted, no effect, with
the reason). Either way a file gets ONE warning per key naming the key and
why, so a person knows what changed. Fail closed: a mapped value we cannot
deliver becomes the stricter value we can, never a weaker one. The
original's `filtered` and `proxied` network modes are our `allowlist` (the
egress proxy), its NETWORK_BLOCKLIST takes entries out of ALLOWED_HOSTS, and
its NETWORK_FILTER_FALLBACK=open (fall back to an open network when the
filter cannot run) is not honoured: a mode that cannot be enforced refuses
the launch.

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


# filtered (a host filter) and proxied (through a proxy) are both our
# allowlist: the egress proxy, ALLOWED_HOSTS deciding (docs/network.md).
_NETWORK_MODES = {"open": "open", "isolated": "isolated",
                  "filtered": "allowlist", "proxied": "allowlist"}
# A pseudo-key of translate's assignments: remove these entries from
# ALLOWED_HOSTS (config/load.py Merged.remove_hosts).
REMOVE_HOSTS = "ALLOWED_HOSTS-"


def _network_mode(value) -> tuple[tuple[str, object], ...]:
    mode = str(value).strip().lower()
    if mode not in _NETWORK_MODES:
        raise LegacyValueError(f"NETWORK_FILTER_MODE={value} is not one of "
                               f"{', '.join(_NETWORK_MODES)}")
    return (("NETWORK_MODE", _NETWORK_MODES[mode]),)


def _blocklist(value) -> tuple[tuple[str, object], ...]:
    entries = (value,) if isinstance(value, str) else tuple(value)
    return ((REMOVE_HOSTS, tuple(e for e in entries if e)),)


LEGACY: dict[str, Legacy] = {
    "NETWORK_FILTER_MODE": Legacy(
        "mapped to NETWORK_MODE: open → open, isolated → isolated, filtered and proxied → "
        "allowlist (the egress proxy; ALLOWED_HOSTS decides which hosts pass)",
        _network_mode),
    "NETWORK_FILTER_FALLBACK": Legacy(
        "no effect: no mode ever falls back here — a network mode that cannot be enforced "
        "refuses the launch (exit 125), never runs with the network open"),
    "NETWORK_BLOCKLIST": Legacy(
        "mapped: NETWORK_MODE=allowlist refuses every host ALLOWED_HOSTS does not list, so a "
        "blocked host is refused already; a listed entry equal to a blocked one is removed "
        "from ALLOWED_HOSTS", _blocklist),
    "NETWORK_BLOCKLIST_EXCEPT": Legacy(
        "no effect: exceptions to a block list have no meaning for an allow-list; add the "
        "hosts to ALLOWED_HOSTS to let them through"),
    "NETWORK_MAIL_BLOCK": Legacy(
        "no effect: with NETWORK_MODE=allowlist a mail server is refused unless ALLOWED_HOSTS "
        "lists it (and the proxy carries TCP to the ports listed, 443 and 80 by default)"),
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
        lines.extend(f"# (remove {_shell(value)} from ALLOWED_HOSTS if you list them)"
                     if key == REMOVE_HOSTS else f"{key}={_shell(value)}"
                     for key, value in ours)
    return "\n".join(lines) + "\n"
