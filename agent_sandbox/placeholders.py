"""Placeholders for missing protected paths, shared by every session of a
project.

A protected path (`.git/hooks/`, `.envrc`, …) that does not exist gets an
empty placeholder before the sandbox starts, so it can be kept read-only
(SPEC §4). Sessions overlap: a second sandbox of the same project — or a job
of it, on this or another host with the same home — mounts the placeholder the
first one made. Removing it when the first session ends would end the
protection inside the others (unlinking a mount point in another mount
namespace detaches that mount). So the placeholders a project has are
listed in `~/.local/state/agent-sandbox/placeholders/<project>.jsonl`
(hidden inside every sandbox), and only the last session of the project that
ends removes them — each still only if it is exactly what was written.
"Last" is judged by the session registry (registry.py): a live record of this
host, or any record of another host (it cannot be checked from here), keeps
them. A session killed with SIGKILL leaves its placeholders in place until the
next session of the project ends: they stay read-only meanwhile.
"""
from __future__ import annotations

import os

from .errors import PolicyError

SUBDIR = "placeholders"


def create(policy) -> list[tuple[str, bool, bytes]]:
    """Make the placeholders the plan mounts; return (path, is_dir, content)
    of each thing made (missing parents included), oldest first."""
    from .fsview import placeholders

    created = []
    for item in placeholders(policy):
        try:
            parent = os.path.dirname(item.path)
            missing_parents = []
            while not os.path.lexists(parent):
                missing_parents.append(parent)
                parent = os.path.dirname(parent)
            for directory in reversed(missing_parents):
                os.mkdir(directory, 0o755)
                created.append((directory, True, b""))
            if item.is_dir:
                os.mkdir(item.path, 0o755)
            else:
                fd = os.open(item.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o644)
                os.write(fd, item.placeholder)
                os.close(fd)
            created.append((item.path, item.is_dir, item.placeholder))
        except OSError as exc:
            raise PolicyError(f"cannot create the read-only placeholder {item.path} — {exc}. "
                              "Create it yourself or remove it from PROTECTED_PATHS.",
                              reason="placeholder_failed") from None
    return created


def _list_path(home: str, project: str) -> str:
    from chaperon.paths import project_hash

    from .confload import state_dir

    return os.path.join(state_dir(home), SUBDIR, project_hash(project) + ".jsonl")


def remember(home: str, project: str, created: list) -> None:
    """Add what this session made to the project's list (one appended line
    each, so concurrent sessions do not overwrite each other)."""
    if not created:
        return
    import json

    path = _list_path(home, project)
    lines = "".join(json.dumps([p, d, c.hex()]) + "\n" for p, d, c in created).encode()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, lines)
        finally:
            os.close(fd)
    except OSError:
        pass   # unlisted placeholders simply stay: read-only meanwhile, never unsafe


def _others_running(home: str, project: str, session: str) -> bool:
    from . import registry

    host, boot = registry.host_name(), registry.boot_id()
    records, _ = registry.read(home, now=0.0)
    for _, record in records:
        if record.get("project") != project or record.get("session") == session:
            continue
        verdict = registry.judge(record, host=host, boot=boot, lookup=registry.lookup_proc)
        if verdict in (registry.LIVE, registry.FOREIGN):
            return True
    return False


def release(home: str, project: str, session: str, created: list) -> None:
    """At the end of a session (after its registry record is gone): when no
    other session of the project runs, remove the project's placeholders,
    newest first, each only while it is still exactly what was written."""
    path = _list_path(home, project)
    if not created and not os.path.exists(path):
        return      # nothing of this project to remove: skip reading the registry
    if _others_running(home, project, session):
        return
    import json

    entries = []
    try:
        with open(path, "rb") as handle:
            for line in handle:
                try:
                    p, d, c = json.loads(line)
                    entries.append((p, bool(d), bytes.fromhex(c)))
                except (ValueError, TypeError):
                    continue
    except OSError:
        pass
    for item in created:
        if item not in entries:
            entries.append(item)
    for item_path, is_dir, content in reversed(entries):
        try:
            if is_dir:
                os.rmdir(item_path)   # fails when not empty: then it stays
            else:
                with open(item_path, "rb") as handle:
                    if handle.read() != content:
                        continue
                os.unlink(item_path)
        except OSError:
            pass
    try:
        os.unlink(path)
    except OSError:
        pass
