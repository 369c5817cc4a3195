"""The session logs' vocabulary: where they live, how a record is appended,
the time format, and how a logged value is made safe for a terminal.

One floor below everything that writes or reads the logs: the launcher's
checks (services/gitcheck, configcheck, linkcheck; agents/copy) append records
and quote values with `clean`; `agent-sandbox logs` (tools/logs.py) reads and
renders them. Both import from here, so the launcher never reaches up into
tools/ (the floors guard, tests/unit/test_structure.py).
"""
from __future__ import annotations

import os

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"     # chaperon/audit.py


def log_directory(home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), "chaperon")


def append_records(home: str, name: str, records) -> None:
    """Append `records` (dicts, one JSON line each) to the session log `name`
    in the log directory (0600, never through a link); a log that cannot be
    written loses them — the report on stderr was already made."""
    import json     # here: a launch that reports nothing never pays for it

    lines = "".join(json.dumps(record) + "\n" for record in records)
    directory = log_directory(home)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(directory, name),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def clean(value) -> str:
    """Text safe for a terminal: control characters (C0, DEL, C1) escaped."""
    if isinstance(value, str):
        text = value
    else:
        import json

        text = json.dumps(value, ensure_ascii=False, default=str)
    out = []
    for char in text:
        code = ord(char)
        if code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        else:
            out.append(char)
    return "".join(out)
