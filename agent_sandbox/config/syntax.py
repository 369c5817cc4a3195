"""Parse sandbox.conf: shell assignment syntax that is read, never executed.

Strategy: one hand-written scanner makes a single pass over the text.  At the
start of each statement it accepts a blank line, a ``#`` comment, ``KEY=`` or
``KEY+=``; anything else is classified (shell keyword, builtin, operator) only
to word the error.  The value after ``=`` is one word or a parenthesised list
of words.  A word is read piece by piece (unquoted text, ``'…'``, ``"…"``) and
the pieces are joined exactly as the shell joins them.  The only expansions
are ``$HOME``, ``${HOME}``, ``$USER``, ``${USER}`` and a leading ``~`` or
``~/``, taken from the mapping the caller passes.  Every character the shell
would treat as code (``$(``, backticks, ``;``, ``|``, redirections, any other
parameter) raises ConfigSyntaxError at its own file:line:column: nothing is
skipped, nothing is taken literally when bash would not take it literally.

The result is the list of assignments in file order.  Layering, defaults, admin
locks and value validation belong to the caller.  The module imports nothing
beyond ``collections.abc`` (difflib only on the unknown-key error path), since
it runs on every launch.

Kept whole on purpose: the tokenizer, the assignment grammar and the error
messages (file, line, column) are one cohesive thing, read top to bottom.
"""

from collections.abc import Collection, Mapping

__all__ = ["Assignment", "ConfigSyntaxError", "parse_config"]


class Assignment:
    """One ``KEY=value`` or ``KEY+=(…)`` of a config file; immutable, compared by value.

    ``value`` is a str for a scalar and a tuple of str for an array ``(…)``;
    ``append`` is True only for ``KEY+=(…)``.  ``line`` and ``column`` (1-based)
    locate the first character of KEY in ``file``.
    """

    __slots__ = ("key", "append", "value", "file", "line", "column")
    __match_args__ = ("key", "append", "value", "file", "line", "column")

    key: str
    append: bool
    value: "str | tuple[str, ...]"
    file: str
    line: int
    column: int

    def __init__(
        self,
        key: str,
        append: bool,
        value: "str | tuple[str, ...]",
        file: str,
        line: int,
        column: int,
    ) -> None:
        setter = object.__setattr__
        setter(self, "key", key)
        setter(self, "append", append)
        setter(self, "value", value)
        setter(self, "file", file)
        setter(self, "line", line)
        setter(self, "column", column)

    def _fields(self) -> "tuple[str, bool, str | tuple[str, ...], str, int, int]":
        return (self.key, self.append, self.value, self.file, self.line, self.column)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Assignment is immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Assignment is immutable: cannot delete {name}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Assignment:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Assignment(key={self.key!r}, append={self.append!r}, value={self.value!r}, "
            f"file={self.file!r}, line={self.line!r}, column={self.column!r})"
        )

    def __reduce__(self) -> tuple[type["Assignment"], tuple[object, ...]]:
        return (Assignment, self._fields())


class ConfigSyntaxError(ValueError):
    """A construct sandbox.conf does not accept; ``str()`` is ``file:line:column: message``."""

    def __init__(self, file: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{file}:{line}:{column}: {message}")
        self.file = file
        self.line = line
        self.column = column
        self.message = message

    def __reduce__(self) -> tuple[type["ConfigSyntaxError"], tuple[object, ...]]:
        return (self.__class__, (self.file, self.line, self.column, self.message))


# --- character classes --------------------------------------------------------

_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_KEY_CHARS = frozenset(_UPPER + "_0123456789")
_NAME_START = frozenset(_UPPER + _UPPER.lower() + "_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_EXPANDABLE = frozenset(("HOME", "USER"))
# Characters that end a run of plain unquoted text (each needs its own rule).
_UNQUOTED_STOP = frozenset(" \t\n'\"\\$;&|<>()`\r:")
# Characters that end a word (or follow a bare ~) without being part of it.
_WORD_END = " \t\n;&|<>()`\r"
_DQUOTE_STOP = frozenset('"\\$`')
_DQUOTE_ESCAPABLE = '"\\$`'
# Characters after `$` that bash would expand as a special parameter.
_SPECIAL_PARAMETERS = frozenset("0123456789@*#?-$!")

# --- messages -----------------------------------------------------------------

_NEVER = "sandbox.conf is parsed, never executed"

# An operator where a word or the end of a line was expected.
_OPERATORS = {
    ";": f"`;` is not allowed — {_NEVER}, so it has no command lists. "
    "Put each assignment on its own line (quote a literal semicolon: 'a;b')",
    "&": f"`&` is not allowed — {_NEVER}, so it has no background jobs or `&&` lists. "
    "Remove it (quote a literal ampersand: 'a&b')",
    "|": f"`|` is not allowed — {_NEVER}, so it has no pipes or `||` lists. "
    "Remove it (quote a literal bar: 'a|b')",
    "<": f"redirection `<` is not allowed — {_NEVER}. Remove it (quote a literal <: 'a<b')",
    ">": f"redirection `>` is not allowed — {_NEVER}. Remove it (quote a literal >: 'a>b')",
    "`": f"command substitution `…` is not allowed — {_NEVER}. "
    "Write the value itself (quote a literal backtick: '`')",
    "(": "unquoted `(` outside the array syntax — `(` only opens an array, as in KEY=(a b). "
    "Quote a literal parenthesis: 'a(b)'",
    ")": "unquoted `)` outside an array — `)` only closes an array opened by KEY=(. "
    "Quote a literal parenthesis: 'a)b'",
    "\r": "carriage return (a Windows line ending) — sandbox.conf must use Unix line endings. "
    "Convert the file, e.g. with dos2unix",
}

_WITHOUT_EXPORT = f"{_NEVER}, and every key is read as it is. Write KEY=value without {{word}}"
_CONTROL = (
    f"`{{word}}` is not allowed — {_NEVER}: it holds only KEY=value lines and comments, "
    "no conditionals, loops or functions. Write the value you want directly"
)
_FUNCTION = (
    f"function definitions are not allowed — {_NEVER}: it holds only KEY=value lines and "
    "comments. Write the value you want directly"
)
_SOURCE = (
    f"`{{word}}` is not allowed — {_NEVER}, and it does not include other files. "
    "Copy the assignments you need into this file"
)

# The first word of a statement that is not an assignment, mapped to its error.
_SHELL_WORDS = {
    "export": "`export` is not allowed — " + _WITHOUT_EXPORT.format(word="export"),
    "readonly": "`readonly` is not allowed — " + _WITHOUT_EXPORT.format(word="readonly"),
    "declare": "`declare` is not allowed — " + _WITHOUT_EXPORT.format(word="declare"),
    "typeset": "`typeset` is not allowed — " + _WITHOUT_EXPORT.format(word="typeset"),
    "local": "`local` is not allowed — " + _WITHOUT_EXPORT.format(word="local"),
    "unset": f"`unset` is not allowed — {_NEVER}. "
    "Write KEY=value without unset; clear a value with KEY= or an array with KEY=()",
    "source": _SOURCE.format(word="source"),
    ".": _SOURCE.format(word="."),
    "function": _FUNCTION,
    **{
        word: _CONTROL.format(word=word)
        for word in (
            "if", "then", "elif", "else", "fi", "for", "while", "until", "do", "done",
            "case", "esac", "select", "{", "}", "[[", "]]", "!", "time", "coproc",
        )
    },
}


def parse_config(
    text: str,
    *,
    file: str,
    variables: Mapping[str, str],
    known_keys: "Collection[str] | None" = None,
) -> list[Assignment]:
    """Return the assignments of a sandbox.conf text, in file order.

    ``file`` only names the text in positions and errors.  ``variables`` gives
    the values of HOME and USER (other entries are never consulted).  With
    ``known_keys``, any other key is an error.  Raises ConfigSyntaxError, at the
    offending character, for anything that is not plain assignment syntax.
    """
    keys = None if known_keys is None else frozenset(known_keys)
    return _Scanner(text, file, variables).parse(keys)


class _Scanner:
    """The state of one parse: the text, and where the last assignment was found."""

    __slots__ = ("text", "end", "file", "variables", "array_start", "_line", "_line_from")

    def __init__(self, text: str, file: str, variables: Mapping[str, str]) -> None:
        self.text = text
        self.end = len(text)
        self.file = file
        self.variables = variables
        self.array_start = -1  # offset of the `(` of the array being read
        self._line = 1  # line number at offset _line_from
        self._line_from = 0

    # --- positions and errors ---------------------------------------------

    def locate(self, pos: int) -> tuple[int, int]:
        """Line and column of ``pos``; cheap when called with increasing offsets."""
        text = self.text
        if pos >= self._line_from:
            self._line += text.count("\n", self._line_from, pos)
        else:
            self._line = text.count("\n", 0, pos) + 1
        self._line_from = pos
        return self._line, pos - text.rfind("\n", 0, pos)

    def error(self, pos: int, message: str) -> ConfigSyntaxError:
        line = self.text.count("\n", 0, pos) + 1
        return ConfigSyntaxError(self.file, line, pos - self.text.rfind("\n", 0, pos), message)

    def operator(self, pos: int) -> ConfigSyntaxError:
        return self.error(pos, _OPERATORS[self.text[pos]])

    # --- statements -----------------------------------------------------------

    def parse(self, known_keys: "frozenset[str] | None") -> list[Assignment]:
        text, end = self.text, self.end
        nul = text.find("\0")
        if nul >= 0:
            raise self.error(
                nul, "NUL byte — sandbox.conf must be a text file. Remove the NUL byte"
            )
        if text.startswith("\ufeff"):
            raise self.error(
                0,
                "byte-order mark at the start of the file — "
                "save sandbox.conf as UTF-8 without BOM",
            )
        found: list[Assignment] = []
        i = 0
        while True:
            i = self.skip_blank(i)
            if i >= end:
                return found
            if text[i] == "#":
                i = self.skip_comment(i)
            else:
                i = self.assignment(i, found, known_keys)

    def skip_blank(self, i: int) -> int:
        """Past spaces, tabs, newlines and backslash-newline continuations."""
        text, end = self.text, self.end
        while i < end:
            c = text[i]
            if c == " " or c == "\t" or c == "\n":
                i += 1
            elif c == "\\" and text.startswith("\n", i + 1):
                i += 2
            else:
                break
        return i

    def skip_comment(self, i: int) -> int:
        newline = self.text.find("\n", i)
        return self.end if newline < 0 else newline + 1

    def assignment(
        self, i: int, found: list[Assignment], known_keys: "frozenset[str] | None"
    ) -> int:
        """Read the statement at ``i``, which must be KEY=… or KEY+=…; return the next offset."""
        text, end = self.text, self.end
        j = i
        while j < end and text[j] in _NAME_CHARS:
            j += 1
        if text.startswith("=", j):
            append, value_at = False, j + 1
        elif text.startswith("+=", j):
            append, value_at = True, j + 2
        else:
            raise self.not_assignment(i)
        key = text[i:j]
        if not key or key[0] not in _NAME_START:
            raise self.not_assignment(i)
        if not _KEY_CHARS.issuperset(key):
            raise self.error(
                i,
                f"invalid key {key} — keys are upper-case letters, digits and _. "
                f"Write {key.upper()}={'(…)' if append else '…'}",
            )
        if known_keys is not None and key not in known_keys:
            raise self.error(i, _unknown_key(key, known_keys))
        line, column = self.locate(i)
        value: "str | tuple[str, ...]"
        if text.startswith("(", value_at):
            value, i = self.array(value_at)
        elif append:
            raise self.error(
                j,
                f"`+=` only appends to an array — write {key}+=(value) to add an item, "
                f"or {key}=value to replace the value",
            )
        else:
            value, i = self.word(value_at, in_array=False)
        i = self.end_of_statement(i, key, isinstance(value, tuple))
        found.append(Assignment(key, append, value, self.file, line, column))
        return i

    def end_of_statement(self, i: int, key: str, after_array: bool) -> int:
        """After a value only blanks and a comment may follow on the line."""
        text, end = self.text, self.end
        while i < end:
            c = text[i]
            if c == " " or c == "\t":
                i += 1
            elif c == "\\" and text.startswith("\n", i + 1):
                i += 2
            else:
                break
        if i >= end:
            return i
        c = text[i]
        if c == "\n":
            return i + 1
        if c == "#":
            return self.skip_comment(i)
        if c in _OPERATORS:
            raise self.operator(i)
        j = i
        while j < end and text[j] in _NAME_CHARS:
            j += 1
        if _is_name(text[i:j]) and (text.startswith("=", j) or text.startswith("+=", j)):
            raise self.error(
                i,
                f"two assignments on one line — put {text[i:j]} on a line of its own",
            )
        if after_array:
            raise self.error(
                i,
                f"unexpected text after the array of {key} — the array ends at `)`. "
                "Put every item inside the parentheses",
            )
        raise self.error(
            i,
            f"unexpected text after the value of {key} — an unquoted blank ends the value. "
            f'Quote a value that contains blanks: {key}="a b"',
        )

    def not_assignment(self, i: int) -> ConfigSyntaxError:
        """The error for a statement at ``i`` that does not start with KEY= or KEY+=."""
        text, end = self.text, self.end
        c = text[i]
        if c in _OPERATORS:
            return self.operator(i)
        if c in "$'\"":
            self.word(i, in_array=False)  # raises on $(…), unknown $NAME, unterminated quotes
        j = i
        while j < end and text[j] not in _WORD_END:
            j += 1
        word = text[i:j]
        shown = word if len(word) <= 40 else word[:37] + "..."
        k = j
        while k < end and text[k] in " \t":
            k += 1
        if word in _SHELL_WORDS:
            return self.error(i, _SHELL_WORDS[word])
        if text.startswith("(", k) and _is_name(word):
            return self.error(i, _FUNCTION)
        if word == "=" or word.startswith("+=") or word.startswith("="):
            return self.error(i, "no key before `=` — write KEY=value")
        if _is_name(word) and (text.startswith("=", k) or text.startswith("+=", k)):
            return self.error(
                j, f"blank before `=` — write {word}=value with no blanks around `=`"
            )
        if "=" in word:
            name = word[: word.index("=")].removesuffix("+")
            return self.error(
                i,
                f"invalid key {name} — a key is upper-case letters, digits and _, "
                "not starting with a digit, and a whole array is assigned at once. Write KEY=value",
            )
        return self.error(
            i,
            f"`{shown}` is not an assignment — {_NEVER}: it holds only KEY=value lines and "
            "comments. Write KEY=value, or comment the line out with #",
        )

    # --- values -------------------------------------------------------------

    def array(self, start: int) -> tuple[tuple[str, ...], int]:
        """Read ``( word … )`` from the `(` at ``start``; may hold blank lines and comments."""
        text, end = self.text, self.end
        self.array_start = start
        items: list[str] = []
        i = start + 1
        while True:
            i = self.skip_blank(i)
            if i >= end:
                raise self.error(
                    start, "unterminated array: the `(` opened here is never closed by `)`"
                )
            c = text[i]
            if c == ")":
                return tuple(items), i + 1
            if c == "#":
                i = self.skip_comment(i)
                continue
            if c == "[":
                self.refuse_subscript(i)
            item, i = self.word(i, in_array=True)
            items.append(item)

    def refuse_subscript(self, i: int) -> None:
        """``[N]=value`` inside an array sets an index in bash: refuse rather than differ."""
        text, end = self.text, self.end
        j = i
        while j < end and text[j] not in " \t\n)":
            if text.startswith("]=", j):
                raise self.error(
                    i,
                    "indexed item [N]=… in an array is not allowed — items are plain words. "
                    "Quote the item if it is meant literally: '[N]=…'",
                )
            j += 1

    def word(self, i: int, in_array: bool) -> tuple[str, int]:
        """Read one shell word at ``i`` (possibly empty); return its value and where it ends."""
        text, end = self.text, self.end
        parts: list[str] = []
        if text.startswith("~", i):
            i = self.tilde(i, parts, in_array)
        while i < end:
            c = text[i]
            if c not in _UNQUOTED_STOP:
                j = i + 1
                while j < end and text[j] not in _UNQUOTED_STOP:
                    j += 1
                parts.append(text[i:j])
                i = j
            elif c == " " or c == "\t" or c == "\n":
                break
            elif c == "'":
                close = text.find("'", i + 1)
                if close < 0:
                    raise self.error(
                        i, "unterminated single quote: the ' opened here is never closed"
                    )
                parts.append(text[i + 1 : close])
                i = close + 1
            elif c == '"':
                i = self.double_quoted(i, parts)
            elif c == "\\":
                if i + 1 >= end:
                    raise self.error(
                        i, "backslash at the end of the file escapes nothing — remove it"
                    )
                if text[i + 1] != "\n":
                    parts.append(text[i + 1])
                    i += 2
                else:
                    i = self.continuation(i, in_array)
            elif c == "$":
                i = self.dollar(i, parts, quoted=False)
            elif c == ":":
                parts.append(":")
                i += 1
                if not in_array and text.startswith("~", i):
                    # bash expands ~ after a colon of an assignment (PATH-like values)
                    i = self.tilde(i, parts, in_array)
            elif c == ")" and in_array:
                break
            elif c == "(" and in_array:
                raise self.nested_array(i, parts)
            else:
                raise self.operator(i)
        return "".join(parts), i

    def continuation(self, i: int, in_array: bool) -> int:
        """Skip the backslash-newline(s) at ``i`` when they end the word; refuse them inside it.

        Between words a continuation is only a blank.  Inside a word the shell
        joins the lines before it looks for ``$``, ``~`` or a name, so accepting
        it there would mean re-doing every look-ahead across line breaks.
        """
        text = self.text
        j = i
        while text.startswith("\\\n", j):
            j += 2
        after = text[j : j + 1]
        if after and after not in " \t\n" and not (in_array and after == ")"):
            raise self.error(i, _CONTINUATION)
        return j

    def nested_array(self, i: int, parts: list[str]) -> ConfigSyntaxError:
        so_far = "".join(parts)
        name = so_far.removesuffix("=").removesuffix("+")
        if so_far.endswith("=") and _is_name(name):
            line, _ = self.locate(i)  # KEY2=( inside an array: the earlier `)` is missing
            return self.error(
                self.array_start,
                "unterminated array: the `(` opened here is not closed by `)` "
                f"before {so_far}( on line {line}",
            )
        return self.error(
            i,
            "`(` inside an array — nested arrays are not allowed, an array holds plain words. "
            "Quote a literal parenthesis: 'a(b)'",
        )

    def tilde(self, i: int, parts: list[str], in_array: bool) -> int:
        """Expand the unquoted ``~`` at ``i`` when it stands for $HOME; refuse ~user."""
        text = self.text
        after = text[i + 1 : i + 2]
        if not after or after in _WORD_END or after == "/" or (after == ":" and not in_array):
            parts.append(self.variable("HOME", i))
            return i + 1
        j = i + 1
        while j < self.end and (text[j] in _NAME_CHARS or text[j] in "+-."):
            j += 1
        if j > i + 1:  # ~user, ~+, ~-: another user's home or a directory-stack entry
            raise self.error(
                i,
                f"`{text[i:j]}` is not expanded — only ~ and ~/… (your own home) are. "
                "Write the path itself",
            )
        raise self.error(
            i,
            f"a leading ~ followed by `{after}` is not expanded — only ~ and ~/… (your own "
            "home) are. Write the path itself, or quote a literal tilde: '~'",
        )

    def double_quoted(self, i: int, parts: list[str]) -> int:
        """Read ``"…"`` from the quote at ``i``; return the offset after the closing quote."""
        text, end = self.text, self.end
        j = i + 1
        while True:
            k = j
            while k < end and text[k] not in _DQUOTE_STOP:
                k += 1
            if k > j:
                parts.append(text[j:k])
            if k >= end:
                raise self.error(i, 'unterminated double quote: the " opened here is never closed')
            c = text[k]
            if c == '"':
                return k + 1
            if c == "\\":
                nxt = text[k + 1 : k + 2]
                if nxt and nxt in _DQUOTE_ESCAPABLE:
                    parts.append(nxt)
                    j = k + 2
                elif nxt == "\n":
                    raise self.error(k, _CONTINUATION)
                else:
                    parts.append("\\")
                    j = k + 1
            elif c == "$":
                j = self.dollar(k, parts, quoted=True)
            else:
                raise self.operator(k)  # a backtick

    def dollar(self, i: int, parts: list[str], quoted: bool) -> int:
        """Expand the ``$`` at ``i``: $HOME, $USER and their braced forms, else refuse."""
        text, end = self.text, self.end
        nxt = text[i + 1 : i + 2]
        if nxt and nxt in _NAME_START:
            j = i + 2
            while j < end and text[j] in _NAME_CHARS:
                j += 1
            name = text[i + 1 : j]
            if name not in _EXPANDABLE:
                raise self.error(i, _not_expanded(f"${name}", name))
            parts.append(self.variable(name, i))
            return j
        if nxt == "{":
            close = i + 2
            while close < end and text[close] != "}" and text[close] != "\n":
                close += 1
            if close >= end or text[close] != "}":
                raise self.error(
                    i, "unterminated ${ — no closing } on this line. Write ${HOME} or ${USER}"
                )
            inner = text[i + 2 : close]
            if inner in _EXPANDABLE:
                parts.append(self.variable(inner, i))
                return close + 1
            j = 0
            while j < len(inner) and inner[j] in _NAME_CHARS:
                j += 1
            if 0 < j < len(inner) or inner[:1] in ("#", "!"):
                raise self.error(
                    i,
                    f"parameter expansion ${{{inner}}} is not allowed — only plain ${{HOME}} "
                    "and ${USER} expand. Write the value itself",
                )
            raise self.error(i, _not_expanded(f"${{{inner}}}"))
        if nxt == "(":
            if text.startswith("((", i + 1):
                raise self.error(
                    i,
                    f"arithmetic expansion $((…)) is not allowed — {_NEVER}. "
                    "Write the number itself",
                )
            raise self.error(
                i,
                f"command substitution $(…) is not allowed — {_NEVER}. Write the value itself",
            )
        if nxt == "[":
            raise self.error(
                i,
                f"arithmetic expansion $[…] is not allowed — {_NEVER}. Write the number itself",
            )
        if nxt and nxt in _SPECIAL_PARAMETERS:
            raise self.error(i, _not_expanded(f"${nxt}"))
        if not quoted and nxt == "'":
            raise self.error(i, "$'…' quoting is not allowed — use '…' for a literal string")
        if not quoted and nxt == '"':
            raise self.error(i, '$"…" quoting is not allowed — use "…"')
        parts.append("$")  # a `$` that bash also leaves alone: `a$`, `$/`, "a$"
        return i + 1

    def variable(self, name: str, pos: int) -> str:
        value = self.variables.get(name)
        if value is None:
            raise self.error(pos, f"${name} cannot be expanded — {name} is not set")
        return value


_CONTINUATION = (
    "backslash-newline inside a value is not allowed — it would join two lines into one word. "
    "Keep the word on one line (quoted text may span lines without a backslash)"
)


def _is_name(word: str) -> bool:
    return bool(word) and word[0] in _NAME_START and _NAME_CHARS.issuperset(word)


def _not_expanded(what: str, name: str = "") -> str:
    message = f"{what} is not expanded — only $HOME and $USER (or ${{HOME}}, ${{USER}}) are. "
    for known in ("HOME", "USER"):
        if name.startswith(known):  # $HOMEDIR meant as $HOME then DIR
            rest = name[len(known) :]
            return message + f"Write ${{{known}}}{rest} for ${known} followed by {rest}"
    return message + "Write the value itself (\\$ or '$' for a literal dollar sign)"


def _unknown_key(key: str, known_keys: frozenset[str]) -> str:
    import difflib  # only on this error path: keeps the import off every launch

    close = difflib.get_close_matches(key, sorted(known_keys), n=1)
    if close:
        return f"unknown key {key}; did you mean {close[0]}?"
    return f"unknown key {key}; known keys: {', '.join(sorted(known_keys))}"
