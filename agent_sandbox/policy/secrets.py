"""Secrets in a text: text in, findings out (SPEC §6, "A secret must not come
back in through a file"). Nothing here opens a file or prints a secret.

Strategy: every rule is a regular expression run once over the whole text (in
C, so a 1 MiB file costs milliseconds), and each match is mapped to its line
through a table of line offsets. Two kinds of rule:

* CREDENTIAL_SHAPES — the one table of well-known credential formats. A
  private-key block is one finding from its BEGIN line to its END line (to the
  end of the text when END is missing: fail closed).
* assignments (`NAME=…`, `export NAME=…`, `setenv NAME …`, `set -gx NAME …`)
  of a variable the environment policy removes. Whether a name is removed is
  not decided here: the caller passes envfilter's own rule. A value that goes
  on over more lines (a trailing backslash, an open quote) makes the finding
  cover those lines too.

A Finding carries line numbers and *what* was found (a shape's name, or the
variable's name, which is not secret), never the matched text. `blank` empties
exactly the lines the findings cover and keeps every line break, so line
numbers in a report still point at the user's file.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from typing import Callable, Iterable, NamedTuple

# Characters a token cannot be glued to on its left (ghp_… inside a longer word
# is some other identifier).
_START = r"(?<![A-Za-z0-9])"
# A long secret-looking value: 16+ token characters, letters and digits both,
# not starting like a path, an option or a variable.
_TOKEN_CHARS = r"[A-Za-z0-9._~+/=-]"
_SECRET_VALUE = (rf"(?=[A-Za-z0-9_+=-])(?={_TOKEN_CHARS}*[0-9])(?={_TOKEN_CHARS}*[A-Za-z])"
                 rf"{_TOKEN_CHARS}{{16,}}")
PRIVATE_KEY = "private key block"
CREDENTIAL_ASSIGNMENT = "credential assignment"
REMOVED_SUFFIX = " (a variable the policy removes)"
CREDENTIAL_SHAPES: tuple[tuple[str, re.Pattern], ...] = (
    (PRIVATE_KEY, re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")),
    ("GitHub token", re.compile(_START + r"(?:gh[pousr]_[A-Za-z0-9]{30,}"
                                         r"|github_pat_[A-Za-z0-9_]{30,})")),
    ("GitLab token", re.compile(_START + r"glpat-[A-Za-z0-9_-]{20,}")),
    ("AWS access key id", re.compile(_START + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])")),
    ("Slack token", re.compile(_START + r"xox[abprs]-[A-Za-z0-9-]{10,}")),
    ("OpenAI/Anthropic API key", re.compile(_START + r"sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("JWT", re.compile(_START + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")),
    # An HTTP bearer credential written out (a curl line, an alias): the word
    # Bearer and a long token with letters and digits (prose has neither).
    ("bearer token", re.compile(r"(?<![A-Za-z0-9])(?i:bearer)[ \t]+" + _SECRET_VALUE)),
    # A long value given to a key whose name ends in token/password/secret/
    # api key, in any language (`token=…`, `"password": "…"`), whatever the
    # policy says of the name: the agents' own keys in a start-up file too.
    # Not a path, a variable or a substitution ($, /, ~, . first).
    (CREDENTIAL_ASSIGNMENT, re.compile(
        r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_.-])*(?i:token|password|passwd|secret|api[_-]?key)"
        r"[\"']?[ \t]*[:=][ \t]*[\"']?" + _SECRET_VALUE)),
)
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# NAME= / NAME+= not glued to a word, $, . or - on its left (so not $X=, a.b=, --x=);
# setenv NAME value (csh); set [-gx…] NAME value (fish).
# Every builtin that assigns with NAME=… (export, declare, typeset, local,
# readonly, export -n, env …) is covered by the first rule; printf -v NAME
# (bash) and read NAME… (value from a here-string or input) name it apart.
_ASSIGNMENTS = (
    re.compile(r"(?<![\w$.\-])([A-Za-z_]\w*)\+?="),
    re.compile(r"(?<![\w$.\-])setenv[ \t]+([A-Za-z_]\w*)"),
    re.compile(r"(?<![\w$.\-])set[ \t]+(?:--?[A-Za-z-]+[ \t]+)*([A-Za-z_]\w*)[ \t]"),
    re.compile(r"(?<![\w$.\-])printf[ \t]+(?:-[^\sv]\S*[ \t]+)*-v[ \t]*([A-Za-z_]\w*)"),
)
# read/readarray/mapfile: the rest of the command up to a redirection or its end.
_READ = re.compile(r"(?<![\w$.\-])(?:read|readarray|mapfile)[ \t]+([^\n;&|<>]*)")
_NAME = re.compile(r"[A-Za-z_]\w*")
# A backslash-newline joins two physical lines into one (an odd number of
# backslashes: an even one is escaped backslashes and a real line end).
_CONTINUATION = re.compile(r"\\+\n")


class Finding(NamedTuple):
    first_line: int        # 1-based, inclusive
    last_line: int
    what: str              # a shape's name or "NAME (a variable the policy removes)"

    def lines(self) -> str:
        return (f"line {self.first_line}" if self.first_line == self.last_line
                else f"lines {self.first_line}-{self.last_line}")


class _Lines:
    """Offsets of line starts: offset → 1-based line number."""

    def __init__(self, text: str):
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def of(self, offset: int) -> int:
        return bisect_right(self.starts, offset)

    @property
    def count(self) -> int:
        return len(self.starts)


def _value_end(text: str, pos: int) -> int:
    """Offset where the shell word starting at `pos` ends: at unquoted
    whitespace, `;`, `&`, `|` or newline; a backslash-newline or a quote
    carries it over lines. An unclosed quote runs to the end of the text."""
    i, n = pos, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch in " \t;&|\n":
            return i
        if ch == "'":
            close = text.find("'", i + 1)
            if close < 0:
                return n
            i = close + 1
            continue
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            if i >= n:
                return n
        i += 1
    return n


def _join_continuations(text: str) -> tuple[str, list[int]]:
    """(text with every backslash-newline removed, the offsets in it where
    one was): `export GH_TOK\\⏎EN=…` is one assignment to the shell."""
    parts, cuts, kept, last = [], [], 0, 0
    for match in _CONTINUATION.finditer(text):
        if (match.end() - match.start() - 1) % 2 == 0:
            continue                                   # escaped backslashes
        parts.append(text[last:match.end() - 2])
        kept += match.end() - 2 - last
        cuts.append(kept)
        last = match.end()
    parts.append(text[last:])
    return "".join(parts), cuts


def scan(text: str, removed: Callable[[str], bool]) -> tuple[Finding, ...]:
    """Findings in `text`, ordered by line. `removed(name)` says whether the
    policy removes the variable NAME (envfilter.removal_rule)."""
    joined, cuts = _join_continuations(text)
    lines = _Lines(text)
    found: dict[tuple[int, int], str] = {}

    def line(offset: int) -> int:
        """The physical line (of `text`) of an offset in `joined`."""
        return lines.of(offset + 2 * bisect_right(cuts, offset))

    def add(first: int, last: int, what: str) -> None:
        if what not in found.get((first, last), "").split("; "):
            found[(first, last)] = "; ".join(filter(None, (found.get((first, last)), what)))

    # The joined text is what the shell reads; the physical one is scanned
    # too, so that joining never hides what a line shows as it is.
    passes = [(joined, line)] + ([(text, lines.of)] if cuts else [])
    for source, where in passes:
        for name, pattern in CREDENTIAL_SHAPES:
            for match in pattern.finditer(source):
                first = where(match.start())
                if name == PRIVATE_KEY:
                    end = _KEY_END.search(source, match.end())
                    add(first, where(end.end() - 1) if end else lines.count, name)
                else:
                    add(first, where(match.end() - 1), name)
        for pattern in _ASSIGNMENTS:
            for match in pattern.finditer(source):
                variable = match.group(1)
                if removed(variable):
                    last = where(max(match.end(), _value_end(source, match.end())) - 1)
                    add(where(match.start()), last, f"{variable}{REMOVED_SUFFIX}")
        for match in _READ.finditer(source):
            for variable in _NAME.findall(match.group(1)):
                if removed(variable):
                    add(where(match.start()), where(match.end() - 1),
                        f"{variable}{REMOVED_SUFFIX}")
    def named(what: str) -> str:
        """A removed variable's name says more than the generic shape."""
        parts = what.split("; ")
        if any(p.endswith(REMOVED_SUFFIX) for p in parts):
            parts = [p for p in parts if p != CREDENTIAL_ASSIGNMENT]
        return "; ".join(parts)

    return tuple(Finding(first, last, named(what))
                 for (first, last), what in sorted(found.items()))


def blank(text: str, findings: Iterable[Finding]) -> str:
    """`text` with every line a finding covers emptied; line breaks kept."""
    covered = {n for f in findings for n in range(f.first_line, f.last_line + 1)}
    if not covered:
        return text
    parts = text.split("\n")
    return "\n".join("" if number in covered else line
                     for number, line in enumerate(parts, start=1))
