"""The trusted job ledger: which jobs this user's sandboxes submitted.

It is the scope authority (the comment tag on a job is for humans and
admins). It lives under ~/.local/state/agent-sandbox/ledger/, hidden inside
every sandbox. Many sandboxes of one user may run on several login nodes that
share an NFS home, where O_APPEND is not atomic between hosts; so every
chaperon appends only to its own file (<host>_<session>.jsonl), one JSON
record per write(2), and readers skip a torn last line.

Records (one JSON object a line, written by this module only):

    {"pending": TOKEN, "session": S, "project": P, "time": T}
        reserved before a submission, so a full disk refuses the job;
    {"job": "123", "token": TOKEN, "session": S, "project": P, "time": T,
     "kind": "batch" | "allocation" | "adopted", "array": true, "het": true}
        the job id Slurm gave; "array" marks a job array (its tasks have
        their own ids later, which scope.py maps back to "123"), "het" a
        heterogeneous job (components are "123+N"); "adopted" an allocation
        the user made outside and the launcher adopted (in scope of the
        adopting session only, never of the project's other sessions);
    {"gone": ["123", …], "project": P, "time": T}
        ids of the project Slurm has forgotten (scope.py prunes them once;
        written down so no later session prunes them again).

Scale: a scoped call costs what is in scope, not the user's history. Session
files are folded into one file per project, compact/<project>.jsonl (job
records only, without forgotten ids), by a chaperon when it starts and finds
more than COMPACT_ABOVE session files (`compact`, in a thread of its own). A
project scope then reads its own compacted file and the few session files of
live sessions; the session scope is this chaperon's own records. Reading is
incremental: each file's parsed records are kept with the file's identity and
the offset of its last complete line, so a later call parses only what was
appended (a stat per file otherwise).

Compaction is crash-safe and safe against concurrent writers, also on NFS
(flock is a lock the server holds):
- one compactor at a time (compact/.lock, LOCK_EX|LOCK_NB: a busy lock means
  someone else is folding);
- a session file is renamed to NAME.<pid>.compacting first, then locked
  LOCK_EX, which waits for a writer inside its append; a writer holds LOCK_SH
  on the file it appends to and checks, once locked, that the name still
  leads to that inode (else the compactor has it: the writer opens the name
  again and creates a fresh file), so no record lands in a file already read;
- each project's file is rewritten whole (temporary file, fsync, rename),
  and only then are the .compacting files removed. Readers read session
  files, .compacting files, then compacted files, in that order, and retry a
  listing when a file vanished under them; a crash at any point leaves every
  record in at least one of them (duplicates are harmless: ids are a set).
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time

from .paths import project_hash

SCOPES = ("session", "project", "user", "none")
ADOPTED = "adopted"       # the kind of an allocation the user brought (services/chaperon.py)
COMPACT_DIR = "compact"
COMPACT_ABOVE = 16        # session files (other than the reader's own) before folding
COMPACTING = ".compacting"


class LedgerError(OSError):
    """The ledger could not be written: no submission may happen without it."""


class Record(dict):
    """One job record: job, session, project, kind, array, het, time."""

    @property
    def job(self) -> str:
        return str(self["job"])


class _FileState:
    __slots__ = ("ident", "offset", "records", "gone")

    def __init__(self, ident):
        self.ident = ident
        self.offset = 0
        self.records: list[Record] = []
        self.gone: list[tuple[str, str]] = []     # (project, id)


def _parse(data: bytes, state: _FileState) -> None:
    try:   # whole lines as one JSON array: one C call (a compacted file: 20,000 records)
        items = json.loads(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
    except ValueError:
        items = None   # a torn or blank line: line by line below
    if items is not None and all(isinstance(i, dict) for i in items):
        for record in items:
            if "job" in record:
                state.records.append(Record(record))
            elif isinstance(record.get("gone"), list):
                state.gone += [(str(record.get("project")), str(i)) for i in record["gone"]]
        return
    for line in data.split(b"\n"):
        if b'"job"' not in line and b'"gone"' not in line:
            continue   # reservations, blank lines
        try:
            record = json.loads(line)
        except ValueError:
            continue   # a line torn by a concurrent writer on another node
        if not isinstance(record, dict):
            continue
        if "job" in record:
            state.records.append(Record(record))
        elif isinstance(record.get("gone"), list):
            state.gone += [(str(record.get("project")), str(i)) for i in record["gone"]]


def _same_file(path: str, fd: int) -> bool:
    """Does `path` still name the file open as `fd`?"""
    try:
        named, opened = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino) and opened.st_nlink > 0


class Ledger:
    def __init__(self, state_dir: str, session_id: str, project_dir: str,
                 job_session: str = ""):
        self.directory = os.path.join(state_dir, "ledger")
        self.compacted = os.path.join(self.directory, COMPACT_DIR)
        self.session = session_id
        # The sessions whose adopted allocations are in scope: this one, and
        # on a compute node the session that submitted the job (or adopted it).
        self.sessions = {session_id, job_session} - {""}
        self.project = project_hash(project_dir)
        self.path = os.path.join(self.directory, f"{socket.gethostname()}_{session_id}.jsonl")
        self._files: dict[str, _FileState] = {}
        self._own: dict[str, Record] = {}      # this session's job records, by id
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ writing
    def _append(self, record: dict) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                             0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)
                    if not _same_file(self.path, fd):
                        continue   # a compaction took the file: open the name again
                    if os.write(fd, line) != len(line):
                        raise OSError(28, "short write to the ledger")
                    os.fsync(fd)
                    return
                finally:
                    os.close(fd)
            raise OSError(11, "the ledger file kept moving (compaction)")
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
        record = {"job": str(job_id), "token": token, "session": self.session,
                  "project": self.project, "time": time.time(), **extra}
        self._append(record)
        with self._lock:
            self._own.setdefault(str(job_id), Record(record))

    def forget(self, ids) -> threading.Thread | None:
        """Ids of this project Slurm has forgotten: written down, so the next
        session neither lists nor prunes them again (best effort), and
        removed from the project's compacted file in a thread of its own (so
        the next session does not even read them)."""
        ids = sorted(set(ids))
        if not ids:
            return None
        try:
            self._append({"gone": ids, "project": self.project, "time": time.time()})
        except LedgerError:
            return None   # pruning is an optimisation; the next session prunes again
        thread = threading.Thread(target=self._drop, args=(set(ids),), daemon=True)
        thread.start()
        return thread

    def _drop(self, ids: set[str]) -> None:
        if os.path.exists(os.path.join(self.compacted, f"{self.project}.jsonl")):
            self._locked(lambda: self._rewrite(self.project, [], ids))

    # ------------------------------------------------------------------ reading
    def _read(self, path: str) -> _FileState | None:
        """The records of one file, parsing only what was appended since the
        last read (a file replaced or truncated is read again); None when
        the file is gone."""
        try:
            info = os.stat(path)
        except OSError:
            self._files.pop(path, None)
            return None
        ident = (info.st_dev, info.st_ino)
        state = self._files.get(path)
        if state is None or state.ident != ident or info.st_size < state.offset:
            state = self._files[path] = _FileState(ident)
        if info.st_size == state.offset:
            return state
        try:
            with open(path, "rb") as handle:
                handle.seek(state.offset)
                data = handle.read()
        except OSError:
            return state
        end = data.rfind(b"\n") + 1   # a torn last line is read again next time
        _parse(data[:end], state)
        state.offset += end
        return state

    def _sources(self, project: str | None) -> list[str]:
        """Session files and leftovers of a compaction, then the compacted
        file(s) of `project` (None: every project)."""
        names = sorted(os.listdir(self.directory))
        paths = [os.path.join(self.directory, n) for n in names
                 if n.endswith(".jsonl") or n.endswith(COMPACTING)]
        try:
            compact = sorted(os.listdir(self.compacted))
        except OSError:
            compact = []
        wanted = (f"{project}.jsonl",) if project else None
        paths += [os.path.join(self.compacted, n) for n in compact
                  if n.endswith(".jsonl") and (wanted is None or n in wanted)]
        return paths

    def _gather(self, project: str | None) -> tuple[list[Record], set[str]]:
        for _ in range(3):
            try:
                paths = self._sources(project)
            except OSError:
                return [], set()
            states = [self._read(p) for p in paths]
            if all(s is not None for s in states):
                break   # else a compaction moved a file under us: list again
        for gone in set(self._files) - set(paths):
            del self._files[gone]
        records: list[Record] = []
        forgotten: set[str] = set()
        for state in filter(None, states):
            if project is None:
                records += state.records
                forgotten.update(i for _, i in state.gone)
            else:
                records += [r for r in state.records if r.get("project") == project]
                forgotten.update(i for p, i in state.gone if p == project)
        return records, forgotten

    def records(self, scope: str) -> list[Record]:
        """Job records in scope (session / project / user=none: all), without
        the ids Slurm has forgotten, oldest file first, in file order."""
        with self._lock:
            if scope == "session":
                own = self._read(self.path)
                found = dict(self._own)
                for r in own.records if own else ():
                    if r.get("session") == self.session:
                        found.setdefault(r.job, r)
                return list(found.values())
            records, forgotten = self._gather(self.project if scope == "project" else None)
            if any(r.get("kind") == ADOPTED for r in records):
                # An allocation the user brought belongs to the session that
                # adopted it (and its jobs' sandboxes), not to the project.
                mine = self.sessions
                records = [r for r in records
                           if r.get("kind") != ADOPTED or r.get("session") in mine]
            if not forgotten:       # (a fresh list: no pass over every record's id)
                return records
            return [r for r in records if r.job not in forgotten]

    def jobs(self, scope: str) -> list[str]:
        """Job ids in scope (session / project / user), oldest first."""
        return list(dict.fromkeys(r.job for r in self.records(scope)))

    # ------------------------------------------------------------------ compaction
    def session_files(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.directory)
                    if (n.endswith(".jsonl") or n.endswith(COMPACTING))
                    and os.path.join(self.directory, n) != self.path]
        except OSError:
            return []

    def compact_if_needed(self) -> int:
        """Fold the session files when there are more than COMPACT_ABOVE."""
        if len(self.session_files()) <= COMPACT_ABOVE:
            return 0
        return self.compact()

    def compact(self) -> int:
        """Fold every session file but this session's own into the compacted
        per-project files (see the module docstring); the number of files
        folded, 0 when another compactor holds the lock or nothing failed."""
        return self._locked(self._fold) or 0

    def _locked(self, work):
        """`work()` under the compaction lock; None when another holds it."""
        try:
            os.makedirs(self.compacted, mode=0o700, exist_ok=True)
            lock = os.open(os.path.join(self.compacted, ".lock"),
                           os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return None
            return work()
        finally:
            os.close(lock)

    def _fold(self) -> int:
        taken = []
        for name in self.session_files():
            path = os.path.join(self.directory, name)
            if name.endswith(COMPACTING):
                taken.append(path)       # a compaction that crashed: fold it now
                continue
            moved = f"{path}.{os.getpid()}{COMPACTING}"
            try:
                os.rename(path, moved)
                taken.append(moved)
            except OSError:
                continue
        state = _FileState(None)
        read = []      # only what was read may be removed: a file that cannot be
        for path in taken:   # read now stays (.compacting) for readers and the next fold
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)    # a writer inside its append finishes first
                with os.fdopen(os.dup(fd), "rb") as handle:
                    _parse(handle.read(), state)
                read.append(path)
            except OSError:
                continue
            finally:
                os.close(fd)
        projects = {str(r.get("project")) for r in state.records} | {p for p, _ in state.gone}
        for project in projects:
            if project and "/" not in project and not project.startswith("."):
                self._rewrite(project, [r for r in state.records
                                        if str(r.get("project")) == project],
                              {i for p, i in state.gone if p == project})
        directory = os.open(self.compacted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        for path in read:
            try:
                os.unlink(path)
            except OSError:
                pass
        return len(read)

    def _rewrite(self, project: str, new: list[Record], forgotten: set[str]) -> None:
        """compact/<project>.jsonl with `new` added and `forgotten` removed,
        replaced whole (temporary file, fsync, rename)."""
        path = os.path.join(self.compacted, f"{project}.jsonl")
        old = _FileState(None)
        try:
            with open(path, "rb") as handle:
                _parse(handle.read(), old)
        except FileNotFoundError:
            pass
        kept: dict[str, Record] = {}
        for record in old.records + new:
            if record.job not in forgotten:
                record.pop("token", None)     # the submission's own business, not scope's
                kept.setdefault(record.job, record)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                          0o600), "wb") as handle:
            handle.write(b"".join((json.dumps(r, separators=(",", ":")) + "\n").encode()
                                  for r in kept.values()))
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temporary, path)
