"""doctor's "agent logins" item: which login each agent would use here — an
API key from the environment (brokered in NETWORK_MODE=allowlist when its
profile can: the key never enters the sandbox) or an OAuth/subscription
login file (a copy of it is readable inside the sandbox, so not protected
from a prompt-injected agent; out of scope of brokering,
docs/network.md). Never prints a key or a token, only names and paths.
Pure but for the existence checks of the login files.
"""
from __future__ import annotations

import os

from agent_sandbox.tools.checks import GAPS, GO, Item

# agent → (API key variables it reads, its OAuth/subscription login files below $HOME)
LOGINS = {
    "claude": (("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"), (".claude/.credentials.json",)),
    "codex": (("OPENAI_API_KEY",), (".codex/auth.json",)),
    "gemini": (("GEMINI_API_KEY", "GOOGLE_API_KEY"), (".gemini/oauth_creds.json",)),
    "aider": (("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY",
               "OPENROUTER_API_KEY", "DEEPSEEK_API_KEY"), ()),
    "opencode": (("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"),
                 (".local/share/opencode/auth.json",)),
}


def agent_logins(home: str, environ, brokered: dict) -> dict:
    """agent → {"keys": [variables set], "files": [login files present],
    "brokered": [variables the proxy would keep outside]}. `brokered` maps an
    agent to the key variables its profile's brokers cover."""
    out = {}
    for agent, (keys, files) in LOGINS.items():
        present = [k for k in keys if environ.get(k)]
        out[agent] = {"keys": present,
                      "files": [os.path.join(home, f) for f in files
                                if os.path.lexists(os.path.join(home, f))],
                      "brokered": [k for k in present if k in brokered.get(agent, ())]}
    return out


def logins_item(home: str, environ, brokered: dict) -> Item:
    found = agent_logins(home, environ, brokered)
    parts, oauth = [], []
    for agent, login in found.items():
        if not login["keys"] and not login["files"]:
            continue
        what = []
        for key in login["keys"]:
            what.append(f"API key {key}" + (" (brokered in allowlist mode: stays outside)"
                                            if key in login["brokered"] else
                                            " (enters the sandbox)"))
        for path in login["files"]:
            what.append(f"OAuth login file {path}")
            oauth.append(path)
        parts.append(f"{agent}: {', '.join(what)}")
    if not parts:
        return Item("agent logins", GO, "no agent API key in the environment and no agent "
                    "login file found", data={"agents": found})
    if oauth:
        return Item("agent logins", GAPS, "; ".join(parts),
                    "an OAuth/subscription login is readable inside the sandbox by the agent "
                    "(and a prompt injected into it) — a copy from the sandbox's own login "
                    "store, never written back to your file; "
                    "an API key with NETWORK_MODE=allowlist and API_KEY_BROKERING=true never "
                    "enters it (docs/network.md)", data={"agents": found})
    return Item("agent logins", GO, "; ".join(parts), data={"agents": found})
