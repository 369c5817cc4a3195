"""registry.dumps writes a session record without importing json: it must
give json.dumps's bytes for every flat record (issue 19, the warm path)."""
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_sandbox.launch.registry import dumps

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                                 allow_infinity=False) | st.text()


@given(st.dictionaries(st.text(), SCALARS, max_size=12))
def test_a_flat_record_is_written_as_json_dumps_writes_it(record):
    assert dumps(record) == json.dumps(record).encode()
    assert json.loads(dumps(record)) == record


def test_a_path_that_is_not_utf8_round_trips_as_json_would():
    record = {"project": "/home/u/caf\udce9", "command": "a\"b\\c\n\x01"}
    assert dumps(record) == json.dumps(record).encode()


@pytest.mark.parametrize("value", [[1], {"a": 1}, float("inf"), float("nan"), b"x"])
def test_anything_but_a_flat_scalar_is_refused(value):
    with pytest.raises(TypeError):
        dumps({"key": value})
