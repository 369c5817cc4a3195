"""`agent-sandbox help PROFILE`: what an agent profile changes (issue 36
item 8) — the command it runs, the settings it changes compared with a plain
`agent-sandbox run` here (each with its old and new value, lists as what it
adds and removes), the API keys it brokers, the agent state it keeps, the
configuration it copies for the session. `summary` is pure."""
from __future__ import annotations

import shlex


def _shown(value) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + " ".join(shlex.quote(str(v)) for v in value) + ")"
    if isinstance(value, bool):
        return "true" if value else "false"
    return shlex.quote(str(value)) if value != "" else "''"


def changes(plain: dict, profiled: dict) -> list[str]:
    """One line per setting the profile changes: `KEY: old → new`, or for a
    list `KEY: +added -removed`."""
    lines = []
    for key in sorted(profiled):
        before, after = plain.get(key), profiled[key]
        if before == after:
            continue
        if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)):
            added = [v for v in after if v not in before]
            removed = [v for v in before if v not in after]
            parts = [f"+{shlex.quote(str(v))}" for v in added] + \
                [f"-{shlex.quote(str(v))}" for v in removed]
            if parts:
                lines.append(f"  {key}: " + " ".join(parts))
            continue
        lines.append(f"  {key}: {_shown(before)} → {_shown(after)}")
    return lines


def summary(profile, plain: dict, profiled: dict) -> str:
    command = " ".join(shlex.quote(c) for c in profile.command)
    if len(command) > 160:
        command = command[:157] + "…"
    out = [f"{profile.name}: an agent profile ({profile.path}).",
           f"Run it with: agent-sandbox [--dry-run] [--project-dir DIR] {profile.name} [ARGS]",
           "", "What it changes, compared with agent-sandbox run here:",
           f"  runs: {command} ARGS"]
    out += changes(plain, profiled) or ["  (no setting)"]
    if profile.brokers:
        out.append(f"  API keys brokered (NETWORK_MODE=allowlist): {', '.join(profile.brokers)} "
                   "— a placeholder inside, the real key added outside")
    if profile.state:
        out.append(f"  agent state kept between sessions: {' '.join(profile.state)}")
    if profile.settings:
        names = [s.partition("=")[2] or s for s in profile.settings]
        out.append(f"  its settings used from a guarded session copy: {' '.join(names)} "
                   "(merged back under an allow-list at the end)")
    out += ["", f"agent-sandbox --dry-run {profile.name} shows its plan; agent-sandbox config "
            f"show --profile {profile.name} --origin every setting and where it comes from."]
    return "\n".join(out) + "\n"
