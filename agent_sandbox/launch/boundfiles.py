"""The host's side of the bound-file check (SPEC §6; SECRETS_IN_BOUND_FILES):
the verdicts are policy/boundfiles.py's, pure over the reads handed to them;
this module hands the host's (a plain file? its real path?) and keeps the
names the launcher (launch/payloads.py) and the tests call. Reading each
file's bytes is payloads.py's (_read_bound_file)."""
from __future__ import annotations

import os

from agent_sandbox.policy import boundfiles as verdicts
from agent_sandbox.policy.boundfiles import (MAX_BYTES, MODES, SHELL_STARTUP_FILES,  # noqa: F401
                                             TOO_LARGE, clean)
from agent_sandbox.policy.model import BoundFileFinding, BoundFileReport  # noqa: F401


def _plain_file(path: str) -> bool:
    return not os.path.islink(path) and os.path.isfile(path)


def bound_files(policy) -> tuple[tuple[str, str], ...]:
    """(path inside, path to read) for every single file bound from the home."""
    return verdicts.bound_files(policy, _plain_file, os.path.realpath)


def apply(policy, *, mode: str, can_generate: bool, contents: dict, removed):
    """(policy, payloads): policy/boundfiles.apply with this host's files."""
    sources = bound_files(policy) if mode != "off" else ()
    return verdicts.apply(policy, mode=mode, can_generate=can_generate, contents=contents,
                          removed=removed, sources=sources)
