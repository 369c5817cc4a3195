"""Unit tests for chaperon.wire.protocol: CHAPERON/1 of SPEC §9.

Round trips (property-based, binary data included), chunking invariance,
every malformed frame with its typed error, every limit at the limit and one
byte over, bounded memory against a 100 MiB flood, and a fuzz that the
decoders never raise anything but ProtocolError.
"""
from __future__ import annotations

import base64
import os
import pickle
import random
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaperon.wire.protocol import (CHUNK, MAX_ARGS, MAX_COMMAND, MAX_DATUM, MAX_ENV, MAX_LINE,
                                    MAX_LINES, MAX_REQUEST, MAX_RESP_PATH, Alive, Closed, Exit,
                                    FrameTooLarge, MalformedFrame, Output, ProtocolError, Request,
                                    RequestDecoder, ResponseDecoder, encode_alive, encode_event,
                                    encode_exit, encode_request, encode_stderr, encode_stdout)

ROOT = Path(__file__).resolve().parents[3]
MiB = 1024 * 1024


# --- helpers -------------------------------------------------------------------------------------

def b64(data: bytes) -> bytes:
    return base64.b64encode(data)


def run(decoder_cls, chunks):
    """Feed chunks then EOF, draining events after every feed.

    Returns (events, error): events before the error, and the error or None.
    A clean run must end in Closed, which is not included in the events.
    """
    decoder = decoder_cls()
    events: list = []

    def drain():
        while True:
            event = decoder.next_event()
            if event is None or isinstance(event, Closed):
                return event
            events.append(event)

    try:
        for chunk in chunks:
            decoder.feed(chunk)
            drain()
        decoder.feed(b"")
        assert isinstance(drain(), Closed)
    except ProtocolError as error:
        return events, error
    return events, None


def outcome(decoder_cls, chunks):
    """Events and a comparable summary of the error."""
    events, error = run(decoder_cls, chunks)
    return events, (None if error is None else (type(error), error.reason, error.line, str(error)))


def split(data: bytes, cuts) -> list[bytes]:
    points = sorted({0, len(data), *[c for c in cuts if 0 <= c <= len(data)]})
    return [data[a:b] for a, b in zip(points, points[1:])]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


def decode_one_request(wire: bytes) -> Request:
    events, error = run(RequestDecoder, [wire])
    assert error is None, error
    assert len(events) == 1
    return events[0]


HEADER = b"CHAPERON/1 sbatch\n"
CWD = b"CWD " + b64(b"/project") + b"\n"
RESP = b"RESP /tmp/session/conn/r1.resp\n"
END = b"END\n"


def frame(*lines: bytes, header: bytes = HEADER, cwd: bytes = CWD, resp: bytes = RESP,
          end: bytes = END) -> bytes:
    """A request frame around lines; header/cwd/resp/end can be dropped with b""."""
    return header + cwd + b"".join(lines) + resp + end


def simple_request(command="sbatch", **kw) -> Request:
    fields = dict(args=(b"-p", b"debug"), cwd=b"/project", env={b"HOME": b"/home/u"},
                  stdin=None, resp_path="/tmp/session/conn/r1.resp")
    fields.update(kw)
    return Request(command, **fields)


# --- strategies ----------------------------------------------------------------------------------

SPECIAL = [b"", b"\n", b"\0", b"\r\n", b"\xff\xfe\x80", b"a\nb\0c", b"END", b"\nEND\n",
           b"CHAPERON/1 sbatch\n", b"ARG QQ==\n", b"=", b"==", b" ", b"\xed\xa0\x80"]
datum = st.one_of(st.binary(max_size=64), st.sampled_from(SPECIAL),
                  st.lists(st.sampled_from(SPECIAL), max_size=4).map(b"".join))
commands = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
env_names = st.binary(min_size=1, max_size=16).filter(lambda b: b"=" not in b)
paths = st.binary(max_size=40).filter(lambda b: b"\0" not in b).map(lambda b: b"/" + b)
resp_paths = paths.filter(lambda b: b"\n" not in b).map(os.fsdecode)
envs = st.dictionaries(env_names, datum, max_size=8) | st.lists(
    st.tuples(env_names, datum), max_size=8, unique_by=lambda kv: kv[0])
requests = st.builds(
    Request, commands,
    st.lists(datum, max_size=12)
    | st.lists(st.sampled_from([b"", b"-x"]), min_size=50, max_size=300),
    cwd=paths, env=envs,
    stdin=st.none() | datum | st.binary(min_size=CHUNK - 2, max_size=CHUNK + 2),
    resp_path=resp_paths,
)
small_requests = st.builds(Request, commands, st.lists(datum, max_size=8), cwd=paths, env=envs,
                           stdin=st.none() | datum, resp_path=resp_paths)
outputs = st.builds(Output, st.sampled_from(["stdout", "stderr"]), datum)
response_events = st.lists(outputs | st.just(Alive()), max_size=20)
exit_codes = st.integers(0, 255)


def encode_response(events, code) -> bytes:
    return b"".join(encode_event(e) for e in events) + encode_exit(code)


def expected_response(events, code) -> list:
    return [e for e in events if not (isinstance(e, Output) and not e.data)] + [Exit(code)]


# --- round trips ---------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=requests, data=st.data())
def test_any_request_round_trips_exactly_in_any_chunking(req, data):
    wire = encode_request(req)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=12))
    assert outcome(RequestDecoder, [wire]) == ([req], None)
    assert outcome(RequestDecoder, split(wire, cuts)) == ([req], None)


@settings(max_examples=40, deadline=None)
@given(req=requests.filter(lambda r: len(encode_request(r)) < 4000))
def test_request_fed_byte_by_byte(req):
    assert outcome(RequestDecoder, bytewise(encode_request(req))) == ([req], None)


@settings(max_examples=300, deadline=None)
@given(events=response_events, code=exit_codes, data=st.data())
def test_any_response_round_trips_in_any_chunking(events, code, data):
    wire = encode_response(events, code)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=12))
    expected = (expected_response(events, code), None)
    assert outcome(ResponseDecoder, [wire]) == expected
    assert outcome(ResponseDecoder, split(wire, cuts)) == expected
    assert outcome(ResponseDecoder, bytewise(wire)) == expected


@pytest.mark.parametrize("arg", [b"a\nb", b"\0", b"x\0y\nz", b"\xff\xfe", b"caf\xc3", b"",
                                 b"\nEND\nCHAPERON/1 scancel\n", b"ARG " + b64(b"x"),
                                 bytes(range(256))])
def test_hostile_argument_bytes_round_trip_exactly(arg):
    req = simple_request(args=(b"--wrap", arg, b"tail"))
    got = decode_one_request(encode_request(req))
    assert got.args == (b"--wrap", arg, b"tail")
    assert got == req


def test_str_inputs_are_fs_encoded_and_helpers_fs_decode_back():
    raw = b"dir-\xff\xfe-\xc3\x28"
    req = Request("squeue", ["-u", os.fsdecode(raw)], cwd=os.fsdecode(b"/p/" + raw),
                  env={"LANG": "C", "ODD": os.fsdecode(raw)}, resp_path="/s/r")
    assert req.args == (b"-u", raw)
    assert req.cwd == b"/p/" + raw
    assert req.env == ((b"LANG", b"C"), (b"ODD", raw))
    got = decode_one_request(encode_request(req))
    assert got.args_str == ["-u", os.fsdecode(raw)]
    assert [os.fsencode(a) for a in got.args_str] == list(got.args)
    assert got.cwd_str == os.fsdecode(b"/p/" + raw)
    assert got.env_str == {"LANG": "C", "ODD": os.fsdecode(raw)}
    assert got.resp_path == "/s/r"
    assert Request("squeue", [b"-u", raw], cwd=b"/p/" + raw,
                   env=[(b"LANG", b"C"), (b"ODD", raw)], resp_path=b"/s/r") == req


def test_env_values_keep_every_equals_sign_and_order():
    env = [(b"Z", b"a=b=c"), (b"A", b"="), (b"M", b""), (b"\xff", b"=\n=")]
    got = decode_one_request(encode_request(simple_request(env=env)))
    assert got.env == tuple(env)


def test_stdin_absent_empty_and_multi_chunk_are_distinct():
    for stdin, lines in [(None, 0), (b"", 1), (b"x", 1), (b"s" * (3 * CHUNK + 1), 4)]:
        wire = encode_request(simple_request(stdin=stdin))
        assert wire.count(b"\nSTDIN ") == lines
        assert decode_one_request(wire).stdin == stdin


def test_large_output_is_split_into_chunks_and_reassembled():
    data = os.urandom(5 * CHUNK + 7)
    wire = encode_stdout(data) + encode_stderr(b"e" * CHUNK) + encode_exit(0)
    assert wire.count(b"STDOUT ") == 6 and wire.count(b"STDERR ") == 1
    events, error = run(ResponseDecoder, split(wire, range(0, len(wire), 4093)))
    assert error is None
    out = [e.data for e in events if isinstance(e, Output) and e.stream == "stdout"]
    assert b"".join(out) == data
    assert events[-1] == Exit(0)


def test_encoders_write_the_spec_lines():
    assert encode_stdout(b"hi") == b"STDOUT aGk=\n"
    assert encode_stderr(b"\n") == b"STDERR Cg==\n"
    assert encode_stdout(b"") == b"" and encode_stderr(b"") == b""
    assert encode_alive() == b"ALIVE\n"
    assert encode_exit(0) == b"EXIT 0\nEND\n" and encode_exit(255) == b"EXIT 255\nEND\n"
    req = Request("sbatch", [b"a"], cwd=b"/p", env=[(b"K", b"v")], stdin=b"s", resp_path="/s/r")
    assert encode_request(req) == (b"CHAPERON/1 sbatch\nARG YQ==\nCWD L3A=\nENV Sz12\n"
                                   b"STDIN cw==\nRESP /s/r\nEND\n")


def test_requests_may_follow_each_other_on_one_stream():
    one = simple_request(command="squeue", args=(b"-h",))
    two = simple_request(command="sbatch", stdin=b"#!/bin/sh\ntrue\n")
    wire = encode_request(one) + encode_request(two)
    for chunks in ([wire], bytewise(wire), split(wire, range(0, len(wire), 7))):
        assert outcome(RequestDecoder, chunks) == ([one, two], None)


def test_unknown_commands_are_parsed_and_reported_by_name():
    req = decode_one_request(frame(header=b"CHAPERON/1 salloc_future9\n"))
    assert req.command == "salloc_future9"


def test_unknown_lines_are_ignored_inside_frames():
    noisy = frame(b"FOO bar\n", b"\n", b"arg " + b64(b"lower") + b"\n", b"EXIT 3\n", b"ARGS x\n",
                  b"ARG " + b64(b"kept") + b"\n", b"STDOUT " + b64(b"x") + b"\n",
                  b"X" * 5000 + b"\n",
                  b"ENVIRONMENT y\n")
    req = decode_one_request(noisy)
    assert req.args == (b"kept",) and req.env == () and req.stdin is None
    wire = (b"HELLO\n" + encode_stdout(b"a") + b"\n" + b"stdout YQ==\n" + b"ARG YQ==\n"
            + encode_alive() + b"EXIT 4\nNOTE x\n\nEND\n")
    assert outcome(ResponseDecoder, [wire]) == ([Output("stdout", b"a"), Alive(), Exit(4)], None)


def test_fields_may_come_in_any_order():
    wire = (HEADER + RESP + b"ENV " + b64(b"A=1") + b"\nSTDIN " + b64(b"in") + b"\nARG "
            + b64(b"x") + b"\n" + CWD + b"ARG " + b64(b"y") + b"\n" + END)
    req = decode_one_request(wire)
    assert req.args == (b"x", b"y") and req.env == ((b"A", b"1"),) and req.stdin == b"in"


# --- malformed frames ----------------------------------------------------------------------------

REQUEST_ERRORS = [
    # (id, wire then EOF, error class, reason)
    ("no-header", b"ARG YQ==\n", MalformedFrame, "missing-header"),
    ("empty-first-line", b"\n" + frame(), MalformedFrame, "missing-header"),
    ("long-garbage-no-newline", b"x" * 300, MalformedFrame, "missing-header"),
    ("lowercase-header", b"chaperon/1 sbatch\n", MalformedFrame, "missing-header"),
    ("version-2", b"CHAPERON/2 sbatch\n", MalformedFrame, "bad-version"),
    ("version-10", b"CHAPERON/10 sbatch\n", MalformedFrame, "bad-version"),
    ("header-no-command", b"CHAPERON/1\n", MalformedFrame, "bad-command"),
    ("header-empty-command", b"CHAPERON/1 \n", MalformedFrame, "bad-command"),
    ("command-uppercase", b"CHAPERON/1 Sbatch\n", MalformedFrame, "bad-command"),
    ("command-digit-first", b"CHAPERON/1 1sbatch\n", MalformedFrame, "bad-command"),
    ("command-dash", b"CHAPERON/1 s-batch\n", MalformedFrame, "bad-command"),
    ("command-two-words", b"CHAPERON/1 sbatch x\n", MalformedFrame, "bad-command"),
    ("command-double-space", b"CHAPERON/1  sbatch\n", MalformedFrame, "bad-command"),
    ("command-cr", b"CHAPERON/1 sbatch\r\n", MalformedFrame, "bad-command"),
    ("command-non-ascii", "CHAPERON/1 sbätch\n".encode(), MalformedFrame, "bad-command"),
    ("command-too-long", b"CHAPERON/1 " + b"a" * (MAX_COMMAND + 1) + b"\n", MalformedFrame,
     "bad-command"),
    ("duplicate-header", HEADER + frame(), MalformedFrame, "duplicate-header"),
    ("other-version-inside", frame(b"CHAPERON/2 x\n"), MalformedFrame, "duplicate-header"),
    ("arg-no-payload", frame(b"ARG\n"), MalformedFrame, "missing-payload"),
    ("arg-non-canonical", frame(b"ARG QR==\n"), MalformedFrame, "bad-base64"),
    ("arg-non-canonical-1pad", frame(b"ARG QUJ=\n"), MalformedFrame, "bad-base64"),
    ("arg-no-padding", frame(b"ARG QQ\n"), MalformedFrame, "bad-base64"),
    ("arg-leading-space", frame(b"ARG  QQ==\n"), MalformedFrame, "bad-base64"),
    ("arg-trailing-space", frame(b"ARG QQ== \n"), MalformedFrame, "bad-base64"),
    ("arg-inner-space", frame(b"ARG Q Q==\n"), MalformedFrame, "bad-base64"),
    ("arg-cr", frame(b"ARG QQ==\r\n"), MalformedFrame, "bad-base64"),
    ("arg-tab", frame(b"ARG \tQQ==\n"), MalformedFrame, "bad-base64"),
    ("arg-urlsafe", frame(b"ARG -_8=\n"), MalformedFrame, "bad-base64"),
    ("arg-excess-padding", frame(b"ARG QQ===\n"), MalformedFrame, "bad-base64"),
    ("arg-padding-after-full-quantum", frame(b"ARG QUJD=\n"), MalformedFrame, "bad-base64"),
    ("arg-padding-after-full-quantum2", frame(b"ARG QUJD==\n"), MalformedFrame, "bad-base64"),
    ("arg-only-padding", frame(b"ARG ====\n"), MalformedFrame, "bad-base64"),
    ("arg-data-after-padding", frame(b"ARG QQ==QQ==\n"), MalformedFrame, "bad-base64"),
    ("arg-one-char", frame(b"ARG Q\n"), MalformedFrame, "bad-base64"),
    ("arg-non-ascii", frame("ARG QUJ\u00e9\n".encode()), MalformedFrame, "bad-base64"),
    ("arg-nul", frame(b"ARG QQ==\0\n"), MalformedFrame, "bad-base64"),
    ("cwd-missing", frame(cwd=b""), MalformedFrame, "missing-cwd"),
    ("cwd-twice", frame(CWD), MalformedFrame, "duplicate-cwd"),
    ("cwd-relative", frame(cwd=b"CWD " + b64(b"project") + b"\n"), MalformedFrame, "bad-cwd"),
    ("cwd-empty", frame(cwd=b"CWD \n"), MalformedFrame, "bad-cwd"),
    ("cwd-nul", frame(cwd=b"CWD " + b64(b"/p\0q") + b"\n"), MalformedFrame, "bad-cwd"),
    ("cwd-no-payload", frame(cwd=b"CWD\n"), MalformedFrame, "missing-payload"),
    ("cwd-bad-base64", frame(cwd=b"CWD L3A\n"), MalformedFrame, "bad-base64"),
    ("env-no-equals", frame(b"ENV " + b64(b"NAME") + b"\n"), MalformedFrame, "bad-env"),
    ("env-empty-name", frame(b"ENV " + b64(b"=value") + b"\n"), MalformedFrame, "bad-env"),
    ("env-empty", frame(b"ENV \n"), MalformedFrame, "bad-env"),
    ("env-duplicate", frame(b"ENV " + b64(b"A=1") + b"\nENV " + b64(b"A=2") + b"\n"),
     MalformedFrame, "duplicate-env"),
    ("env-bad-base64", frame(b"ENV QT0x=\n"), MalformedFrame, "bad-base64"),
    ("stdin-bad-base64", frame(b"STDIN aGk\n"), MalformedFrame, "bad-base64"),
    ("stdin-no-payload", frame(b"STDIN\n"), MalformedFrame, "missing-payload"),
    ("resp-missing", frame(resp=b""), MalformedFrame, "missing-resp"),
    ("resp-twice", frame(RESP), MalformedFrame, "duplicate-resp"),
    ("resp-relative", frame(resp=b"RESP tmp/r\n"), MalformedFrame, "bad-resp"),
    ("resp-empty", frame(resp=b"RESP \n"), MalformedFrame, "bad-resp"),
    ("resp-nul", frame(resp=b"RESP /tmp/r\0x\n"), MalformedFrame, "bad-resp"),
    ("resp-no-payload", frame(resp=b"RESP\n"), MalformedFrame, "missing-payload"),
    ("end-with-payload", frame(end=b"END now\n"), MalformedFrame, "unexpected-payload"),
    ("end-trailing-space", frame(end=b"END \n"), MalformedFrame, "unexpected-payload"),
    ("data-after-end", frame() + b"junk\n", MalformedFrame, "data-after-end"),
    ("empty-line-after-end", frame() + b"\n", MalformedFrame, "data-after-end"),
    ("long-data-after-end", frame() + b"y" * 300, MalformedFrame, "data-after-end"),
    ("truncated-no-end", frame(end=b""), MalformedFrame, "truncated"),
    ("truncated-mid-line", frame(end=b"EN"), MalformedFrame, "truncated"),
    ("truncated-mid-header", b"CHAPER", MalformedFrame, "truncated"),
    ("truncated-second-request", frame() + b"CHAPERON/1 squeue\n", MalformedFrame, "truncated"),
    ("arg-too-large", frame(b"ARG " + b64(b"a" * (MAX_DATUM + 1)) + b"\n"), FrameTooLarge,
     "datum-too-large"),
    ("resp-too-long", frame(resp=b"RESP /" + b"r" * MAX_RESP_PATH + b"\n"), FrameTooLarge,
     "datum-too-large"),
]


@pytest.mark.parametrize("wire,cls,reason", [c[1:] for c in REQUEST_ERRORS],
                         ids=[c[0] for c in REQUEST_ERRORS])
def test_malformed_requests_raise_the_typed_error(wire, cls, reason):
    whole = outcome(RequestDecoder, [wire])
    error = whole[1]
    assert error is not None, "accepted"
    assert error[0] is cls and error[1] == reason, error
    message = error[3]
    assert "\n" not in message and message.startswith(("malformed request from the sandbox",
                                                       "oversized request from the sandbox"))
    if len(wire) < 5000:     # the outcome does not depend on the chunking
        assert outcome(RequestDecoder, bytewise(wire)) == whole


RESPONSE_ERRORS = [
    ("stdout-no-payload", b"STDOUT\n", MalformedFrame, "missing-payload"),
    ("stdout-non-canonical", b"STDOUT QR==\n", MalformedFrame, "bad-base64"),
    ("stderr-bad-base64", b"STDERR !!!!\n", MalformedFrame, "bad-base64"),
    ("stdout-cr", b"STDOUT QQ==\r\n", MalformedFrame, "bad-base64"),
    ("alive-payload", b"ALIVE 1\n", MalformedFrame, "unexpected-payload"),
    ("exit-empty", b"EXIT\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-blank", b"EXIT \nEND\n", MalformedFrame, "bad-exit"),
    ("exit-word", b"EXIT zero\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-negative", b"EXIT -1\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-256", b"EXIT 256\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-huge", b"EXIT 99999999999999999999\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-leading-zero", b"EXIT 07\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-plus", b"EXIT +1\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-underscore", b"EXIT 1_0\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-trailing-space", b"EXIT 1 \nEND\n", MalformedFrame, "bad-exit"),
    ("exit-double-space", b"EXIT  1\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-float", b"EXIT 1.0\nEND\n", MalformedFrame, "bad-exit"),
    ("exit-non-ascii-digit", "EXIT \u0661\nEND\n".encode(), MalformedFrame, "bad-exit"),
    ("end-without-exit", b"END\n", MalformedFrame, "missing-exit"),
    ("end-with-payload", b"EXIT 0\nEND 0\n", MalformedFrame, "unexpected-payload"),
    ("stdout-after-exit", b"EXIT 0\nSTDOUT YQ==\nEND\n", MalformedFrame, "out-of-order"),
    ("alive-after-exit", b"EXIT 0\nALIVE\nEND\n", MalformedFrame, "out-of-order"),
    ("second-exit", b"EXIT 0\nEXIT 1\nEND\n", MalformedFrame, "out-of-order"),
    ("line-after-end", b"EXIT 0\nEND\nSTDOUT YQ==\n", MalformedFrame, "data-after-end"),
    ("second-end", b"EXIT 0\nEND\nEND\n", MalformedFrame, "data-after-end"),
    ("byte-after-end", b"EXIT 0\nEND\nx", MalformedFrame, "data-after-end"),
    ("newline-after-end", b"EXIT 0\nEND\n\n", MalformedFrame, "data-after-end"),
    ("truncated-empty", b"", MalformedFrame, "truncated"),
    ("truncated-streaming", b"STDOUT YQ==\n", MalformedFrame, "truncated"),
    ("truncated-after-exit", b"EXIT 0\n", MalformedFrame, "truncated"),
    ("truncated-mid-end", b"EXIT 0\nEN", MalformedFrame, "truncated"),
    ("output-too-large", b"STDOUT " + b64(b"o" * (MAX_DATUM + 1)) + b"\n", FrameTooLarge,
     "datum-too-large"),
]


@pytest.mark.parametrize("wire,cls,reason", [c[1:] for c in RESPONSE_ERRORS],
                         ids=[c[0] for c in RESPONSE_ERRORS])
def test_malformed_responses_raise_the_typed_error(wire, cls, reason):
    whole = outcome(ResponseDecoder, [wire] if wire else [])
    error = whole[1]
    assert error is not None, "accepted"
    assert error[0] is cls and error[1] == reason, error
    assert "\n" not in error[3] and error[3].startswith(("malformed response from the chaperon",
                                                         "oversized response from the chaperon"))
    if len(wire) < 5000:
        assert outcome(ResponseDecoder, bytewise(wire)) == whole


def test_errors_name_the_peer_and_line_and_never_quote_payload():
    secret = b64(b"SECRET-SCRIPT-BODY password=hunter2")
    wire = frame(b"STDIN " + secret + b"!\n")
    _, error = run(RequestDecoder, [wire])
    assert isinstance(error, MalformedFrame) and error.fault == "peer" and error.line == 3
    assert b"U0VDUkVU" not in str(error).encode() and "hunter2" not in str(error)
    assert str(error) == ("malformed request from the sandbox (line 3): "
                          "STDIN payload is not valid base64")
    _, error = run(ResponseDecoder, [b"ALIVE\nSTDOUT " + secret + b"=\n"])
    assert error.line == 2 and "U0VD" not in str(error)
    assert str(error).startswith("malformed response from the chaperon (line 2): STDOUT")


def test_events_before_an_error_are_delivered_then_the_error_sticks():
    decoder = ResponseDecoder()
    decoder.feed(b"STDOUT YQ==\nALIVE\nEXIT x\nEND\n")
    assert decoder.next_event() == Output("stdout", b"a")
    assert decoder.next_event() == Alive()
    with pytest.raises(MalformedFrame) as first:
        decoder.next_event()
    decoder.feed(b"STDOUT YQ==\n")           # discarded
    with pytest.raises(MalformedFrame) as again:
        decoder.next_event()
    assert again.value is first.value


def test_request_decoder_states_and_eof():
    decoder = RequestDecoder()
    assert decoder.next_event() is None
    decoder.feed(b"")
    assert decoder.next_event() == Closed()          # peer opened and closed: nothing to do
    assert decoder.next_event() == Closed()
    decoder.feed(b"")                                # repeated EOF is harmless
    with pytest.raises(ProtocolError) as exc:
        decoder.feed(b"x")
    assert exc.value.fault == "local" and exc.value.reason == "feed-after-eof"


def test_response_decoder_done_only_after_end():
    decoder = ResponseDecoder()
    decoder.feed(b"EXIT 3\n")
    assert decoder.next_event() is None and not decoder.done
    decoder.feed(bytearray(b"END\n"))
    assert decoder.next_event() == Exit(3) and decoder.done
    assert decoder.next_event() is None
    decoder.feed(b"")
    assert decoder.next_event() == Closed()


def test_feed_accepts_bytes_like_but_not_str():
    decoder = ResponseDecoder()
    decoder.feed(memoryview(b"ALIVE\n"))
    assert decoder.next_event() == Alive()
    with pytest.raises(TypeError):
        decoder.feed("ALIVE\n")


def test_error_classes_default_reason_and_fault():
    assert issubclass(FrameTooLarge, ProtocolError) and issubclass(MalformedFrame, ProtocolError)
    error = MalformedFrame("the request did not arrive in time")
    assert error.reason == "malformed" and error.fault == "peer" and error.line is None
    assert FrameTooLarge("x").reason == "too-large"
    assert ProtocolError("x").reason == "protocol-error"


# --- local errors: what this side cannot say -----------------------------------------------------

LOCAL_ERRORS = [
    ("command-empty", dict(command=""), MalformedFrame, "bad-command"),
    ("command-upper", dict(command="Sbatch"), MalformedFrame, "bad-command"),
    ("command-unicode", dict(command="sbätch"), MalformedFrame, "bad-command"),
    ("command-long", dict(command="a" * (MAX_COMMAND + 1)), MalformedFrame, "bad-command"),
    ("cwd-relative", dict(cwd="p"), MalformedFrame, "bad-cwd"),
    ("cwd-empty", dict(cwd=b""), MalformedFrame, "bad-cwd"),
    ("cwd-nul", dict(cwd=b"/p\0"), MalformedFrame, "bad-cwd"),
    ("resp-relative", dict(resp_path="r"), MalformedFrame, "bad-resp"),
    ("resp-newline", dict(resp_path="/r\nEND"), MalformedFrame, "bad-resp"),
    ("resp-nul", dict(resp_path="/r\0"), MalformedFrame, "bad-resp"),
    ("resp-long", dict(resp_path="/" + "r" * MAX_RESP_PATH), FrameTooLarge, "datum-too-large"),
    ("env-empty-name", dict(env={b"": b"v"}), MalformedFrame, "bad-env"),
    ("env-equals-in-name", dict(env={b"A=B": b"v"}), MalformedFrame, "bad-env"),
    ("env-duplicate", dict(env=[(b"A", b"1"), ("A", "2")]), MalformedFrame, "duplicate-env"),
    ("arg-too-large", dict(args=[b"x" * (MAX_DATUM + 1)]), FrameTooLarge, "datum-too-large"),
    ("env-too-large", dict(env={b"A": b"x" * (MAX_DATUM - 1)}), FrameTooLarge, "datum-too-large"),
    ("stdin-too-large", dict(stdin=b"x" * (MAX_DATUM + 1)), FrameTooLarge, "stdin-too-large"),
    ("too-many-args", dict(args=[b""] * (MAX_ARGS + 1)), FrameTooLarge, "too-many-args"),
    ("too-many-env", dict(env=[(b"V%d" % i, b"") for i in range(MAX_ENV + 1)]), FrameTooLarge,
     "too-many-env"),
]


@pytest.mark.parametrize("fields,cls,reason", [c[1:] for c in LOCAL_ERRORS],
                         ids=[c[0] for c in LOCAL_ERRORS])
def test_invalid_requests_cannot_be_built(fields, cls, reason):
    with pytest.raises(cls) as exc:
        simple_request(**fields)
    assert exc.value.fault == "local" and exc.value.reason == reason
    assert str(exc.value).startswith("cannot build request")


@pytest.mark.parametrize("fields", [dict(command=b"sbatch"), dict(args="-p debug"),
                                    dict(args=[1]), dict(cwd=None), dict(env={"A": 1}),
                                    dict(stdin="text"), dict(resp_path=3)])
def test_wrong_types_are_type_errors(fields):
    with pytest.raises(TypeError):
        simple_request(**fields)


def test_request_over_16_mib_cannot_be_sent():
    big = b"a" * MAX_DATUM
    req = simple_request(args=[big, big, big], stdin=big)
    with pytest.raises(FrameTooLarge) as exc:
        encode_request(req)
    assert exc.value.fault == "local" and exc.value.reason == "request-too-large"


def test_invalid_response_events_cannot_be_built():
    for code in (-1, 256):
        with pytest.raises(MalformedFrame) as exc:
            encode_exit(code)
        assert exc.value.fault == "local" and exc.value.reason == "bad-exit"
    for code in (True, "0", 1.0, None):
        with pytest.raises(TypeError):
            encode_exit(code)
    with pytest.raises(MalformedFrame):
        Output("stdin", b"x")
    with pytest.raises(TypeError):
        Output("stdout", "text")
    with pytest.raises(TypeError):
        encode_event(Closed())
    with pytest.raises(TypeError):
        encode_request("CHAPERON/1 sbatch")


# --- limits: at the limit accepted, one over refused ---------------------------------------------

def _line_with_payload(keyword: bytes, data: bytes) -> bytes:
    return keyword + b" " + b64(data) + b"\n"


@pytest.mark.parametrize("keyword", [b"ARG", b"ENV", b"CWD"])
def test_datum_limit_is_exact(keyword):
    def wire(size):
        if keyword == b"ARG":
            return frame(_line_with_payload(b"ARG", b"a" * size))
        if keyword == b"ENV":
            return frame(_line_with_payload(b"ENV", b"A=" + b"v" * (size - 2)))
        return frame(cwd=_line_with_payload(b"CWD", b"/" + b"d" * (size - 1)))

    events, error = run(RequestDecoder, [wire(MAX_DATUM)])
    assert error is None and len(events) == 1
    events, error = run(RequestDecoder, [wire(MAX_DATUM + 1)])
    assert isinstance(error, FrameTooLarge) and error.reason == "datum-too-large"
    assert error.line == 3 if keyword != b"CWD" else error.line == 2


def test_encoder_accepts_data_at_the_limits():
    # three 4 MiB data encode to more than 16 MiB: the frame limit is on the wire
    for req in (simple_request(args=[b"a" * MAX_DATUM], stdin=b"s" * MAX_DATUM),
                simple_request(env={b"A": b"v" * (MAX_DATUM - 2)},
                               cwd=b"/" + b"d" * (MAX_DATUM - 1))):
        assert decode_one_request(encode_request(req)) == req


def test_stdin_total_limit_is_exact_across_chunks():
    def wire(size):
        chunks = [b"s" * min(CHUNK, size - i) for i in range(0, size, CHUNK)]
        return frame(*[_line_with_payload(b"STDIN", c) for c in chunks])

    events, error = run(RequestDecoder, [wire(MAX_DATUM)])
    assert error is None and events[0].stdin == b"s" * MAX_DATUM
    events, error = run(RequestDecoder, [wire(MAX_DATUM + 1)])
    assert isinstance(error, FrameTooLarge) and error.reason == "stdin-too-large"


def test_line_limit_is_exact():
    events, error = run(RequestDecoder, [frame(b"X" * MAX_LINE + b"\n")])
    assert error is None and len(events) == 1
    events, error = run(RequestDecoder, [frame(b"X" * (MAX_LINE + 1) + b"\n")])
    assert isinstance(error, FrameTooLarge) and error.reason == "line-too-long" and error.line == 3
    events, error = run(ResponseDecoder, [b"X" * MAX_LINE + b"\n" + encode_exit(0)])
    assert error is None and events == [Exit(0)]
    events, error = run(ResponseDecoder, [b"ALIVE\n" + b"X" * (MAX_LINE + 1) + b"\n"])
    assert events == [Alive()] and isinstance(error, FrameTooLarge)
    assert error.reason == "line-too-long" and error.line == 2


def test_response_output_line_limit_is_exact():
    events, error = run(ResponseDecoder, [encode_event(Output("stderr", b"e" * CHUNK))
                                          + b"STDOUT " + b64(b"o" * MAX_DATUM) + b"\n"
                                          + encode_exit(1)])
    assert error is None and [len(e.data) for e in events[:-1]] == [CHUNK, MAX_DATUM]


def _padded_request(total: int) -> bytes:
    """A valid request frame of exactly `total` bytes, padded with unknown lines."""
    fixed = len(frame())
    pad = total - fixed
    lines = []
    while pad > 0:
        size = min(pad, MAX_LINE + 1)
        lines.append(b"X" * (size - 1) + b"\n")
        pad -= size
    wire = frame(*lines)
    assert len(wire) == total
    return wire


def test_request_size_limit_is_exact():
    events, error = run(RequestDecoder, [_padded_request(MAX_REQUEST)])
    assert error is None and len(events) == 1
    events, error = run(RequestDecoder, [_padded_request(MAX_REQUEST + 1)])
    assert isinstance(error, FrameTooLarge) and error.reason == "request-too-large"
    # the budget is per request: a second frame of the full size is fine
    full = _padded_request(MAX_REQUEST)
    events, error = run(RequestDecoder, [full, full])
    assert error is None and len(events) == 2


def test_arg_and_env_count_limits_are_exact():
    events, error = run(RequestDecoder, [frame(b"ARG \n" * MAX_ARGS)])
    assert error is None and len(events[0].args) == MAX_ARGS
    events, error = run(RequestDecoder, [frame(b"ARG \n" * (MAX_ARGS + 1))])
    assert isinstance(error, FrameTooLarge) and error.reason == "too-many-args"
    env = [_line_with_payload(b"ENV", b"V%d=" % i) for i in range(MAX_ENV + 1)]
    events, error = run(RequestDecoder, [frame(*env[:MAX_ENV])])
    assert error is None and len(events[0].env) == MAX_ENV
    events, error = run(RequestDecoder, [frame(*env)])
    assert isinstance(error, FrameTooLarge) and error.reason == "too-many-env"


def test_line_count_limit_is_exact_and_counts_unknown_lines():
    fill = MAX_LINES - len(frame().splitlines())
    events, error = run(RequestDecoder, [frame(b"\n" * fill)])
    assert error is None and len(events) == 1
    events, error = run(RequestDecoder, [frame(b"\n" * (fill + 1))])
    assert isinstance(error, FrameTooLarge) and error.reason == "too-many-lines"


def test_command_and_resp_path_limits_are_exact():
    name = "a" * MAX_COMMAND
    assert decode_one_request(frame(header=b"CHAPERON/1 " + name.encode() + b"\n")).command == name
    path = "/" + "r" * (MAX_RESP_PATH - 1)
    assert decode_one_request(frame(resp=b"RESP " + path.encode() + b"\n")).resp_path == path
    assert simple_request(command=name, resp_path=path).resp_path == path


# --- bounded memory against floods ---------------------------------------------------------------

def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _flood(decoder, prefix: bytes, chunk: bytes, total: int):
    """Feed prefix then `total` bytes of chunk, as a reader would; return the first error."""
    if prefix:
        decoder.feed(prefix)
    first = None
    for _ in range(total // len(chunk)):
        decoder.feed(chunk)
        if first is None:
            try:
                while decoder.next_event() is not None:
                    pass
            except ProtocolError as error:
                first = error
    return first


FLOODS = [
    # (id, decoder, prefix, chunk repeated to 100 MiB, error class, reason, memory bound)
    ("request-one-huge-line", RequestDecoder, HEADER + CWD + b"ARG ", b"A" * 65536, FrameTooLarge,
     "line-too-long", MAX_LINE + 2 * MiB),
    ("request-garbage-before-header", RequestDecoder, b"", b"\xff" * 65536, MalformedFrame,
     "missing-header", 1 * MiB),
    ("request-garbage-lines", RequestDecoder, b"", b"\n" * 65536, MalformedFrame,
     "missing-header", 1 * MiB),
    ("request-many-unknown-lines", RequestDecoder, HEADER, (b"X" * 1023 + b"\n") * 64,
     FrameTooLarge, "request-too-large", 2 * MiB),
    ("request-many-args", RequestDecoder, HEADER, (b"ARG " + b64(b"a" * 765) + b"\n") * 64,
     FrameTooLarge, "request-too-large", MAX_REQUEST),
    ("response-one-huge-line", ResponseDecoder, b"STDOUT ", b"A" * 65536, FrameTooLarge,
     "line-too-long", MAX_LINE + 2 * MiB),
    ("response-after-end", ResponseDecoder, encode_exit(0), b"\n" * 65536, MalformedFrame,
     "data-after-end", 1 * MiB),
]


@pytest.mark.parametrize("decoder_cls,prefix,chunk,cls,reason,bound", [f[1:] for f in FLOODS],
                         ids=[f[0] for f in FLOODS])
def test_a_100_mib_flood_is_refused_in_bounded_memory(decoder_cls, prefix, chunk, cls, reason,
                                                       bound):
    result = {}
    decoder = decoder_cls()
    peak = _peak_while(lambda: result.update(error=_flood(decoder, prefix, chunk, 100 * MiB)))
    error = result["error"]
    assert isinstance(error, cls) and error.reason == reason
    assert peak < bound, f"peak {peak / MiB:.1f} MiB"


def test_one_100_mib_feed_is_not_copied():
    flood = HEADER + b"ARG " + b"A" * (100 * MiB)
    decoder = RequestDecoder()
    peak = _peak_while(lambda: decoder.feed(flood))
    assert peak < 1 * MiB, f"peak {peak / MiB:.1f} MiB"
    with pytest.raises(FrameTooLarge):
        decoder.next_event()


def test_a_100_mib_response_stream_is_consumed_in_bounded_memory():
    line = encode_stdout(b"o" * CHUNK)
    count = 100 * MiB // len(line)

    def consume():
        decoder = ResponseDecoder()
        total = 0
        for _ in range(count):
            decoder.feed(line)
            while (event := decoder.next_event()) is not None:
                total += len(event.data)
        decoder.feed(encode_exit(0))
        assert decoder.next_event() == Exit(0)
        assert total == count * CHUNK

    assert _peak_while(consume) < 1 * MiB


# --- fuzz: never anything but ProtocolError ------------------------------------------------------

def _check_fuzz(wire: bytes, cuts):
    for decoder_cls, kinds in ((RequestDecoder, (Request,)),
                               (ResponseDecoder, (Output, Alive, Exit))):
        whole = outcome(decoder_cls, [wire])
        events, error = whole
        assert all(isinstance(e, kinds) for e in events)
        if error is not None:
            assert issubclass(error[0], ProtocolError)
        assert outcome(decoder_cls, split(wire, cuts)) == whole


TOKENS = [b"CHAPERON/1 sbatch\n", b"CHAPERON/1 ", b"ARG ", b"CWD L3A=\n", b"ENV QT0x\n",
          b"STDIN ", b"RESP /s/r\n", b"END\n", b"STDOUT ", b"STDERR ", b"ALIVE\n", b"EXIT 0\n",
          b"EXIT ", b"\n", b" ", b"=", b"QQ==", b"YWJj", b"\0", b"\xff"]


@settings(max_examples=1500, deadline=None)
@given(wire=st.binary(max_size=300) | st.lists(st.sampled_from(TOKENS) | st.binary(max_size=6),
                                               max_size=40).map(b"".join),
       cuts=st.lists(st.integers(0, 400), max_size=8))
def test_fuzz_arbitrary_bytes_only_raise_protocol_error(wire, cuts):
    _check_fuzz(wire, cuts)


@settings(max_examples=500, deadline=None)
@given(req=small_requests, events=response_events, code=exit_codes, data=st.data())
def test_fuzz_mutated_valid_frames_only_raise_protocol_error(req, events, code, data):
    for wire in (encode_request(req), encode_response(events, code)):
        wire = bytearray(wire)
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(0, len(wire)))
            op = data.draw(st.sampled_from(["flip", "insert", "delete", "token"]))
            if op == "flip" and pos < len(wire):
                wire[pos] ^= 1 << data.draw(st.integers(0, 7))
            elif op == "insert":
                wire[pos:pos] = data.draw(st.binary(min_size=1, max_size=3))
            elif op == "delete":
                del wire[pos:pos + data.draw(st.integers(1, 4))]
            else:
                wire[pos:pos] = data.draw(st.sampled_from(TOKENS))
        cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=6))
        _check_fuzz(bytes(wire), cuts)


def test_fuzz_seeded_mutations_in_bulk():
    """20 000 cheap random mutations of valid frames, beyond what hypothesis runs."""
    rng = random.Random(1903)
    seeds = [encode_request(simple_request(stdin=b"#!/bin/sh\necho hi\n")),
             encode_request(simple_request(args=(b"\0\n", b""), env={b"A": b"=", b"B": b"\xff"})),
             encode_stdout(b"out\n") + encode_alive() + encode_stderr(b"err") + encode_exit(7)]
    for _ in range(20000):
        wire = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(wire) + 1)
            op = rng.random()
            if op < 0.4 and pos < len(wire):
                wire[pos] = rng.randrange(256)
            elif op < 0.6:
                wire[pos:pos] = rng.choice(TOKENS)
            elif op < 0.8:
                del wire[pos:pos + rng.randint(1, 8)]
            else:
                wire[pos:pos] = bytes([rng.randrange(256)])
        wire = bytes(wire)
        for decoder_cls in (RequestDecoder, ResponseDecoder):
            events, error = run(decoder_cls, [wire])
            assert error is None or error.fault == "peer"


# --- events --------------------------------------------------------------------------------------

def test_events_are_frozen_hashable_comparable_and_picklable():
    req = simple_request(stdin=b"secret script body")
    for event in (req, Output("stdout", b"x"), Alive(), Exit(3), Closed()):
        assert event == pickle.loads(pickle.dumps(event))
        assert hash(event) == hash(pickle.loads(pickle.dumps(event)))
        with pytest.raises(AttributeError):
            event.extra = 1
    with pytest.raises(AttributeError):
        req.args = ()
    with pytest.raises(AttributeError):
        del req.command
    assert Exit(0) != Exit(1) and Alive() != Closed()
    assert Output("stdout", b"") != Output("stderr", b"")
    assert Output("stdout", bytearray(b"x")) == Output("stdout", b"x")
    assert "secret" not in repr(req) and "<18 bytes>" in repr(req)
    assert repr(Exit(3)) == "Exit(code=3)" and repr(Alive()) == "Alive()"
    assert repr(Output("stderr", b"e")) == "Output(stream='stderr', data=b'e')"
    assert simple_request(args=[bytearray(b"x"), memoryview(b"y")]).args == (b"x", b"y")


def test_has_nul_flags_what_exec_cannot_pass():
    assert not simple_request().has_nul
    assert simple_request(args=(b"a\0b",)).has_nul
    assert simple_request(env={b"A": b"\0"}).has_nul


# --- cost ----------------------------------------------------------------------------------------

def test_import_pulls_in_nothing_heavy():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); "
            "import chaperon.wire.protocol; print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], check=True,
                         capture_output=True, text=True).stdout.split()
    assert set(out) <= {"chaperon", "chaperon.wire", "chaperon.wire.protocol", "binascii"}, out
