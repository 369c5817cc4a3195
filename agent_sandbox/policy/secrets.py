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
PRIVATE_KEY = "private key block"
CREDENTIAL_SHAPES: tuple[tuple[str, re.Pattern], ...] = (
    (PRIVATE_KEY, re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")),
    ("GitHub token", re.compile(_START + r"(?:gh[pousr]_[A-Za-z0-9]{30,}"
                                         r"|github_pat_[A-Za-z0-9_]{30,})")),
    ("GitLab token", re.compile(_START + r"glpat-[A-Za-z0-9_-]{20,}")),
    ("AWS access key id", re.compile(_START + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])")),
    ("Slack token", re.compile(_START + r"xox[abprs]-[A-Za-z0-9-]{10,}")),
    ("OpenAI/Anthropic API key", re.compile(_START + r"sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("JWT", re.compile(_START + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")),
)
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# NAME= / NAME+= not glued to a word, $, . or - on its left (so not $X=, a.b=, --x=);
# setenv NAME value (csh); set [-gx…] NAME value (fish).
_ASSIGNMENTS = (
    re.compile(r"(?<![\w$.\-])([A-Za-z_]\w*)\+?="),
    re.compile(r"(?<![\w$.\-])setenv[ \t]+([A-Za-z_]\w*)"),
    re.compile(r"(?<![\w$.\-])set[ \t]+(?:-[A-Za-z]+[ \t]+)*([A-Za-z_]\w*)[ \t]"),
)


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


def scan(text: str, removed: Callable[[str], bool]) -> tuple[Finding, ...]:
    """Findings in `text`, ordered by line. `removed(name)` says whether the
    policy removes the variable NAME (envfilter.removal_rule)."""
    lines = _Lines(text)
    found: dict[tuple[int, int], str] = {}

    def add(first: int, last: int, what: str) -> None:
        if what not in found.get((first, last), "").split("; "):
            found[(first, last)] = "; ".join(filter(None, (found.get((first, last)), what)))

    for name, pattern in CREDENTIAL_SHAPES:
        for match in pattern.finditer(text):
            first = lines.of(match.start())
            if name == PRIVATE_KEY:
                end = _KEY_END.search(text, match.end())
                add(first, lines.of(end.end()) if end else lines.count, name)
            else:
                add(first, first, name)
    for pattern in _ASSIGNMENTS:
        for match in pattern.finditer(text):
            variable = match.group(1)
            if removed(variable):
                last = lines.of(max(match.end(), _value_end(text, match.end()) - 1))
                add(lines.of(match.start()), last,
                    f"{variable} (a variable the policy removes)")
    return tuple(Finding(first, last, what) for (first, last), what in sorted(found.items()))


def blank(text: str, findings: Iterable[Finding]) -> str:
    """`text` with every line a finding covers emptied; line breaks kept."""
    covered = {n for f in findings for n in range(f.first_line, f.last_line + 1)}
    if not covered:
        return text
    parts = text.split("\n")
    return "\n".join("" if number in covered else line
                     for number, line in enumerate(parts, start=1))
