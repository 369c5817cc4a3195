"""Which interpreter the jail-side helper (agent_sandbox/helper/) runs on.

Strategy. The helper runs before the user's command and, for Landlock,
before any confinement: it must run on an interpreter the host has, that is
new enough for the helper's code (MIN_VERSION), and that no sandbox of this
policy can have changed. Two candidates, in this order:

1. the launcher's own interpreter (the file behind sys.executable) with its
   standard library: the marshal payloads the launcher writes are read by
   the same Python, and a user whose system python3 is too old (RHEL 8's
   3.6, SLES 15) still has a working helper;
2. the system python3 (`/usr/bin/python3`), when the version its name
   resolves to (`python3.N`) is at least MIN_VERSION.

A candidate is *usable* when each of its paths is shown inside the sandbox,
is not hidden, and lies in no writable grant of the policy (the project, a
writable home entry, an extra writable path, the whole home with
HOME_ACCESS=write — each by its name and by its real path, as a grant named
through a symlink writes the directory it resolves to) unless a read-only overlay covers it again — the same
question `self_protection` asks of the launcher (backends/base.py). With
neither usable the launch is refused (exit 125) naming what is missing, why
and the fix: never a traceback from a helper that cannot start.

When both candidates are the same file the system's name is kept, so a plan
built on Debian's or a site's python says `/usr/bin/python3` as it always did.

The same interpreter starts the Slurm stubs inside (their `#!` line,
services/chaperon.py) and, on a compute node, the job wrapper and the
jobstart step (chaperon/jobwrap.py): `shebang_line` says it or why a `#!`
line cannot name it.

Pure: `choose` takes the candidates and a verdict function; the reads
(realpath, the access check, the stdlib's place) are in `launcher()` and
`system()`. A compile calls them under the plan cache's recorder, which
fingerprints every path they resolve or check (docs/design.md, "The warm
launch"); the launcher's interpreter and version key the cache already.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, NamedTuple, Optional

from agent_sandbox.errors import PolicyError

MIN_VERSION = (3, 9)          # the oldest Python the helper's code runs on
SYSTEM_PYTHON = "/usr/bin/python3"


class Interpreter(NamedTuple):
    path: str                  # what the helper's argv names
    real: str                  # the file it is
    version: tuple             # (major, minor); () when not known
    tree: tuple                # the paths that must be read-only inside


def startup_files(real: str) -> tuple:
    """What an interpreter at `real` reads at its start besides itself and
    its standard library (pure): its directory (a `._pth` file beside it,
    a pyvenv.cfg there), the pyvenv.cfg one level up, and its prefix's lib/
    (a pythonXY.zip on sys.path, a shared libpython). Each must be as
    unwritable inside as the executable (found in review)."""
    bin_dir = os.path.dirname(real)
    prefix = os.path.dirname(bin_dir)
    return (bin_dir, os.path.join(bin_dir, "pyvenv.cfg"), os.path.join(prefix, "pyvenv.cfg"),
            os.path.join(prefix, "lib"))


def launcher() -> Interpreter:
    """The interpreter this launcher runs on, with its standard library."""
    real = os.path.realpath(sys.executable)
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    return Interpreter(real, real, tuple(sys.version_info[:2]),
                       (real, stdlib) + startup_files(real))


def version_from_name(real: str) -> tuple:
    """(3, N) from a file named python3.N, else () (unknown: not run to ask)."""
    name = os.path.basename(real)
    major, _, minor = name[len("python"):].partition(".") if name.startswith("python") else ("", "", "")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else ()


def system(path: str = SYSTEM_PYTHON) -> Optional[Interpreter]:
    """The system python3, or None when there is none to run."""
    if not os.access(path, os.X_OK):
        return None
    real = os.path.realpath(path)
    return Interpreter(path, real, version_from_name(real), (real,) + startup_files(real))


def policy_verdict(policy) -> Callable[[str], str]:
    """path → "" when the path is shown read-only inside and no grant of the
    policy makes it writable, else why not (a clause for the message)."""
    from agent_sandbox.paths import is_within
    from agent_sandbox.policy.view import ViewBuilder, is_hidden

    # Each grant by its name and by the directory it is: a grant named
    # through a symlink ($WORK -> /gpfs/work/u) writes the interpreter's
    # real path too, which starts with the second name only.
    roots = tuple(dict.fromkeys(name for root in ViewBuilder(policy).writable_roots()
                                for name in (root, os.path.realpath(root))))
    overlays = tuple(policy.readonly_overlays)
    shown = (tuple(policy.system_readonly) + overlays + tuple(policy.home_readonly)
             + ((policy.home,) if policy.home_access in ("read", "write") else ()))

    def verdict(path: str) -> str:
        if is_hidden(path, policy.hidden):
            return "is hidden inside the sandbox"
        root = next((r for r in roots if is_within(path, r)), None)
        if root is not None and not any(is_within(path, o) for o in overlays):
            return f"is writable inside the sandbox (it lies in the writable {root})"
        if not any(is_within(path, s) for s in shown):
            return "is not shown inside the sandbox (outside READONLY_MOUNTS)"
        return ""
    return verdict


def host_verdict(path: str) -> str:
    """Without a policy (landlock's find(), which runs the probe outside any
    sandbox): "" when this user cannot write the path nor a directory on the
    way to it (paths.runnable_outside), so no grant of any session can."""
    from agent_sandbox.paths import runnable_outside

    # A file that is not there (most pyvenv.cfg) is as safe as the directory
    # it would be made in.
    place = path if os.path.lexists(path) else os.path.dirname(path)
    return "" if runnable_outside(place) else "is writable by you"


def _fault(candidate: Interpreter, verdict: Callable[[str], str]) -> str:
    if candidate.version and tuple(candidate.version) < MIN_VERSION:
        return f"{candidate.real} is Python {'.'.join(map(str, candidate.version))}"
    if not candidate.version:
        return f"{candidate.real} is of a Python version not known from its name"
    for path in candidate.tree:
        why = verdict(path)
        if why:
            return f"{path} {why}"
    return ""


def choose(own: Interpreter, system_python: Optional[Interpreter],
           verdict: Callable[[str], str] = lambda path: "") -> str:
    """The helper's interpreter path, or PolicyError (exit 125)."""
    if system_python is not None and system_python.real == own.real:
        own = own._replace(path=system_python.path)      # one file: the stable name
    why_own = _fault(own, verdict)
    if not why_own:
        return own.path
    if system_python is None:
        why_system = f"there is no {SYSTEM_PYTHON}"
    else:
        why_system = _fault(system_python, verdict)
        if not why_system:
            return system_python.path
    need = ".".join(map(str, MIN_VERSION))
    raise PolicyError(
        f"refusing to start the sandbox helper — it needs Python {need} or newer that the "
        f"sandbox cannot write, and neither candidate is one: the launcher's ({why_own}); "
        f"the system's ({why_system}). Install agent-sandbox on a Python {need}+ outside "
        "the writable paths (a site install, a module's or /opt Python: docs/install.md), "
        f"or install python{need}+ as {SYSTEM_PYTHON}", reason="no_helper_python")


# The kernel reads a `#!` line from the first 128 bytes of a script before
# Linux 5.1 (BINPRM_BUF_SIZE; RHEL 8 runs 4.18), 256 since: the line and
# its newline must fit the older one.
SHEBANG_MAX = 128 - 1


def shebang_line(python: str) -> str:
    """`#!<python> -IS` for the stubs and the job wrapper (pure), or
    PolicyError when a `#!` line cannot name that interpreter (a blank or a
    control character splits or ends it; too long is cut by old kernels)."""
    line = f"#!{python} -IS"
    if (not python.startswith("/") or any(c.isspace() or ord(c) < 32 or c == "\x7f"
                                           for c in python)
            or len(line.encode()) + 1 > SHEBANG_MAX):
        raise PolicyError(
            f"refusing to start the Slurm stubs — their interpreter {python!r} (the helper's, "
            f"docs/install.md) cannot be named in a script's '#!' line: a blank or control "
            f"character in the path, or longer than {SHEBANG_MAX - 5} bytes. Install "
            "agent-sandbox on a Python whose path is short and plain (a venv's base "
            "Python counts), or set CHAPERON=false to run without Slurm",
            reason="no_helper_python")
    return line


def helper_python(policy=None) -> str:
    """The rule on this host: the policy's verdict when there is a policy
    (a launch), the host's without one."""
    return choose(launcher(), system(), policy_verdict(policy) if policy is not None
                  else host_verdict)
