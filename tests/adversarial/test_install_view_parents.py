"""The install's path as the sandbox sees it, when the install lies in the
home below directories of the private home (a pipx or uv tool install:
~/.local/share/pipx/venvs/NAME, HOME_ACCESS=tmpwrite, the default). The
install is bound read-only, but `.local/share/pipx` above it is a directory
of the sandbox's own tmpfs: the session renames it away (the mount moves
with it) and makes its own NAME/libexec/python3-join and NAME/lib/…/helper.
Nothing of that reaches the real home — but `firejail --join` resolves the
join interpreter (jobs/join.py join_python: stat'ed outside, a user's own
0100 copy accepted) and the helper's directory inside the sandbox's mount
namespace, so a job step's joining task would run the session's code
before it loads the session's seccomp filter: what the execute-only join
interpreter is for. Found in review at 04b718e (bwrap and firejail); the
fix (pin or refuse) is open: strict xfail until then.

Real backends, the unprivileged test user, the launcher run from a venv of
the install's interpreter placed as pipx places its venvs."""
from __future__ import annotations

import glob
import os
import pathlib
import shutil
import uuid

import pytest

from tests.support.install import PREFIX


@pytest.fixture
def pipx_like(user):
    """argv of the launcher from a venv at ~/.local/share/pipx/venvs/NAME
    (its sys.prefix: a read-only overlay of every launch)."""
    top = user.home / ".local" / "share" / "pipx"
    venv = top / "venvs" / f"rv-{uuid.uuid4().hex[:8]}"
    for path in (user.home / ".local", user.home / ".local" / "share", top, top / "venvs"):
        path.mkdir(exist_ok=True)
        os.chown(path, user.uid, user.gid)
    made = user.run([os.path.realpath(f"{PREFIX}/venv/bin/python"), "-I", "-m", "venv",
                     "--without-pip", venv], cwd=user.home)
    assert made.returncode == 0, made.stderr
    site, = glob.glob(f"{PREFIX}/venv/lib/python3.*/site-packages")
    own_site, = glob.glob(f"{venv}/lib/python3.*/site-packages")
    pth = pathlib.Path(own_site) / "agent_sandbox_install.pth"
    pth.write_text(site + "\n")
    os.chown(pth, user.uid, user.gid)
    yield venv, [str(venv / "bin" / "python"), "-I", "-m", "agent_sandbox"]
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.xfail(strict=True, reason="review of 04b718e: the private home's parents of "
                   "a user install are renamable inside (fix open)")
@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_the_install_path_inside_cannot_be_given_other_files(user, project, backend, pipx_like):
    venv, launcher = pipx_like
    top = venv.parent.parent
    planter = (f"mv {top} {top}.moved 2>/dev/null && echo moved; "
               f"mkdir -p {venv}/libexec 2>/dev/null && "
               f"echo planted > {venv}/libexec/python3-join 2>/dev/null && echo planted; "
               "echo ran")
    result = user.run(launcher + ["run", "--backend", backend, "--", "/bin/sh", "-c", planter],
                      env=user.env(HOME_ACCESS="tmpwrite"), cwd=project)
    assert result.returncode == 0, result.stderr
    assert "ran" in result.stdout
    assert "planted" not in result.stdout.split(), result.stdout
