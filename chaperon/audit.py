"""The chaperon's audit log (SPEC §9): one file per chaperon session under
~/.local/state/agent-sandbox/chaperon/<host>_<pid>_<time>.log, mode 0600 in a
0700 directory that is hidden inside every sandbox. One JSON object a line:
start/stop, every request (command, arguments, cwd, script size and hash —
never the script body), every refusal with its reason code. Old files are
removed by age (CHAPERON_LOG_RETAIN_DAYS) and by total size."""
from __future__ import annotations

import json
import os
import socket
import threading
import time

MAX_TOTAL_BYTES = 200 * 1024 * 1024
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


def log_dir(state_dir: str) -> str:
    return os.path.join(state_dir, "chaperon")


class AuditLog:
    def __init__(self, config: dict):
        directory = log_dir(config["state_dir"])
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.path = os.path.join(directory,
                                 f"{socket.gethostname()}_{os.getpid()}_{stamp}.log")
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                          0o600)
        self.level = LEVELS.get(config.get("log_level", "info"), 20)
        self.session = config["session_id"]
        self.lock = threading.Lock()
        self._prune(directory, config.get("retain_days", 7))

    def _prune(self, directory: str, retain_days: int) -> None:
        try:
            entries = []
            for name in os.listdir(directory):
                path = os.path.join(directory, name)
                info = os.stat(path)
                entries.append((info.st_mtime, info.st_size, path))
        except OSError:
            return
        cutoff = time.time() - retain_days * 86400
        total = sum(size for _, size, _ in entries)
        for mtime, size, path in sorted(entries):
            if path == self.path:
                continue
            if mtime < cutoff or total > MAX_TOTAL_BYTES:
                try:
                    os.unlink(path)
                    total -= size
                except OSError:
                    pass

    def _write(self, level: int, record: dict) -> None:
        if level < self.level:
            return
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "session": self.session,
                  **record}
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self.lock:
            try:
                os.write(self.fd, line.encode("utf-8", "surrogateescape"))
            except OSError:
                pass   # a full disk must not stop Slurm answers; submission checks the ledger

    def event(self, event: str, **fields) -> None:
        self._write(20, {"event": event, **fields})

    def request(self, command: str, args, cwd: str, **fields) -> None:
        self._write(20, {"event": "request", "command": command, "args": list(args),
                         "cwd": cwd, **fields})

    def refusal(self, command: str, reason: str, detail: str) -> None:
        self._write(30, {"event": "refusal", "command": command, "reason": reason,
                         "detail": detail})
