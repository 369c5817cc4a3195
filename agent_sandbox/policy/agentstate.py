"""Agent state scoped to the session's project, and the login rule (issue 27).

Pure: the names an agent gives its per-project state, and what a session's
login change may become. agents/copy.py applies both.

Per-project state. An agent keeps state keyed by project in its
configuration directory — Claude Code's `projects/<path, dashed>/`
(transcripts, and `memory/MEMORY.md`, which its next session in that
project loads as instructions), Gemini CLI's `tmp/<id>/` — and a session
that may write the whole parent can plant instructions for *another*
project, which the user's unsandboxed agent there obeys. A profile names
such a parent and how the agent names a project in it:

    AGENT_CONFIG_PER_PROJECT=('projects/{path-dashed}')

Only this project's entries are granted (writable) and linked into the
session copy; the parent itself is a directory of the copy's own (other
projects' entries do not exist in it, and on the real path they are not
granted: absent in a private home, read-only where the home is shown), and
at exit nothing but this project's entries goes back. "This project": the
project directory and every directory from it down to the working
directory (an agent started in a subdirectory keys its transcripts by its
working directory).

Encodings (ENCODINGS), read from the agents' sources:

- `path-dashed`: Claude Code 2.1 (`S()` in its CLI): every character but
  ASCII letters and digits becomes `-`; a result longer than 200 keeps its
  first 200 and adds `-` and the base-36 absolute value of the Java-style
  32-bit string hash of the path (UTF-16 code units).
- `path-sha256`: the hex SHA-256 of the path (Gemini CLI before its project
  registry, and other agents that hash).
- `gemini-registry`: Gemini CLI 0.2x+ (ProjectRegistry in its core): the
  name `projects.json` in the configuration directory maps the project
  directory to (`{"projects": {path: slug}}`), each `<parent>/<slug>/`
  holding an owner marker `.project_root` with the path. The launcher
  resolves it as Gemini does (the registry's entry if its markers agree,
  else a directory whose marker names the project, else a new slug of the
  directory's base name — `claim_slug`) and registers a new one itself,
  outside, so the session never needs to write the registry (read-only
  inside: a session could map another project to a directory it writes).
  A marker the session changes is put back at exit (Gemini adopts a
  directory whose marker names a new project: a planted marker would hand
  the session's memory to a project the user opens later).
"""
from __future__ import annotations

import os

from agent_sandbox.config.agentkeys import ENCODINGS, parse_per_project  # noqa: F401

REGISTRY = "projects.json"
OWNER_MARKER = ".project_root"
_DASHED_MAX = 200


def _java_hash(text: str) -> int:
    value = 0
    data = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        value = (value * 31 + int.from_bytes(data[i:i + 2], "little")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if not number:
            return out


def encode(encoding: str, path: str) -> str:
    """The name an agent gives the project at `path` in its state directory."""
    if encoding == "path-dashed":
        # per UTF-16 code unit, as JavaScript's replace: an astral character is "--"
        dashed = "".join(c if c.isascii() and c.isalnum() else "-" * (1 + (ord(c) > 0xFFFF))
                         for c in path)
        if len(dashed) <= _DASHED_MAX:
            return dashed
        return f"{dashed[:_DASHED_MAX]}-{_base36(abs(_java_hash(path)))}"
    if encoding == "path-sha256":
        import hashlib

        return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()
    raise ValueError(f"unknown encoding {encoding!r}")


def project_chain(project_dir: str, workdir: str) -> tuple[str, ...]:
    """The project directory and every directory from it down to workdir."""
    chain = [project_dir]
    relative = os.path.relpath(workdir, project_dir) if workdir else "."
    if relative != "." and not relative.startswith(".."):
        here = project_dir
        for part in relative.split("/"):
            here = os.path.join(here, part)
            chain.append(here)
    return tuple(chain)


def per_project_names(entries, project_dir: str, workdir: str,
                      registry_slug: str | None = None) -> dict[str, tuple[str, ...]]:
    """parent entry → the names of this project's entries in it (entries that
    do not parse are left out: the profile loader refuses them).
    `registry_slug`: the project's `gemini-registry` name, resolved by the
    launcher (None: no entry of such a parent is this project's)."""
    chain = project_chain(project_dir, workdir)
    out: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        try:
            parent, encoding = parse_per_project(entry)
        except ValueError:
            continue
        if encoding == "gemini-registry":
            mine = (registry_slug,) if registry_slug and is_slug(registry_slug) else ()
        else:
            mine = tuple(encode(encoding, d) for d in chain)
        names = out.get(parent, ()) + mine
        out[parent] = tuple(dict.fromkeys(n for n in names if n not in ("", ".", "..")))
    return out


def login_source(real_digest: str, have_store: bool, seen_digest: str | None) -> str:
    """Which login a session starts on: "real" — the user's file, copied
    into the sandbox's store first — when the store has none or the real
    file changed outside since it was last copied (`seen_digest`: the user
    logged in or refreshed outside; their login wins); else "store" (a
    refresh or login made in an earlier sandboxed session)."""
    if not have_store or seen_digest != real_digest:
        return "real"
    return "store"


def slugify(text: str) -> str:
    """Gemini CLI's slug of a directory's base name."""
    out, dash = "", False
    for c in text.lower():
        if c.isascii() and c.isalnum():
            out, dash = out + c, False
        elif not dash:
            out, dash = out + "-", True
    return out.strip("-") or "project"


def is_slug(name: str) -> bool:
    return (isinstance(name, str) and 0 < len(name) <= 255 and name not in (".", "..")
            and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name))


def claim_slug(project: str, registry: dict, owners) -> tuple[str, bool]:
    """(slug, new) for the project as Gemini CLI picks it: its registry entry
    when every marker of that slug names the project (or is missing); else a
    slug whose marker names it; else the first of base-name, base-name-1, …
    that no registry entry and no other project's marker holds. `owners(slug)`
    → the owners its markers name (None for a missing marker, "" for an
    unreadable one)."""
    def mine(slug: str) -> bool:
        return all(o is None or o == project for o in owners(slug))

    slug = registry.get(project)
    if isinstance(slug, str) and is_slug(slug) and mine(slug):
        return slug, False
    taken = {v for k, v in registry.items() if k != project}
    for candidate in owners.marked():
        if candidate not in taken and project in owners(candidate) and mine(candidate):
            return candidate, True
    base = slugify(os.path.basename(project))
    counter = 0
    while True:
        candidate = base if counter == 0 else f"{base}-{counter}"
        counter += 1
        if candidate not in taken and mine(candidate):
            return candidate, True
