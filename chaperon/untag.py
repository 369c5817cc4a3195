"""Untagging: the comment tag `chaperon:sid=…,proj=…[,user=…]:END` never
leaves the chaperon (SPEC §9), while the output stays Slurm's own, byte for
byte. Where a comment is printed whole (scontrol, JSON, YAML, parsable
sacct, squeue %all) the tag becomes the user's own comment (percent-decoded),
or no comment when the user gave none. Fixed-width columns (squeue -o %k,
-O comment, sacct -o comment) are asked for unbounded, between sentinel
bytes or at a known column, and rendered again at the caller's width with
Slurm's own padding and truncation (`SqueueFormat`, `SacctColumns`,
`render_*`). `Filter` applies such a rewrite to output as it streams.

Pure functions of bytes, no Slurm call: the scope (chaperon/scope.py)
decides which jobs are shown, this module only how their comments read.
"""
from __future__ import annotations

import json
import re
from urllib.parse import unquote_to_bytes

TAG = re.compile(rb"chaperon:sid=[0-9A-Za-z]{1,64},proj=[0-9a-f]{1,64}"
                 rb"(?:,user=([A-Za-z0-9%._~\-]*))?:END")


def user_comment(match: re.Match) -> bytes | None:
    """The user's own comment in a tag (percent-decoded), None when none."""
    part = match.group(1)
    return unquote_to_bytes(part) if part else None


def decode_value(value: bytes) -> bytes | None:
    """A comment as Slurm printed it -> the comment to show (None: none)."""
    match = TAG.fullmatch(value)
    return user_comment(match) if match else value


def untag_scontrol(data: bytes) -> bytes:
    """scontrol show job: `Comment=TAG ` + line end ("\\n   ", or " " with
    -o). Without a user comment the whole entry goes, as Slurm prints none."""
    def replace(match: re.Match) -> bytes:
        comment = user_comment(match)
        if comment is None:
            return b""
        return b"Comment=" + comment + b" " + match.group(2)
    return re.sub(rb"Comment=" + TAG.pattern + rb" (\n   | )", replace, data)


def _json_c(value: bytes) -> bytes:
    """A string as json-c writes it (Slurm's JSON): '/' escaped, control
    characters as \\uXXXX or their short form, other bytes as they are."""
    out = bytearray(b'"')
    short = {0x08: b"\\b", 0x09: b"\\t", 0x0a: b"\\n", 0x0c: b"\\f", 0x0d: b"\\r",
             0x22: b'\\"', 0x5c: b"\\\\", 0x2f: b"\\/"}
    for byte in value:
        if byte in short:
            out += short[byte]
        elif byte < 0x20:
            out += b"\\u%04x" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


def untag_json(data: bytes, *, empty: bytes) -> bytes:
    """A JSON document: every string that is exactly a tag. `empty` is what
    the command prints for no comment (squeue: "", sacct: null)."""
    def replace(match: re.Match) -> bytes:
        comment = user_comment(match)
        return empty if comment is None else _json_c(comment)
    return re.sub(rb'"' + TAG.pattern + rb'"', replace, data)


_YAML_PLAIN = re.compile(rb"[A-Za-z0-9_(./][^\x00-\x1f\x7f:#]*")


def _yaml(value: bytes) -> bytes:
    """A string as libyaml writes it with an explicit !!str tag: plain when
    nothing in it needs quoting, else single-quoted, else double-quoted."""
    text = value
    if (_YAML_PLAIN.fullmatch(text) and not text.endswith(b" ")
            and b" #" not in text and b": " not in text):
        return text
    if not re.search(rb"[\x00-\x1f\x7f]", text):
        return b"'" + text.replace(b"'", b"''") + b"'"
    escaped = (text.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
               .replace(b"\t", b"\\t").replace(b"\r", b"\\r"))
    escaped = re.sub(rb"[\x00-\x1f\x7f]", lambda m: b"\\x%02X" % m.group(0)[0], escaped)
    return b'"' + escaped + b'"'


def untag_yaml(data: bytes) -> bytes:
    def replace(match: re.Match) -> bytes:
        comment = user_comment(match)
        return b"!!null null" if comment is None else b"!!str " + _yaml(comment)
    return re.sub(rb"!!str " + TAG.pattern + rb"(?=\n)", replace, data)


def untag_fields(data: bytes) -> bytes:
    """Whole fields between delimiters (sacct -p/-P, squeue %all): a tag is
    replaced by the user's comment, or by nothing; in a submit line the
    chaperon's ` --comment=TAG` becomes the user's ` --comment=…` or goes."""
    return untag_line(data)


_OPTION_TAG = re.compile(rb"( --comment=)?" + TAG.pattern)


def untag_line(data: bytes, encode=lambda value: value) -> bytes:
    """Every tag in `data` (a submit line, a field): ` --comment=TAG` (the
    chaperon's own option in SubmitLine) becomes ` --comment=<user's>`, or
    nothing without a user comment; a bare tag the user's comment or nothing.
    `encode` writes the user's comment as the surrounding text needs."""
    def replace(match: re.Match) -> bytes:
        comment = unquote_to_bytes(match.group(2)) if match.group(2) else None
        if comment is None:
            return b""
        return (match.group(1) or b"") + encode(comment)
    return _OPTION_TAG.sub(replace, data)


def untag_submit_line(value: bytes | None) -> bytes | None:
    """A SubmitLine column's value (fixed-width sacct) without the tag."""
    return None if value is None else untag_line(value)


# --------------------------------------------------------------------------- submit lines
_JSON_SUBMIT = re.compile(rb'("submit_line": )("(?:[^"\\]|\\.)*")')
_YAML_SUBMIT = re.compile(rb"^([ -]*)((?:!!str )?submit_line:)(.*)$")
_YAML_IDS = re.compile(rb"^[ -]*(?:!!str )?(?:job_id|het_job_id|array_job_id): (?:!!int )?(\d+)\s*$",
                       re.M)


def _job_in(job: dict, ids: set[str]) -> bool:
    """A sacct JSON job: its id, its array's or its het job's is in `ids`."""
    def number(value):
        if isinstance(value, dict):   # 24.11: {"set": true, "number": N}
            value = value.get("number")
        return str(value) if isinstance(value, int) and value else None
    found = {number(job.get("job_id")), number((job.get("array") or {}).get("job_id")),
             number((job.get("het") or {}).get("job_id"))}
    return bool(found & ids)


def scope_submit_json(data: bytes, ids: set[str] | None) -> bytes:
    """sacct --json (24.11+ has "submit_line"): each job's submit line is
    untagged; with `ids` (session/project scope) the submit line of a job
    not in `ids` becomes "" — decided per element of the "jobs" array, and
    any submit line outside an element it could read becomes "" too."""
    def untag_json_string(match: re.Match) -> bytes:
        return match.group(1) + untag_line(match.group(2),
                                           encode=lambda v: _json_c(v)[1:-1])
    if ids is None:
        return _JSON_SUBMIT.sub(untag_json_string, data)
    lines = data.split(b"\n")
    keep = [False] * len(lines)
    start = None
    for number, line in enumerate(lines):
        if line == b"    {":
            start = number
        elif line in (b"    }", b"    },") and start is not None:
            try:
                job = json.loads(b"\n".join(lines[start:number + 1]).rstrip(b","))
            except ValueError:
                job = None
            if isinstance(job, dict) and _job_in(job, ids):
                keep[start:number + 1] = [True] * (number + 1 - start)
            start = None
    out = []
    for number, line in enumerate(lines):
        if keep[number]:
            out.append(_JSON_SUBMIT.sub(untag_json_string, line))
        else:
            out.append(_JSON_SUBMIT.sub(lambda m: m.group(1) + b'""', line))
    return b"\n".join(out)


def scope_submit_yaml(data: bytes, ids: set[str] | None) -> bytes:
    """sacct --yaml: submit lines untagged; with `ids`, shown only when every
    job the document names (job_id, array_job_id, het_job_id) is in `ids`,
    else each becomes '' (with its continuation lines): the layout of a
    YAML job list is not read element by element, so this fails closed."""
    named = {i.decode() for i in _YAML_IDS.findall(data) if i.strip(b"0")}
    hide = ids is not None and not named <= ids
    lines = data.split(b"\n")
    out, number = [], 0
    while number < len(lines):
        line = lines[number]
        match = _YAML_SUBMIT.match(line)
        number += 1
        if not match:
            out.append(line)
            continue
        indent = len(match.group(1))
        value = [match.group(3)]
        while number < len(lines) and lines[number].strip() and \
                len(lines[number]) - len(lines[number].lstrip(b" ")) > indent:
            value.append(lines[number])
            number += 1
        if hide:
            out.append(match.group(1) + match.group(2) + b" ''")
        else:
            out.append(match.group(1) + match.group(2) + untag_line(value[0]))
            out.extend(untag_line(v) for v in value[1:])
    return b"\n".join(out)


# --------------------------------------------------------------------------- squeue formats
SENTINEL_START, SENTINEL_END = "\x01", "\x02"


def render_squeue(value: bytes | None, width: int, right: bool) -> bytes:
    """squeue's _print_str(str, width, right, cut_output=true), with glibc's
    printf of a NULL string ("(null)", or nothing under a precision < 6)."""
    if value is None:
        value = b"(null)" if (right or width == 0 or width >= 6) else b""
    if width == 0:
        return value
    if right:
        return value.rjust(width)[:width]
    return value[:width].ljust(width)


class SqueueFormat:
    """An -o (`%[.][size]type[suffix]`) or -O (`type[:[.][size]][suffix]`,
    comma-separated) format with every comment field rewritten to print in
    full, ended by a sentinel byte (and started by one where the format
    allows), and the widths to render those fields at again."""

    def __init__(self, fmt: str, long: bool):
        self.fields: list[tuple[int, bool]] = []
        self.all = False
        self.starts = True       # every comment field has a start sentinel
        self.text = self._long(fmt) if long else self._short(fmt)

    def _short(self, fmt: str) -> str:
        if fmt[:4].lower() == "%all":
            self.all = True
            return fmt
        prefix, _, rest = fmt.partition("%")
        if not _:
            return fmt
        tokens = [t for t in rest.split("%") if t]
        out = [prefix]
        for token in tokens:
            match = re.match(r"(\.?)(\d*)(.)(.*)", token, re.S)
            if match and match.group(3) == "k":
                out[-1] += SENTINEL_START
                self.fields.append((int(match.group(2) or 0), bool(match.group(1))))
                out.append("%k" + SENTINEL_END + match.group(4))
            else:
                out.append("%" + token)
        return "".join(out)

    def _long(self, fmt: str) -> str:
        tokens = fmt.split(",")
        out: list[str] = []
        for token in tokens:
            name, colon, spec = token.partition(":")
            if name.strip().lower() != "comment":
                out.append(token)
                continue
            match = re.match(r"(\.?)(\d*)(.*)", spec, re.S)
            right = bool(colon and match.group(1))
            width = int(match.group(2) or 0) if colon else 20
            suffix = match.group(3) if colon else ""
            if out:
                previous = out[-1]
                out[-1] = previous + (SENTINEL_START if ":" in previous else ":20" + SENTINEL_START)
            else:
                self.starts = False
            self.fields.append((width, right))
            out.append(f"{name}:0{SENTINEL_END}{suffix}")
        return ",".join(out)

    def line(self, line: bytes) -> bytes:
        """One line of squeue's answer with the comment fields rendered again."""
        if self.all:
            return untag_fields(line)
        if not self.fields:
            return line
        out = bytearray()
        rest = line
        for index, (width, right) in enumerate(self.fields):
            end = rest.find(b"\x02")
            if end < 0:
                break
            if self.starts or index > 0:
                start = rest.rfind(b"\x01", 0, end)
                if start < 0:
                    break
                out += rest[:start]
                value = rest[start + 1:end]
            else:
                value = rest[:end]
            value = None if value == b"(null)" else decode_value(value)
            out += render_squeue(value, width, right)
            rest = rest[end + 1:]
        out += rest
        return bytes(out)


# --------------------------------------------------------------------------- sacct columns
def render_sacct(value: bytes | None, length: int) -> bytes:
    """sacct's print_fields_str: truncated with '+', right-justified for a
    positive length, left for a negative one."""
    size = abs(length)
    if value is None:
        text = b" "
    else:
        text = value[:size]
        if len(value) > size and size:
            text = text[:-1] + b"+"
    return text.rjust(size)[:size] if length >= 0 else text[:size].ljust(size)


class SacctColumns:
    """sacct -o with every Comment field widened to WIDTH (left-justified), so
    the full comment sits at a column the dashed header line gives (the only
    columns that wide), and rendered again at the caller's length. `names`
    is sacct's field table in its own order (sacct --helpformat: a field
    name may be abbreviated, the first match wins), `default` the Comment
    field's own length."""

    WIDTH = 4096
    # The columns read whole and rendered again, with how a value is shown.
    REWRITTEN = {"Comment": decode_value, "SubmitLine": untag_submit_line}

    def __init__(self, spec: str, names: list[str], default):
        if isinstance(default, int):
            default = {"Comment": default}
        self.lengths: list[int] = []   # the caller's length of each rewritten field, in order
        self.fields: list[str] = []    # and its name
        items: list[str] = []
        for item in spec.split(","):
            if item.lower() == "all":
                items.extend(names)
            elif item:
                items.append(item)
        out = []
        for item in items:
            name, _, length = item.partition("%")
            key = name.lstrip(" \t\n\v\f\r").lower()
            resolved = next((n for n in names if n.lower().startswith(key)),
                            None) if key else None
            if resolved in self.REWRITTEN:
                given = int(length) if re.fullmatch(r"-?\d+", length or "") else 0
                self.lengths.append(given or default.get(resolved, 20))
                self.fields.append(resolved)
                out.append(f"{name}%-{self.WIDTH}")
            else:
                out.append(item)
        self.text = ",".join(out)

    def lines(self, data: bytes, *, header: bool) -> bytes:
        lines = data.split(b"\n")
        if not self.lengths or len(lines) < 2:
            return data
        spans, position, dashes = [], 0, lines[1]
        while position < len(dashes):
            end = position
            while end < len(dashes) and dashes[end:end + 1] == b"-":
                end += 1
            if end - position == self.WIDTH:
                spans.append((position, end))
            position = end + 1
        out = []
        for number, line in enumerate(lines):
            if not line:
                out.append(line)
                continue
            pieces, last = [], 0
            for (start, end), length, field in zip(spans, self.lengths, self.fields):
                size = abs(length)
                if number == 0:
                    name = field.encode()[:size]
                    new = name.rjust(size) if length >= 0 else name.ljust(size)
                elif number == 1:
                    new = b"-" * size
                else:
                    value = line[start:end].rstrip(b" ")
                    new = render_sacct(self.REWRITTEN[field](value) if value else None, length)
                pieces.append(line[last:start] + new)
                last = end
            out.append(b"".join(pieces) + line[last:])
        if not header:
            out = out[2:]
        return b"\n".join(out)


# --------------------------------------------------------------------------- output
class Filter:
    """An `out` for run_real that passes complete lines through `fix` (both
    streams), so output is rewritten as it streams (squeue -i never ends)."""

    def __init__(self, out, fix, fix_err=None):
        self.out, self.fix, self.fix_err = out, fix, fix_err or fix
        self.pending = {"stdout": b"", "stderr": b""}

    def _feed(self, stream: str, data: bytes, fix) -> None:
        buffered = self.pending[stream] + data
        cut = buffered.rfind(b"\n") + 1
        self.pending[stream] = buffered[cut:]
        if cut:
            getattr(self.out, stream)(fix(buffered[:cut]))

    def stdout(self, data: bytes) -> None:
        self._feed("stdout", data, self.fix)

    def stderr(self, data: bytes) -> None:
        self._feed("stderr", data, self.fix_err)

    def flush(self) -> None:
        for stream, fix in (("stdout", self.fix), ("stderr", self.fix_err)):
            if self.pending[stream]:
                getattr(self.out, stream)(fix(self.pending[stream]))
                self.pending[stream] = b""


def by_lines(fix_line):
    """A `fix` for Filter from a function of one line (without its newline)."""
    def fix(data: bytes) -> bytes:
        return b"\n".join(fix_line(line) for line in data.split(b"\n"))
    return fix
