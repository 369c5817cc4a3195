"""Other users out of pass-through output (SPEC §9 invariants: no user
enumeration). Inside the sandbox the only user is the caller; a cluster-wide
view must not name anyone else — by name or by uid.

Strategy: where a format decides what is printed (sinfo), the real command
is asked for the caller's format without the user fields, so every byte of
the answer is Slurm's own answer to that format. Where the command prints a
fixed text (sdiag, scontrol show node|reservation, sinfo --json/--yaml), the
answer is rewritten here, sans I/O, by the rules below; everything else
stays byte for byte.

- sdiag: "Remote Procedure Call statistics by user": only the caller's line.
- sinfo: %u, %U (-o), User, UserLong (-O) — who set a node's reason — are
  removed with the text that follows them (the field and its separator);
  `sinfo -R` gets its default format without the USER column, and `sinfo
  -R -l` (which takes no format) loses that column from its answer; `%all` is
  refused (it prints the USER fields and cannot be narrowed); --json and
  --yaml show `reason_set_by_user` as null, as for a reason nobody set.
- scontrol show node: `Reason=TEXT [user@time]` loses ` [user@time]`.
- scontrol show reservation: `Users=` keeps the caller's own entry only,
  `(null)` when none is left.
Entries naming the caller (name or uid) stay as they are.
"""
from __future__ import annotations

import re


class AllFields(Exception):
    """A format of %all: every field, the user fields included."""


# --------------------------------------------------------------------------- sdiag
def sdiag(data: bytes, mine: set[str]) -> bytes:
    lines = data.split(b"\n")
    out, in_users = [], False
    for line in lines:
        if line.startswith(b"Remote Procedure Call statistics by user"):
            in_users = True
        elif in_users and not line.startswith(b"\t"):
            in_users = False
        elif in_users:
            match = re.match(rb"\t(\S+)\s*\(\s*(\d+)\)", line)
            if not match or not ({match.group(1).decode(errors="replace"),
                                  match.group(2).decode()} & mine):
                continue
        out.append(line)
    return b"\n".join(out)


# --------------------------------------------------------------------------- sinfo
SINFO_REASONS = "%20E %9u %19H %N"             # sinfo -R (22.05 opts.c)
SINFO_REASONS_LONG = "%20E %12U %19H %6t %N"   # sinfo -R -l
_SHORT_FIELD = re.compile(r"(%\.?\d*[A-Za-z])")
USER_LETTERS = "uU"
USER_NAMES = ("user", "userlong")


def sinfo_short(fmt: str) -> str:
    """An -o format without %u/%U, each removed with the text up to the next
    field (the last field with the text before it)."""
    if "%all" in fmt.lower():
        raise AllFields(fmt)
    tokens = _SHORT_FIELD.split(fmt)
    literals, fields = tokens[0::2], tokens[1::2]
    kept_literals, kept_fields = [literals[0]], []
    for index, field in enumerate(fields):
        after = literals[index + 1]
        if field[-1] in USER_LETTERS:
            if index == len(fields) - 1:
                kept_literals[-1] = after
            continue
        kept_fields.append(field)
        kept_literals.append(after)
    return kept_literals[0] + "".join(f + t for f, t in zip(kept_fields, kept_literals[1:]))


def sinfo_long(fmt: str) -> str:
    """An -O format without User/UserLong items."""
    items = fmt.split(",")
    return ",".join(i for i in items if i.partition(":")[0].strip().lower() not in USER_NAMES)


def sinfo_reasons() -> str:
    return sinfo_short(SINFO_REASONS)


def sinfo_reasons_long(line: bytes) -> bytes:
    """One line of `sinfo -R -l`, which takes no format (-l): without the
    %12U column (bytes 21-33, with its separator; %20E and %12U cut their
    values to the width). The time stamp line is shorter and stays."""
    if len(line) > 34 and line[20:21] == b" " and line[33:34] == b" ":
        return line[:21] + line[34:]
    return line


def reason_user_null(data: bytes, mine: set[str], *, yaml: bool) -> bytes:
    """--json/--yaml: reason_set_by_user of anyone else becomes null."""
    if yaml:
        pattern = rb"(!!str reason_set_by_user: )!!str ([^\n]*)"
        null = b"!!null null"
    else:
        pattern = rb'("reason_set_by_user": )"((?:[^"\\]|\\.)*)"'
        null = b"null"

    def replace(match: re.Match) -> bytes:
        if match.group(2).decode(errors="replace") in mine:
            return match.group(0)
        return match.group(1) + null
    return re.sub(pattern, replace, data)


# --------------------------------------------------------------------------- scontrol
def scontrol_nodes(data: bytes, mine: set[str]) -> bytes:
    """`Reason=TEXT [user@time]` (at a line's end): the bracket goes unless
    the caller set the reason."""
    def replace(match: re.Match) -> bytes:
        return match.group(0) if match.group(2).decode(errors="replace") in mine else \
            match.group(1)
    return re.sub(rb"(Reason=[^\n]*?) \[([^\]@\n]*)@[^\]\n]*\](?=\n|$)", replace, data)


def scontrol_reservations(data: bytes, mine: set[str]) -> bytes:
    def replace(match: re.Match) -> bytes:
        users = [u for u in match.group(1).split(b",")
                 if u.lstrip(b"-").decode(errors="replace") in mine]
        return b"Users=" + (b",".join(users) if users else b"(null)")
    return re.sub(rb"(?<![^\s])Users=(\S+)", replace, data)
