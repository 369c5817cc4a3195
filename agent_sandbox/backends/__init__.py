"""Backends compile one Policy into a Plan. Each module answers the same
questions in the same order: is it available (find, then a real probe), what
does it guarantee for this policy, what is its plan (argv, payloads, env).

This package module holds what is common to choosing one: the auto order,
the selection logic (pure: finding and probing are passed in, the launcher
does them), and which backends would give a guarantee another one lacks.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from agent_sandbox.names import BACKENDS as AUTO_ORDER  # noqa: E402
INSTALL_HINT = {
    "bwrap": "install bubblewrap (apt-get install bubblewrap)",
    "firejail": "install firejail (apt-get install firejail)",
    "landlock": "it needs Linux 5.13+ with Landlock enabled (lsm=…,landlock) and "
                "/usr/bin/python3",
}
PROBE_HINT = {
    "bwrap": "unprivileged user namespaces are probably disabled on this host "
             "(user.max_user_namespaces, kernel.unprivileged_userns_clone, an AppArmor "
             "userns restriction); ask your admin to enable them",
    "firejail": "firejail may not allow this user (/etc/firejail/firejail.users) or be too "
                "old (0.9.72 or newer is needed)",
    "landlock": "the kernel refused a trivial Landlock ruleset",
}


def module(name: str):
    if name == "bwrap":
        from agent_sandbox.backends import bwrap as mod
    elif name == "firejail":
        from agent_sandbox.backends import firejail as mod
    elif name == "landlock":
        from agent_sandbox.backends import landlock as mod
    else:  # pragma: no cover - names are validated before
        raise ValueError(name)
    return mod


class Selection(NamedTuple):
    name: str
    path: str                       # the backend's program (for landlock: the helper's python)
    reason: str                     # why this one, for --dry-run and the banner
    passed_over: tuple[tuple[str, str], ...] = ()   # (backend, why not), auto only


class Unavailable(Exception):
    """No backend can be used; the message names the cause and the fix."""


def select(requested: str, allowed, *, find: Callable[[str], str | None],
           probe: Callable[[str, str], tuple[bool, str]], origin: str = "") -> Selection:
    """The backend to use. `find(name)` returns its program or None;
    `probe(name, path)` runs a trivial sandbox and returns (ok, detail);
    `origin` says who asked for an explicit backend ("with --backend")."""
    candidates = AUTO_ORDER if requested == "auto" else (requested,)
    passed_over = []          # (backend, why not, what to do)
    for name in candidates:
        if name not in allowed:
            passed_over.append((name, "not in ALLOWED_BACKENDS", "ask your site admin"))
            continue
        path = find(name)
        if path is None:
            passed_over.append((name, "not found", INSTALL_HINT[name]))
            continue
        ok, detail = probe(name, path)
        if not ok:
            passed_over.append((name, f"probe failed ({detail})", PROBE_HINT[name]))
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
            provides = module(name).guarantees(policy, landlock_abi=landlock_abi)[0]
            if guarantee in provides:
                names.append(name)
    return names
