"""Tests for agent_sandbox.config.syntax: sandbox.conf is parsed, never executed."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_sandbox.config.syntax import Assignment, ConfigSyntaxError, parse_config

FILE = "sandbox.conf"
VARIABLES = {"HOME": "/home/alice", "USER": "alice"}
REPO = Path(__file__).resolve().parents[3]


def parse(text: str, **kwargs) -> list[Assignment]:
    kwargs.setdefault("variables", VARIABLES)
    return parse_config(text, file=FILE, **kwargs)


def value_of(text: str) -> str | tuple[str, ...]:
    (assignment,) = parse(text)
    return assignment.value


def error_of(text: str, **kwargs) -> ConfigSyntaxError:
    with pytest.raises(ConfigSyntaxError) as info:
        parse(text, **kwargs)
    return info.value


# --- accepted constructs ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("KEY=value", "value", id="plain"),
        pytest.param("KEY=/usr/local/bin", "/usr/local/bin", id="path"),
        pytest.param('KEY="a b  c"', "a b  c", id="double-quoted"),
        pytest.param("KEY='a b  c'", "a b  c", id="single-quoted"),
        pytest.param("KEY=", "", id="empty"),
        pytest.param("KEY=\n", "", id="empty-newline"),
        pytest.param("KEY= # nothing", "", id="empty-comment"),
        pytest.param('KEY=""', "", id="empty-double"),
        pytest.param("KEY=''", "", id="empty-single"),
        pytest.param("KEY=true", "true", id="true-is-a-string"),
        pytest.param("KEY=false", "false", id="false-is-a-string"),
        pytest.param("KEY=a\"b c\"'d'", "ab cd", id="concatenation"),
        pytest.param("KEY='it'\\''s'", "it's", id="single-quote-escape"),
        pytest.param('KEY="x\\"y\\\\z\\$w\\`v"', 'x"y\\z$w`v', id="double-quote-escapes"),
        pytest.param('KEY="a\\nb\\tc"', "a\\nb\\tc", id="double-quote-other-backslash"),
        pytest.param("KEY='a\\b$c`d\"e'", 'a\\b$c`d"e', id="single-quote-literal"),
        pytest.param("KEY=a\\ b\\;c\\$d\\(e\\)", "a b;c$d(e)", id="unquoted-backslash"),
        pytest.param("KEY=a\\\n", "a", id="continuation-ends-value"),
        pytest.param("KEY=a \\\n  # c", "a", id="continuation-then-comment"),
        pytest.param("\\\nKEY=a", "a", id="continuation-before-key"),
        pytest.param("KEY='line 1\nline 2'", "line 1\nline 2", id="multi-line-single"),
        pytest.param('KEY="line 1\nline 2"', "line 1\nline 2", id="multi-line-double"),
        pytest.param("KEY=a#b", "a#b", id="hash-inside-word"),
        pytest.param("KEY=#b", "#b", id="hash-starting-value"),
        pytest.param("KEY=a=b", "a=b", id="equals-in-value"),
        pytest.param("KEY=/dev/nvidia*", "/dev/nvidia*", id="glob-literal"),
        pytest.param("KEY=a{b,c}", "a{b,c}", id="braces-literal"),
        pytest.param("KEY=a$", "a$", id="trailing-dollar"),
        pytest.param('KEY="a$"', "a$", id="trailing-dollar-quoted"),
        pytest.param("KEY=$/x", "$/x", id="dollar-slash"),
        pytest.param("KEY=\\$HOME", "$HOME", id="escaped-dollar"),
        pytest.param("KEY=ünïcødé", "ünïcødé", id="unicode"),
        pytest.param("KEY='a\rb'", "a\rb", id="carriage-return-quoted"),
        pytest.param("KEY=a~b", "a~b", id="tilde-inside-word"),
        pytest.param("   KEY=x", "x", id="indented"),
        pytest.param("\tKEY=x\t# c", "x", id="tabs"),
        pytest.param("KEY=()", (), id="empty-array"),
        pytest.param("KEY=( )", (), id="empty-array-blank"),
        pytest.param("KEY=(a)", ("a",), id="array-one"),
        pytest.param("KEY=(a \"b c\" 'd')", ("a", "b c", "d"), id="array"),
        pytest.param("KEY=(a\"b c\"'d' e)", ("ab cd", "e"), id="array-concatenation"),
        pytest.param("KEY=('' \"\")", ("", ""), id="array-empty-items"),
        pytest.param("KEY=(a#b #c\n)", ("a#b",), id="array-hash"),
        pytest.param("KEY=(a=b OMP_NUM_THREADS=4)", ("a=b", "OMP_NUM_THREADS=4"), id="array-env"),
        pytest.param("KEY=(a \\\n b)", ("a", "b"), id="array-continuation"),
        pytest.param("KEY=(a\\\n b\\\n\\\n)", ("a", "b"), id="array-continuation-ends-word"),
        pytest.param("KEY=(a)  # done", ("a",), id="array-trailing-comment"),
        pytest.param("KEY=(a)#done", ("a",), id="array-comment-no-blank"),
        pytest.param("KEY=('a)' \"(b\")", ("a)", "(b"), id="array-quoted-parens"),
    ],
)
def test_accepted_values(text, value):
    assert value_of(text) == value


def test_multi_line_array_with_comments_and_blank_lines():
    text = (
        "# home entries bound read-only\n"
        "HOME_READONLY=(\n"
        "    .bashrc        # shell rc\n"
        "\n"
        "    # conda\n"
        "    .conda  '.local/bin'\n"
        '    "with space"\n'
        ")\n"
        "NEXT=1\n"
    )
    assert parse(text) == [
        Assignment(
            "HOME_READONLY", False, (".bashrc", ".conda", ".local/bin", "with space"), FILE, 2, 1
        ),
        Assignment("NEXT", False, "1", FILE, 9, 1),
    ]


def test_append_and_order():
    text = "LIST=(a)\nLIST+=(b c)\nLIST+=()\nLIST=x\n"
    assert [(a.key, a.append, a.value) for a in parse(text)] == [
        ("LIST", False, ("a",)),
        ("LIST", True, ("b", "c")),
        ("LIST", True, ()),
        ("LIST", False, "x"),
    ]


def test_positions_are_those_of_the_key():
    text = "A=1\n\n  # comment\n\tB='multi\nline'\n   C=(\n x\n)\nD=2"
    assert [(a.key, a.line, a.column) for a in parse(text)] == [
        ("A", 1, 1),
        ("B", 4, 2),
        ("C", 6, 4),
        ("D", 9, 1),
    ]


def test_file_name_is_recorded():
    (assignment,) = parse_config("A=1", file="/etc/agent-sandbox/sandbox.conf", variables={})
    assert assignment.file == "/etc/agent-sandbox/sandbox.conf"


def test_empty_and_comment_only_texts():
    assert parse("") == []
    assert parse("\n\n   \n\t\n") == []
    assert parse("# only\n   # comments\n#") == []


def test_key_names():
    assert [a.key for a in parse("_=1\nA_1=2\nSANDBOX_BACKEND=auto\n__X9=3")] == [
        "_",
        "A_1",
        "SANDBOX_BACKEND",
        "__X9",
    ]


# --- comments -----------------------------------------------------------------


def test_comments_can_hold_anything():
    text = "# $(rm -rf /); `id` | > 'unterminated \"\nA=1 # ; & | $(x) ${HOME:-y} '\n#last"
    assert [(a.key, a.value) for a in parse(text)] == [("A", "1")]


def test_hash_in_quotes_is_not_a_comment():
    assert value_of("A='#x' # real comment") == "#x"
    assert value_of('A="# x"') == "# x"
    assert value_of("A=(' # x' # comment\n)") == (" # x",)


# --- expansion ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("A=$HOME", "/home/alice", id="home"),
        pytest.param("A=${HOME}", "/home/alice", id="home-braced"),
        pytest.param("A=$USER", "alice", id="user"),
        pytest.param("A=${USER}", "alice", id="user-braced"),
        pytest.param("A=$HOME/x", "/home/alice/x", id="home-path"),
        pytest.param("A=${HOME}x", "/home/alicex", id="braced-adjacent"),
        pytest.param("A=/scratch/$USER/p", "/scratch/alice/p", id="user-inside"),
        pytest.param('A="$HOME/my dir"', "/home/alice/my dir", id="double-quoted"),
        pytest.param('A="${USER}s"', "alices", id="double-quoted-braced"),
        pytest.param("A='$HOME'", "$HOME", id="single-quoted-literal"),
        pytest.param("A='${USER}'", "${USER}", id="single-quoted-braced-literal"),
        pytest.param('A="\\$HOME"', "$HOME", id="escaped-in-double"),
        pytest.param("A=~", "/home/alice", id="tilde"),
        pytest.param("A=~/", "/home/alice/", id="tilde-slash"),
        pytest.param("A=~/x/y", "/home/alice/x/y", id="tilde-path"),
        pytest.param("A=~ # c", "/home/alice", id="tilde-comment"),
        pytest.param("A=~/'a b'", "/home/alice/a b", id="tilde-then-quotes"),
        pytest.param("A=x:~/y:~", "x:/home/alice/y:/home/alice", id="tilde-after-colon"),
        pytest.param("A='~/x'", "~/x", id="tilde-single-quoted"),
        pytest.param('A="~/x"', "~/x", id="tilde-double-quoted"),
        pytest.param("A=\\~/x", "~/x", id="tilde-escaped"),
        pytest.param("A=x~/y", "x~/y", id="tilde-not-leading"),
        pytest.param("A=x':'~/y", "x:~/y", id="tilde-after-quoted-colon"),
        pytest.param("A=(~ ~/x y~ '~' $HOME)", ("/home/alice", "/home/alice/x", "y~", "~",
                                                 "/home/alice"), id="array"),
        pytest.param("A=(~)", ("/home/alice",), id="array-tilde-paren"),
        pytest.param("A=(a:~/b)", ("a:~/b",), id="array-no-colon-tilde"),
    ],
)
def test_expansion(text, value):
    assert value_of(text) == value


def test_only_home_and_user_come_from_variables():
    variables = {"HOME": "/h", "USER": "u", "PATH": "/bin", "FOO": "bar"}
    assert parse_config("A=$HOME:$USER", file=FILE, variables=variables)[0].value == "/h:u"
    with pytest.raises(ConfigSyntaxError) as info:
        parse_config("A=$FOO", file=FILE, variables=variables)
    assert (info.value.line, info.value.column) == (1, 3)


def test_expanded_values_are_not_rescanned():
    variables = {"HOME": "/h/$(id) `x` ~bob", "USER": "$USER;"}
    (a,) = parse_config('A=("$HOME" $USER ~)', file=FILE, variables=variables)
    assert a.value == ("/h/$(id) `x` ~bob", "$USER;", "/h/$(id) `x` ~bob")


def test_missing_variable_is_an_error():
    with pytest.raises(ConfigSyntaxError) as info:
        parse_config("A=x\nB=~/y", file=FILE, variables={"USER": "u"})
    assert (info.value.line, info.value.column) == (2, 3)
    assert "HOME is not set" in info.value.message


# --- refused constructs -------------------------------------------------------

REFUSED = [
    # command substitution and backticks
    ("cmdsub", "A=$(id)", 1, 3, "command substitution $(…) is not allowed"),
    ("cmdsub-quoted", 'A="x $(id)"', 1, 6, "command substitution $(…)"),
    ("cmdsub-array", "A=(a $(id))", 1, 6, "command substitution $(…)"),
    ("cmdsub-line-start", "$(id)", 1, 1, "command substitution $(…)"),
    ("backtick", "A=`id`", 1, 3, "command substitution `…` is not allowed"),
    ("backtick-quoted", 'A="a`id`"', 1, 5, "command substitution `…`"),
    ("backtick-line-start", "`id`", 1, 1, "command substitution `…`"),
    ("arithmetic", "A=$((1+2))", 1, 3, "arithmetic expansion $((…))"),
    ("arithmetic-brackets", "A=$[1+2]", 1, 3, "arithmetic expansion $[…]"),
    # other parameters
    ("other-variable", "A=$PATH", 1, 3, "$PATH is not expanded — only $HOME and $USER"),
    ("other-variable-quoted", 'A="x$PATH"', 1, 5, "$PATH is not expanded"),
    ("longer-name", "A=$HOMEDIR", 1, 3, "Write ${HOME}DIR for $HOME followed by DIR"),
    ("lowercase-name", "A=$home", 1, 3, "$home is not expanded"),
    ("braced-other", "A=${PATH}", 1, 3, "${PATH} is not expanded"),
    ("default-operator", "A=${HOME:-x}", 1, 3, "parameter expansion ${HOME:-x} is not allowed"),
    ("suffix-operator", 'A="${USER%x}"', 1, 4, "parameter expansion ${USER%x}"),
    ("length-operator", "A=${#HOME}", 1, 3, "parameter expansion ${#HOME}"),
    ("indirect", "A=${!HOME}", 1, 3, "parameter expansion ${!HOME}"),
    ("unterminated-brace", "A=${HOME\nB=1", 1, 3, "unterminated ${"),
    ("positional", "A=$1", 1, 3, "$1 is not expanded"),
    ("special-at", 'A="$@"', 1, 4, "$@ is not expanded"),
    ("special-pid", "A=$$", 1, 3, "$$ is not expanded"),
    ("underscore", "A=$_", 1, 3, "$_ is not expanded"),
    ("ansi-c-quote", "A=$'x'", 1, 3, "$'…' quoting is not allowed"),
    ("locale-quote", 'A=$"x"', 1, 3, '$"…" quoting is not allowed'),
    # operators
    ("semicolon", "A=1;", 1, 4, "`;` is not allowed"),
    ("semicolon-blank", "A=1 ; B=2", 1, 5, "`;` is not allowed"),
    ("semicolon-line-start", "A=1\n;", 2, 1, "`;` is not allowed"),
    ("semicolon-array", "A=(a;b)", 1, 5, "`;` is not allowed"),
    ("ampersand", "A=1 &", 1, 5, "`&` is not allowed"),
    ("and-list", "A=a&&b", 1, 4, "`&` is not allowed"),
    ("pipe", "A=a|b", 1, 4, "`|` is not allowed"),
    ("or-list", "A=1 || B=2", 1, 5, "`|` is not allowed"),
    ("redirect-in", "A=a <x", 1, 5, "redirection `<` is not allowed"),
    ("redirect-out", "A=a>x", 1, 4, "redirection `>` is not allowed"),
    ("redirect-array", "A=(a >x)", 1, 6, "redirection `>`"),
    ("redirect-line-start", "> x", 1, 1, "redirection `>`"),
    # parentheses outside the array syntax
    ("open-paren-in-word", "A=a(b)", 1, 4, "unquoted `(` outside the array syntax"),
    ("close-paren-in-word", "A=a)", 1, 4, "unquoted `)` outside an array"),
    ("subshell", "(A=1)", 1, 1, "unquoted `(` outside the array syntax"),
    ("second-array", "A=(a) (b)", 1, 7, "unquoted `(` outside the array syntax"),
    ("close-paren-line-start", "A=(a)\n)", 2, 1, "unquoted `)` outside an array"),
    # shell control flow and functions
    ("if", "if true; then A=1; fi", 1, 1, "`if` is not allowed"),
    ("if-indented", "# c\n  if [ -d x ]\n", 2, 3, "`if` is not allowed"),
    ("then", "then", 1, 1, "`then` is not allowed"),
    ("for", "for x in a b; do :; done", 1, 1, "`for` is not allowed"),
    ("while", "while true; do :; done", 1, 1, "`while` is not allowed"),
    ("until", "until false; do :; done", 1, 1, "`until` is not allowed"),
    ("case", "case x in *) ;; esac", 1, 1, "`case` is not allowed"),
    ("brace-group", "{ A=1; }", 1, 1, "`{` is not allowed"),
    ("test", "[[ -d x ]]", 1, 1, "`[[` is not allowed"),
    ("function-keyword", "function f { :; }", 1, 1, "function definitions are not allowed"),
    ("function-parens", "setup() { :; }", 1, 1, "function definitions are not allowed"),
    ("function-parens-blank", "setup () { :; }", 1, 1, "function definitions are not allowed"),
    # sourcing other files
    ("source", "source other.conf", 1, 1, "`source` is not allowed"),
    ("dot", ". other.conf", 1, 1, "`.` is not allowed"),
    ("dot-indented", "A=1\n  . ~/x", 2, 3, "`.` is not allowed"),
    # builtins that declare variables
    ("export", "export A=1", 1, 1, "Write KEY=value without export"),
    ("export-indented", "\texport A=1", 1, 2, "`export` is not allowed"),
    ("readonly", "readonly A=1", 1, 1, "Write KEY=value without readonly"),
    ("declare", "declare -a A=(x)", 1, 1, "Write KEY=value without declare"),
    ("typeset", "typeset A=1", 1, 1, "Write KEY=value without typeset"),
    ("local", "local A=1", 1, 1, "Write KEY=value without local"),
    ("unset", "unset A", 1, 1, "Write KEY=value without unset"),
    # lines that are not assignments
    ("command", "echo hello", 1, 1, "`echo` is not an assignment"),
    ("bare-key", "A=1\nHOME_ACCESS\n", 2, 1, "`HOME_ACCESS` is not an assignment"),
    ("quoted-command", "'rm' -rf x", 1, 1, "`'rm'` is not an assignment"),
    ("path-command", "/bin/true", 1, 1, "`/bin/true` is not an assignment"),
    ("no-key", "=1", 1, 1, "no key before `=`"),
    ("blank-before-equals", "A =1", 1, 2, "blank before `=`"),
    ("blanks-around-equals", "A = 1", 1, 2, "blank before `=`"),
    ("blank-after-equals", "A= 1", 1, 4, "unexpected text after the value of A"),
    ("unquoted-blank", "A=a b", 1, 5, 'Quote a value that contains blanks: A="a b"'),
    ("newline-in-scalar", "A=a\nb", 2, 1, "`b` is not an assignment"),
    ("lowercase-key", "home_access=read", 1, 1, "invalid key home_access"),
    ("digit-first-key", "1A=x", 1, 1, "invalid key 1A"),
    ("dash-in-key", "MY-KEY=x", 1, 1, "invalid key MY-KEY"),
    ("indexed-key", "A[0]=x", 1, 1, "invalid key A[0]"),
    ("indexed-item", "A=([0]=x)", 1, 4, "indexed item [N]=…"),
    # two assignments on one line
    ("two-assignments", "A=1 B=2", 1, 5, "two assignments on one line"),
    ("two-after-array", "A=(x) B=2", 1, 7, "two assignments on one line"),
    ("two-append", "A=1 B+=(x)", 1, 5, "two assignments on one line"),
    ("two-lowercase", "A=1 b=2", 1, 5, "two assignments on one line"),
    ("text-after-array", "A=(x) y", 1, 7, "unexpected text after the array of A"),
    # += with a scalar
    ("append-scalar", "A+=x", 1, 2, "`+=` only appends to an array"),
    ("append-quoted", 'A+="x y"', 1, 2, "write A+=(value)"),
    ("append-empty", "A+=", 1, 2, "`+=` only appends to an array"),
    # unterminated quotes and arrays report where they started
    ("unterminated-single", "A=1\nB='abc\nC=2\n", 2, 3, "unterminated single quote"),
    ("unterminated-double", 'A="abc', 1, 3, "unterminated double quote"),
    ("unterminated-double-escaped", 'A="abc\\"', 1, 3, "unterminated double quote"),
    ("unterminated-in-word", "A=x'abc", 1, 4, "unterminated single quote"),
    ("unterminated-in-array", "A=(a 'b)", 1, 6, "unterminated single quote"),
    ("unterminated-array", "A=1\nB=(a\n b\n", 2, 3, "unterminated array"),
    ("unterminated-array-eof", "  B=(", 1, 5, "unterminated array"),
    ("array-closed-by-next-key", "A=(a\nB=(b)\n", 1, 3, "not closed by `)` before B=( on line 2"),
    # ~user
    ("tilde-user", "A=~bob", 1, 3, "`~bob` is not expanded"),
    ("tilde-user-path", "A=~bob/x", 1, 3, "`~bob` is not expanded"),
    ("tilde-user-array", "A=(x ~bob/y)", 1, 6, "`~bob` is not expanded"),
    ("tilde-plus", "A=~+", 1, 3, "`~+` is not expanded"),
    ("tilde-then-quote", 'A=~"x"', 1, 3, "a leading ~ followed by `\"` is not expanded"),
    ("tilde-user-after-colon", "A=x:~bob", 1, 5, "`~bob` is not expanded"),
    # nested arrays
    ("nested-array", "A=((a))", 1, 4, "nested arrays are not allowed"),
    ("nested-array-item", "A=(a (b))", 1, 6, "nested arrays are not allowed"),
    ("nested-array-in-word", "A=(a b(c))", 1, 7, "nested arrays are not allowed"),
    # characters a text file should not hold
    ("crlf", "A=1\r\nB=2\r\n", 1, 4, "carriage return (a Windows line ending)"),
    ("crlf-blank-line", "# c\r\n\r\n", 2, 1, "carriage return"),
    ("nul", "A=1\nB='x\0y'", 2, 5, "NUL byte"),
    ("bom", "\ufeffA=1", 1, 1, "byte-order mark"),
    ("backslash-at-eof", "A=x\\", 1, 4, "backslash at the end of the file"),
    # backslash-newline is a blank between words, never part of one
    ("continuation-in-word", "KEY=a\\\nb", 1, 6, "backslash-newline inside a value"),
    ("continuation-in-double-quotes", 'KEY="a\\\nb"', 1, 7, "backslash-newline inside"),
    ("continuation-before-tilde", "A=\\\n\\\n~/", 1, 3, "backslash-newline inside"),
    ("continuation-in-array-word", "A=(a\\\nb)", 1, 5, "backslash-newline inside"),
    ("continuation-after-dollar", "A=$\\\nHOME", 1, 4, "backslash-newline inside"),
    ("continuation-in-key", "HOME_\\\nACCESS=x", 1, 1, "`HOME_\\` is not an assignment"),
    # columns count characters, not bytes
    ("column-after-unicode", "A=é;", 1, 4, "`;` is not allowed"),
]


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSED],
)
def test_refused(text, line, column, fragment):
    error = error_of(text)
    assert (error.file, error.line, error.column) == (FILE, line, column)
    assert fragment in error.message
    assert str(error) == f"{FILE}:{line}:{column}: {error.message}"


def test_refusals_say_why_and_what_to_do():
    messages = {
        "A=$(id)": "sandbox.conf is parsed, never executed",
        "A=1;B=2": "Put each assignment on its own line",
        "export A=1": "Write KEY=value without export",
        "A=a b": 'A="a b"',
        "A+=x": "A=value to replace the value",
        "home_access=read": "Write HOME_ACCESS=…",
        "A=1 B=2": "put B on a line of its own",
    }
    for text, fragment in messages.items():
        assert fragment in error_of(text).message, text


def test_first_error_wins():
    error = error_of("A=1\nB=$(x) ; C=`y`\n")
    assert (error.line, error.column) == (2, 3)


# --- known keys ---------------------------------------------------------------

KNOWN = ["HOME_ACCESS", "HOME_READONLY", "SANDBOX_BACKEND", "SLURM_SCOPE"]


def test_known_keys_accept_listed_keys():
    text = "HOME_ACCESS=read\nSLURM_SCOPE=project\nHOME_READONLY+=(.x)"
    assert [a.key for a in parse(text, known_keys=KNOWN)] == [
        "HOME_ACCESS",
        "SLURM_SCOPE",
        "HOME_READONLY",
    ]


def test_known_keys_accept_any_collection():
    assert parse("A=1", known_keys={"A"}) == parse("A=1", known_keys=("A",))


def test_unknown_key_suggests_a_close_match():
    error = error_of("HOME_ACCESS=read\n  HOME_ACESS=write\n", known_keys=KNOWN)
    assert (error.line, error.column) == (2, 3)
    assert error.message == "unknown key HOME_ACESS; did you mean HOME_ACCESS?"


def test_unknown_key_lists_known_keys():
    error = error_of("FOO=1", known_keys=KNOWN)
    assert (error.line, error.column) == (1, 1)
    assert error.message == (
        "unknown key FOO; known keys: HOME_ACCESS, HOME_READONLY, SANDBOX_BACKEND, SLURM_SCOPE"
    )


def test_unknown_key_checked_for_append():
    error = error_of("A=1\nNOPE+=(x)", known_keys=["A"])
    assert (error.line, error.column, error.message) == (2, 1, "unknown key NOPE; known keys: A")


def test_without_known_keys_any_key_is_accepted():
    assert parse("ANYTHING_AT_ALL=1")[0].key == "ANYTHING_AT_ALL"


# --- the public types ---------------------------------------------------------


def test_assignment_is_immutable_and_compares_by_value():
    a = Assignment("A", False, ("x",), FILE, 1, 1)
    b = Assignment(key="A", append=False, value=("x",), file=FILE, line=1, column=1)
    assert a == b and hash(a) == hash(b)
    assert a != Assignment("A", True, ("x",), FILE, 1, 1)
    assert a != ("A", False, ("x",), FILE, 1, 1)
    assert len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.value = "y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del a.key
    with pytest.raises(AttributeError):
        a.extra = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(a) == (
        "Assignment(key='A', append=False, value=('x',), file='sandbox.conf', line=1, column=1)"
    )
    assert Assignment.__match_args__[:3] == ("key", "append", "value")
    if sys.version_info >= (3, 10):   # a `match` statement would not compile on Python 3.9
        scope = {"a": a, "Assignment": Assignment}
        exec("match a:\n case Assignment(key, append, value): found = (key, append, value)", scope)
        assert scope["found"] == ("A", False, ("x",))


def test_config_syntax_error():
    error = ConfigSyntaxError("f.conf", 3, 7, "bad thing — fix it")
    assert isinstance(error, ValueError)
    assert (error.file, error.line, error.column, error.message) == (
        "f.conf",
        3,
        7,
        "bad thing — fix it",
    )
    assert str(error) == "f.conf:3:7: bad thing — fix it"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.file, copy.line, copy.column, str(copy)) == ("f.conf", 3, 7, str(error))


def test_import_stays_light():
    """The parser runs on every launch: importing it must not pull re, dataclasses, difflib."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import agent_sandbox; "
        "before = set(sys.modules); import agent_sandbox.config.syntax; "
        "print(sorted(m for m in ('re', 'dataclasses', 'difflib', 'typing', 'inspect') "
        "if m in sys.modules and m not in before))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# --- agreement with bash -------------------------------------------------------

BASH_DUMP = r"""
set -f +B
source "$1"
shift
for key; do
    declare -n ref="$key"
    if [[ "$(declare -p "$key")" == "declare -a"* ]]; then
        printf 'A\0%s\0' "${#ref[@]}"
        (( ${#ref[@]} )) && printf '%s\0' "${ref[@]}"
    else
        printf 'S\0%s\0' "$ref"
    fi
    unset -n ref
done
"""

BASH_AGREES = [
    "A=plain\nB='single quoted'\nC=\"double $HOME ${USER}\"\nD=\nE=''",
    "A=a\"b c\"'d'\\ e\\$f\nB='it'\\''s'\nC=\"x\\\"y\\\\z\\$w\\`v\\q\"",
    "A=(a \"b c\" 'd'  # comment\n\n  # more\n  e\\ f $HOME \"${USER}x\" '$HOME'\n)\nA+=(g)\nA+=()",
    "A=~\nB=~/x\nC=(~ ~/y a~ '~' \"~\" \\~)\nD=x:~/y:~:z\nE=(x:~/y)",
    "A=a#b # comment\nB=(c#d #e\n)\nC=#x",
    "A=/dev/nvidia*\nB=(/dev/nvidia* {a,b} [ab])\nC=a{b,c}",
    "A=a$\nB=\"a$\"\nC=$/x\nD=(a$ \"$\")\nE=\"$'x\"",
    "A=x\\\n\nB=(a \\\n b c\\\n d)\nC=y \\\n # c\nD='multi\nline'\nE=\"multi\nline\"",
    "  A=1\t# c\n\tB=( x )  # c\nC=true\nD=false",
    "A='a\rb'\nB=(ünï 'cødé')",
    "A=a=b\nB=(OMP_NUM_THREADS=4 K=\"v w\")",
    "A=()\nB=( # nothing\n)\nB+=()",
]


@pytest.mark.parametrize("text", BASH_AGREES)
def test_bash_reads_the_same_values(text, tmp_path):
    """Every accepted construct means what bash would make of it (globbing off)."""
    bash = shutil.which("bash")
    assert bash, "bash is required on the platform agent-sandbox supports"
    expected: dict[str, str | tuple[str, ...]] = {}
    for a in parse(text):
        if a.append:
            expected[a.key] = expected[a.key] + a.value  # type: ignore[operator]
        else:
            expected[a.key] = a.value
    conf = tmp_path / "sandbox.conf"
    conf.write_text(text, encoding="utf-8")
    env = {"HOME": VARIABLES["HOME"], "USER": VARIABLES["USER"], "PATH": os.defpath}
    out = subprocess.run(
        [bash, "--noprofile", "--norc", "-c", BASH_DUMP, "bash", str(conf), *expected],
        capture_output=True,
        env=env,
        check=True,
    )
    assert out.stderr == b""
    fields = out.stdout.decode("utf-8").split("\0")
    got: dict[str, str | tuple[str, ...]] = {}
    pos = 0
    for key in expected:
        kind = fields[pos]
        if kind == "S":
            got[key] = fields[pos + 1]
            pos += 2
        else:
            count = int(fields[pos + 1])
            got[key] = tuple(fields[pos + 2 : pos + 2 + count])
            pos += 2 + count
    assert got == expected


# --- properties ---------------------------------------------------------------

# NUL cannot occur in a shell string, a path or an environment value; the parser
# refuses it anywhere, so it is the one character left out of the strategies.
TEXT = st.text(st.characters(exclude_characters="\0"))


def single_quoted(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


@given(st.lists(TEXT))
def test_single_quoted_array_round_trip(items):
    text = "KEY=(" + " ".join(single_quoted(s) for s in items) + ")"
    assert parse(text) == [Assignment("KEY", False, tuple(items), FILE, 1, 1)]


@given(st.lists(TEXT), st.sampled_from([" ", "\n", "\n  # c\n\t", " \\\n "]))
def test_single_quoted_array_round_trip_with_layout(items, separator):
    text = "# head\nKEY+=(" + separator + separator.join(single_quoted(s) for s in items) + ")\n"
    assert parse(text) == [Assignment("KEY", True, tuple(items), FILE, 2, 1)]


@given(TEXT)
def test_double_quoted_scalar_round_trip(value):
    escaped = "".join("\\" + c if c in '"\\$`' else c for c in value)
    assert value_of(f'KEY="{escaped}"') == value


@settings(max_examples=300)
@given(st.text(st.sampled_from(list("AB=+()'\"\\$`{}~#;&|<> \t\n:/HOMEUSRx\r\0"))))
def test_arbitrary_text_parses_or_fails_cleanly(text):
    """Any input gives assignments or a ConfigSyntaxError that points inside the text."""
    try:
        found = parse(text)
    except ConfigSyntaxError as error:
        lines = text.split("\n")
        assert 1 <= error.line <= len(lines)
        assert 1 <= error.column <= len(lines[error.line - 1]) + 1
        assert error.message
    else:
        for a in found:
            assert text.split("\n")[a.line - 1][a.column - 1 :].startswith(a.key)
