"""The ledger at scale (issue 15 item 5): session files folded into one file
per project, crash-safe and safe against concurrent writers; forgotten ids
written down once; a project scope reads what is in scope, not the history."""
from __future__ import annotations

import json
import multiprocessing
import os

from chaperon import ledger as ledger_module
from chaperon.ledger import COMPACTING, Ledger


def sessions(tmp_path, count: int, per: int, project: str, start: int = 0) -> list[str]:
    """`count` finished sessions of `project`, `per` jobs each (their ids)."""
    ids = []
    for s in range(count):
        writer = Ledger(str(tmp_path), f"s{start + s:05d}", str(tmp_path / project))
        for j in range(per):
            job = str(1000 + (start + s) * per + j)
            writer.record(job, "t", kind="batch")
            ids.append(job)
    return ids


def test_compaction_folds_session_files_per_project_and_keeps_every_record(tmp_path):
    mine = sessions(tmp_path, 30, 5, "p")
    other = sessions(tmp_path, 20, 5, "q", start=100)
    reader = Ledger(str(tmp_path), "reader", str(tmp_path / "p"))
    reader.record("999999", "t")          # a live session's own file is never folded
    before = (sorted(reader.jobs("project")), sorted(reader.jobs("user")))
    assert reader.compact_if_needed() == 50
    assert sorted(os.listdir(reader.directory)) == [COMPACT_DIR_NAME, os.path.basename(reader.path)]
    after = Ledger(str(tmp_path), "later", str(tmp_path / "p"))
    assert (sorted(after.jobs("project")), sorted(after.jobs("user"))) == before
    assert sorted(after.jobs("project")) == sorted(mine + ["999999"])
    assert set(other) <= set(after.jobs("user")) and not set(other) & set(after.jobs("project"))
    assert reader.jobs("session") == ["999999"]
    assert reader.compact_if_needed() == 0     # nothing left to fold


COMPACT_DIR_NAME = ledger_module.COMPACT_DIR


def test_a_project_scope_reads_its_own_file_not_the_history(tmp_path):
    sessions(tmp_path, 200, 10, "p")
    sessions(tmp_path, 200, 10, "q", start=1000)
    Ledger(str(tmp_path), "folder", str(tmp_path / "z")).compact()
    reader = Ledger(str(tmp_path), "reader", str(tmp_path / "p"))
    assert len(reader.jobs("project")) == 2000
    assert [os.path.basename(p) for p in reader._files] == [f"{reader.project}.jsonl"]


def test_forgotten_ids_are_written_down_once(tmp_path):
    ids = sessions(tmp_path, 3, 4, "p")
    first = Ledger(str(tmp_path), "first", str(tmp_path / "p"))
    first.forget(ids[:10])
    second = Ledger(str(tmp_path), "second", str(tmp_path / "p"))
    assert second.jobs("project") == ids[10:]
    second.compact()
    text = (tmp_path / "ledger" / COMPACT_DIR_NAME / f"{second.project}.jsonl").read_text()
    assert [json.loads(line)["job"] for line in text.splitlines()] == ids[10:]
    third = Ledger(str(tmp_path), "third", str(tmp_path / "p"))
    assert third.jobs("project") == ids[10:]
    third.forget(ids[10:11]).join()      # also out of the compacted file, at once
    text = (tmp_path / "ledger" / COMPACT_DIR_NAME / f"{third.project}.jsonl").read_text()
    assert [json.loads(line)["job"] for line in text.splitlines()] == ids[11:]


def test_a_compaction_that_crashed_loses_nothing(tmp_path, monkeypatch):
    ids = sessions(tmp_path, 20, 3, "p")
    folder = Ledger(str(tmp_path), "folder", str(tmp_path / "p"))

    def crash(*_args, **_kwargs):
        raise KeyboardInterrupt   # the process dies after renaming, before rewriting
    monkeypatch.setattr(Ledger, "_rewrite", crash)
    try:
        folder.compact()
    except KeyboardInterrupt:
        pass
    left = [n for n in os.listdir(folder.directory) if n.endswith(COMPACTING)]
    assert len(left) == 20
    assert sorted(Ledger(str(tmp_path), "r", str(tmp_path / "p")).jobs("project")) == sorted(ids)
    monkeypatch.undo()
    assert Ledger(str(tmp_path), "next", str(tmp_path / "p")).compact() == 20
    assert sorted(Ledger(str(tmp_path), "r2", str(tmp_path / "p")).jobs("project")) == sorted(ids)


def _write(state_dir: str, project: str, session: str, count: int) -> None:
    import fcntl
    import time

    def slow_flock(fd, operation, flock=fcntl.flock):
        if operation == fcntl.LOCK_SH:
            time.sleep(0.002)   # widen the window between a writer's open and its lock
        flock(fd, operation)
    ledger_module.fcntl = type("F", (), {"flock": staticmethod(slow_flock),
                                         "LOCK_SH": fcntl.LOCK_SH, "LOCK_EX": fcntl.LOCK_EX,
                                         "LOCK_NB": fcntl.LOCK_NB})
    writer = Ledger(state_dir, session, project)
    for n in range(count):
        writer.record(f"{session}{n:04d}", "t")


def _fold(state_dir: str, project: str, rounds: int) -> None:
    folder = Ledger(state_dir, "folder", project)
    for _ in range(rounds):
        folder.compact()


def test_concurrent_writers_and_compactions_lose_no_record(tmp_path):
    state, project = str(tmp_path), str(tmp_path / "p")
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write, args=(state, project, f"9{w}", 300))
               for w in range(4)]
    folders = [context.Process(target=_fold, args=(state, project, 150)) for _ in range(2)]
    for process in writers + folders:
        process.start()
    for process in writers + folders:
        process.join(60)
        assert process.exitcode == 0
    expected = {f"9{w}{n:04d}" for w in range(4) for n in range(300)}
    reader = Ledger(state, "reader", project)
    assert set(reader.jobs("project")) == expected
    reader.compact()
    assert set(Ledger(state, "again", project).jobs("project")) == expected


def test_a_session_file_that_cannot_be_read_is_never_removed(tmp_path, monkeypatch):
    """A fold that cannot open a session file (another owner's, an I/O error)
    leaves it for readers and the next fold: removing it lost its records
    (seen with a second node's writer whose file the chaperon could not read)."""
    ids = sessions(tmp_path, 20, 2, "p")
    unreadable = Ledger(str(tmp_path), "s00003", str(tmp_path / "p")).path
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if str(path).startswith(unreadable + ".") and not flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    reader = Ledger(str(tmp_path), "reader", str(tmp_path / "p"))
    monkeypatch.setattr(os, "open", refusing_open)
    assert reader.compact_if_needed() == 19           # all but the unreadable one
    monkeypatch.setattr(os, "open", real_open)
    assert [n for n in os.listdir(reader.directory) if n.endswith(COMPACTING)], \
        "the file the fold could not read was removed"
    assert reader.compact() == 1                      # the next fold takes it
    assert sorted(Ledger(str(tmp_path), "later", str(tmp_path / "p")).jobs("project")) == \
        sorted(ids)


def test_an_adopted_allocation_is_in_the_adopting_sessions_scope_only(tmp_path):
    adopter = Ledger(str(tmp_path), "s1", "/p")
    adopter.record("500", "-", kind="adopted")
    adopter.record("501", "t", kind="batch")
    other = Ledger(str(tmp_path), "s2", "/p")
    assert other.jobs("project") == ["501"] and other.jobs("user") == ["501"]
    assert sorted(adopter.jobs("project")) == ["500", "501"]
    assert sorted(adopter.jobs("session")) == ["500", "501"]
    # A job's sandbox on a node: its own session, the adopting one as the job's.
    node = Ledger(str(tmp_path), "n1", "/p", job_session="s1")
    assert sorted(node.jobs("project")) == ["500", "501"]
    other.compact()      # folded into the project's file, still the adopter's alone
    assert Ledger(str(tmp_path), "s3", "/p").jobs("project") == ["501"]
