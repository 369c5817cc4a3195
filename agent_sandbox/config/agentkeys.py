"""The vocabulary of an agent profile's state keys, checked when a profile
loads (config/profiles.py) and applied by the launcher (policy/agentmerge.py,
policy/agentstate.py): one source for both.

- AGENT_SETTINGS_KEEP kinds: a kept settings key is typed *and* constrained
  (issue 27) — free text (`str`, `strs`, no type) is refused, strings have a
  strict pattern (STRING_KINDS), a language (LANGUAGES) or an enum.
- AGENT_CONFIG_PER_PROJECT entries: `PARENT/{ENCODING}`, ENCODINGS being the
  ways agents name a project in their state directory.
"""
from __future__ import annotations

# The constrained string kinds: strict patterns, matched whole (compiled
# when a value is judged: re costs a launch that loads a profile ~3 ms).
STRING_KINDS = {
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "hex": r"[0-9a-fA-F]{1,128}",
    "version": r"[0-9]{1,6}(\.[0-9]{1,6}){0,3}([-+][0-9A-Za-z.]{1,32})?",
    "isotime": (r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                r"(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:?[0-9]{2})?"),
    "name": r"[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]{0,127}",
}

# `language`: what Claude Code puts in its system prompt as the language to
# answer in — a language's English name (any case) or its ISO 639-1 code.
LANGUAGES = frozenset("""
    afrikaans albanian amharic arabic armenian azerbaijani basque belarusian bengali bosnian
    bulgarian burmese catalan chinese croatian czech danish dutch english esperanto estonian
    filipino finnish french galician georgian german greek gujarati hebrew hindi hungarian
    icelandic indonesian irish italian japanese kannada kazakh khmer korean kurdish kyrgyz lao
    latin latvian lithuanian luxembourgish macedonian malay malayalam maltese marathi mongolian
    nepali norwegian pashto persian polish portuguese punjabi romanian russian serbian sinhala
    slovak slovenian somali spanish swahili swedish tagalog tajik tamil tatar telugu thai
    tibetan turkish turkmen ukrainian urdu uyghur uzbek vietnamese welsh yiddish yoruba zulu
    af sq am ar hy az eu be bn bs bg my ca zh hr cs da nl en eo et fi fr gl ka de el gu he hi
    hu is id ga it ja kn kk km ko ku ky lo la lv lt lb mk ms ml mt mr mn ne no nb nn ps fa pl
    pt pa ro ru sr si sk sl so es sw sv tl tg ta tt te th bo tr tk uk ur ug uz vi cy yi yo zu
""".split())
FREE_TEXT = ("", "scalar", "str", "strs")
PLAIN_KINDS = ("bool", "int", "num")


def pattern_problem(pattern: str) -> str:
    """What is wrong with one AGENT_SETTINGS_KEEP pattern of a profile ("" if
    nothing): free text (`str`, `strs`, no type) is refused — the agent reads
    such a value as words, maybe instructions —, and so is a malformed
    `enum(…)`. (Any other word is a literal: `untrusted`, `false`.)"""
    key, sep, kind = pattern.partition("=")
    if not key or not sep:
        return "no =TYPE (a kept key must say what it may hold)"
    if kind in FREE_TEXT:
        return (f"={kind or '(nothing)'} is free text — use a constrained kind "
                f"({', '.join(sorted(STRING_KINDS))}, language, enum(a|b|…)) or "
                "bool/int/num")
    if kind.startswith("enum("):
        inner = kind[5:-1] if kind.endswith(")") else ""
        if not inner or any(not w.strip() or not w.isprintable() or ")" in w
                            for w in inner.split("|")):
            return f"={kind}: enum(…) lists the values allowed, separated by |"
    return ""


ENCODINGS = ("path-dashed", "path-sha256", "gemini-registry")


def parse_per_project(entry: str) -> tuple[str, str]:
    """('projects', 'path-dashed') from 'projects/{path-dashed}'; ValueError
    saying what is wrong."""
    parent, sep, leaf = entry.strip("/").partition("/")
    if (not sep or not parent or parent in (".", "..") or "/" in leaf
            or not (leaf.startswith("{") and leaf.endswith("}"))):
        raise ValueError("not PARENT/{ENCODING}")
    if leaf[1:-1] not in ENCODINGS:
        raise ValueError(f"unknown encoding {leaf} (known: "
                         f"{', '.join('{' + e + '}' for e in ENCODINGS)})")
    return parent, leaf[1:-1]


# AGENT_TRUST and AGENT_KEY_APPROVAL entries: FILE:KEY.PATH=VALUE. The key
# path is split at dots before {dir} is put in (a directory's name may hold
# dots: it stays one key).
def parse_entry(entry: str) -> tuple[str, tuple[str, ...], str]:
    """(file, key path, value) of one entry; ValueError saying what is wrong."""
    file, sep, rest = entry.partition(":")
    key, eq, value = rest.partition("=")
    path = tuple(key.split("."))
    if not sep or not file or not eq or not key or not all(path) or not value:
        raise ValueError("not FILE:KEY.PATH=VALUE")
    return file, path, value


def entry_problem(kind: str, entry: str) -> str:
    """What is wrong with one AGENT_TRUST (a JSON literal value; {dir} in the
    path once) or AGENT_KEY_APPROVAL (value tail:N) entry ("" if nothing)."""
    try:
        _file, path, value = parse_entry(entry)
    except ValueError as exc:
        return str(exc)
    if kind == "AGENT_TRUST":
        import json

        if sum(part == "{dir}" for part in path) != 1:
            return "the key path must name the directory once, as {dir}"
        try:
            literal = json.loads(value)
        except ValueError:
            return f"{value} is not a JSON literal (true, \"trusted\")"
        if not isinstance(literal, (bool, str)):
            return "the value must be true/false or a string"
        return ""
    count = value[5:] if value.startswith("tail:") else ""
    if not count.isdigit() or not 0 < int(count) <= 64:
        return "the value must be tail:N (the last N characters of the key, N ≤ 64)"
    return ""
