"""Environment scrubbing (SPEC §6), a pure function of the caller's environment.

Removed: exact names in BLOCKED_ENV_VARS and names matching a shell glob in
BLOCKED_ENV_PATTERNS (a trailing "/i" makes a glob case-insensitive). Kept
whatever the patterns say: names in ALLOWED_ENV_VARS (the agents' API keys).
Then SANDBOX_ENV is added and the identity variables are set from the password
database, never from the caller: a forged HOME must not move the sandbox home.
"""
from __future__ import annotations

import re
from fnmatch import translate
from typing import Callable, Iterable, Mapping


def _compile(patterns: Iterable[str]) -> re.Pattern | None:
    parts = []
    for pattern in patterns:
        if pattern.endswith("/i"):
            parts.append(f"(?i:{translate(pattern[:-2])})")
        else:
            parts.append(translate(pattern))
    return re.compile("|".join(parts)) if parts else None


def removal_rule(*, blocked: Iterable[str], patterns: Iterable[str],
                 allowed: Iterable[str]) -> Callable[[str], bool]:
    """name → True when the policy removes a variable of that name (compiled
    once; also what secretscan asks about assignments in bound files)."""
    blocked_names = frozenset(blocked)
    allowed_names = frozenset(allowed)
    matcher = _compile(patterns)

    def removed(name: str) -> bool:
        if name in allowed_names:
            return False
        return name in blocked_names or (matcher is not None and bool(matcher.fullmatch(name)))

    return removed


def scrub(environ: Mapping[str, str], *, blocked: Iterable[str], patterns: Iterable[str],
          allowed: Iterable[str], extra: Iterable[str] = (),
          forced: Mapping[str, str] = {}) -> tuple[dict[str, str], tuple[str, ...]]:
    """Return (environment for the sandbox, sorted names removed)."""
    is_removed = removal_rule(blocked=blocked, patterns=patterns, allowed=allowed)
    kept: dict[str, str] = {}
    removed: list[str] = []
    for name, value in environ.items():
        if is_removed(name):
            removed.append(name)
        else:
            kept[name] = value
    for item in extra:
        name, _, value = item.partition("=")
        kept[name] = value
    kept.update(forced)
    return kept, tuple(sorted(removed))


def is_removed(name: str, *, blocked: Iterable[str], patterns: Iterable[str],
               allowed: Iterable[str]) -> bool:
    return removal_rule(blocked=blocked, patterns=patterns, allowed=allowed)(name)
