"""The scope machinery without a cluster: job references, placeholders,
untagging in every output shape, squeue's and sacct's field rendering
(checked against outputs of the real 22.05 binaries), the permuting parser,
the scontrol update key table, and the ledger's incremental reading."""
from __future__ import annotations

import json
import os

import pytest

from chaperon import scope, untag
from chaperon.slurm import jobids, options
from chaperon.handlers import scontrol, squeue
from chaperon.ledger import Ledger

TAG = b"chaperon:sid=0123456789ab,proj=0123456789abcdef,user=my%20note:END"
BARE = b"chaperon:sid=0123456789ab,proj=0123456789abcdef:END"


@pytest.mark.parametrize("ref,base", [
    ("123", "123"), ("123_4", "123"), ("123_[1-3]", "123"), ("123_[1,3-5%2]", "123"),
    ("123.0", "123"), ("123.batch", "123"), ("123_4.extern", "123"), ("123+1", "123"),
    ("123+1.0", "123"), (" 123", None), ("+123", None), ("abc", None), ("123x", None),
    ("", None), ("0x7b", None), ("123.0.1", None),
])
def test_job_references(ref, base):
    assert jobids.ref_base(ref) == base


def test_placeholders_turn_back_into_the_caller_ids():
    holder = scope.Placeholders()
    assert holder.replace("530") == "67108863"
    assert holder.replace("531_2.0") == "67108862_2.0"
    text = (b"Invalid job id specified for job 67108863\n"
            b"Kill job error on job step id 67108862_2.0: x 167108863 671088630\n")
    assert holder.restore(text) == (b"Invalid job id specified for job 530\n"
                                    b"Kill job error on job step id 531_2.0: x 167108863 "
                                    b"671088630\n")


def test_scontrol_comment_entry():
    multi = b"   WorkDir=/tmp\n   Comment=" + TAG + b" \n   StdErr=/x\n"
    assert untag.untag_scontrol(multi) == b"   WorkDir=/tmp\n   Comment=my note \n   StdErr=/x\n"
    bare = b"   WorkDir=/tmp\n   Comment=" + BARE + b" \n   StdErr=/x\n"
    assert untag.untag_scontrol(bare) == b"   WorkDir=/tmp\n   StdErr=/x\n"
    one = b"WorkDir=/tmp Comment=" + BARE + b"  StdErr=/x"
    assert untag.untag_scontrol(one) == b"WorkDir=/tmp StdErr=/x"


def test_json_and_yaml():
    assert untag.untag_json(b'"comment": "' + TAG + b'",', empty=b'""') == \
        b'"comment": "my note",'
    assert untag.untag_json(b'"job": "' + BARE + b'",', empty=b"null") == b'"job": null,'
    odd = b"chaperon:sid=0123456789ab,proj=0123456789abcdef,user=a%2Fb%22%0A%C3%A9:END"
    assert untag.untag_json(b'"' + odd + b'"', empty=b'""') == '"a\\/b\\"\\né"'.encode()
    assert untag.untag_yaml(b"  !!str comment: !!str " + TAG + b"\n") == \
        b"  !!str comment: !!str my note\n"
    assert untag.untag_yaml(b"  !!str job: !!str " + BARE + b"\n") == \
        b"  !!str job: !!null null\n"
    colon = b"chaperon:sid=0123456789ab,proj=0123456789abcdef,user=a%3A%20b:END"
    assert untag.untag_yaml(b"x: !!str " + colon + b"\n") == b"x: !!str 'a: b'\n"


# squeue 22.05, job 531 with comment "my note", job 532 without one:
#   squeue -o "%k|%10k|%.10k|%.3k|%3k"
#   COMMENT|COMMENT   |   COMMENT|COM|COM
#   (null)|(null)    |    (null)|(nu|
REAL_SHORT = [
    (b"COMMENT", [b"COMMENT", b"COMMENT   ", b"   COMMENT", b"COM", b"COM"]),
    (None, [b"(null)", b"(null)    ", b"    (null)", b"(nu", b"   "]),
    (b"my note", [b"my note", b"my note   ", b"   my note", b"my ", b"my "]),
]


@pytest.mark.parametrize("value,expected", REAL_SHORT)
def test_squeue_short_format_renders_like_squeue(value, expected):
    fmt = untag.SqueueFormat("%k|%10k|%.10k|%.3k|%3k", long=False)
    assert fmt.text == "\x01%k\x02|\x01%k\x02|\x01%k\x02|\x01%k\x02|\x01%k\x02"
    raw = b"(null)" if value is None else (TAG if value == b"my note" else value)
    line = b"|".join(b"\x01" + raw + b"\x02" for _ in range(5))
    assert fmt.line(line) == b"|".join(expected)


def test_squeue_formats_keep_everything_else():
    fmt = untag.SqueueFormat("x%.18i %k%%j", long=False)
    assert fmt.text == "x%.18i \x01%k\x02%j"
    assert fmt.line(b"x               531 \x01" + TAG + b"\x02wrap") == \
        b"x               531 my notewrap"
    assert untag.SqueueFormat("%i", long=False).text == "%i"
    everything = untag.SqueueFormat("%all", long=False)
    assert everything.line(b"a|" + TAG + b"|b") == b"a|my note|b"


def test_squeue_long_format():
    fmt = untag.SqueueFormat("jobid,comment,comment:.12,comment:5x,name", long=True)
    assert fmt.text == "jobid:20\x01,comment:0\x02\x01,comment:0\x02\x01,comment:0\x02x,name"
    line = (b"531".ljust(20) + b"\x01" + TAG + b"\x02\x01" + TAG + b"\x02\x01" + TAG +
            b"\x02x" + b"wrap".ljust(20))
    assert fmt.line(line) == (b"531".ljust(20) + b"my note".ljust(20) + b"     my note" +
                              b"my nox" + b"wrap".ljust(20))
    first = untag.SqueueFormat("comment:30,jobid", long=True)
    assert first.text == "comment:0\x02,jobid"
    assert first.line(BARE + b"\x02531") == b"(null)".ljust(30) + b"531"


def test_sacct_columns():
    names = ["Account", "AdminComment", "Cluster", "Comment", "Constraints", "JobID",
             "JobName"]
    columns = untag.SacctColumns("jobid,comm%-5,jobname,ALL", names, 14)
    assert columns.lengths == [-5, 14]
    assert "comm%-4096" in columns.text and "Comment%-4096" in columns.text
    wide = b"-" * 4096
    header = b"JobID        " + b"Comment".ljust(4096) + b"    JobName "
    dashes = b"-" * 12 + b" " + wide + b" " + b"-" * 10 + b" "
    row = b"535          " + TAG.ljust(4096) + b"       wrap "
    bare = b"536          " + BARE.ljust(4096) + b"       wrap "
    data = b"\n".join([header, dashes, row, bare, b""])
    columns = untag.SacctColumns("jobid,comm%-5,jobname", names, 14)
    rows = [b"535          my n+       wrap ", b"536          " + b" " * 5 + b"       wrap "]
    assert columns.lines(data, header=True) == b"\n".join([
        b"JobID        Comme    JobName ", b"------------ ----- ---------- ", *rows, b""])
    assert columns.lines(data, header=False) == b"\n".join([*rows, b""])


def test_sacct_render_matches_print_fields_str():
    assert untag.render_sacct(b"my note", 14) == b"       my note"
    assert untag.render_sacct(b"my note", -5) == b"my n+"
    assert untag.render_sacct(None, 4) == b"    "
    assert untag.render_sacct(b"abc", -6) == b"abc   "


def test_parse_permuted_reads_options_anywhere():
    parsed = options.parse_permuted(squeue.SQUEUE, ["-j", "12", "-h", "--", "-x"])
    assert parsed.has("noheader") and parsed.rest == ("12", "-x")
    parsed = options.parse_permuted(scontrol.SCONTROL, ["show", "job", "-d", "5"])
    assert parsed.rest == ("show", "job", "5") and parsed.has("details")


@pytest.mark.parametrize("tag,key", [("TimeL", "TimeLimit"), ("Time", None),
                                     ("timelimit", "TimeLimit"), ("Na", "Name"),
                                     ("Com", "Comment"), ("Us", None), ("userid", "UserID"),
                                     ("dep", "Dependency"), ("W", "WCKey"), ("wo", "WorkDir")])
def test_update_keys_resolve_as_scontrol_does(tag, key):
    assert scontrol._key(tag)[0] == key


def test_time_limits():
    assert scontrol._minutes("UNLIMITED") == float("inf")
    assert scontrol._minutes("30") == 30
    assert scontrol._minutes("1:30:00") == 90
    assert scontrol._minutes("2-00:00:00") == 2880
    assert scontrol._minutes("1-2") == 1440 + 120
    assert scontrol._minutes("x") is None


def test_ledger_reads_incrementally_and_tolerates_torn_lines(tmp_path):
    mine = Ledger(str(tmp_path), "aaaa", str(tmp_path / "p"))
    other = Ledger(str(tmp_path), "bbbb", str(tmp_path / "q"))
    mine.record("1", "t", kind="batch")
    other.record("2", "t")
    assert mine.jobs("project") == ["1"] and mine.jobs("user") in (["1", "2"], ["2", "1"])
    with open(mine.path, "ab") as handle:
        handle.write(b'{"job":"3","session":"aaaa","proj')     # a writer mid-line
    assert mine.jobs("session") == ["1"]
    with open(mine.path, "ab") as handle:
        handle.write(b'ect":"' + mine.project.encode() + b'"}\n')
    assert mine.jobs("session") == ["1", "3"]
    assert mine.jobs("project") == ["1", "3"]
    state = mine._files[mine.path]
    assert state.offset == os.path.getsize(mine.path)


def test_ledger_reading_thousands_of_records_parses_each_once(tmp_path, monkeypatch):
    """A squeue of the project scope reads the ledger at every call: what was
    parsed is kept, and a later read parses only what was appended (counted,
    not timed: a timing limit fails on a loaded machine; benchmarks/scope.py
    measures the speed)."""
    from chaperon import ledger

    parsed = []
    real_parse = ledger._parse
    monkeypatch.setattr(ledger, "_parse", lambda data, state: (
        parsed.append(data.count(b"\n")), real_parse(data, state))[1])
    writer = Ledger(str(tmp_path), "cccc", str(tmp_path / "p"))
    os.makedirs(writer.directory)
    with open(writer.path, "w") as handle:
        for n in range(20000):
            handle.write(json.dumps({"job": str(n), "session": "cccc",
                                     "project": writer.project}) + "\n")
    reader = Ledger(str(tmp_path), "dddd", str(tmp_path / "p"))
    assert len(reader.jobs("project")) == 20000
    assert sum(parsed) == 20000, parsed
    for _ in range(10):
        assert len(reader.jobs("project")) == 20000
    assert sum(parsed) == 20000, parsed
    with open(writer.path, "a") as handle:
        handle.write(json.dumps({"job": "20000", "session": "cccc",
                                 "project": writer.project}) + "\n")
    assert reader.jobs("project")[-1] == "20000"
    assert sum(parsed) == 20001, parsed


@pytest.mark.parametrize("comment", ["plain", "with space, comma:colon", "ünïcode",
                                     b"\xff\xfe latin-1".decode("utf-8", "surrogateescape")])
def test_comment_tag_round_trips_any_user_comment(comment):
    from types import SimpleNamespace

    from chaperon.submit import comment_tag

    ctx = SimpleNamespace(session_id="abc123", ledger=SimpleNamespace(project="0f" * 8))
    tag = comment_tag(ctx, comment).encode("ascii")      # Slurm stores it as given
    match = untag.TAG.fullmatch(tag)
    assert match is not None
    assert untag.user_comment(match) == comment.encode("utf-8", "surrogateescape")


def test_an_allocation_wait_polls_gently():
    """Doubling from 50 ms to one squeue a second (issue 15: a queued srun
    polled slurmctld every 50 ms)."""
    from itertools import islice

    from chaperon.scope import AllocationWatcher

    pauses = list(islice(AllocationWatcher.pauses(AllocationWatcher), 12))
    assert pauses[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert min(pauses[5:]) >= 1.0 and sum(pauses) < 9.0


# The submit line the chaperon's sbatch leaves in accounting (sacct 22.05
# -o SubmitLine; 24.11's --json "submit_line").
SUBMIT_BARE = b"sbatch --wait --job-name=wrap --comment=" + BARE + b" --parsable /h/wrapper"
SUBMIT_USER = b"sbatch --comment=" + TAG + b" --parsable /h/wrapper"


def test_the_tag_never_shows_in_a_submit_line():
    assert untag.untag_line(SUBMIT_BARE) == b"sbatch --wait --job-name=wrap --parsable /h/wrapper"
    assert untag.untag_line(SUBMIT_USER) == b"sbatch --comment=my note --parsable /h/wrapper"
    assert untag.untag_fields(b"7|" + SUBMIT_BARE + b"|") == \
        b"7|sbatch --wait --job-name=wrap --parsable /h/wrapper|"
    assert untag.untag_submit_line(None) is None


def test_sacct_columns_render_submit_lines_untagged():
    names = ["Comment", "JobID", "SubmitLine"]
    columns = untag.SacctColumns("jobid, submitl%-30", names, {"Comment": 14, "SubmitLine": 20})
    assert columns.fields == ["SubmitLine"] and columns.lengths == [-30]
    assert columns.text == "jobid, submitl%-4096"
    header = b"JobID        " + b"SubmitLine".ljust(4096) + b" "
    dashes = b"-" * 12 + b" " + b"-" * 4096 + b" "
    row = b"535          " + SUBMIT_BARE.ljust(4096) + b" "
    got = columns.lines(b"\n".join([header, dashes, row, b""]), header=True).split(b"\n")
    assert got[0] == b"JobID        " + b"SubmitLine".ljust(30) + b" "
    assert got[2] == b"535          sbatch --wait --job-name=wrap+ "
    assert b"chaperon" not in b"".join(got)


def _job(job_id, line, array=0):
    return [b"    {", b'      "array": {', b'        "job_id": %d' % array, b"      },",
            b'      "job_id": %d,' % job_id, b'      "submit_line": "' + line + b'"', b"    }"]


def test_sacct_json_submit_lines_are_scoped_per_job():
    doc = b"\n".join([b"{", b'  "jobs": [', *_job(7, b"sbatch --wrap=SECRET")[:-1], b"    },",
                      *_job(8, SUBMIT_BARE), *[b"  ]", b"}"]])
    scoped = untag.scope_submit_json(doc, {"8"})
    assert b"SECRET" not in scoped and b'"submit_line": ""' in scoped
    assert b'"submit_line": "sbatch --wait --job-name=wrap --parsable \\/h\\/wrapper"' \
        not in scoped   # the line is Slurm's own bytes, only the tag goes
    assert b'"submit_line": "sbatch --wait --job-name=wrap --parsable /h/wrapper"' in scoped
    assert b"chaperon" not in scoped
    # An array task is in scope by its array's id; user scope untags only.
    task = b"\n".join([b'  "jobs": [', *_job(12, b"sbatch --array=1", array=11), b"  ]"])
    assert b"--array=1" in untag.scope_submit_json(task, {"11"})
    assert b"SECRET" in untag.scope_submit_json(doc, None)
    assert b"chaperon" not in untag.scope_submit_json(doc, None)
    # A submit line outside an element it can read: hidden.
    odd = b'{"jobs": [{"job_id": 8, "submit_line": "sbatch --wrap=SECRET"}]}'
    assert b"SECRET" not in untag.scope_submit_json(odd, {"8"})


def test_sacct_yaml_submit_lines_fail_closed():
    doc = (b"jobs:\n- job_id: 7\n  submit_line: sbatch --wrap=SECRET\n    folded on\n"
           b"  name: wrap\n- job_id: 8\n  submit_line: " + SUBMIT_BARE + b"\n")
    scoped = untag.scope_submit_yaml(doc, {"8"})
    assert b"SECRET" not in scoped and b"folded" not in scoped and b"name: wrap" in scoped
    assert scoped.count(b"submit_line: ''") == 2
    own = untag.scope_submit_yaml(b"jobs:\n- job_id: 8\n  array:\n    job_id: 0\n"
                                  b"  submit_line: " + SUBMIT_USER + b"\n", {"8"})
    assert b"submit_line: sbatch --comment=my note --parsable" in own
    assert b"SECRET" in untag.scope_submit_yaml(doc, None)
