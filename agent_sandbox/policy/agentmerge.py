"""The guard on an agent's settings: which of a session's changes go back.

An agent works on a session copy of its settings files (agents/copy.py);
at the end the launcher hands this module three trees per file — `base` (the
copy as the session started), `ours` (the copy as the session left it) and
`theirs` (the user's file as it is now, perhaps changed meanwhile by another
session or by the user) — and the profile's ALLOW-list of typed key patterns
(AGENT_SETTINGS_KEEP). Strategy, all pure:

- `changes(base, ours, patterns)` walks base and ours together and lists
  what the session changed: a key path that a pattern names is one change
  if its new value has the pattern's type; a path that is only the prefix of
  a pattern is walked into when both sides are tables; any other changed
  path is *dropped* — it can run something outside (hooks, MCP server
  commands, status line, key helper, plugin sources…), grants something
  (trust, permissions that run tools), or is simply not known to be
  harmless. Allow, never deny: an unknown key, or a known key with a value
  of another type, is dropped.
- `apply(theirs, changes, new_table)` writes the kept changes into theirs
  (a dict, or a tomlkit document whose comments and layout survive). Only
  keys the session changed are touched (three-way): another session's or the
  user's edits to other keys stay; on the same key the session ending last
  wins; list additions are added to the user's list as it is now.

A pattern is `dotted.key.path=TYPE`; `*` (or any fnmatch glob) matches one
key, whatever it contains (a project path with dots is one key). TYPE:

- `bool`, `int`, `num` (finite), `str`, `strs` (list of strings): a value of
  that type, or the key removed (back to the agent's default);
- `A|B|…`: one of these literals (`true`/`false` are booleans) — how a trust
  key keeps only revocations (`untrusted`, `DO_NOT_TRUST`, `false`); never
  removed (removing a revocation is a grant);
- `+*` or `+Tool|Tool…`: a list the session may only add strings to (deny and
  ask rules narrow what runs); with tool names, only rules `Tool` or
  `Tool(…)` naming one of them (permission rules that grant no execution);
  removals are dropped.

No TYPE: a scalar (bool, int, finite number, string) — never a table or list.

Strings an agent later reads (its system prompt carries `language`, a model
name, an output style; issue 27) are never free text in a shipped or loaded
profile: `str`, `strs` and no TYPE are refused by `pattern_problem` (the
profile loader), and a kept string has one of the constrained kinds
(STRING_KINDS — each a strict pattern, so no sentence, no shell syntax, no
newline) or is one of an enum's literals:

- `uuid`, `hex` (an id, a hash), `version` (1.2.3, 2.1.330-beta.1),
  `isotime` (2025-01-31T12:00:00.000Z), `name` (a model or style name:
  letters, digits and `._:/@[]-`, no space, ≤ 128), `language` (one of
  LANGUAGES, the language names and ISO 639-1 codes Claude Code is told to
  answer in);
- `enum(a|b|…)`: one of these strings, or the key removed (a choice like a
  theme, where going back to the default is no grant — unlike `A|B`).
"""
from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Mapping, MutableMapping
from fnmatch import fnmatchcase

# The kinds' names and patterns are the profile's vocabulary (the loader
# checks them): one source, config/agentkeys.py.
from agent_sandbox.config.agentkeys import (FREE_TEXT as _FREE_TEXT, LANGUAGES,  # noqa: F401
                                            PLAIN_KINDS as _PLAIN_KINDS, STRING_KINDS,
                                            pattern_problem)

MISSING = object()


# collections.namedtuple, not typing.NamedTuple: every agent session's end
# merges through here, and typing costs it ~2.5 ms of imports.
class Change(namedtuple("Change", ("path", "value", "add"), defaults=(False,))):
    """value: MISSING deletes the key; add: value is a list of items to add
    to theirs."""
    __slots__ = ()


Pattern = namedtuple("Pattern", ("path", "kind"))


def parse_patterns(patterns) -> tuple[Pattern, ...]:
    out = []
    for p in patterns:
        if not p:
            continue
        key, _, kind = p.partition("=")
        out.append(Pattern(tuple(key.split(".")), kind))
    return tuple(out)


def _matches(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(path) == len(pattern) and all(fnmatchcase(k, p) for k, p in zip(path, pattern))


def _leads_to(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(path) < len(pattern) and all(
        fnmatchcase(k, p) for k, p in zip(path, pattern[:len(path)]))


def _scalar(value) -> bool:
    if isinstance(value, bool) or isinstance(value, str):
        return True
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _fits(kind: str, value: str) -> bool:
    import re

    return re.fullmatch(STRING_KINDS[kind], value) is not None
def _literal(word: str):
    return {"true": True, "false": False}.get(word, word)


def _typed(kind: str, value) -> bool:
    """Whether a (plain) value fits the pattern's type."""
    if kind in ("", "scalar"):
        return _scalar(value)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return _scalar(value) and not isinstance(value, (bool, str))
    if kind == "str":
        return isinstance(value, str)
    if kind == "strs":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind in STRING_KINDS:
        return isinstance(value, str) and _fits(kind, value)
    if kind == "language":
        return isinstance(value, str) and value.lower() in LANGUAGES
    if kind.startswith("enum(") and kind.endswith(")"):
        return isinstance(value, str) and value in kind[5:-1].split("|")
    # an enum of literals (compared with their type: True is not 1)
    return any(type(value) is type(lit) and value == lit
               for lit in map(_literal, kind.split("|")))


def _rule_allowed(kind: str, rule) -> bool:
    """An item added to a `+` list: any string for `+*`, else a permission
    rule `Tool` or `Tool(…)` naming one of the listed tools."""
    if not isinstance(rule, str):
        return False
    tools = kind[1:]
    if tools == "*":
        return True
    return rule.partition("(")[0].strip() in tools.split("|")


def show(path: tuple[str, ...]) -> str:
    """A key path as a person reads it: a.b, or a["/x.y"].b for odd keys."""
    out = ""
    for key in path:
        simple = key.replace("_", "").replace("-", "").isalnum()
        out += (("." if out else "") + key) if simple else f"[{key!r}]".replace("'", '"')
    return out


def _judge(here, kind, bv, ov, kept, dropped) -> None:
    """One changed key a pattern names: kept (whole or its additions) or dropped."""
    if kind.startswith("+"):
        before = bv if isinstance(bv, list) else []
        if ov is MISSING or not isinstance(ov, list):
            dropped.append(here)
            return
        added = [v for v in ov if v not in before]
        good = [v for v in added if _rule_allowed(kind, v)]
        if good:
            kept.append(Change(here, good, add=True))
        if len(good) != len(added) or any(v not in ov for v in before):
            dropped.append(here)        # a removal or a rule that grants execution
        return
    # a literal enum (A|B: a revocation) is never removed; a kind may be
    enum = not (kind in _FREE_TEXT or kind in _PLAIN_KINDS or kind in STRING_KINDS
                or kind == "language" or kind.startswith("enum("))
    if ov is MISSING:
        (dropped if enum else kept).append(here if enum else Change(here, MISSING))
    elif _typed(kind, ov):
        kept.append(Change(here, ov))
    else:
        dropped.append(here)


def changes(base, ours, patterns) -> tuple[list[Change], list[tuple[str, ...]]]:
    """(kept changes, dropped key paths) from base to ours."""
    compiled = parse_patterns(patterns)
    kept: list[Change] = []
    dropped: list[tuple[str, ...]] = []

    def walk(path, b, o):
        for key in dict.fromkeys([*b, *o]):
            bv, ov = _plain(b.get(key, MISSING)), _plain(o.get(key, MISSING))
            if bv == ov and type(bv) is type(ov):
                continue
            here = path + (key,)
            named = [p for p in compiled if _matches(here, p.path)]
            if named:
                _judge(here, named[0].kind, bv, ov, kept, dropped)
            elif (any(_leads_to(here, p.path) for p in compiled)
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
    needs one, or a non-list where items are added (reported, never forced)."""
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
        elif change.add:
            now = container.get(last, MISSING)
            if now is MISSING:
                container[last] = list(change.value)
            elif isinstance(now, list):
                have = _plain(now)
                for item in change.value:
                    if item not in have:
                        now.append(item)
            else:
                conflicts.append(change.path)
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
