"""The note an agent profile gives its agent (NOTE_PATH: ~/.claude/CLAUDE.md,
~/.codex/AGENTS.md, …), decided (issue 28, item 3): a pure function over the
reads handed to it (launch/payloads.py hands the host's).

The note stands in for the user's own file at that path, after its text:
- the bound-file check blanked that file (a token in the user's CLAUDE.md):
  its blanked copy's text comes first and the note takes that copy's place
  — one file at that path, so neither the payload nor the plan cache's copy
  of it holds the token (the blanked payload is consumed);
- the file is hidden (or the check left it out: it is hidden then): none of
  its text;
- else whatever the user keeps there (at most 1 MiB; nothing when there is
  no such file).
Where a missing note gets a placeholder (a mount point bwrap cannot make in a
read-only directory) is policy/view.py's placeholder_candidates.
"""
from __future__ import annotations

MAX_BYTES = 1 << 20


def with_note(policy, note_path: str, *, slurm: bool, blanked, realpath, read) -> tuple:
    """(policy naming the note, the note's bytes, the blanked payload it
    consumed or None). `blanked(name)`: a generated payload's bytes;
    `realpath(path)`; `read(path)`: the file's first MAX_BYTES, or None when
    it cannot be read."""
    from agent_sandbox.config.profiles import note_text

    existing, used = b"", None
    copies = [g for g in policy.generated_files if g[0] == note_path]
    if copies:
        used = copies[0][1]
        existing = blanked(used).rstrip(b"\n") + b"\n\n"
        policy = policy._replace(generated_files=tuple(
            g for g in policy.generated_files if g[0] != note_path))
    elif not policy.is_hidden(realpath(note_path)):
        data = read(note_path)
        if data is not None:
            existing = data.rstrip(b"\n") + b"\n\n"
    note = existing + note_text(policy, slurm=slurm).encode()
    return policy._replace(notes=((note_path, "note-0"),)), note, used
