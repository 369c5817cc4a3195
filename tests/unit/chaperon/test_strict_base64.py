"""The wire's strict base64 on every Python (chaperon/wire/protocol.py
_strict_a2b): Python 3.9 and 3.10 have no a2b_base64(strict_mode=True), so
the protocol rejects what strict mode rejects itself, then decodes leniently."""
from __future__ import annotations

import itertools
import sys
from binascii import Error, a2b_base64, b2a_base64

import pytest

from chaperon.wire import protocol

KNOWN = {b"QUJD": b"ABC", b"QUJD=": None, b"QUJD===": None, b"QQ==": b"A",
         b"QQQ=": b"A\x04", b"": b"", b"QUJDQ=": None, b"QQ=": None, b"=": None,
         b"==": None, b"QQQ==": None, b"QUJDQQ===": None, b"QU JD": None, b"QU\nJD": None,
         b"QQ==QUJD": None, b"=QQ=": None, b"QUJ!": None, b"QU-_": None}


def fallback(text: bytes):
    """The pre-3.11 path, on whatever Python runs the test."""
    saved, protocol._STRICT_MODE = protocol._STRICT_MODE, False
    try:
        return protocol._strict_a2b(memoryview(text))
    except Error:
        return None
    finally:
        protocol._STRICT_MODE = saved


@pytest.mark.parametrize("text, decoded", sorted(KNOWN.items()))
def test_the_fallback_decodes_and_refuses_as_strict_mode_does(text, decoded):
    assert fallback(text) == decoded


def test_the_fallback_agrees_with_strict_mode_on_every_short_string():
    """What the wire takes (strict, then canonical: the text re-encodes to
    itself) is the same either way; where both decode, the bytes are too.
    (3.11 and 3.12's strict mode takes padding after a whole quantum, 3.13's
    does not, the fallback does not: the canonical check refuses it anyway.)"""
    if sys.version_info < (3, 11):       # no strict mode here: the table above is its answers
        assert protocol._STRICT_MODE is False
        return
    for length in range(6):
        for text in map(bytes, itertools.product(b"QUa+/= !\n", repeat=length)):
            try:
                strict = a2b_base64(text, strict_mode=True)
            except Error:
                strict = None
            ours = fallback(text)
            assert (ours is None or strict is None or ours == strict), text
            taken = [data is not None and b2a_base64(data, newline=False) == text
                     for data in (strict, ours)]
            assert taken[0] == taken[1], text
