"""sacct: which --format values ask for a command-line field (SubmitLine),
read as sacct 22.05 reads them, and the user-wide listing cut to the scope."""
from __future__ import annotations

import pytest

from chaperon.handlers.sacct import PRIVATE_FIELDS, InScopeRows, _asks_private, format_fields

# sacct 22.05 --helpformat, in its own order (abridged around the S…/W… names).
NAMES = ["Account", "AdminComment", "AllocCPUS", "Comment", "JobID", "JobIDRaw", "JobName",
         "Start", "State", "Submit", "SubmitLine", "Suspended", "SystemComment",
         "SystemCPU", "WCKey", "WCKeyID", "WorkDir"]


@pytest.mark.parametrize("formats", [
    ["SubmitLine"], ["submitline"], ["SUBMITL"], ["submitl%200"], ["SubmitLine%-5"],
    ["jobid,submitline"], ["jobid, submitline%300"], ["jobid", "submitline"],
    ["all"], ["ALL%10"], ["a"], ["Al"], ["%300"], ["jobid,\tsubmitli"],
])
def test_formats_that_show_the_submit_line(formats):
    assert _asks_private(formats, NAMES)


@pytest.mark.parametrize("formats", [
    ["Submit"], ["sub"], ["s"], ["su%20"], ["jobid,state,submit"], ["WorkDir"], ["w"],
    ["jobid,,submitline"],          # an empty item ends sacct's list
    ["jobid, ,submitline"],         # so does one of whitespace only
    ["comment%40"], ["account"], [],
])
def test_formats_that_do_not(formats):
    assert not _asks_private(formats, NAMES)


def test_resolution_follows_sacct():
    assert format_fields(["s,su,submitl,st,j%5"], NAMES) == [
        "Start", "Submit", "SubmitLine", "Start", "JobID"]
    assert format_fields(["a"], NAMES) == NAMES
    assert format_fields(["nosuchfield"], NAMES) is None


def test_an_unknown_name_counts_as_private():
    # sacct refuses it; the chaperon takes the cautious path all the same.
    assert _asks_private(["jobid,bogus"], NAMES)


def test_without_the_field_table_any_prefix_of_submitline_counts():
    names = list(PRIVATE_FIELDS)
    assert _asks_private(["s"], names) and _asks_private(["su"], names)


def test_fixed_width_rows_cut_to_the_scope():
    rows = InScopeRows({"10", "12"}, None)
    pad = lambda ref: ref.ljust(64).encode() + b" "   # noqa: E731
    data = (pad("JobID") + b"SubmitLine\n" + b"-" * 64 + b" ----------\n"
            + pad("10") + b"sbatch mine\n" + pad("10.batch") + b"batch\n"
            + pad("11") + b"sbatch secret\n" + pad("12_3") + b"sbatch array\n"
            + pad("1123456789012345678901234567890123456789012345678901234567890123+")
            + b"sbatch truncated\n" + pad("12+1") + b"het\n")
    assert rows.fix(data) == (b"SubmitLine\n----------\nsbatch mine\nbatch\nsbatch array\n"
                              b"het\n")


def test_parsable_rows_cut_to_the_scope():
    rows = InScopeRows({"10"}, b";")
    data = b"JobID;SubmitLine;\n10;sbatch a;\n11;sbatch b;\n10.0;srun x;\nno-delimiter\n"
    assert rows.fix(data) == b"SubmitLine;\nsbatch a;\nsrun x;\n"
    assert rows.fix(b"11;sbatch b;") == b""   # an unterminated last line too
