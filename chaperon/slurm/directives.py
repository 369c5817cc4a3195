"""#SBATCH directives: read from a job script as sbatch 22.05 reads them,
validated by the same option table as the command line, and removed from
the body.

What sbatch does (checked against the sbatch 22.05 binary):
- The script must be non-empty, start with "#!", contain no NUL byte and no
  DOS line break (\\r\\n); sbatch refuses it otherwise, and so do we.
- Lines are split at "\\n". A line starting exactly with "#SBATCH" (or the
  legacy "#SLURM") at column 0 is a directive; "# SBATCH", "#sbatch" and an
  indented "  #SBATCH" are plain comments. Reading stops at the first line
  holding anything but blanks before a "#" (the first command); later
  "#SBATCH" lines are ordinary comments.
- The text after the magic word is split into words: blanks (C isspace)
  separate words, '…' and "…" group (the quotes are removed), a backslash
  takes the next character literally (but does not join words across a
  blank), an unquoted "#" starts a comment, an unmatched quote and a word
  starting with ":" are fatal errors. An empty word ("") ends the line in
  sbatch; we refuse the line when text would be silently dropped that way.
- The words of all directive lines form ONE argument list (an option's
  value may sit on the next directive line) read by getopt_long; a word that
  is not an option ("Invalid directive found in batch script") is refused.
- A word "hetjob" (or legacy "packjob") starts another component of a
  heterogeneous job: refused, like ':' on the command line.
- sbatch also translates #PBS and #BSUB lines anywhere in the script unless
  --ignore-pbs is given. Only our wrapper reaches the real sbatch, so those
  lines would be silently ignored: they are refused unless --ignore-pbs is
  set (on the command line or in a directive).

Inside directives --wrap is refused, and early-pass options (--verbose,
--quiet, --help, --usage, --version), which sbatch ignores there, are kept
but not re-emitted. Removed directive lines become empty lines so the line
numbers of the body stay those the agent sees in its own file.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

from ..refusal import Refusal
from .options import Parsed, parse
from .sbatch_options import SBATCH

MAGIC_WORDS = ("#SBATCH", "#SLURM")
HET_WORDS = ("hetjob", "packjob")
C_SPACE = " \t\n\v\f\r"


class Directives(NamedTuple):
    words: tuple[str, ...]       # option words in order, quotes removed
    word_lines: tuple[int, ...]  # the script line (1-based) of each word
    lines: tuple[int, ...]       # the directive lines removed from the body
    parsed: Parsed               # validated options; parsed.canonical re-emits them
    body: bytes | str            # the script with directive lines blanked, same type as given


def _refuse(reason: str, written: str, why: str, instead: str, line: int, *,
            subject: str | None = None) -> Refusal:
    return Refusal.argument("sbatch", written, reason, why, instead, line=line, subject=subject)


def _refuse_script(why: str, instead: str, line: int) -> Refusal:
    return _refuse("not_a_batch_script", "", why, instead, line, subject="the job script")


def _words(text: str, lineno: int, line: str) -> Iterable[str]:
    """The words of one directive line after the magic word, as sbatch's
    get_argument() reads them."""
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in C_SPACE:
            pos += 1
        if pos < end and text[pos] == ":":
            raise _refuse("directive_syntax", line.strip(), "sbatch stops at a word starting "
                          "with ':' in an #SBATCH line", "Quote the value or remove the ':'",
                          lineno)
        if pos >= end:
            return
        word: list[str] = []
        quote = ""
        escaped = False
        while pos < end and (quote or text[pos] not in C_SPACE):
            char = text[pos]
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
                pos += 1
                continue
            elif quote:
                if char == quote:
                    quote = ""
                    pos += 1
                    continue
            elif char in "\"'":
                quote = char
                pos += 1
                continue
            elif char == "#":
                break
            word.append(char)
            pos += 1
        if quote:
            raise _refuse("directive_syntax", line.strip(), f"the {quote} quote is not closed "
                          "(sbatch refuses the script)", "Close the quote on the same line",
                          lineno)
        if not word:
            # sbatch ends the line at an empty word; refuse if that drops text.
            remainder = text[pos:].lstrip(C_SPACE)
            if remainder and not remainder.startswith("#"):
                raise _refuse("directive_syntax", line.strip(), "sbatch stops reading an "
                              "#SBATCH line at an empty quoted word, so the rest of the line "
                              "would be silently ignored", "Remove the empty word, or write "
                              "the option as --name= for an empty value", lineno)
            return
        yield "".join(word)


def _check_script(text: str) -> None:
    if text == "":
        raise _refuse_script("it is empty", "Give the job's commands after a #! line", 1)
    if not text.startswith("#!"):
        raise _refuse_script("its first line does not start with #! and the path of an "
                             "interpreter", "Start the script with a line such as #!/bin/bash",
                             1)
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise _refuse_script(f"line {line} contains a NUL character",
                             "Remove the NUL character", line)
    if "\r\n" in text:
        line = text.count("\n", 0, text.index("\r\n")) + 1
        raise _refuse_script(f"it has DOS line breaks (\\r\\n), first on line {line}",
                             "Convert it with dos2unix", line)


def parse_script(script: bytes | str, *, allow_mail: bool = False,
                 ignore_pbs: bool = False, spec=SBATCH) -> Directives:
    """Extract and validate the #SBATCH directives of `script`. `ignore_pbs`
    is True when --ignore-pbs was given on the command line. Raises
    Refusal naming the script line."""
    is_bytes = isinstance(script, bytes)
    text = script.decode("utf-8", "surrogateescape") if is_bytes else script
    _check_script(text)
    lines = text.split("\n")

    words: list[str] = []
    word_lines: list[int] = []
    directive_lines: list[int] = []
    for number, line in enumerate(lines, start=1):
        magic = next((m for m in MAGIC_WORDS if line.startswith(m)), None)
        if magic is None:
            stripped = line.lstrip(C_SPACE)
            if stripped and not stripped.startswith("#"):
                break               # the first command ends the directives
            continue
        directive_lines.append(number)
        for word in _words(line[len(magic):], number, line):
            if word.lower() in HET_WORDS:
                raise _refuse("het_job", f"{word}", "heterogeneous jobs are not supported "
                              "through the sandbox", "Submit each component as its own job "
                              "and link them with --dependency", number)
            words.append(word)
            word_lines.append(number)

    try:
        parsed = parse(spec, words, unlock=("mail",) if allow_mail else (), in_script=True)
    except Refusal as refused:
        index = refused.index if refused.index is not None else len(words) - 1
        raise refused.at_line(word_lines[index] if word_lines else 1) from None
    if parsed.rest:
        stray = parsed.rest[0]
        raise _refuse("invalid_directive", stray, "it is not an sbatch option, and sbatch "
                      "refuses the script (\"Invalid directive found in batch script\")",
                      "Write #SBATCH lines as options only, such as #SBATCH --time=10",
                      word_lines[parsed.rest_index])

    if not (ignore_pbs or parsed.has("ignore-pbs")):
        for number, line in enumerate(lines, start=1):
            if line.startswith(("#PBS", "#BSUB")):
                raise _refuse("pbs_directives", line.split(None, 1)[0], "sbatch would "
                              "translate PBS/LSF directives, which the sandbox does not do",
                              "Convert them to #SBATCH lines, or pass --ignore-pbs", number)

    blank = set(directive_lines)
    body = "\n".join("" if n in blank else line for n, line in enumerate(lines, start=1))
    return Directives(tuple(words), tuple(word_lines), tuple(directive_lines), parsed,
                      body.encode("utf-8", "surrogateescape") if is_bytes else body)
