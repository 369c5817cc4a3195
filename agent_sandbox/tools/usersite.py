"""A `pip install --user` is refused at its first launch (issue 29).

Strategy: the Slurm proxy (services/chaperon.py), the egress proxy
(services/egress.py) and the job wrapper (the chaperon's `launcher`) start
`python -I -m …`: isolated mode, which drops the user site, so an install
there fails at a session's first Slurm call or connection, long after the
launch. Passing the user site to each of them would put a directory the
user's own tools write on the path of every process outside the sandbox; a
venv, pipx or uv tool install costs the user one command. So the CLI
refuses a launch from the user site at once (exit 125) and `doctor` says
the same (tools/platform.py). Standard library only and cheap: a site
install's `-IS` entry never imports `site`, and the check returns at once.
"""
from __future__ import annotations

import os
import sys


def within(path: str, parent: str) -> bool:
    return bool(parent) and (path == parent or path.startswith(parent.rstrip("/") + "/"))


def user_site_refusal(package_dir: str, user_site: str) -> str | None:
    """The refusal of a launch from a `pip install --user`, or None."""
    if not within(os.path.dirname(package_dir), user_site):
        return None
    return ("this agent-sandbox was installed with pip --user — the Slurm proxy, the "
            "egress proxy and the job wrapper start `python -I -m …`, which ignores "
            f"the user site ({user_site}), so sessions would fail at their first Slurm call "
            "or connection. Install it into a venv, pipx or uv tool instead: python3 -m "
            "venv ~/.local/agent-sandbox && ~/.local/agent-sandbox/bin/pip install WHEEL "
            "(or pipx install WHEEL; docs/install.md), then pip uninstall --user "
            "agent-sandbox; the command was not run.")


def user_site() -> str:
    import site

    try:
        return site.getusersitepackages()
    except Exception:       # no home (getpwuid fails): no user site either
        return ""


def check_user_site() -> None:
    """Refuse a launch from a pip --user install (exit 125). Cheap: a site
    install's `-IS` entry never imported `site`, and its package cannot lie
    in the user site."""
    if "site" not in sys.modules:
        return
    from agent_sandbox.paths import PACKAGE_DIR

    reason = user_site_refusal(PACKAGE_DIR, user_site())
    if reason:
        from agent_sandbox.errors import PolicyError

        raise PolicyError(reason, reason="user_site_install")


