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
"""
from __future__ import annotations

import os

from agent_sandbox.errors import PolicyError


def visible(policy, path: str) -> bool:
    """Does `path` (a real path) show the host's file inside?"""
    from agent_sandbox.policy.resolve import _is_within

    if policy.is_hidden(path):
        return False
    roots = (policy.system_readonly + policy.home_readonly + policy.home_writable
             + policy.extra_writable + policy.readonly_overlays + (policy.project_dir,))
    if policy.home_access in ("read", "write"):
        roots += (policy.home,)
    return any(_is_within(path, os.path.realpath(r)) or _is_within(path, r) for r in roots)


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


def install_root(real: str, home: str) -> str | None:
    """The tree to bind so that `real` runs with what it loads; None when that
    would be the home, an ancestor of it, or /."""
    from agent_sandbox.policy.resolve import _is_within

    parts = real.split("/")
    if "node_modules" in parts:
        root = "/".join(parts[:parts.index("node_modules") + 1])
    elif (os.path.basename(os.path.dirname(real)) == "bin"
          and _is_prefix(os.path.dirname(os.path.dirname(real)))
          and not _is_within(home, os.path.dirname(os.path.dirname(real)))):
        root = os.path.dirname(os.path.dirname(real))
    elif _native(real):
        root = real                 # a single-file executable: itself only
    else:
        root = os.path.dirname(real)
    if root in ("", "/") or _is_within(home, root):
        return None
    return root


def _shebang(path: str) -> list[str]:
    try:
        with open(path, "rb") as handle:
            line = handle.read(256).split(b"\n", 1)[0]
    except OSError:
        return []
    if not line.startswith(b"#!"):
        return []
    return line[2:].decode("utf-8", "replace").split()


def _show(policy, name: str, real: str, what: str):
    """The policy with `real` visible inside, or raise the refusal."""
    if visible(policy, real):
        return policy
    from agent_sandbox.policy.resolve import _is_within

    if policy.is_hidden(real):
        raise PolicyError(
            f"{name}: {what} {real} lies under a hidden path — the sandbox cannot run it. "
            "Install it elsewhere, or remove that path from BLOCKED_FILES / "
            "EXTRA_BLOCKED_PATHS.", reason="agent_not_visible")
    root = install_root(real, policy.home)
    if root is None:
        key = "HOME_READONLY" if _is_within(real, policy.home) else "READONLY_MOUNTS"
        raise PolicyError(
            f"{name}: {what} {real} is not visible inside the sandbox and its install "
            f"directory cannot be shown on its own — add {os.path.dirname(real)} to {key} "
            "in ~/.config/agent-sandbox/sandbox.conf, or install it in a directory of its "
            "own (e.g. ~/.local/share/<name> or under a node_modules prefix).",
            reason="agent_not_visible")
    if _is_within(root, policy.home):
        return policy._replace(home_readonly=policy.home_readonly + (root,))
    return policy._replace(system_readonly=policy.system_readonly + (root,))


def _writable_trees(policy) -> tuple[str, ...]:
    trees = policy.home_writable + policy.extra_writable + (policy.project_dir,)
    return trees + ((policy.home,) if policy.home_access == "write" else ())


def which(policy, program: str, path_env: str, name: str, what: str) -> str | None:
    """`program` on PATH as the shell finds it — refused when the shell would
    take it from a relative PATH entry or from a tree the sandbox can write."""
    from agent_sandbox.policy.resolve import _is_within

    if "/" in program:
        found = program
    else:
        found = None
        for entry in path_env.split(os.pathsep):
            candidate = os.path.join(entry or ".", program)
            if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
                continue
            if not os.path.isabs(entry):
                raise PolicyError(
                    f"{name}: {what} {program} would be taken from the relative PATH entry "
                    f"{entry or '(empty)'!r} ({os.path.abspath(candidate)}) — a sandboxed "
                    "session could have put it there. Remove relative entries from PATH.",
                    reason="agent_untrusted_path")
            found = candidate
            break
        if found is None:
            return None
    real = os.path.realpath(found)
    for tree in _writable_trees(policy):
        for path in {os.path.abspath(found), real}:
            if tree and (_is_within(path, tree) or _is_within(path, os.path.realpath(tree))):
                raise PolicyError(
                    f"{name}: {what} {found} lies in {tree}, which the sandbox can write — a "
                    "session could have replaced it for this launch. Install it outside the "
                    "project and the writable home entries (HOME_WRITABLE), or put a trusted "
                    "install earlier on PATH.", reason="agent_untrusted_path")
    return found


def resolve(policy, command: list[str], environ, name: str) -> tuple:
    """(policy, command): the command with its executable (and a `#!/usr/bin/env`
    interpreter) as absolute real paths that are visible inside."""
    path_env = environ.get("PATH", os.defpath)
    found = which(policy, command[0], path_env, name, "the")
    if found is None:
        return policy, command          # run_profile has said it is not installed
    real = os.path.realpath(found)
    policy = _show(policy, name, real, f"the {command[0]} found on your PATH,")
    interpreter = _shebang(real)
    if interpreter and os.path.basename(interpreter[0]) == "env":
        words = [w for w in interpreter[1:] if w != "-S"]
        if words and not words[0].startswith("-"):
            runtime = which(policy, words[0], path_env, name, f"the runtime of {real},")
            if runtime is None:
                raise PolicyError(
                    f"{name}: {real} runs with {words[0]} (#!/usr/bin/env), which is not on "
                    f"your PATH — install {words[0]} or add its directory to PATH.",
                    reason="agent_runtime_missing")
            runtime = os.path.realpath(runtime)
            policy = _show(policy, name, runtime, f"its runtime ({words[0]})")
            return policy, [runtime, *words[1:], real, *command[1:]]
    elif interpreter:
        policy = _show(policy, name, os.path.realpath(interpreter[0]), "its interpreter")
    return policy, [real, *command[1:]]


def npm_prefix(policy, home: str):
    """`prefix=` of ~/.npmrc (never its tokens) as npm_config_prefix inside,
    its tree visible read-only."""
    if "npm_config_prefix" in policy.env or "NPM_CONFIG_PREFIX" in policy.env:
        return policy
    from agent_sandbox.paths import read_regular

    data = read_regular(os.path.join(home, ".npmrc"), 1 << 20)
    if not isinstance(data, bytes):
        return policy
    prefix = None
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "prefix":
            prefix = value.strip().strip('"')
    if not prefix:
        return policy
    prefix = prefix.replace("${HOME}", home).replace("$HOME", home)
    if prefix.startswith("~/"):
        prefix = os.path.join(home, prefix[2:])
    if not os.path.isabs(prefix):
        return policy
    env = dict(policy.env)
    env["npm_config_prefix"] = prefix
    policy = policy._replace(env=env)
    real = os.path.realpath(prefix)
    if os.path.isdir(real) and not visible(policy, real) and not policy.is_hidden(real):
        from agent_sandbox.policy.resolve import _is_within

        if _is_within(real, home) and real != home:
            policy = policy._replace(home_readonly=policy.home_readonly + (real,))
    return policy
