"""`agent-sandbox trust [DIR]`: the user trusts a directory for an agent,
outside the sandbox, by an explicit command.

Trust is an execution grant (a trusted folder's project settings and MCP
configuration run things), so a session's own trust grants are never merged
back (agents/copy.py, policy/agentmerge.py): the agent would ask again every
session. The remedy used to be running the agent unsandboxed once. This
command writes the one key the agent itself would write when the user
accepts its trust dialog — the profile's AGENT_TRUST entries (Claude Code:
`projects[DIR].hasTrustDialogAccepted = true` in ~/.claude.json; Codex:
`projects[DIR].trust_level = "trusted"` in ~/.codex/config.toml; Gemini CLI:
`DIR = "TRUST_FOLDER"` in ~/.gemini/trustedFolders.json) — and nothing else,
into the user's own file (the session copy starts from it). Run inside, it
is refused: there the user's files are read-only, and a sandboxed process
granting trust is exactly what the guard keeps out.

The file is read and rewritten by descriptor: its real path resolved once
(a dotfiles symlink is followed, as the agent does), the file replaced by a
rename inside the directory read, keeping its mode; TOML through tomlkit
(comments and layout kept).
"""
from __future__ import annotations

import os


def home_files(profile, home: str) -> dict:
    """AGENT_SETTINGS copy name → the user's file."""
    files = {}
    for entry in profile.settings:
        name, _, real = entry.partition("=")
        if real:
            files[os.path.normpath(name)] = os.path.join(home, os.path.expanduser(real))
    return files


def trust(profile, home: str, directory: str) -> list[tuple[str, str]]:
    """Write the profile's trust of `directory` (absolute, resolved); returns
    (file, key shown) for each entry written. OSError/ValueError when a file
    cannot be read or written as it is."""
    from agent_sandbox.config.agentkeys import parse_entry

    files = home_files(profile, home)
    done = []
    for entry in profile.trust:
        name, path, value = parse_entry(entry)
        real = files.get(os.path.normpath(name))
        if real is None:
            raise ValueError(f"AGENT_TRUST names {name}, which is not one of the profile's "
                             "AGENT_SETTINGS")
        keys = tuple(directory if part == "{dir}" else part for part in path)
        import json

        _set_key(real, keys, json.loads(value))
        from agent_sandbox.policy.agentmerge import show

        done.append((real, show(keys)))
    return done


def _set_key(real: str, keys: tuple, value) -> None:
    from agent_sandbox.agents.copy import _dump, _open_below, _parse, _read, _replace_at

    resolved = os.path.realpath(real)
    kind = "toml" if resolved.endswith(".toml") else "json"
    top = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parent = _open_below(top, os.path.dirname(resolved), create=True, mode=0o700)
    finally:
        os.close(top)
    if parent is None:
        raise OSError(f"{os.path.dirname(resolved)} is not a directory")
    try:
        name = os.path.basename(resolved)
        data = _read(name, dir_fd=parent)
        if data is None and _exists(parent, name):
            raise OSError(f"{resolved} is not a plain file")
        document = _parse(kind, (data or b"").decode("utf-8"), editable=True)
        if not isinstance(document, dict):
            raise ValueError(f"{resolved} does not hold a table")
        table = document
        for key in keys[:-1]:
            inner = table.get(key)
            if inner is None:
                inner = _new_table(kind)
                table[key] = inner
            if not isinstance(inner, dict):
                raise ValueError(f"{resolved}: {key} is not a table")
            table = inner
        if table.get(keys[-1]) == value and data is not None:
            return
        table[keys[-1]] = value
        _replace_at(parent, name, _dump(kind, document).encode())
    finally:
        os.close(parent)


def _new_table(kind: str):
    if kind == "toml":
        import tomlkit

        return tomlkit.table()
    return {}


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except OSError:
        return False
