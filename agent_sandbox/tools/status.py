"""`agent-sandbox status`: this user's running sandboxes on this host.

The source is the session registry (services/registry.py), never a scan of the process
table by name: a process name proves nothing, a record proves which project,
backend and chaperon a launcher started. Each record is judged against the
live process (psutil: the pid exists, is ours, is not a zombie, and started at
the recorded time); stale records are deleted as they are found. The jobs
column counts the distinct job ids in the session's own ledger file; an
allocation the session adopted (the user's own, docs/chaperon.md) is named
on a line of its own.

Collecting (`collect`) touches the system; formatting (`render`, `as_json`)
is pure and unit-tested.
"""
from __future__ import annotations

import json
import os
import time
from typing import NamedTuple

from agent_sandbox.services import registry


class Session(NamedTuple):
    session: str
    pid: int
    backend: str
    project: str
    chaperon_pid: int | None      # None: no chaperon (no Slurm, CHAPERON=false);
    #                               0: on standby, started at the first Slurm call
    chaperon_alive: bool
    started: float                # wall clock, seconds since the epoch
    jobs: int
    command: str
    allocation: str = ""          # the user's Slurm allocation it adopted (chaperon.py)


class Status(NamedTuple):
    host: str
    sessions: tuple[Session, ...]
    removed: int                  # stale records deleted by this call
    foreign: tuple[tuple[str, int], ...] = ()   # (host, records) judged there, not here


def _chaperon_alive(pid: int | None, launcher: int) -> bool:
    """The chaperon is a child of the launcher while the session runs."""
    if not pid:
        return False
    import psutil

    try:
        process = psutil.Process(pid)
        return process.ppid() == launcher and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False


def jobs_submitted(state_dir: str, host: str, session: str) -> int:
    """Distinct job ids in the session's ledger file (chaperon/ledger.py writes
    one file per host and session; a torn last line is skipped)."""
    path = os.path.join(state_dir, "ledger", f"{host}_{session}.jsonl")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return 0
    jobs = set()
    for line in data.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "job" in record and record.get("kind") != "adopted":
            jobs.add(str(record["job"]))
    return len(jobs)


def collect(home: str, *, lookup=registry.lookup_proc, now: float | None = None) -> Status:
    from agent_sandbox.paths import state_dir

    now = time.time() if now is None else now
    host, boot = registry.host_name(), registry.boot_id()
    records, junk = registry.read(home, now=now)
    sessions, stale, foreign = [], list(junk), {}
    for path, record in records:
        verdict = registry.judge(record, host=host, boot=boot, lookup=lookup)
        if verdict == registry.FOREIGN:
            foreign[str(record["host"])] = foreign.get(str(record["host"]), 0) + 1
            continue
        if verdict == registry.STALE:
            stale.append(path)
            continue
        chaperon = record.get("chaperon_pid")
        chaperon = chaperon if isinstance(chaperon, int) else None
        sessions.append(Session(
            session=str(record["session"]), pid=record["pid"],
            backend=str(record.get("backend", "?")), project=str(record.get("project", "?")),
            chaperon_pid=chaperon, chaperon_alive=_chaperon_alive(chaperon, record["pid"]),
            started=float(record.get("started") or now),
            jobs=jobs_submitted(state_dir(home), host, str(record["session"])),
            command=str(record.get("command", "")),
            allocation=str(record.get("allocation") or "")))
    removed = registry.remove(stale)
    sessions.sort(key=lambda s: s.started)
    return Status(host, tuple(sessions), removed, tuple(sorted(foreign.items())))


# ---------------------------------------------------------------- formatting
def uptime(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}d {clock}" if days else clock


def _chaperon_cell(s: Session) -> str:
    if s.chaperon_pid is None:
        return "-"
    if s.chaperon_pid == 0:
        return "standby"
    return str(s.chaperon_pid) if s.chaperon_alive else f"{s.chaperon_pid} (gone)"


def render(status: Status, *, now: float) -> str:
    lines = []
    if not status.sessions:
        lines.append(f"no running sandboxes of yours on {status.host}")
    else:
        header = ("SESSION", "PID", "BACKEND", "CHAPERON", "UPTIME", "JOBS", "COMMAND",
                  "PROJECT")
        rows = [header] + [(s.session, str(s.pid), s.backend, _chaperon_cell(s),
                            uptime(now - s.started), str(s.jobs), s.command or "-", s.project)
                           for s in status.sessions]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
        for row in rows:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  "
                         + row[-1])
    for s in status.sessions:
        if s.allocation:
            lines.append(f"session {s.session} adopted your Slurm allocation {s.allocation}: "
                         "srun inside runs its steps there, sandboxed")
    for host, count in status.foreign:
        lines.append(f"{count} session record(s) of host {host} (same home): run "
                     f"`agent-sandbox status` there to see them")
    if status.removed:
        lines.append(f"({status.removed} stale record(s) of ended sandboxes removed)")
    return "\n".join(lines) + "\n"


def as_json(status: Status, *, now: float) -> str:
    return json.dumps({
        "host": status.host,
        "sessions": [dict(s._asdict(), uptime_seconds=int(max(0, now - s.started)))
                     for s in status.sessions],
        "stale_removed": status.removed,
        "other_hosts": dict(status.foreign),
    }, indent=2) + "\n"
