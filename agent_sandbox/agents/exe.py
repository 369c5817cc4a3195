"""The same agent inside as outside: resolve the executable as the user's
shell would, and make that exact file run inside.

Strategy: look the profile's command up on the caller's PATH (outside), take
its real path, and run that absolute path inside — so a same-named binary
earlier on the inner PATH (or in a directory the sandbox adds) can never run
in its place. When the file is not visible inside (an install under ~/tools,
~/.nvm, …, with a tmpfs home), its install is bound read-only, as narrow as
it runs: the topmost `node_modules` of an npm install (its dependencies live
there), the prefix above a `bin/` directory only when it is one (a venv's
pyvenv.cfg, conda-meta/, a node prefix's lib/node_modules), a native
executable alone, else the script's own directory — never a tree that
merely holds it (~/Downloads/claude does not show ~/Downloads' other files
beyond its directory, ~/work/bin/claude not all of ~/work).
The executable is looked up on PATH as the shell would, but a candidate
found through a relative PATH entry (., node_modules/.bin) or lying in a tree
the sandbox can write (the project, writable home entries) is refused: a
session could plant it — or a symlink aiming the next launch's bind at
~/anything — for the next launch. A `#!/usr/bin/env NAME` script would find NAME on the
inner PATH: NAME is resolved outside too and run explicitly (`node
script.js ARGS`), its install bound the same way. When the install would be
the whole home (or `/`), or the file lies under a hidden path, the launch is
refused, naming the path and the setting that would show it. Hidden paths
inside a bound tree stay hidden (policy/view.py carves them).

`~/.npmrc` stays hidden (it holds registry tokens); its `prefix=` alone goes
in as `npm_config_prefix`, so `npm` inside keeps the user's per-user prefix.

The decision is policy/executable.py's, pure over the reads this module
hands it (HOST: the host's filesystem); what stays here is those reads and
the names the launcher and the tests call.
"""

from __future__ import annotations

import os

from agent_sandbox.policy import executable
from agent_sandbox.policy.model import is_shown


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _is_prefix(directory: str) -> bool:
    """An install prefix (venv, conda, node) rather than any tree with a bin/."""
    return (os.path.isfile(os.path.join(directory, "pyvenv.cfg"))
            or os.path.isdir(os.path.join(directory, "conda-meta"))
            or os.path.isdir(os.path.join(directory, "lib", "node_modules")))


def _native(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def _shebang(path: str) -> list[str]:
    try:
        with open(path, "rb") as handle:
            line = handle.read(256).split(b"\n", 1)[0]
    except OSError:
        return []
    if not line.startswith(b"#!"):
        return []
    return line[2:].decode("utf-8", "replace").split()


# Looked up at each call (not bound once): a test's monkeypatch of
# os.path.realpath, a recorder's wrapper of os.stat, reach the decision.
HOST = executable.Reads(is_executable=_is_executable,
                        realpath=lambda path: os.path.realpath(path),
                        shebang=_shebang, is_prefix=_is_prefix, is_native=_native,
                        isdir=lambda path: os.path.isdir(path))


def visible(policy, path: str) -> bool:
    """Does `path` (a real path) show the host's file inside?"""
    return is_shown(policy, path)


def install_root(real: str, home: str) -> str | None:
    """The tree to bind so that `real` runs with what it loads (executable.install_root)."""
    return executable.install_root(real, home, HOST)


def which(policy, program: str, path_env: str, name: str, what: str) -> str | None:
    """`program` on PATH as the shell finds it (executable.which)."""
    return executable.which(policy, program, path_env, name, what, HOST)


def resolve(policy, command: list[str], environ, name: str) -> tuple:
    """(policy, command): the command with its executable (and a `#!/usr/bin/env`
    interpreter) as absolute real paths that are visible inside."""
    return executable.resolve(policy, command, environ.get("PATH", os.defpath), name, HOST)


def npm_prefix(policy, home: str):
    """`prefix=` of ~/.npmrc (never its tokens) as npm_config_prefix inside,
    its tree visible read-only (executable.npm_prefix)."""
    if "npm_config_prefix" in policy.env or "NPM_CONFIG_PREFIX" in policy.env:
        return policy
    from agent_sandbox.paths import read_regular

    return executable.npm_prefix(policy, home, read_regular(os.path.join(home, ".npmrc"),
                                                            1 << 20), HOST)
