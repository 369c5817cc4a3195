"""The agent's executable, decided: which file runs, and which install the
policy shows for it (issue 28, item 3). Pure over injected reads: every
question to the filesystem is a callable of `Reads`, which the launcher
fills with the host's (agents/exe.py) and a test with a table.

The rules (docs: agents/exe.py's strategy):
- the command is looked up on the caller's PATH as the shell would
  (`which`), but a candidate found through a relative PATH entry or lying
  in a tree the sandbox can write is refused: a session could have planted
  it for the next launch;
- its real path runs inside; when the sandbox does not show that file, its
  install is shown read-only, as narrow as it runs (`install_root`): the
  topmost node_modules, the prefix above bin/ only when it is one (venv,
  conda, node), a native executable alone, else the script's directory —
  never the home, an ancestor of it, or /; under a hidden path: refused;
- a `#!/usr/bin/env NAME` script runs as `NAME script ARGS`, NAME resolved
  and shown the same way; another interpreter is shown;
- `npm_prefix`: ~/.npmrc's `prefix=` (never its tokens) becomes
  npm_config_prefix inside, its tree shown read-only.
"""
from __future__ import annotations

import os

from agent_sandbox.errors import PolicyError
from agent_sandbox.paths import is_within
from agent_sandbox.policy.model import is_shown, writable_tree_of


class Reads:
    """The filesystem questions the decision asks, each a callable:
    is_executable(path) — a regular file this user may execute;
    realpath(path); shebang(path) — the `#!` line's words ([] for none);
    is_prefix(directory) — an install prefix (pyvenv.cfg, conda-meta/,
    lib/node_modules); is_native(path) — an ELF file; isdir(path)."""
    __slots__ = ("is_executable", "realpath", "shebang", "is_prefix", "is_native", "isdir")

    def __init__(self, **reads) -> None:
        for name in self.__slots__:
            setattr(self, name, reads.pop(name))
        if reads:
            raise TypeError(f"not a read: {', '.join(sorted(reads))}")


def install_root(real: str, home: str, reads: Reads) -> str | None:
    """The tree to show so that `real` runs with what it loads; None when
    that would be the home, an ancestor of it, or /."""
    parts = real.split("/")
    prefix = os.path.dirname(os.path.dirname(real))
    if "node_modules" in parts:
        root = "/".join(parts[:parts.index("node_modules") + 1])
    elif (os.path.basename(os.path.dirname(real)) == "bin" and reads.is_prefix(prefix)
          and not is_within(home, prefix)):
        root = prefix
    elif reads.is_native(real):
        root = real                 # a single-file executable: itself only
    else:
        root = os.path.dirname(real)
    if root in ("", "/") or is_within(home, root):
        return None
    return root


def show(policy, name: str, real: str, what: str, reads: Reads):
    """The policy with `real` shown inside, or raise the refusal."""
    if is_shown(policy, real, realpath=reads.realpath):
        return policy
    if policy.is_hidden(real):
        raise PolicyError(
            f"{name}: {what} {real} lies under a hidden path — the sandbox cannot run it. "
            "Install it elsewhere, or remove that path from BLOCKED_FILES / "
            "EXTRA_BLOCKED_PATHS.", reason="agent_not_visible")
    root = install_root(real, policy.home, reads)
    if root is None:
        key = "HOME_READONLY" if is_within(real, policy.home) else "READONLY_MOUNTS"
        raise PolicyError(
            f"{name}: {what} {real} is not visible inside the sandbox and its install "
            f"directory cannot be shown on its own — add {os.path.dirname(real)} to {key} "
            "in ~/.config/agent-sandbox/sandbox.conf, or install it in a directory of its "
            "own (e.g. ~/.local/share/<name> or under a node_modules prefix).",
            reason="agent_not_visible")
    if is_within(root, policy.home):
        return policy._replace(home_readonly=policy.home_readonly + (root,))
    return policy._replace(system_readonly=policy.system_readonly + (root,))


def which(policy, program: str, path_env: str, name: str, what: str,
          reads: Reads) -> str | None:
    """`program` on PATH as the shell finds it — refused when the shell would
    take it from a relative PATH entry or from a tree the sandbox can write."""
    if "/" in program:
        found = program
    else:
        found = None
        for entry in path_env.split(os.pathsep):
            candidate = os.path.join(entry or ".", program)
            if not reads.is_executable(candidate):
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
    real = reads.realpath(found)
    tree = writable_tree_of(policy, os.path.abspath(found), real, realpath=reads.realpath)
    if tree is not None:
        raise PolicyError(
            f"{name}: {what} {found} lies in {tree}, which the sandbox can write — a "
            "session could have replaced it for this launch. Install it outside the "
            "project and the writable home entries (HOME_WRITABLE), or put a trusted "
            "install earlier on PATH.", reason="agent_untrusted_path")
    return found


def resolve(policy, command: list, path_env: str, name: str, reads: Reads) -> tuple:
    """(policy, command): the command with its executable (and a `#!/usr/bin/env`
    interpreter) as absolute real paths that are shown inside."""
    found = which(policy, command[0], path_env, name, "the", reads)
    if found is None:
        return policy, command          # run_profile has said it is not installed
    real = reads.realpath(found)
    policy = show(policy, name, real, f"the {command[0]} found on your PATH,", reads)
    interpreter = reads.shebang(real)
    if interpreter and os.path.basename(interpreter[0]) == "env":
        words = [w for w in interpreter[1:] if w != "-S"]
        if words and not words[0].startswith("-"):
            runtime = which(policy, words[0], path_env, name, f"the runtime of {real},", reads)
            if runtime is None:
                raise PolicyError(
                    f"{name}: {real} runs with {words[0]} (#!/usr/bin/env), which is not on "
                    f"your PATH — install {words[0]} or add its directory to PATH.",
                    reason="agent_runtime_missing")
            runtime = reads.realpath(runtime)
            policy = show(policy, name, runtime, f"its runtime ({words[0]})", reads)
            return policy, [runtime, *words[1:], real, *command[1:]]
    elif interpreter:
        policy = show(policy, name, reads.realpath(interpreter[0]), "its interpreter", reads)
    return policy, [real, *command[1:]]


def npmrc_prefix(data) -> str | None:
    """`prefix=` of ~/.npmrc's bytes (None: no file, or no prefix)."""
    if not isinstance(data, bytes):
        return None
    prefix = None
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "prefix":
            prefix = value.strip().strip('"')
    return prefix or None


def npm_prefix(policy, home: str, npmrc, reads: Reads):
    """The policy with ~/.npmrc's `prefix=` (`npmrc`: the file's bytes, or
    anything else for none) as npm_config_prefix inside, its tree shown
    read-only; unchanged when the environment names a prefix already."""
    if "npm_config_prefix" in policy.env or "NPM_CONFIG_PREFIX" in policy.env:
        return policy
    prefix = npmrc_prefix(npmrc)
    if not prefix:
        return policy
    prefix = prefix.replace("${HOME}", home).replace("$HOME", home)
    if prefix.startswith("~/"):
        prefix = os.path.join(home, prefix[2:])
    if not os.path.isabs(prefix):
        return policy
    policy = policy._replace(env=dict(policy.env, npm_config_prefix=prefix))
    real = reads.realpath(prefix)
    if (reads.isdir(real) and not is_shown(policy, real, realpath=reads.realpath)
            and not policy.is_hidden(real) and is_within(real, home) and real != home):
        policy = policy._replace(home_readonly=policy.home_readonly + (real,))
    return policy
