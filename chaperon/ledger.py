"""The trusted job ledger: which jobs this user's sandboxes submitted.

It is the scope authority (the comment tag on a job is for humans and
admins). It lives under ~/.local/state/agent-sandbox/ledger/, hidden inside
every sandbox. Many sandboxes of one user may run on several login nodes that
share an NFS home, where O_APPEND is not atomic between hosts; so every
chaperon appends only to its own file (<host>_<session>.jsonl), one JSON
record per write(2), and readers read every file and skip a torn last line.

Records (one JSON object a line, written by this module only):

    {"pending": TOKEN, "session": S, "project": P, "time": T}
        reserved before a submission, so a full disk refuses the job;
    {"job": "123", "token": TOKEN, "session": S, "project": P, "time": T,
     "kind": "batch" | "allocation", "array": true, "het": true}
        the job id Slurm gave; "array" marks a job array (its tasks have
        their own ids later, which scope.py maps back to "123"), "het" a
        heterogeneous job (components are "123+N").

Reading is incremental: the chaperon lives as long as its sandbox and reads
the ledger on every scoped call, so each file's parsed records are kept with
the file's identity and the offset of the last complete line; a later read
only parses what was appended since (files of finished sessions never
change, and a stat says so). Thousands of records cost a stat per file, not
a parse per record. On NFS the stat may serve cached attributes for up to
acregmax seconds, so a job submitted from another login node can take that
long to enter this session's project scope; this session's own records are
always current (its own writes).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time

from .paths import project_hash

SCOPES = ("session", "project", "user", "none")


class LedgerError(OSError):
    """The ledger could not be written: no submission may happen without it."""


class Record(dict):
    """One job record: job, session, project, kind, array, het, time."""

    @property
    def job(self) -> str:
        return str(self["job"])


class _FileState:
    __slots__ = ("ident", "offset", "records")

    def __init__(self, ident):
        self.ident = ident
        self.offset = 0
        self.records: list[Record] = []


class Ledger:
    def __init__(self, state_dir: str, session_id: str, project_dir: str):
        self.directory = os.path.join(state_dir, "ledger")
        self.session = session_id
        self.project = project_hash(project_dir)
        self.path = os.path.join(self.directory, f"{socket.gethostname()}_{session_id}.jsonl")
        self._files: dict[str, _FileState] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ writing
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
        """`extra`: kind ("batch", "allocation"), array=True, het=True."""
        self._append({"job": str(job_id), "token": token, "session": self.session,
                      "project": self.project, "time": time.time(), **extra})

    # ------------------------------------------------------------------ reading
    def _read(self, path: str, name: str) -> list[Record]:
        """The records of one file, parsing only what was appended since the
        last read. A file replaced or truncated is read again from the start."""
        try:
            info = os.stat(path)
        except OSError:
            self._files.pop(name, None)
            return []
        ident = (info.st_dev, info.st_ino)
        state = self._files.get(name)
        if state is None or state.ident != ident or info.st_size < state.offset:
            state = self._files[name] = _FileState(ident)
        if info.st_size == state.offset:
            return state.records
        try:
            with open(path, "rb") as handle:
                handle.seek(state.offset)
                data = handle.read()
        except OSError:
            return state.records
        end = data.rfind(b"\n") + 1   # a torn last line is read again next time
        for line in data[:end].split(b"\n"):
            if b'"job"' not in line:
                continue   # reservations, blank lines
            try:
                record = json.loads(line)
            except ValueError:
                continue   # a line torn by a concurrent writer on another node
            if isinstance(record, dict) and "job" in record:
                state.records.append(Record(record))
        state.offset += end
        return state.records

    def records(self, scope: str) -> list[Record]:
        """Job records in scope (session / project / user=none: all), oldest
        file first, in file order."""
        with self._lock:
            if scope == "session":
                return [r for r in self._read(self.path, os.path.basename(self.path))
                        if r.get("session") == self.session]
            try:
                names = sorted(n for n in os.listdir(self.directory) if n.endswith(".jsonl"))
            except OSError:
                return []
            for gone in set(self._files) - set(names):
                del self._files[gone]
            found: list[Record] = []
            for name in names:
                records = self._read(os.path.join(self.directory, name), name)
                if scope == "project":
                    found.extend(r for r in records if r.get("project") == self.project)
                else:
                    found.extend(records)
            return found

    def jobs(self, scope: str) -> list[str]:
        """Job ids in scope (session / project / user), oldest first."""
        return list(dict.fromkeys(r.job for r in self.records(scope)))
