"""CHAPERON/1, the wire protocol between the Slurm stubs and the chaperon (SPEC §9).

Strategy. This module does no I/O: bytes go in, events come out, and events
go in, bytes come out. The transport (FIFOs, flock, timeouts) lives elsewhere
and feeds whatever it reads to a decoder: ``decoder.feed(os.read(fd, n))``,
where ``b""`` means end of stream. ``decoder.next_event()`` then returns the
next event, ``None`` meaning "I need more data", or raises a typed
`ProtocolError`. A decoder cuts the stream into lines as it is fed and
handles each complete line at once through a table (state -> keyword ->
reader), so the events and the error it reports depend only on the bytes,
never on how they were chunked. It never holds more than one bounded partial
line plus the request being assembled: a line longer than the limit is
refused as soon as the limit is passed, whatever the peer sends after.

Wire format. Every user datum is base64 (strict and canonical: one encoding
per byte string) on one line, so no byte of user data can form a token.

    request                      response (streamed)
    CHAPERON/1 <command>         STDOUT <b64>   any number, in order,
    ARG <b64>      per argument  STDERR <b64>   interleaved with
    CWD <b64>      exactly once  ALIVE          heartbeats
    ENV <b64 of NAME=VALUE>      EXIT <n>       0..255, exactly once
    STDIN <b64>    chunks        END
    RESP <path>    exactly once
    END

Lines end with "\\n". After the header, request fields may come in any order
(the encoder writes the order above). Lines with an unknown keyword are
ignored inside a frame (room for later versions) but count against the
limits; keywords are case-sensitive. Requests may follow one another on one
stream (a shared request FIFO does not show EOF between writers): after END
the next line must be a new header, anything else is "data after END". A
response ends at END: any byte after it is an error. No STDIN line means the
caller's stdin was a terminal (``stdin=None``); ``STDIN `` with an empty
payload means an empty stdin.

Types. Arguments, environment entries, the working directory and stdin are
bytes: on Linux they are arbitrary bytes (a file name need not be UTF-8), and
bytes round-trip exactly, newline, NUL and invalid UTF-8 included. The
constructors accept str as well and convert it like os.fsencode (UTF-8 with
surrogateescape here); ``Request.args_str`` and friends convert back like
os.fsdecode, so str -> bytes -> str is exact too. NUL cannot reach exec: a
handler refuses a request whose `Request.has_nul` is true. The RESP path is
not user data but the transport's own path, sent as plain text and given as
str (os.fsdecode of the bytes, so still exact); it must be absolute without
NUL or newline, and the transport checks that it is the FIFO it expects in
the session directory (O_NOFOLLOW, fstat).

Limits (checked by the decoders against the peer and by the constructors and
encoders against local mistakes, at the limit accepted, one byte over refused):
each ARG, ENV entry, CWD and output line decodes to at most MAX_DATUM (4 MiB);
all STDIN chunks of a request together at most MAX_DATUM; a request frame,
header to END inclusive, at most MAX_REQUEST (16 MiB) on the wire; any line at
most MAX_LINE bytes; at most MAX_ARGS arguments, MAX_ENV variables and
MAX_LINES lines (unknown ones included) per request, which bounds the memory
and the CPU a peer can cost; a command name at most MAX_COMMAND bytes; the
RESP path at most MAX_RESP_PATH bytes. A response has no total limit: it is a
stream whose events the caller consumes.

Errors. `ProtocolError` (base), `FrameTooLarge` and `MalformedFrame` carry
``fault`` ("peer": the other side sent it; "local": this side asked for
something the protocol cannot say), a stable ``reason`` code, and a one-line
message fit for the audit log that never quotes payload bytes. After an error
a decoder is dead: it discards what it is fed and raises the same error again.

Cost. Stubs import this on every Slurm call inside the jail, so it imports
only ``sys`` and ``binascii`` (both built in): no os, re, dataclasses, typing,
collections or __future__: about 0.9 ms with a cached .pyc, less than
``import os`` (1.2 ms) on the development machine.

Size. Over 500 lines and kept whole on purpose: one cohesive thing (the
encoders, both decoders and their shared reader table), and one file is one
import on the stub's hot path.
"""
import sys                         # no `from __future__ import annotations`: it costs an import
from binascii import Error as _B64Error
from binascii import a2b_base64, b2a_base64

__all__ = [
    "PROTOCOL", "MAX_DATUM", "MAX_REQUEST", "MAX_LINE", "MAX_ARGS", "MAX_ENV", "MAX_LINES",
    "MAX_COMMAND", "MAX_RESP_PATH", "CHUNK",
    "ProtocolError", "FrameTooLarge", "MalformedFrame",
    "Request", "Output", "Alive", "Exit", "Closed",
    "encode_request", "encode_stdout", "encode_stderr", "encode_alive", "encode_exit",
    "encode_event", "RequestDecoder", "ResponseDecoder",
]

PROTOCOL = "CHAPERON/1"

MAX_DATUM = 4 * 1024 * 1024        # one ARG / ENV entry / CWD / output line; all STDIN together
MAX_REQUEST = 16 * 1024 * 1024     # a whole request frame on the wire
MAX_ARGS = 65536                   # more than any real command line (Linux ARG_MAX is 2 MiB)
MAX_ENV = 65536
MAX_LINES = 262144                 # per request, unknown lines included (a request the
                                   # constructor accepts always fits: 2 * 65536 + 86 + 4)
MAX_COMMAND = 64
MAX_RESP_PATH = 4096               # PATH_MAX
CHUNK = 48 * 1024                  # bytes of data per STDIN/STDOUT/STDERR line the encoders write


def _b64_len(n: int) -> int:
    return (n + 2) // 3 * 4


MAX_LINE = len("STDOUT ") + _b64_len(MAX_DATUM)   # longest line, without its "\n"
_MAX_HEADER = 256                  # longest line accepted where a header is expected
_MAX_KEYWORD = len(PROTOCOL)

_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()
_COMMAND_CHARS = b"abcdefghijklmnopqrstuvwxyz0123456789_"
_VERSION = PROTOCOL.encode()
_HEADER = _VERSION + b" "
_MiB = 1024 * 1024


# --- errors -----------------------------------------------------------------

class ProtocolError(Exception):
    """A frame that CHAPERON/1 cannot carry or did not expect.

    ``fault`` is "peer" when the other side sent it (a decoder) and "local"
    when this side asked for something invalid (a constructor or encoder);
    ``reason`` is a stable code for logs; ``line`` the 1-based line number in
    the decoded stream, or None. ``str(error)`` is one line, without payload.
    """

    default_reason = "protocol-error"

    def __init__(self, message: str, *, reason: str = "", fault: str = "peer",
                 line: "int | None" = None):
        super().__init__(message)
        self.reason = reason or self.default_reason
        self.fault = fault
        self.line = line


class FrameTooLarge(ProtocolError):
    """A line, datum, count or frame over its limit."""
    default_reason = "too-large"


class MalformedFrame(ProtocolError):
    """Not CHAPERON/1: bad syntax or base64, a field missing, repeated or out of place."""
    default_reason = "malformed"


def _limit(size: int, limit: int) -> str:
    unit = f" ({limit // _MiB} MiB)" if limit >= _MiB and limit % _MiB == 0 else ""
    return f"{size} bytes, over the limit of {limit}{unit}"


def _show(raw) -> str:
    """A short, escaped, single-line rendering of a token (never of a payload)."""
    text = repr(bytes(raw[:32]))[2:-1]
    return text + ("..." if len(raw) > 32 else "")


def _local(cls, reason: str, message: str) -> ProtocolError:
    return cls(message, reason=reason, fault="local")


# --- events -------------------------------------------------------------------

class _Event:
    """Frozen, slotted, compared by type and fields."""
    __slots__ = ()
    _fields: tuple = ()

    def _values(self) -> tuple:
        return tuple([getattr(self, name) for name in self._fields])

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self):
        return hash((type(self).__name__,) + self._values())

    def __repr__(self):
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({inner})"

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __reduce__(self):
        return (_restore, (type(self), self._values()))


def _restore(cls, values):
    event = object.__new__(cls)
    for name, value in zip(cls._fields, values):
        object.__setattr__(event, name, value)
    return event


def _fsencode(value, what: str) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode(_FS_ENCODING, _FS_ERRORS)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")


def _fsdecode(value: bytes) -> str:
    return value.decode(_FS_ENCODING, _FS_ERRORS)


def _command_ok(name: bytes) -> bool:
    """``^[a-z][a-z0-9_]*$`` without importing re."""
    return (0 < len(name) <= MAX_COMMAND and 97 <= name[0] <= 122
            and not name.translate(None, _COMMAND_CHARS))


class Request(_Event):
    """One call of a Slurm command from inside the sandbox.

    command   str, ``^[a-z][a-z0-9_]*$``, at most MAX_COMMAND bytes
    args      tuple of bytes (argv[1:])
    cwd       bytes, absolute, no NUL
    env       tuple of (name, value) bytes pairs; names non-empty, without
              "=", unique; order kept
    stdin     bytes, or None when stdin was a terminal (nothing sent)
    resp_path str, absolute, no NUL or newline: the response FIFO

    str is accepted wherever bytes are (converted like os.fsencode); env may
    be a mapping such as os.environb. Invalid values raise MalformedFrame or
    FrameTooLarge with fault "local", wrong types TypeError.
    """
    __slots__ = ("command", "args", "cwd", "env", "stdin", "resp_path")
    _fields = __slots__

    def __init__(self, command: str, args=(), *, cwd, env=(), stdin=None, resp_path):
        if not isinstance(command, str):
            raise TypeError(f"command must be str, not {type(command).__name__}")
        if not (command.isascii() and _command_ok(command.encode())):
            raise _local(MalformedFrame, "bad-command",
                         f"cannot build request: command {command[:32]!r} does not match "
                         f"^[a-z][a-z0-9_]*$ (at most {MAX_COMMAND} bytes)")
        if isinstance(args, (str, bytes)):
            raise TypeError("args must be a sequence of str or bytes, not a single string")
        args = tuple([_fsencode(a, "an argument") for a in args])
        if len(args) > MAX_ARGS:
            raise _local(FrameTooLarge, "too-many-args",
                         f"cannot build request: {len(args)} arguments, "
                         f"over the limit of {MAX_ARGS}")
        for i, a in enumerate(args, 1):
            if len(a) > MAX_DATUM:
                raise _local(FrameTooLarge, "datum-too-large",
                             f"cannot build request: argument {i} is {_limit(len(a), MAX_DATUM)}")
        cwd = _fsencode(cwd, "cwd")
        problem = _path_problem(cwd, MAX_DATUM)
        if problem:
            raise _local(problem[0], _path_reason(problem, "bad-cwd"),
                         f"cannot build request: cwd {problem[1]}")
        if hasattr(env, "items"):
            env = env.items()
        pairs = []
        names = set()
        for item in env:
            name, value = item
            name = _fsencode(name, "an environment name")
            value = _fsencode(value, "an environment value")
            problem = _env_problem(name, value, names)
            if problem:
                raise _local(problem[0], problem[1],
                             f"cannot build request: environment {problem[2]}")
            names.add(name)
            pairs.append((name, value))
        if len(pairs) > MAX_ENV:
            raise _local(FrameTooLarge, "too-many-env",
                         f"cannot build request: {len(pairs)} environment variables, "
                         f"over the limit of {MAX_ENV}")
        if stdin is not None:
            if isinstance(stdin, str):
                raise TypeError("stdin must be bytes or None, not str")
            stdin = _fsencode(stdin, "stdin")
            if len(stdin) > MAX_DATUM:
                raise _local(FrameTooLarge, "stdin-too-large",
                             f"cannot build request: stdin is {_limit(len(stdin), MAX_DATUM)}")
        resp = _fsencode(resp_path, "resp_path")
        problem = _path_problem(resp, MAX_RESP_PATH)
        if problem:
            raise _local(problem[0], _path_reason(problem, "bad-resp"),
                         f"cannot build request: resp_path {problem[1]}")
        if b"\n" in resp:
            raise _local(MalformedFrame, "bad-resp",
                         "cannot build request: resp_path contains a newline")
        if type(resp_path) is not str:
            resp_path = _fsdecode(resp)
        setattr_ = object.__setattr__
        setattr_(self, "command", command)
        setattr_(self, "args", args)
        setattr_(self, "cwd", cwd)
        setattr_(self, "env", tuple(pairs))
        setattr_(self, "stdin", stdin)
        setattr_(self, "resp_path", resp_path)

    def __repr__(self):
        stdin = "None" if self.stdin is None else f"<{len(self.stdin)} bytes>"
        return (f"Request(command={self.command!r}, args={self.args!r}, cwd={self.cwd!r}, "
                f"env=<{len(self.env)} variables>, stdin={stdin}, resp_path={self.resp_path!r})")

    @property
    def args_str(self) -> list[str]:
        """The arguments as str, like os.fsdecode (undecodable bytes become surrogates)."""
        return [_fsdecode(a) for a in self.args]

    @property
    def cwd_str(self) -> str:
        return _fsdecode(self.cwd)

    @property
    def env_str(self) -> dict[str, str]:
        return {_fsdecode(name): _fsdecode(value) for name, value in self.env}

    @property
    def has_nul(self) -> bool:
        """True when an argument or environment entry holds a NUL, which exec cannot pass."""
        return any(b"\0" in a for a in self.args) or any(
            b"\0" in name or b"\0" in value for name, value in self.env)


def _path_problem(path: bytes, limit: int):
    """None, or (error class, what is wrong) for a path field."""
    if len(path) > limit:
        return FrameTooLarge, f"is {_limit(len(path), limit)}"
    if not path.startswith(b"/"):
        return MalformedFrame, "is not an absolute path"
    if b"\0" in path:
        return MalformedFrame, "contains a NUL byte"
    return None


def _path_reason(problem, malformed: str) -> str:
    return "datum-too-large" if problem[0] is FrameTooLarge else malformed


def _env_problem(name: bytes, value: bytes, seen):
    size = len(name) + 1 + len(value)
    if size > MAX_DATUM:
        return FrameTooLarge, "datum-too-large", f"entry is {_limit(size, MAX_DATUM)}"
    if not name:
        return MalformedFrame, "bad-env", "entry has an empty name"
    if b"=" in name:
        return MalformedFrame, "bad-env", "name contains '='"
    if name in seen:
        return MalformedFrame, "duplicate-env", f"variable {_show(name)} appears twice"
    return None


class Output(_Event):
    """A chunk of the command's output: stream is "stdout" or "stderr"."""
    __slots__ = ("stream", "data")
    _fields = __slots__

    def __init__(self, stream: str, data: bytes):
        if stream != "stdout" and stream != "stderr":
            raise _local(MalformedFrame, "bad-stream",
                         f"cannot build output: stream must be 'stdout' or 'stderr', "
                         f"not {stream!r}")
        if type(data) is not bytes:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"output data must be bytes, not {type(data).__name__}")
            data = bytes(data)
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "data", data)


class Alive(_Event):
    """A heartbeat: the chaperon is still working on the request."""
    __slots__ = ()


class Exit(_Event):
    """The command's exit status (0..255); decoded only once END has arrived."""
    __slots__ = ("code",)
    _fields = __slots__

    def __init__(self, code: int):
        if type(code) is not int:
            raise TypeError(f"exit code must be int, not {type(code).__name__}")
        if not 0 <= code <= 255:
            raise _local(MalformedFrame, "bad-exit",
                         f"cannot build exit: code {code} is not in 0..255")
        object.__setattr__(self, "code", code)


class Closed(_Event):
    """The peer closed the stream at a clean boundary (after END)."""
    __slots__ = ()


_ALIVE = Alive()
_CLOSED = Closed()


# --- encoders -------------------------------------------------------------------

def encode_request(req: Request) -> bytes:
    """The wire bytes of a request. Raises FrameTooLarge (fault "local") over MAX_REQUEST."""
    if not isinstance(req, Request):
        raise TypeError(f"encode_request takes a Request, not {type(req).__name__}")
    parts = [_HEADER, req.command.encode(), b"\n"]
    add = parts.append
    for a in req.args:
        add(b"ARG ")
        add(b2a_base64(a))
    add(b"CWD ")
    add(b2a_base64(req.cwd))
    for name, value in req.env:
        add(b"ENV ")
        add(b2a_base64(name + b"=" + value))
    if req.stdin is not None:
        _chunks(parts, b"STDIN ", req.stdin, empty_line=True)
    add(b"RESP ")
    add(req.resp_path.encode(_FS_ENCODING, _FS_ERRORS))
    add(b"\nEND\n")
    wire = b"".join(parts)
    if len(wire) > MAX_REQUEST:
        raise _local(FrameTooLarge, "request-too-large",
                     f"cannot send request: it encodes to {_limit(len(wire), MAX_REQUEST)}")
    return wire


def _chunks(parts: list, keyword: bytes, data: bytes, empty_line: bool = False) -> None:
    if not data:
        if empty_line:
            parts.append(keyword + b"\n")
        return
    view = memoryview(data)
    for i in range(0, len(data), CHUNK):
        parts.append(keyword)
        parts.append(b2a_base64(view[i:i + CHUNK]))


def encode_stdout(data: bytes) -> bytes:
    """STDOUT lines carrying data (CHUNK bytes per line; nothing for empty data)."""
    parts: list = []
    _chunks(parts, b"STDOUT ", data)
    return b"".join(parts)


def encode_stderr(data: bytes) -> bytes:
    """STDERR lines carrying data (CHUNK bytes per line; nothing for empty data)."""
    parts: list = []
    _chunks(parts, b"STDERR ", data)
    return b"".join(parts)


def encode_alive() -> bytes:
    return b"ALIVE\n"


def encode_exit(code: int) -> bytes:
    """The end of a response: ``EXIT <code>`` and ``END``."""
    return b"EXIT %d\nEND\n" % Exit(code).code


def encode_event(event) -> bytes:
    """The wire bytes of any event a peer sends (Request, Output, Alive, Exit)."""
    encoder = _ENCODERS.get(type(event))
    if encoder is None:
        raise TypeError(f"cannot encode {type(event).__name__}")
    return encoder(event)


_ENCODERS = {
    Request: encode_request,
    Output: lambda ev: (encode_stdout if ev.stream == "stdout" else encode_stderr)(ev.data),
    Alive: lambda ev: encode_alive(),
    Exit: lambda ev: encode_exit(ev.code),
}


# --- decoders -------------------------------------------------------------------

class _LineDecoder:
    """Cuts fed bytes into lines, each handled at once by ``_line``.

    Subclasses give ``_room()`` (how many more bytes the current line may
    take; negative: none at all), ``_overflow()`` (the error when a line
    would exceed it), ``_line(line)``, and ``_boundary()`` (EOF here is clean).
    """
    __slots__ = ("_partial", "_queue", "_head", "_error", "_eof", "_lineno")
    _frame = "frame"
    _peer = "peer"

    def __init__(self):
        self._partial = bytearray()
        self._queue: list = []
        self._head = 0
        self._error: ProtocolError | None = None
        self._eof = False
        self._lineno = 0

    def feed(self, data: bytes) -> None:
        """Take bytes read from the peer; b"" means the peer closed the stream."""
        if self._eof:
            if data:
                raise _local(ProtocolError, "feed-after-eof",
                             f"{self._frame} data fed after end of stream")
            return
        if not data:
            self._eof = True
            return
        if self._error is not None:
            return                                  # refused already: discard, memory stays bounded
        if not isinstance(data, (bytes, bytearray)):
            data = memoryview(data).tobytes()
        pos, end, find = 0, len(data), data.find
        while pos < end:
            partial = self._partial
            room = self._room()
            nl = find(b"\n", pos, pos + room + 1) if room >= 0 else -1
            if nl < 0:
                if end - pos > room:
                    self._fail(self._overflow())
                    return
                partial += memoryview(data)[pos:]
                return
            if partial:
                partial += memoryview(data)[pos:nl]
                line = partial
                self._partial = bytearray()
            else:
                line = data[pos:nl]
            pos = nl + 1
            self._lineno += 1
            try:
                self._line(line)
            except ProtocolError as error:
                self._fail(error)
                return

    def next_event(self):
        """The next event; None when more data is needed; Closed after a clean EOF.

        Raises the decoder's ProtocolError once the events before it are taken.
        """
        queue = self._queue
        if self._head < len(queue):
            event = queue[self._head]
            queue[self._head] = None
            self._head += 1
            if self._head == len(queue):
                queue.clear()
                self._head = 0
            return event
        if self._error is not None:
            raise self._error
        if self._eof:
            if self._partial or not self._boundary():
                self._fail(MalformedFrame(self._message("stream ended before END"),
                                          reason="truncated", line=self._lineno))
                raise self._error
            return _CLOSED
        return None

    def _fail(self, error: ProtocolError) -> None:
        self._error = error
        self._partial = bytearray()
        self._reset()

    def _reset(self) -> None:
        pass

    def _message(self, detail: str, kind: str = "malformed", line: "int | None" = None) -> str:
        where = f" (line {line})" if line else ""
        return f"{kind} {self._frame} from the {self._peer}{where}: {detail}"

    def _malformed(self, reason: str, detail: str) -> MalformedFrame:
        return MalformedFrame(self._message(detail, line=self._lineno), reason=reason,
                              line=self._lineno)

    def _too_large(self, reason: str, detail: str, line: "int | None" = None) -> FrameTooLarge:
        line = self._lineno if line is None else line
        return FrameTooLarge(self._message(detail, "oversized", line), reason=reason, line=line)

    def _payload(self, keyword: bytes, line, start: int) -> bytes:
        """The strict, canonical base64 payload of a line, decoded (at most MAX_DATUM)."""
        what = keyword.decode()
        if start < 0:
            raise self._malformed("missing-payload", f"{what} has no payload")
        try:
            data = _strict_a2b(memoryview(line)[start:])
        except _B64Error:
            raise self._malformed("bad-base64", f"{what} payload is not valid base64") from None
        # strict_mode still takes "QR==" (stray low bits) and "QUJD=" (padding after a full
        # quantum): canonical means the exact length and a last quantum that re-encodes the same
        tail = len(data) % 3
        if len(line) - start != _b64_len(len(data)) or (
                tail and b2a_base64(data[-tail:], newline=False) != line[-4:]):
            raise self._malformed("bad-base64", f"{what} payload is not canonical base64")
        if len(data) > MAX_DATUM:
            raise self._too_large("datum-too-large",
                                  f"{what} payload decodes to {_limit(len(data), MAX_DATUM)}")
        return data


_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _strict_a2b(text) -> bytes:
    """Base64 decoded as a2b_base64(strict_mode=True) does (Python 3.11+). On
    an older Python: strict mode's rejections first (3.13's, the strictest)
    — a character outside the alphabet, padding that does not exactly
    complete the last quantum — then the lenient decoder, which takes what
    is left as the strict one would. 3.11 and 3.12 also take padding after a
    whole quantum, which the canonical check below refuses on every Python
    (tests/unit/chaperon/test_strict_base64.py)."""
    if _STRICT_MODE:
        return a2b_base64(text, strict_mode=True)
    text = bytes(text)
    body = text.rstrip(b"=")
    padding, rest = len(text) - len(body), len(body) % 4
    if body.translate(None, _B64_ALPHABET) or (padding and rest + padding != 4):
        raise _B64Error("not strict base64")
    return a2b_base64(text)


_STRICT_MODE = sys.version_info >= (3, 11)


def _split(line):
    """(keyword, payload start) of a line; start -1 when there is no space."""
    space = line.find(b" ", 0, _MAX_KEYWORD + 1)
    if space < 0:
        return (bytes(line) if len(line) <= _MAX_KEYWORD else None), -1
    return bytes(line[:space]), space + 1


_IDLE, _IN_FRAME = "idle", "in-frame"
_STREAMING, _EXITED, _DONE = "streaming", "exited", "done"


class RequestDecoder(_LineDecoder):
    """Decodes requests (used by the chaperon): Request events, then Closed at
    EOF. The writer is whatever process in the sandbox opened the FIFO, the
    stub or not, hence "from the sandbox" in the messages."""
    __slots__ = ("_state", "_started", "_frame_bytes", "_frame_lines", "_command", "_args",
                 "_cwd", "_env", "_names", "_stdin", "_resp")
    _frame = "request"
    _peer = "sandbox"

    def __init__(self):
        super().__init__()
        self._started = False
        self._reset()

    def _reset(self) -> None:
        self._state = _IDLE
        self._frame_bytes = 0
        self._frame_lines = 0
        self._command = None
        self._args: list = []
        self._cwd = None
        self._env: list = []
        self._names: set = set()
        self._stdin = None
        self._resp = None

    def _room(self) -> int:
        used = len(self._partial)
        if self._state is _IDLE:
            return _MAX_HEADER - used
        return min(MAX_LINE - used, MAX_REQUEST - self._frame_bytes - 1 - used)

    def _overflow(self) -> ProtocolError:
        line = self._lineno + 1
        if self._state is _IDLE:
            self._lineno = line
            return self._not_header(f" (a line of more than {_MAX_HEADER} bytes)")
        if MAX_REQUEST - self._frame_bytes - 1 < MAX_LINE:
            return self._too_large("request-too-large",
                                   f"request exceeds the limit of {MAX_REQUEST} bytes (16 MiB)",
                                   line)
        return self._too_large("line-too-long", f"line exceeds the limit of {MAX_LINE} bytes", line)

    def _not_header(self, what: str = "") -> MalformedFrame:
        if self._started:
            return self._malformed("data-after-end",
                                   f"data after END that is not a new {PROTOCOL} header{what}")
        return self._malformed("missing-header", f"the first line is not a {PROTOCOL} header{what}")

    def _boundary(self) -> bool:
        return self._state is _IDLE

    def _line(self, line) -> None:
        self._frame_bytes += len(line) + 1
        self._frame_lines += 1
        if self._state is _IDLE:
            return self._header(line)
        if self._frame_lines > MAX_LINES:
            raise self._too_large("too-many-lines", f"request has more than {MAX_LINES} lines")
        keyword, start = _split(line)
        reader = _REQUEST_READERS.get(keyword)
        if reader is not None:
            reader(self, keyword, line, start)
        elif line.startswith(b"CHAPERON/"):
            raise self._malformed("duplicate-header", "a second header inside a request")

    def _header(self, line) -> None:
        if not line.startswith(b"CHAPERON/"):
            raise self._not_header()
        version, _, name = bytes(line).partition(b" ")
        if version != _VERSION:
            raise self._malformed("bad-version",
                                  f"unsupported protocol {_show(version)!r}, "
                                  f"this side speaks {PROTOCOL}")
        if not _command_ok(name):
            raise self._malformed("bad-command", f"command {_show(name)!r} does not match "
                                                 f"^[a-z][a-z0-9_]*$ (at most {MAX_COMMAND} bytes)")
        self._started = True
        self._state = _IN_FRAME
        self._command = name.decode()

    def _arg(self, keyword, line, start) -> None:
        if len(self._args) >= MAX_ARGS:
            raise self._too_large("too-many-args", f"request has more than {MAX_ARGS} arguments")
        self._args.append(self._payload(keyword, line, start))

    def _cwd_line(self, keyword, line, start) -> None:
        if self._cwd is not None:
            raise self._malformed("duplicate-cwd", "a second CWD")
        cwd = self._payload(keyword, line, start)
        problem = _path_problem(cwd, MAX_DATUM)
        if problem:
            raise self._malformed("bad-cwd", f"CWD {problem[1]}")
        self._cwd = cwd

    def _env_line(self, keyword, line, start) -> None:
        if len(self._env) >= MAX_ENV:
            raise self._too_large("too-many-env",
                                  f"request has more than {MAX_ENV} environment variables")
        entry = self._payload(keyword, line, start)
        name, equals, value = entry.partition(b"=")
        if not equals:
            raise self._malformed("bad-env", "ENV entry has no '='")
        problem = _env_problem(name, value, self._names)
        if problem:                     # (never too large: _payload checked the size)
            raise self._malformed(problem[1], f"ENV {problem[2]}")
        self._names.add(name)
        self._env.append((name, value))

    def _stdin_line(self, keyword, line, start) -> None:
        chunk = self._payload(keyword, line, start)
        if self._stdin is None:
            self._stdin = bytearray()
        size = len(self._stdin) + len(chunk)
        if size > MAX_DATUM:
            raise self._too_large("stdin-too-large", f"STDIN totals {_limit(size, MAX_DATUM)}")
        self._stdin += chunk

    def _resp_line(self, keyword, line, start) -> None:
        if self._resp is not None:
            raise self._malformed("duplicate-resp", "a second RESP")
        if start < 0:
            raise self._malformed("missing-payload", "RESP has no path")
        path = bytes(line[start:])
        problem = _path_problem(path, MAX_RESP_PATH)
        if problem:
            if problem[0] is FrameTooLarge:
                raise self._too_large("datum-too-large", f"RESP path {problem[1]}")
            raise self._malformed("bad-resp", f"RESP path {problem[1]}")
        self._resp = _fsdecode(path)

    def _end(self, keyword, line, start) -> None:
        if start >= 0:
            raise self._malformed("unexpected-payload", "END takes no payload")
        if self._cwd is None:
            raise self._malformed("missing-cwd", "request has no CWD")
        if self._resp is None:
            raise self._malformed("missing-resp", "request has no RESP")
        stdin = None if self._stdin is None else bytes(self._stdin)
        request = Request(self._command, self._args, cwd=self._cwd, env=self._env,
                          stdin=stdin, resp_path=self._resp)
        self._queue.append(request)
        self._reset()


_REQUEST_READERS = {
    b"ARG": RequestDecoder._arg,
    b"CWD": RequestDecoder._cwd_line,
    b"ENV": RequestDecoder._env_line,
    b"STDIN": RequestDecoder._stdin_line,
    b"RESP": RequestDecoder._resp_line,
    b"END": RequestDecoder._end,
}


class ResponseDecoder(_LineDecoder):
    """Decodes the chaperon's response (used by the stub): Output and Alive
    events in order, then Exit once ``EXIT n`` and ``END`` have arrived, then
    Closed at EOF. ``done`` is true once Exit has been decoded."""
    __slots__ = ("_state", "_code")
    _frame = "response"
    _peer = "chaperon"

    def __init__(self):
        super().__init__()
        self._state = _STREAMING
        self._code = None

    @property
    def done(self) -> bool:
        return self._state is _DONE

    def _room(self) -> int:
        if self._state is _DONE:
            return -1
        return MAX_LINE - len(self._partial)

    def _overflow(self) -> ProtocolError:
        if self._state is _DONE:
            return self._malformed("data-after-end", "data after END")
        return self._too_large("line-too-long", f"line exceeds the limit of {MAX_LINE} bytes",
                               self._lineno + 1)

    def _boundary(self) -> bool:
        return self._state is _DONE

    def _line(self, line) -> None:
        keyword, start = _split(line)
        reader = _RESPONSE_READERS[self._state].get(keyword)
        if reader is not None:
            reader(self, keyword, line, start)
        elif keyword in _RESPONSE_KEYWORDS:
            after = "EXIT" if self._state is _EXITED else "END"
            raise self._malformed("out-of-order", f"{keyword.decode()} after {after}")

    def _output(self, keyword, line, start) -> None:
        data = self._payload(keyword, line, start)
        self._queue.append(Output("stdout" if keyword == b"STDOUT" else "stderr", data))

    def _alive(self, keyword, line, start) -> None:
        if start >= 0:
            raise self._malformed("unexpected-payload", "ALIVE takes no payload")
        self._queue.append(_ALIVE)

    def _exit(self, keyword, line, start) -> None:
        digits = bytes(line[start:]) if start >= 0 else b""
        if not (0 < len(digits) <= 3 and digits.isdigit() and (digits == b"0" or digits[0] != 48)
                and int(digits) <= 255):
            raise self._malformed("bad-exit", "EXIT status is not an integer in 0..255")
        self._code = int(digits)
        self._state = _EXITED

    def _end(self, keyword, line, start) -> None:
        if start >= 0:
            raise self._malformed("unexpected-payload", "END takes no payload")
        if self._state is _STREAMING:
            raise self._malformed("missing-exit", "END before EXIT")
        self._queue.append(Exit(self._code))
        self._state = _DONE


_RESPONSE_READERS = {
    _STREAMING: {b"STDOUT": ResponseDecoder._output, b"STDERR": ResponseDecoder._output,
                 b"ALIVE": ResponseDecoder._alive, b"EXIT": ResponseDecoder._exit,
                 b"END": ResponseDecoder._end},
    _EXITED: {b"END": ResponseDecoder._end},
    _DONE: {},
}
_RESPONSE_KEYWORDS = frozenset(_RESPONSE_READERS[_STREAMING])
