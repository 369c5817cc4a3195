"""Where agent-sandbox's own files are, and how the launcher reaches the
jail-side helper.

The helper (`agent_sandbox/helper/`: sandbox_exec, landlock, jobstart) runs
inside every jail with only its own folder on sys.path, so its modules import
each other as top-level modules and the standard library only. Outside, the
same modules are loaded the same way (`helper_module`), never as a package,
so no module exists twice under two names; the folder has no __init__.py, so
`import agent_sandbox.helper.x` fails.
"""
from __future__ import annotations

import importlib
import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
HELPER_DIR = os.path.join(PACKAGE_DIR, "helper")


def helper_path(name: str) -> str:
    """The file of a helper module (`sandbox_exec`, `landlock`, `jobstart`)."""
    return os.path.join(HELPER_DIR, name + ".py")


def helper_module(name: str):
    """A helper module, imported as inside the jail: top-level, from HELPER_DIR."""
    if HELPER_DIR not in sys.path:
        sys.path.insert(0, HELPER_DIR)
    return importlib.import_module(name)
