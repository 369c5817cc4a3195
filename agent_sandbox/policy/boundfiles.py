"""Single files bound from the home, checked for secrets before the sandbox
gets them (SPEC §6; the key SECRETS_IN_BOUND_FILES).

The environment filter removes GH_TOKEN; a `~/.bashrc` that exports it would
hand it back (`cat ~/.bashrc`, `bash -ic 'echo $GH_TOKEN'`). So:

1. `bound_files(policy, reads)` lists the single files the sandbox gets from
   the home: HOME_READONLY entries that are regular files (not symlinks:
   those are recreated as links), seeded files (read through their real
   path, as the copy is made), and with HOME_ACCESS=read/write the shell
   start-up files, which then come in with the rest of the home. Whole
   directory trees are not checked (a launch must stay cheap). The two
   questions it asks the filesystem (a plain file? the real path?) are
   injected: launch/boundfiles.py hands the host's.
2. The launcher reads each one (opened once, O_NOFOLLOW, fstat: a regular
   file of at most MAX_BYTES) — the only I/O, and not in this module.
3. `apply` is pure: secretscan finds the lines, and by the mode
     blank  the sandbox gets a copy with those lines emptied, where the backend
            can bind a generated file (bwrap); elsewhere the file is skipped
     skip   the file is not bound at all: it joins the hidden paths, so every
            backend's one carving rule leaves it out
     off    nothing is checked
   A file too large to check is skipped in both modes (fail closed).
   Strictness for admin floors: skip > blank > off.

The report (banner, --dry-run) names the file, the lines and what was found
(a shape or a variable name), never the secret.
"""
from __future__ import annotations

import os
from typing import Callable

from agent_sandbox.policy.model import BoundFileFinding, BoundFileReport


MAX_BYTES = 1 << 20
MODES = ("skip", "blank", "off")          # strictest first (locks.ORDER)
# Read by shells at start-up; bound with the rest of the home in read/write mode.
SHELL_STARTUP_FILES = (
    ".profile", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases",
    ".zshenv", ".zprofile", ".zshrc", ".zlogin", ".zlogout", ".kshrc", ".mkshrc",
    ".cshrc", ".tcshrc", ".login", ".config/fish/config.fish",
)
TOO_LARGE = "too large"                    # what the reader returns for a file over MAX_BYTES


def bound_files(policy, plain_file: Callable[[str], bool],
                realpath: Callable[[str], str]) -> tuple[tuple[str, str], ...]:
    """(path inside, path to read) for every single file bound from the home.
    `plain_file(path)`: a regular file, not a symlink; `realpath(path)`."""
    pairs = [(p, p) for p in policy.home_readonly if plain_file(p)]
    pairs += [(p, realpath(p)) for p in policy.home_seeded]
    if policy.home_access in ("read", "write"):
        pairs += [(p, p) for p in (os.path.join(policy.home, name) for name in SHELL_STARTUP_FILES)
                  if plain_file(p) and not policy.is_hidden(p)]
    return tuple(dict(pairs).items())


def apply(policy, *, mode: str, can_generate: bool, contents: dict,
          removed: Callable[[str], bool], sources: dict):
    """(policy, payloads): `contents` maps each path of bound_files to its
    bytes, TOO_LARGE, or None (unreadable or not a regular file: nothing to
    check, and nothing readable inside either); `sources`: bound_files' pairs
    (path inside → path read), whose read path a skipped file hides too."""
    if mode == "off":
        return policy._replace(bound_file_report=BoundFileReport(mode, 0)), {}
    from agent_sandbox.policy.secrets import blank, scan   # its table compiles in ~3 ms

    findings: list[BoundFileFinding] = []
    skipped: list[str] = []
    generated: list[tuple[str, str, int]] = []
    payloads: dict[str, bytes] = {}
    sources = dict(sources)
    for path, data in contents.items():
        if data is None:
            continue
        if data == TOO_LARGE:
            findings.append(BoundFileFinding(path, "", f"larger than {MAX_BYTES >> 20} MiB, "
                                             "too large to check", "not bound"))
            skipped.append(path)
            continue
        text = data.decode("utf-8", "surrogateescape")
        found = scan(text, removed)
        if not found:
            continue
        action = "blanked" if mode == "blank" and can_generate else "not bound"
        findings += [BoundFileFinding(path, f.lines(), f.what, action) for f in found]
        if action == "blanked":
            name = f"bound-{len(generated)}"
            payloads[name] = blank(text, found).encode("utf-8", "surrogateescape")
            generated.append((path, name, 0o444))
        else:
            skipped.append(path)
    hidden = set(policy.hidden)
    for path in skipped:
        hidden.add(path)
        hidden.add(sources.get(path, path))
    policy = policy._replace(
        hidden=tuple(sorted(hidden)),
        home_readonly=tuple(p for p in policy.home_readonly if p not in skipped),
        home_seeded=tuple(p for p in policy.home_seeded if p not in skipped),
        generated_files=tuple(generated),
        bound_file_report=BoundFileReport(mode, len(contents), tuple(findings)))
    return policy, payloads


def clean(policy, *, mode: str, checked: int):
    """What `apply` returns when no file holds a secret (the launcher's cache
    of that verdict, keyed by the files' stat, skips reading and scanning)."""
    policy = policy._replace(hidden=tuple(sorted(set(policy.hidden))), generated_files=(),
                             bound_file_report=BoundFileReport(mode, checked, ()))
    return policy, {}
