"""Scope: which jobs exist for a sandbox, and how the real Slurm commands are
made to show and touch only those while their output stays Slurm's own
(SPEC §9 "scope").

Every scoped handler uses the same four tools:

1. The in-scope set. SLURM_SCOPE=session or project: the ledger names the
   jobs (chaperon/ledger.py); an array task or a het component that Slurm
   gave an id of its own is in scope when its array (het) job is, which one
   `squeue` call tells. SLURM_SCOPE=user or none: every job of the user.
2. Listings run the real command restricted to the in-scope jobs
   (`--jobs=…` together with `--me`) with the caller's own format options,
   so every byte of the answer is Slurm's. The ledger keeps every job ever
   submitted from the project, so ids Slurm has forgotten are pruned once
   the list grows long (one `squeue --me` tells which ids still exist).
3. Ids the caller names: an out-of-scope id is replaced, before the real
   command runs, by a placeholder no job can have (counting down from
   0x3FFFFFF, above any MaxJobId a site may set for its own ids), and the
   placeholder is turned back into the caller's id in the answer. So a job
   out of scope behaves exactly like a job that does not exist: Slurm's own
   wording, Slurm's own exit code, for every command and every message.
4. Untagging. The comment tag `chaperon:sid=…,proj=…[,user=…]:END` never
   leaves the chaperon. Where a comment is printed whole (scontrol, JSON,
   YAML, parsable sacct, squeue %all) the tag becomes the user's own comment
   (percent-decoded), or no comment when the user gave none. Fixed-width
   columns (squeue -o %k, -O comment, sacct -o comment) are asked for
   unbounded, between sentinel bytes or at a known column, and rendered
   again at the caller's width with Slurm's own padding and truncation.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes

from .environment import command_env

if TYPE_CHECKING:
    from .options import Parsed

# --------------------------------------------------------------------------- job ids
# jobid, jobid_task, jobid_[range], jobid+offset, and any of them .step
JOB_REF = re.compile(r"(\d{1,10})((?:_(?:\d+|\[[0-9,\-:%]*\]|\*)|\+\d+)?"
                     r"(?:\.(?:\d+|batch|extern|interactive)(?:\+\d+)?)?)", re.ASCII)
PLACEHOLDER_TOP = 0x3FFFFFF          # 67108863: the largest local job id Slurm allows
PRUNE_ABOVE = 256                    # ledger ids before forgotten ones are pruned
PRUNE_EVERY = 10.0                   # seconds between prunes: each costs a squeue call


def ref_base(text: str) -> str | None:
    """The job id a job reference names ("123_4.0" -> "123"), or None."""
    match = JOB_REF.fullmatch(text)
    return match.group(1) if match else None


class Placeholders:
    """Out-of-scope ids replaced by ids no job has, and turned back in the
    answer (see the module docstring, point 3)."""

    def __init__(self):
        self.next = PLACEHOLDER_TOP
        self.back: dict[bytes, bytes] = {}
        self._pattern = None

    def replace(self, ref: str) -> str:
        base = ref_base(ref) or ""
        placeholder = str(self.next)
        self.next -= 1
        self.back[placeholder.encode()] = base.encode()
        self._pattern = None
        return placeholder + ref[len(base):]

    def restore(self, data: bytes) -> bytes:
        if not self.back:
            return data
        if self._pattern is None:
            alternatives = b"|".join(re.escape(k) for k in self.back)
            self._pattern = re.compile(rb"(?<![0-9])(" + alternatives + rb")(?![0-9])")
        return self._pattern.sub(lambda m: self.back[m.group(1)], data)


# --------------------------------------------------------------------------- the set
class Scope:
    """The jobs one request may see and touch."""

    def __init__(self, ctx, request):
        self.ctx = ctx
        self.kind = ctx.scope if ctx.scope in ("session", "project", "user", "none") else "project"
        self.env = command_env(request.env)
        self.uid = os.getuid()

    @property
    def by_user(self) -> bool:
        """user and none: every job of the user is in scope (squeue --me)."""
        return self.kind in ("user", "none")

    def capture(self, command: str, args: list[str]) -> tuple[int, bytes]:
        """Run a real Slurm command for the chaperon's own use (not shown)."""
        binary = self.ctx.binary(command)
        if binary is None:
            return 127, b""
        try:
            result = subprocess.run([command, *args], executable=binary, env=self.env,
                                    cwd="/", stdin=subprocess.DEVNULL,
                                    capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return 1, b""
        return result.returncode, result.stdout

    def ledger_ids(self) -> set[str]:
        return set(self.ctx.ledger.jobs(self.kind))

    def live_ids(self) -> list[str]:
        """The in-scope ids to hand to a listing (session/project scope),
        oldest first; ids Slurm has forgotten are pruned when there are many."""
        ctx = self.ctx
        records = ctx.ledger.records(self.kind)
        with ctx.lock:
            ids = list(dict.fromkeys(r.job for r in records if r.job not in ctx.gone))
        if len(ids) <= PRUNE_ABOVE or time.monotonic() - ctx.pruned_at < PRUNE_EVERY:
            return ids   # a forgotten id in the list is harmless, only a little slower
        ctx.pruned_at = time.monotonic()
        asked = time.time()
        code, out = self.capture("squeue", ["--me", "--noheader", "--states=all",
                                            "--format=%F"])
        if code != 0:
            return ids
        known = set(out.decode(errors="replace").split())
        recorded = {r.job: r.get("time", 0) for r in records}
        with ctx.lock:
            for job in ids:
                # A job recorded after squeue answered may not be in its answer yet.
                if job not in known and recorded.get(job, asked) < asked - 1:
                    ctx.gone.add(job)
            return [j for j in ids if j not in ctx.gone]

    def related(self, bases: set[str], *, active: bool = False) -> dict[str, set[str]]:
        """For ids of this user's jobs that Slurm still knows (`active`: that
        have not ended): the ids they belong to (own id, array job id, het job
        id). One squeue call."""
        if not bases:
            return {}
        ids = sorted(bases, key=int)
        if len(ids) == 1:
            ids.append(str(PLACEHOLDER_TOP))   # keep squeue on its list path (no error)
        code, out = self.capture("squeue", [
            "--me", "--noheader", *([] if active else ["--states=all"]),
            "--Format=JobID:0|,ArrayJobID:0|,HetJobID:0|", f"--jobs={','.join(ids)}"])
        found: dict[str, set[str]] = {}
        for line in out.decode(errors="replace").splitlines():
            parts = [p for p in line.split("|") if p.isdigit()]
            if parts:
                found.setdefault(parts[0], set()).update(parts)
        return found

    def in_scope(self, refs: list[str]) -> list[bool]:
        """For each job reference the caller named: is it in scope?"""
        bases = [ref_base(r) for r in refs]
        if self.by_user:
            related = self.related({b for b in bases if b})
            return [bool(b) and b in related for b in bases]
        known = self.ledger_ids()
        unknown = {b for b in bases if b and b not in known}
        related = self.related(unknown)
        return [bool(b) and (b in known or bool(related.get(b, set()) & known))
                for b in bases]

    def substitute(self, refs: list[str], placeholders: Placeholders) -> list[str]:
        """The references with every out-of-scope one replaced by a placeholder."""
        flags = self.in_scope(refs)
        return [ref if ok else placeholders.replace(ref) for ref, ok in zip(refs, flags)]

    def owns(self, job: dict) -> bool:
        """Is a job record from Slurm's JSON/YAML (job_id, array_job_id,
        het_job_id, user_id) in scope?"""
        if self.by_user:
            return str(job.get("user_id")) == str(self.uid)
        known = getattr(self, "_known", None)
        if known is None:
            known = self._known = self.ledger_ids()
        return str(job.get("user_id")) == str(self.uid) and any(
            str(job.get(k)) in known for k in ("job_id", "array_job_id", "het_job_id"))


# --------------------------------------------------------------------------- untagging
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
    replaced by the user's comment, or by nothing."""
    return TAG.sub(lambda m: user_comment(m) or b"", data)


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

    def __init__(self, spec: str, names: list[str], default: int):
        self.lengths: list[int] = []   # the caller's length of each Comment field, in order
        items: list[str] = []
        for item in spec.split(","):
            if item.lower() == "all":
                items.extend(names)
            elif item:
                items.append(item)
        out = []
        for item in items:
            name, _, length = item.partition("%")
            resolved = next((n for n in names if n.lower().startswith(name.lower())),
                            None) if name else None
            if resolved == "Comment":
                given = int(length) if re.fullmatch(r"-?\d+", length or "") else 0
                self.lengths.append(given or default)
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
            for (start, end), length in zip(spans, self.lengths):
                size = abs(length)
                if number == 0:
                    name = b"Comment"[:size]
                    new = name.rjust(size) if length >= 0 else name.ljust(size)
                elif number == 1:
                    new = b"-" * size
                else:
                    value = line[start:end].rstrip(b" ")
                    new = render_sacct(decode_value(value) if value else None, length)
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


# --------------------------------------------------------------------------- handler helpers
def parse_permuted(spec, argv) -> Parsed:
    """Parse as GNU getopt does without "+": options anywhere, the words that
    are not options collected in order as the positional rest ("--" ends the
    options). The scoped commands (squeue, scancel, scontrol, …) parse so."""
    from .options import Parsed, parse

    items: list = []
    positional: list[str] = []
    rest = list(argv)
    while rest:
        parsed = parse(spec, rest)
        items.extend(parsed.items)
        if not parsed.rest:
            break
        index = parsed.rest_index
        ended = index > 0 and rest[index - 1] == "--" and not any(
            item.written.endswith(" --") for item in parsed.items)
        if ended:
            positional.extend(parsed.rest)
            break
        positional.append(parsed.rest[0])
        rest = list(parsed.rest[1:])
    values: dict = {}
    for item in items:
        values.setdefault(item.name, []).append(item.value)
    return Parsed(spec.command, tuple(items), tuple(positional), 0, values)


def self_names(ctx) -> set[str]:
    """How the caller may name itself: user name and uid."""
    import pwd

    names = {str(os.getuid())}
    try:
        names.add(pwd.getpwuid(os.getuid()).pw_name)
    except KeyError:
        pass
    if ctx.user:
        names.add(ctx.user)
    return names


def foreign_users(ctx, parsed, options=("user",)) -> list[str]:
    """Users named by the options that are not the caller (self-references
    are no-ops: every scope is a subset of the caller's own jobs)."""
    mine = self_names(ctx)
    return [u for name in options for value in parsed.values.get(name, [])
            for u in (value or "").split(",") if u and u not in mine]


def job_refs(values) -> list[str]:
    """Job references from comma lists (-j 1,2 3 …), in order."""
    return [ref for value in values for ref in (value or "").split(",") if ref]


def bad_refs(refs: list[str]) -> list[str]:
    return [r for r in refs if ref_base(r) is None]


# --------------------------------------------------------------------------- ledger help
def known_job(ctx, request, job: str, kind: str = "project") -> bool:
    """Was `job` (an id from the job's own environment) submitted from a
    sandbox of this project (kind "project") — directly, or as a task of an
    array / a component of a het job that was?"""
    base = ref_base(job)
    if base is None:
        return False
    known = set(ctx.ledger.jobs(kind))
    if base in known:
        return True
    scope = Scope(ctx, request)
    return bool(scope.related({base}).get(base, set()) & known)


class AllocationWatcher:
    """srun in allocation mode prints no job id, so the chaperon finds the
    job by its comment tag (which srun got from the handler) among this
    user's jobs, and records it in the ledger the moment Slurm has it: often
    at first (every 50 ms for 2 s, then every second) while srun waits, and
    once more when srun ends. Every job carrying this session's tag that the
    ledger does not have yet is recorded (two sruns of one session may find
    each other's job first; the ledger is a set)."""

    def __init__(self, ctx, request, tag: str, token: str):
        import threading

        self.ctx, self.tag, self.token = ctx, tag.encode(), token
        self.scope = Scope(ctx, request)
        self.found = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "AllocationWatcher":
        self.thread.start()
        return self

    def _check(self) -> None:
        code, data = self.scope.capture("squeue", ["--me", "--noheader", "--states=all",
                                                   "--format=%A|%k"])
        if code != 0:
            return
        recorded = set(self.ctx.ledger.jobs("session"))
        for line in data.split(b"\n"):
            job, _, comment = line.partition(b"|")
            if comment == self.tag and job.isdigit() and job.decode() not in recorded:
                try:
                    self.ctx.ledger.record(job.decode(), self.token, kind="allocation")
                except OSError:
                    return
                self.found.set()

    def _run(self) -> None:
        started = time.monotonic()
        while not self.found.is_set():
            self._check()
            pause = 0.05 if time.monotonic() - started < 2 else 1.0
            if self.done.wait(pause):
                break

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)
        self._check()
