"""JSON for the launch path without `import json` (issue 19).

`import json` costs a warm launch about 3 ms, nearly all of it `re`, which
json's pure-Python decoder imports. The launcher reads and writes a few small
JSON files at every launch (the session registry, the placeholder list), so
this module does it with json's own C accelerator, `_json`, which CPython
always builds: its scanner parses exactly as `json.loads` does (json's
decoder is a thin shell around the same scanner), and its string encoder is
the one `json.dumps` uses. `dumps` covers what those files hold — dicts,
lists, strings, integers, finite floats, booleans and None — and gives
`json.dumps`'s bytes; anything else is a TypeError, as in json. Tested
against json itself (tests/unit/test_jsonlite.py).
"""
from __future__ import annotations

from _json import encode_basestring_ascii as _string
from _json import make_scanner as _make_scanner

_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What json.decoder.JSONDecoder hands the C scanner (its defaults)."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict = {}


_scan = _make_scanner(_Context())
_SPACE = " \t\n\r"


def loads(data: bytes | str):
    """json.loads of one document (UTF-8 bytes or text); ValueError when it
    is not exactly one JSON value."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"expecting a value at {exc.value}") from None
    except SystemError:
        # The C scanner raises json.decoder.JSONDecodeError for malformed
        # input, taken from sys.modules: without `import json` it has none
        # and returns NULL (Python 3.11). A line cut short ('{ "child-pid"')
        # is such input; it is not JSON, as json.loads would say.
        raise ValueError("not a JSON document") from None
    if text[end:].strip(_SPACE):
        raise ValueError(f"extra data at {end}")
    return value


def _encode(value) -> str:
    if value is None or value is True or value is False:
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int) or (isinstance(value, float) and value - value == 0):
        return int.__repr__(value) if isinstance(value, int) else float.__repr__(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_encode(item) for item in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("keys must be str")
        return "{" + ", ".join(f"{_string(k)}: {_encode(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not JSON: {type(value).__name__}")


def dumps(value) -> bytes:
    """json.dumps(value).encode(), byte for byte, for the types above."""
    return _encode(value).encode()
