"""A launcher run as a user would install it on an interpreter of their own
(the helper-interpreter rule's tests: tests/integration/test_helper_python.py,
tests/adversarial/test_helper_interpreter.py)."""
from __future__ import annotations

import glob
import os
import pathlib
import shutil

from tests.support.install import PREFIX


def launcher_on(user, place) -> list:
    """argv of the launcher installed as a user would on an interpreter of
    their own: a copy of the install's interpreter in `place` (it finds its
    standard library by its build prefix), a venv of it beside the copy, and
    the install's site-packages on the venv's path (a .pth: the chaperon and
    the egress proxy, started `-I -m`, find the package too)."""
    real = os.path.realpath(f"{PREFIX}/venv/bin/python")
    copy = place / "bin" / os.path.basename(real)
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(real, copy)
    for path in (place, copy.parent, copy):
        os.chown(path, user.uid, user.gid)
    venv = place / "venv"
    made = user.run([copy, "-I", "-m", "venv", "--without-pip", venv], cwd=place)
    assert made.returncode == 0, made.stderr
    site, = glob.glob(f"{PREFIX}/venv/lib/python3.*/site-packages")
    own_site, = glob.glob(f"{venv}/lib/python3.*/site-packages")
    pth = pathlib.Path(own_site) / "agent_sandbox_install.pth"
    pth.write_text(site + "\n")
    os.chown(pth, user.uid, user.gid)
    return [str(venv / "bin" / "python"), "-I", "-m", "agent_sandbox"]


def helper_line(stdout: str) -> str:
    """The helper's command line in a --dry-run report ("" when none)."""
    return next((line for line in stdout.splitlines() if " -I -S -c " in line), "")
