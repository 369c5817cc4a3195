"""The trusted job ledger: which jobs this user's sandboxes submitted.

It is the scope authority (the comment tag on a job is for humans and
admins). It lives under ~/.local/state/agent-sandbox/ledger/, hidden inside
every sandbox. Many sandboxes of one user may run on several login nodes that
share an NFS home, where O_APPEND is not atomic between hosts; so every
chaperon appends only to its own file (<host>_<session>.jsonl), one JSON
record per write(2), and readers read every file and skip a torn last line.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import time


def project_hash(project_dir: str) -> str:
    return hashlib.sha256(os.path.realpath(project_dir).encode()).hexdigest()[:16]


class LedgerError(OSError):
    """The ledger could not be written: no submission may happen without it."""


class Ledger:
    def __init__(self, state_dir: str, session_id: str, project_dir: str):
        self.directory = os.path.join(state_dir, "ledger")
        self.session = session_id
        self.project = project_hash(project_dir)
        self.path = os.path.join(self.directory, f"{socket.gethostname()}_{session_id}.jsonl")

    def _append(self, record: dict) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(28, "short write to the ledger")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise LedgerError(exc.errno or 5, f"cannot write the job ledger {self.path}: "
                              f"{exc.strerror or exc}") from None

    def reserve(self, token: str) -> None:
        """Written before submitting, so a full disk refuses the submission
        instead of leaving a job the ledger does not know."""
        self._append({"pending": token, "session": self.session, "project": self.project,
                      "time": time.time()})

    def record(self, job_id: str, token: str, **extra) -> None:
        self._append({"job": job_id, "token": token, "session": self.session,
                      "project": self.project, "time": time.time(), **extra})

    def jobs(self, scope: str) -> list[str]:
        """Job ids in scope (session / project / user), oldest first."""
        found: dict[str, None] = {}
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            return []
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            try:
                with open(os.path.join(self.directory, name), "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            for line in data.split(b"\n"):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue   # a torn line of a concurrent writer
                if not isinstance(record, dict) or "job" not in record:
                    continue
                if scope == "session" and record.get("session") != self.session:
                    continue
                if scope == "project" and record.get("project") != self.project:
                    continue
                found[str(record["job"])] = None
        return list(found)
