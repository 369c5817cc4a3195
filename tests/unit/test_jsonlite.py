"""jsonlite reads and writes the launch path's JSON files without importing
json: it must agree with json exactly (issue 19)."""
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_sandbox import jsonlite

SCALARS = (st.none() | st.booleans() | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False) | st.text())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)


@given(VALUES)
def test_dumps_writes_what_json_dumps_writes(value):
    assert jsonlite.dumps(value) == json.dumps(value).encode()


@given(VALUES)
def test_loads_reads_what_json_loads_reads(value):
    text = json.dumps(value)
    assert jsonlite.loads(text) == json.loads(text)
    assert jsonlite.loads(f" \n{text}\t".encode()) == json.loads(text)


def test_surrogates_and_controls_as_json_writes_them():
    record = {"project": "/home/u/caf\udce9", "command": "a\"b\\c\n\x01é"}
    assert jsonlite.dumps(record) == json.dumps(record).encode()
    assert jsonlite.loads(jsonlite.dumps(record)) == record


@pytest.mark.parametrize("text", ["", "  ", "{", '{"a": 1} x', "[1,]", "nul", '"\x01"', "{'a': 1}",
                                  b"\xff"])
def test_what_json_refuses_is_refused(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        jsonlite.loads(text)


@pytest.mark.parametrize("value", [b"x", float("inf"), float("nan"), {1: "a"}, object()])
def test_what_json_would_not_write_plainly_is_refused(value):
    with pytest.raises(TypeError):
        jsonlite.dumps({"key": value})


def test_malformed_input_is_a_value_error_without_json_imported():
    # The launcher never imports json: the C scanner then has no
    # JSONDecodeError to raise (SystemError before the fix). A status line
    # cut short while the sandbox runs is such input (process/spawn.py).
    import subprocess
    import sys

    script = ("import sys; from agent_sandbox import jsonlite\n"
              "assert 'json' not in sys.modules\n"
              "for text in ('{ \"child-pid\"', '{\"a\" 1}', '{\"a\": 1,}'):\n"
              "    try:\n        jsonlite.loads(text)\n"
              "    except ValueError:\n        continue\n"
              "    raise SystemExit(text)\n"
              "print('ok')")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=30)
    assert result.stdout.strip() == "ok", result.stderr
