"""The guard on an agent's settings: which of a session's changes go back.

An agent works on a session copy of its settings files (launch/agentcopy.py);
at the end the launcher hands this module three trees per file — `base` (the
copy as the session started), `ours` (the copy as the session left it) and
`theirs` (the user's file as it is now, perhaps changed meanwhile by another
session or by the user) — and the profile's ALLOW-list of key patterns
(AGENT_SETTINGS_KEEP). Strategy, all pure:

- `changes(base, ours, patterns)` walks base and ours together and lists
  what the session changed: a key path that a pattern names is one change
  (set to ours' value, or deleted), taken whole; a path that is only the
  prefix of a pattern is walked into when both sides are tables; any other
  changed path is *dropped* — it can run something outside (hooks, MCP
  server commands, status line, key helper, plugin sources…) or is simply
  not known to be harmless. Allow, never deny: an unknown key is dropped.
- `apply(theirs, changes, new_table)` writes the kept changes into theirs
  (a dict, or a tomlkit document whose comments and layout survive). Only
  keys the session changed are touched (three-way): another session's or the
  user's edits to other keys stay; on the same key the session ending last
  wins.

Patterns are dotted key paths; `*` (or any fnmatch glob) matches one key,
whatever it contains (so a project path with dots is one key).
"""
from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from fnmatch import fnmatchcase
from typing import NamedTuple

MISSING = object()


class Change(NamedTuple):
    path: tuple[str, ...]
    value: object          # MISSING: delete the key


def parse_patterns(patterns) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(p.split(".")) for p in patterns if p)


def _matches(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(path) == len(pattern) and all(fnmatchcase(k, p) for k, p in zip(path, pattern))


def _leads_to(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(path) < len(pattern) and all(
        fnmatchcase(k, p) for k, p in zip(path, pattern[:len(path)]))


def show(path: tuple[str, ...]) -> str:
    """A key path as a person reads it: a.b, or a["/x.y"].b for odd keys."""
    out = ""
    for key in path:
        simple = key.replace("_", "").replace("-", "").isalnum()
        out += (("." if out else "") + key) if simple else f"[{key!r}]".replace("'", '"')
    return out


def changes(base, ours, patterns) -> tuple[list[Change], list[tuple[str, ...]]]:
    """(kept changes, dropped key paths) from base to ours."""
    compiled = parse_patterns(patterns)
    kept: list[Change] = []
    dropped: list[tuple[str, ...]] = []

    def walk(path, b, o):
        for key in dict.fromkeys([*b, *o]):
            bv, ov = b.get(key, MISSING), o.get(key, MISSING)
            if _plain(bv) == _plain(ov):
                continue
            here = path + (key,)
            if any(_matches(here, p) for p in compiled):
                kept.append(Change(here, _plain(ov)))
            elif (any(_leads_to(here, p) for p in compiled)
                  and isinstance(bv if bv is not MISSING else {}, Mapping)
                  and isinstance(ov if ov is not MISSING else {}, Mapping)):
                walk(here, {} if bv is MISSING else bv, {} if ov is MISSING else ov)
            else:
                dropped.append(here)

    walk((), base if isinstance(base, Mapping) else {}, ours if isinstance(ours, Mapping) else {})
    return kept, dropped


def apply(theirs: MutableMapping, kept, new_table=dict) -> list[tuple[str, ...]]:
    """Write the kept changes into theirs (in place); returns the paths that
    could not be written because theirs holds a non-table where the path
    needs one (reported, never forced)."""
    conflicts = []
    for change in kept:
        container = theirs
        blocked = False
        for key in change.path[:-1]:
            inner = container.get(key, MISSING)
            if inner is MISSING:
                if change.value is MISSING:
                    blocked = True     # nothing to delete
                    break
                container[key] = new_table()
                inner = container[key]
            elif not isinstance(inner, MutableMapping):
                conflicts.append(change.path)
                blocked = True
                break
            container = inner
        if blocked:
            continue
        last = change.path[-1]
        if change.value is MISSING:
            if last in container:
                del container[last]
        else:
            container[last] = change.value
    return conflicts


def _plain(value):
    """A tomlkit item as plain Python (dicts, lists, scalars) for comparing."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def merge(base, ours, theirs: MutableMapping, patterns, new_table=dict):
    """(kept paths, dropped paths): theirs is updated in place."""
    kept, dropped = changes(base, ours, patterns)
    conflicts = apply(theirs, kept, new_table)
    return [c.path for c in kept if c.path not in conflicts], dropped + conflicts
