"""Names derived from paths, shared by the launcher and the chaperon (kept
apart from the ledger so a launch does not import the ledger's machinery)."""
from __future__ import annotations

import os

try:   # built into CPython 3.11; hashlib would load OpenSSL (2 ms on every launch)
    from _sha256 import sha256
except ImportError:
    from hashlib import sha256


def project_hash(project_dir: str) -> str:
    """The project's short name in the ledger, the comment tag and the
    staging directory: the same for every spelling of the same directory."""
    return sha256(os.path.realpath(project_dir).encode()).hexdigest()[:16]
