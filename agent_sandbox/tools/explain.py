"""`config show` and `explain`: why a value, a path or a variable is what it is.

Both are functions of the Settings (values, origins, admin locks) and, for
paths, of the policy and its ordered mount view — the same objects a launch
uses, so the answer cannot drift from what the sandbox really does.
"""
from __future__ import annotations

import json
import os
import shlex

from agent_sandbox.policy.envfilter import _compile
from agent_sandbox.policy.resolve import CREDENTIAL_DIRS, _home_path, _is_within


def _shell(value) -> str:
    if isinstance(value, tuple):
        return "(" + " ".join(shlex.quote(v) for v in value) + ")"
    if isinstance(value, bool):
        return "true" if value else "false"
    return shlex.quote(str(value))


def _origin(settings, key: str) -> str:
    return settings.origins.get(key, "default")


def config_show(settings, *, origin: bool, as_json: bool) -> str:
    keys = sorted(settings.values)
    if as_json:
        if origin:
            data = {k: {"value": settings.values[k], "origin": _origin(settings, k),
                        "locked_by": settings.locks.get(k)} for k in keys}
            if "ALLOWED_HOSTS" in data:
                data["ALLOWED_HOSTS"]["entries"] = host_rules(settings)
        else:
            data = {k: settings.values[k] for k in keys}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    lines = []
    for key in keys:
        line = f"{key}={_shell(settings.values[key])}"
        if origin:
            note = _origin(settings, key)
            if key in settings.locks:
                note += f"; locked by the admin at {settings.locks[key]}"
            line = f"{line}  # {note}"
            if key == "ALLOWED_HOSTS":
                line += "".join(f"\n#   {r['entry']} from {r['origin']}" for r in host_rules(settings))
        lines.append(line)
    return "\n".join(lines) + "\n"


def host_rules(settings) -> list[dict]:
    """Every ALLOWED_HOSTS entry with the file:line that added it."""
    from agent_sandbox.config.network import rules

    return rules(settings)


# ---------------------------------------------------------------- env names
def explain_env(name: str, settings) -> str:
    from agent_sandbox.names import FORCED_ENV

    if name in FORCED_ENV:
        return f"{name}: set by agent-sandbox itself (identity from the password database)\n"
    for item in settings.SANDBOX_ENV:
        if item.partition("=")[0] == name:
            return f"{name}: set inside — SANDBOX_ENV ({_origin(settings, 'SANDBOX_ENV')})\n"
    if name in settings.ALLOWED_ENV_VARS:
        return (f"{name}: kept — ALLOWED_ENV_VARS ({_origin(settings, 'ALLOWED_ENV_VARS')}) "
                "keeps it whatever the patterns say\n")
    if name in settings.BLOCKED_ENV_VARS:
        return f"{name}: removed — BLOCKED_ENV_VARS ({_origin(settings, 'BLOCKED_ENV_VARS')})\n"
    for pattern in settings.BLOCKED_ENV_PATTERNS:
        matcher = _compile([pattern])
        if matcher is not None and matcher.fullmatch(name):
            return (f"{name}: removed — matches {pattern!r} in BLOCKED_ENV_PATTERNS "
                    f"({_origin(settings, 'BLOCKED_ENV_PATTERNS')}). To keep it, add it to "
                    "ALLOWED_ENV_VARS in ~/.config/agent-sandbox/sandbox.conf\n")
    return f"{name}: kept — no rule removes it\n"


# ---------------------------------------------------------------- paths
def _hidden_rule(path: str, settings, policy) -> str | None:
    home = policy.home
    for entry in CREDENTIAL_DIRS:
        if _is_within(path, _home_path(home, entry)):
            return f"credential path ~/{entry} (built in, always hidden)"
    for entry in settings.BLOCKED_FILES:
        if _is_within(path, _home_path(home, entry)):
            return f"BLOCKED_FILES entry {entry} ({_origin(settings, 'BLOCKED_FILES')})"
    for entry in settings.EXTRA_BLOCKED_PATHS:
        if _is_within(path, entry):
            return f"EXTRA_BLOCKED_PATHS entry {entry} ({_origin(settings, 'EXTRA_BLOCKED_PATHS')})"
    if policy.is_hidden(path):
        return "the resolved target of a hidden symlink"
    if path in policy.sockets:
        return ("a unix socket in a tree shown from the host: left out like a hidden path "
                "(unix_sockets.confined; on landlock still connectable)")
    return None


def _grant_rule(dest: str, settings, policy) -> str:
    """Which setting put the mount at `dest` there (nearest ancestor wins)."""
    sources = [
        ((policy.project_dir,), "the project directory"),
        (tuple(p.path for p in policy.protected), "PROTECTED_PATHS / DENIED_WRITABLE_PATHS"),
        (policy.readonly_overlays, "self-protection (install dir, user config tree)"),
        (policy.home_writable, f"HOME_WRITABLE ({_origin(settings, 'HOME_WRITABLE')})"),
        (policy.extra_writable,
         f"EXTRA_WRITABLE_PATHS ({_origin(settings, 'EXTRA_WRITABLE_PATHS')})"),
        (policy.home_readonly, f"HOME_READONLY ({_origin(settings, 'HOME_READONLY')})"),
        (policy.home_seeded, f"HOME_SEEDED_FILES ({_origin(settings, 'HOME_SEEDED_FILES')})"),
        (policy.system_readonly, f"READONLY_MOUNTS ({_origin(settings, 'READONLY_MOUNTS')})"),
        (policy.run_binds, "the /run entries DNS needs"),
        ((policy.home,), f"HOME_ACCESS={policy.home_access} ({_origin(settings, 'HOME_ACCESS')})"),
    ]
    best = None
    for paths, label in sources:
        for path in paths:
            if _is_within(dest, path) and (best is None or len(path) > len(best[0])):
                best = (path, label)
    return best[1] if best else "the sandbox's own layout (/proc, /dev, /tmp, /run)"


def _path_state(path: str, settings, policy, ops) -> tuple[str, str, str]:
    """(verdict, what it is inside, the rule) for one normalized path, not
    following symlinks: verdict is hidden, absent, read-only, writable or
    private (a tmpfs or copy whose writes are discarded)."""
    rule = _hidden_rule(path, settings, policy)
    if rule:
        return "hidden", "hidden (does not exist inside)", rule
    covering = None
    for op in ops:
        dest = op[2] if op[0] in ("ro-bind", "bind", "dev-bind", "symlink", "ro-data", "file") \
            else op[1]
        if op[0] == "remount-ro" or not _is_within(path, dest):
            continue
        if covering is None or len(dest) >= len(covering[1]):
            covering = (op, dest)
    if covering is None:
        return ("absent", "absent", "nothing in the sandbox's filesystem covers it (add it to "
                "READONLY_MOUNTS or EXTRA_WRITABLE_PATHS to make it visible)")
    op, dest = covering
    remounted = any(o[0] == "remount-ro" and o[1] == dest for o in ops)
    kind, verdict = op[0], "read-only"
    if kind == "bind":
        verdict = state = "writable"
    elif kind == "tmpfs":
        verdict = "read-only" if remounted else "private"
        state = ("read-only (an empty private tmpfs)" if remounted
                 else "private tmpfs (writable, discarded at exit)")
    elif kind == "ro-data":
        state = ("read-only, a generated copy (FILTER_PASSWD)" if op[1].startswith("etc-")
                 else "read-only, written by agent-sandbox (session marker)")
    elif kind == "file":
        verdict, state = "private", "a private copy (writable, discarded at exit)"
    elif kind == "symlink":
        state = f"a symlink to {op[1]}"
    else:
        state = "read-only"
    if kind in ("bind", "ro-bind") and not os.path.lexists(path):
        state += " (does not exist yet)"
    return verdict, state, _grant_rule(dest, settings, policy)


def explain_path(path: str, settings, policy, ops) -> dict:
    """What `path` is inside. A symlink (or a path through one) is answered
    for what it resolves to, since that is what opening it reaches: a link in
    the writable project pointing at ~/.ssh/id_rsa is hidden, not writable."""
    given = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
    real = os.path.realpath(given)
    verdict, state, rule = _path_state(given, settings, policy, ops)
    if verdict != "hidden" and real != given:
        verdict, state, rule = _path_state(real, settings, policy, ops)
    return {"target": path, "kind": "path", "path": given,
            "resolves_to": real if real != given else None,
            "verdict": verdict, "state": state, "rule": rule}


def render_path(result: dict) -> str:
    if result["resolves_to"]:
        return (f"{result['path']}: a symlink to {result['resolves_to']}, which is "
                f"{result['state']} inside — {result['rule']}\n")
    return f"{result['path']}: {result['state']} — {result['rule']}\n"


def is_env_name(target: str) -> bool:
    """An identifier that names no file here is an environment variable;
    `explain keylink` with ./keylink present is about the file."""
    return (target.isidentifier() and "/" not in target and not target.startswith(".")
            and not os.path.lexists(target))


def brokering_note(name: str, settings, env) -> str:
    """What API key brokering does to `name` (services/egress.py), when it
    applies (NETWORK_MODE=allowlist, API_KEY_BROKERING): the key variable
    holds a placeholder inside, the base URL variable the broker's URL, and
    the user's base URL is the upstream — or not, and why. "" otherwise."""
    from agent_sandbox.services.egress import BROKERS, gateway

    if settings.NETWORK_MODE != "allowlist" or not settings.API_KEY_BROKERING:
        return ""
    from agent_sandbox.config.network import rules

    for broker_name, broker in BROKERS.items():
        if name == broker.key_var:
            return (f"  brokered: an agent profile that brokers {broker_name} (AGENT_BROKERS) "
                    f"sees a placeholder key in {name}; the egress proxy adds the real one "
                    "outside, on the way to the API, so it never enters the sandbox "
                    "(API_KEY_BROKERING=false turns this off)\n")
        if name == broker.base_url_var:
            upstream, note = gateway(broker, (env or {}).get(name, ""), rules(settings))
            return (f"  brokered: for an agent profile that brokers {broker_name}, {name} "
                    "points at the broker inside; the requests go on to "
                    f"{upstream}" + (f" — {note}" if note else "") + "\n")
    return ""


def explain(target: str, settings, policy, ops, *, as_json: bool = False) -> str:
    if is_env_name(target):
        text = explain_env(target, settings) + brokering_note(target, settings, policy.env)
        if as_json:
            verdict = text.partition(": ")[2].partition(" —")[0]
            return json.dumps({"target": target, "kind": "env", "verdict": verdict,
                               "answer": text.strip()}, indent=2) + "\n"
        return text
    result = explain_path(target, settings, policy, ops)
    return json.dumps(result, indent=2) + "\n" if as_json else render_path(result)
