"""Backends: Policy → Plan (the pipeline's third stage, after config and
policy, before launch). Each backend is an instance of base.Backend and
answers the same questions in the same order: is it available (find, then a
real probe), what does it guarantee for this policy, does it refuse it, what
is its plan (argv, payloads, env) — plan() has one signature everywhere, what
differs travels in a base.PlanContext. All of them draw the filesystem from
the one carve walker (policy/view.carve_walk).

BACKENDS (name → backend, in the auto order) is the one table callers use;
it imports a backend's module on first use, so a launch loads only its own.
traits(name) says what a backend is (agent_sandbox/traits.py) without importing
it: callers outside backends/ ask a trait, never compare a name.
This module also holds what is common to choosing one: the selection logic
(pure: finding and probing are passed in, the launcher does them), and which
backends would give a guarantee another one lacks.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Callable, Iterator, NamedTuple

from agent_sandbox.backends.base import Backend, PlanContext
from agent_sandbox.traits import TRAITS, Traits, traits
from agent_sandbox.names import BACKENDS as NAMES

__all__ = ["AUTO_ORDER", "BACKENDS", "Backend", "PlanContext", "Selection", "TRAITS", "Traits",
           "Unavailable", "select", "traits", "would_provide"]


class _Table(Mapping):
    """name → Backend, importing agent_sandbox.backends.<name> on first use."""

    def __init__(self, names: tuple[str, ...]):
        self._names = names
        self._loaded: dict[str, Backend] = {}

    def __getitem__(self, name: str) -> Backend:
        if name not in self._loaded:
            if name not in self._names:
                raise KeyError(name)
            self._loaded[name] = importlib.import_module(f"agent_sandbox.backends.{name}").BACKEND
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


BACKENDS: Mapping[str, Backend] = _Table(NAMES)
AUTO_ORDER = tuple(BACKENDS)


class Selection(NamedTuple):
    name: str
    path: str                       # the backend's program (for landlock: the helper's python)
    reason: str                     # why this one, for --dry-run and the banner
    passed_over: tuple[tuple[str, str], ...] = ()   # (backend, why not), auto only
    features: object = None         # what the program supports (base.Features); None: unknown


class Unavailable(Exception):
    """No backend can be used; the message names the cause and the fix."""


def select(requested: str, allowed, *, find: Callable[[str], str | None],
           probe: Callable[[str, str], tuple[bool, str]], origin: str = "") -> Selection:
    """The backend to use. `find(name)` returns its program, or None or
    (None, why not); `probe(name, path)` runs a trivial sandbox and returns
    (ok, detail) or (ok, detail, the fix for the observed cause);
    `origin` says who asked for an explicit backend ("with --backend")."""
    candidates = AUTO_ORDER if requested == "auto" else (requested,)
    passed_over = []          # (backend, why not, what to do)
    for name in candidates:
        if name not in allowed:
            passed_over.append((name, "not in ALLOWED_BACKENDS", "ask your site admin"))
            continue
        path, missing = find(name), "not found"
        if isinstance(path, tuple):          # (None, why not) from Backend.locate
            path, missing = path[0], path[1] or missing
        if path is None:
            passed_over.append((name, missing, TRAITS[name].install_hint))
            continue
        ok, detail, *hint = probe(name, path)
        if not ok:
            # the probe's own hint names the observed cause (backends/hints.py)
            passed_over.append((name, f"probe failed ({detail})",
                                hint[0] if hint and hint[0] else TRAITS[name].probe_hint))
            continue
        if requested != "auto":
            reason = f"requested {origin}" if origin else "requested"
        elif passed_over:
            reason = ("auto: " + "; ".join(f"{n} {why}" for n, why, _ in passed_over)
                      + f"; {name} passed its probe")
        else:
            reason = f"auto: the first of {' → '.join(AUTO_ORDER)} whose probe passed"
        return Selection(name, path, reason, tuple((n, why) for n, why, _ in passed_over))
    if requested != "auto":
        name, why, hint = passed_over[0]
        if why == "not in ALLOWED_BACKENDS":
            raise Unavailable(f"backend {name} is not allowed here — ALLOWED_BACKENDS is "
                              f"({' '.join(allowed)}). Use one of those with --backend.")
        raise Unavailable(f"the {name} backend cannot be used — {why}: {hint}. Choose "
                          "another with --backend; the command was not run.")
    detail = "; ".join(f"{n} {why} ({hint})" for n, why, hint in passed_over)
    raise Unavailable(f"no usable sandbox backend — {detail}. The command was not run.")


def would_provide(guarantee: str, policy, *, landlock_abi: int, allowed) -> list[str]:
    """Backends (among `allowed`) whose plan for this policy gives `guarantee`."""
    names = []
    for name in AUTO_ORDER:
        if name in allowed:
            provides = BACKENDS[name].guarantees(policy, landlock_abi=landlock_abi)[0]
            if guarantee in provides:
                names.append(name)
    return names
