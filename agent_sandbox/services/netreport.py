"""Network refusals where they happen (issue 36 item 5): at the end of an
allowlist session, one line per refused destination — how often, why, and
the configuration line to paste — read from the session's own network audit
log (services/egress.py audit_path, written by the egress proxy). A client
inside shows only "403 Forbidden"; this is where the user reads why.

Known background traffic of the agents (their telemetry and error
reporting, TELEMETRY) is refused like anything unlisted, but is noise to the
user: it is counted on one line of its own, never listed destination by
destination; `agent-sandbox logs --denials` hides it unless `--telemetry`.

Pure but for `session_report`, which reads one file.
"""
from __future__ import annotations

# Hosts the agents call in the background (usage statistics, error reports,
# feature flags); suffix match on the name. Refusing them changes nothing the
# user asked for.
TELEMETRY = ("statsig.anthropic.com", "statsig.com", "featuregates.org", "sentry.io",
             "datadoghq.com", "segment.io", "segment.com", "play.googleapis.com",
             "ab.chatgpt.com", "browser-intake-datadoghq.com")
MAX_LINES = 8       # destinations listed at the end of a session; the rest counted
DEFAULT_PORTS = (80, 443)   # an ALLOWED_HOSTS name without :port covers these (egress/hosts.py)


def is_telemetry(record: dict) -> bool:
    """A network record to a host of the agents' known background traffic."""
    if record.get("event") != "network":
        return False
    host = str(record.get("host") or "").lower().rstrip(".")
    return any(host == name or host.endswith("." + name) for name in TELEMETRY)


def paste_line(record: dict) -> str:
    """The ALLOWED_HOSTS line that lets this destination through, or "" when
    the refusal is not about a missing entry (an internal address, a limit)."""
    reason = str(record.get("reason") or "")
    if "is not in ALLOWED_HOSTS" not in reason:
        return ""
    host, port = str(record.get("host") or ""), record.get("port")
    if not host or not all(c.isalnum() or c in ".-:_" for c in host):
        return ""
    shown = f"[{host}]" if ":" in host else host
    entry = shown if port in DEFAULT_PORTS and ":" not in host else f"{shown}:{port}"
    return f"ALLOWED_HOSTS+=({entry})"


def refused_destinations(records) -> tuple[list[tuple[str, int, dict]], int]:
    """([(host:port, count, last record)] most frequent first, telemetry
    refusals counted apart) of the refused network records."""
    counts: dict[str, list] = {}
    telemetry = 0
    for record in records:
        if record.get("event") != "network" or record.get("decision") != "refused":
            continue
        if is_telemetry(record):
            telemetry += 1
            continue
        host = str(record.get("host") or "?")
        where = f"[{host}]:{record.get('port')}" if ":" in host else f"{host}:{record.get('port')}"
        entry = counts.setdefault(where, [0, record])
        entry[0] += 1
        entry[1] = record
    ordered = sorted(counts.items(), key=lambda item: -item[1][0])
    return [(where, count, last) for where, (count, last) in ordered], telemetry


def session_lines(records, session: str) -> list[str]:
    """The end-of-session lines (without the `agent-sandbox: ` prefix)."""
    from agent_sandbox.logfiles import clean

    destinations, telemetry = refused_destinations(records)
    lines = []
    for where, count, last in destinations[:MAX_LINES]:
        times = f" ({count}×)" if count > 1 else ""
        paste = paste_line(last)
        fix = f" — to allow it, add `{paste}` to ~/.config/agent-sandbox/sandbox.conf" \
            if paste else f" — {clean(last.get('reason') or 'refused')}"
        lines.append(f"network: refused {clean(where)}{times}{fix}")
    more = len(destinations) - MAX_LINES
    if more > 0:
        lines.append(f"network: … and {more} more refused destination(s)")
    if telemetry:
        lines.append(f"network: {telemetry} connection(s) of the agent's background telemetry "
                     "refused (harmless)")
    if lines:
        lines.append(f"details: agent-sandbox logs --denials --session {session[:12]}")
    return lines


def session_report(audit: str, session: str) -> list[str]:
    """session_lines of the audit log file `audit` (one session's proxy)."""
    import json

    try:
        with open(audit, "rb") as handle:
            data = handle.read(32 << 20)
    except OSError:
        return []
    records = []
    for line in data.split(b"\n"):
        if b'"refused"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("session") == session:
            records.append(record)      # (a file another session wrote to is not ours)
    return session_lines(records, session)
