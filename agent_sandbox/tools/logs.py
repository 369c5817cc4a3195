"""`agent-sandbox logs [--session ID] [--denials] [--network|--slurm]
[--since WHEN] [--last N] [--telemetry]`: the chaperon and network audit
logs, readable. `--denials` groups repeats (count, first time) and puts the
Slurm proxy's refusals and the network's apart; the agents' known background
telemetry (services/netreport.py) is left out of it unless --telemetry.

The egress proxy of NETWORK_MODE=allowlist (docs/network.md) writes one
"network" record per connection into a file of its own in the same directory
(<host>_<pid>_<time>_network.log), its time a number (seconds since the
epoch); `--network` shows only those, `--denials` the refused ones among them
too.

chaperon/audit.py writes one JSON object a line into one file per chaperon
(~/.local/state/agent-sandbox/chaperon/<host>_<pid>_<time>.log). This module
reads every file, skips torn or foreign lines, filters, orders the records by
time (newest last; records of the same second keep their file order) and
turns each into one line: time, session, command, event, and what happened
(the reason code and detail of a refusal, the arguments of a request, …).

Much of what the log holds came from inside the sandbox (arguments, paths,
the detail of a refusal quotes the refused value), so every field is printed
with control characters escaped: reading the log must not let an agent write
escape sequences to your terminal.

Reading (`read_records`) touches the filesystem; everything else is pure.
"""
from __future__ import annotations

import json
import os
import shlex
from datetime import datetime
from typing import NamedTuple

from agent_sandbox.logfiles import TIME_FORMAT, clean

# Fields every line shows in its own column; the rest goes into the summary.
COLUMNS = ("time", "session", "event", "command")


class Entry(NamedTuple):
    when: float              # seconds since the epoch (0 when the line had no valid time)
    order: tuple[int, int]   # (file index, line index): ties keep file order
    record: dict


def _timestamp(text) -> float:
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)          # the egress proxy's records
    try:
        return datetime.strptime(str(text), TIME_FORMAT).timestamp()
    except ValueError:
        return 0.0


def parse_lines(data: bytes, file_index: int = 0) -> list[Entry]:
    """The JSON objects in one log file; anything else (a torn last line of a
    chaperon that is still writing, garbage) is skipped."""
    entries = []
    for line_index, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            entries.append(Entry(_timestamp(record.get("time")), (file_index, line_index),
                                 record))
    return entries


def read_records(directory: str) -> list[Entry]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    except OSError:
        return []
    entries = []
    for index, name in enumerate(names):
        try:
            with open(os.path.join(directory, name), "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        entries += parse_lines(data, index)
    return entries


def is_denial(record: dict) -> bool:
    """A chaperon refusal, or a connection the egress proxy refused."""
    return record.get("event") == "refusal" or (
        record.get("event") == "network" and record.get("decision") == "refused")


def select(entries, *, session: str | None = None, denials: bool = False,
           network: bool = False, slurm: bool = False, since: float | None = None,
           last: int | None = None, telemetry: bool = True) -> list[Entry]:
    """Filter and order: `session` matches a session id or its beginning (as
    `status` shows it); `denials` keeps refusals only; `network` the egress
    proxy's records only, `slurm` the chaperon's only; `since` (seconds
    since the epoch) drops older records; `telemetry` False drops the
    agents' known background traffic (services/netreport.py); `last` keeps
    the newest N. Oldest first."""
    from agent_sandbox.services.netreport import is_telemetry

    chosen = [e for e in entries
              if (not session or str(e.record.get("session", "")).startswith(session))
              and (not denials or is_denial(e.record))
              and (not network or e.record.get("event") == "network")
              and (not slurm or e.record.get("event") != "network")
              and (since is None or e.when >= since)
              and (telemetry or not is_telemetry(e.record))]
    chosen.sort(key=lambda e: (e.when, e.order))
    return chosen[-last:] if last else chosen


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """--since: a duration back from now (`30s`, `10m`, `2h`, `1d`) or a
    local time (`2026-11-28 06:00`, `2026-11-28T06:00:00`, `06:00` today).
    ValueError saying what is accepted."""
    text = text.strip()
    if text[:-1].isdigit() and text[-1:] in _UNITS:
        return now - int(text[:-1]) * _UNITS[text[-1]]
    for form in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M",
                 "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, form).timestamp()
        except ValueError:
            continue
    for form in ("%H:%M:%S", "%H:%M"):
        try:
            clock = datetime.strptime(text, form).time()
        except ValueError:
            continue
        return datetime.combine(datetime.fromtimestamp(now).date(), clock).timestamp()
    raise ValueError(f"{text!r} is neither a duration (30s, 10m, 2h, 1d) nor a time "
                     "(2026-11-28 06:00, 06:00)")


def grouped(entries) -> list[tuple[Entry, int, Entry]]:
    """Repeats grouped: (last entry, count, first entry) for each distinct
    (session, command, event, what happened), in the order of their last."""
    groups: dict[tuple, list] = {}
    for entry in entries:
        record = entry.record
        key = (record.get("session"), record.get("command", record.get("client")),
               record.get("event"), summary(record))
        if key in groups:
            groups[key][0] = entry
            groups[key][1] += 1
        else:
            groups[key] = [entry, 1, entry]
    return sorted((tuple(g) for g in groups.values()), key=lambda g: (g[0].when, g[0].order))


def render_denials(entries, *, telemetry_hidden: int = 0) -> str:
    """--denials: the Slurm proxy's refusals, then the network's, each
    repeat once with its count and first time; the telemetry left out
    counted at the end."""
    slurm = [e for e in entries if e.record.get("event") != "network"]
    network = [e for e in entries if e.record.get("event") == "network"]
    out = []
    for title, part in (("Slurm (the chaperon)", slurm), ("Network (the egress proxy)", network)):
        if not part:
            continue
        out.append(f"{title}:\n")
        for last, count, first in grouped(part):
            line = format_entry(last)
            if count > 1:
                line += f"  (×{count}, first {_local_time(first)})"
            out.append(line + "\n")
    if telemetry_hidden:
        out.append(f"({telemetry_hidden} refused connection(s) of the agents' known background "
                   "telemetry not shown: --telemetry shows them)\n")
    return "".join(out)


# ---------------------------------------------------------------- formatting
def summary(record: dict) -> str:
    """What happened, in one line, by event."""
    event = record.get("event")
    if event == "refusal":
        return f"{clean(record.get('reason', '?'))}: {clean(record.get('detail', ''))}"
    if event == "request":
        args = record.get("args") if isinstance(record.get("args"), list) else []
        text = shlex.join(str(a) for a in args)
        cwd = record.get("cwd")
        return clean(text) + (f"  (in {clean(cwd)})" if cwd else "")
    if event == "start":
        return f"project {clean(record.get('project', '?'))}"
    if event == "git-setting":
        return (f"{clean(record.get('file', '?'))}: {clean(record.get('key', '?'))} = "
                f"{clean(record.get('value', ''))} runs outside the sandbox — remove it: "
                f"{clean(record.get('remedy', '?'))}")
    if event == "agent-config":
        named = f" (names: {clean(record.get('value'))})" if record.get("value") else ""
        return (f"{clean(record.get('file', '?'))}{named} is obeyed by "
                f"{clean(record.get('readers', '?'))} outside the sandbox — remove it: "
                f"{clean(record.get('remedy', '?'))}")
    if event == "network":
        return network_summary(record)
    if event == "submit":
        return (f"{clean(record.get('script_bytes', '?'))}-byte script submitted "
                f"(token {clean(record.get('token', '?'))})")
    rest = {k: v for k, v in record.items() if k not in COLUMNS}
    return " ".join(f"{k}={clean(v)}" for k, v in rest.items())


def network_summary(record: dict) -> str:
    """One connection: host:port, the decision and the rule (or the reason a
    person can act on), bytes and duration of an allowed one."""
    host, port = clean(record.get("host", "?")), clean(record.get("port", "?"))
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if record.get("decision") == "allowed":
        return (f"allowed {where} by {clean(record.get('rule') or '?')} — "
                f"{clean(record.get('bytes_out', 0))} B out, "
                f"{clean(record.get('bytes_in', 0))} B in, "
                f"{clean(record.get('duration_ms', 0))} ms")
    return f"refused {where} — {clean(record.get('reason', '?'))}"


def _local_time(entry: Entry) -> str:
    if not entry.when:
        return clean(entry.record.get("time", "?"))[:19].ljust(19)
    return datetime.fromtimestamp(entry.when).strftime("%Y-%m-%d %H:%M:%S")


def format_entry(entry: Entry) -> str:
    record = entry.record
    command = record.get("command", record.get("client", "-"))   # network: the protocol
    return "  ".join((_local_time(entry), clean(record.get("session", "-")).ljust(12),
                      clean(command).ljust(8),
                      clean(record.get("event", "?")).ljust(8), summary(record))).rstrip()


def render(entries) -> str:
    return "".join(format_entry(e) + "\n" for e in entries)


def as_json_lines(entries) -> str:
    """One JSON object a line (JSON Lines), as the chaperon wrote it; json.dumps
    escapes control characters, so this is as safe for a terminal as render()."""
    return "".join(json.dumps(e.record, sort_keys=True) + "\n" for e in entries)


def unseen(entries, seen: set) -> list[Entry]:
    """For --follow: the entries not printed yet (remembered in `seen` by their
    content, since the file order shifts when a new chaperon log appears)."""
    fresh = []
    for entry in entries:
        key = json.dumps(entry.record, sort_keys=True)
        if key not in seen:
            seen.add(key)
            fresh.append(entry)
    return fresh
