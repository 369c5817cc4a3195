"""The jail-side helper never runs on an interpreter the sandbox can write
(issue 29 item 2, backends/helperpython.py): the launcher started from a
copy of its interpreter that lies in a writable grant runs its helper on
/usr/bin/python3; the same copy, shown read-only, is the helper's — as the
unprivileged test user, on each backend, planned and run."""
from __future__ import annotations

import glob
import os
import pathlib
import shutil

import pytest

from tests.support.install import PREFIX

BACKENDS = ["bwrap", "firejail", "landlock"]


def _launcher_on(user, place) -> list:
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


def _helper_line(stdout: str) -> str:
    return next((line for line in stdout.splitlines() if " -I -S -c " in line), "")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_writable_launcher_interpreter_never_runs_the_helper(user, project, backend):
    launcher = _launcher_on(user, project / "py")          # the project: writable inside
    copy = os.path.realpath(launcher[0])
    assert copy.startswith(f"{project}/py/bin/python3.")
    if backend == "bwrap":          # bwrap starts the helper for the egress relay (or a tty)
        user.set_config("NETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2:9)\n")
    planned = user.run(launcher + ["run", "--backend", backend, "--dry-run", "--", "true"],
                       cwd=project)
    assert planned.returncode == 0, planned.stderr
    assert "Traceback" not in planned.stderr
    line = _helper_line(planned.stdout)
    assert "/usr/bin/python3 -I -S -c " in line and copy not in line, planned.stdout
    ran = user.run(launcher + ["run", "--backend", backend, "--", "sh", "-c", "echo ran"],
                   cwd=project)
    assert (ran.returncode, ran.stdout.strip()) == (0, "ran"), ran.stderr


@pytest.mark.parametrize("access, helper", [("read", "copy"), ("write", "system")])
def test_the_same_interpreter_is_the_helpers_only_while_no_grant_writes_it(
        user, project, access, helper):
    launcher = _launcher_on(user, user.home / "py39-python")   # in the home, not the project
    user.set_config(f"HOME_ACCESS={access}\nNETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2:9)\n")
    planned = user.run(launcher + ["run", "--backend", "bwrap", "--dry-run", "--", "true"],
                       cwd=project)
    assert planned.returncode == 0, planned.stderr
    line = _helper_line(planned.stdout)
    expected = os.path.realpath(launcher[0]) if helper == "copy" else "/usr/bin/python3"
    assert f"{expected} -I -S -c " in line, planned.stdout


@pytest.fixture
def linked_work(user):
    """A site file system shown read-only (READONLY_MOUNTS+=(/srv/…-real))
    and the user's work directory in it granted writable by another name, a
    path through a symlink (EXTRA_WRITABLE_PATHS=(/srv/…-link/work): $WORK
    on a cluster where /work links to /gpfs/work)."""
    real = pathlib.Path(f"/srv/{user.name}-real")
    link = pathlib.Path(f"/srv/{user.name}-link")
    shutil.rmtree(real, ignore_errors=True)
    if link.is_symlink():
        link.unlink()
    (real / "work").mkdir(parents=True)
    os.chown(real / "work", user.uid, user.gid)
    link.symlink_to(real)
    yield real, link
    shutil.rmtree(real, ignore_errors=True)
    link.unlink()


# firejail mounts the real tree read-only over the grant (read-only wins
# there); bwrap binds the grant by its own name, landlock grants its inode.
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_grant_named_through_a_symlink_still_makes_the_interpreter_writable(
        user, project, backend, linked_work):
    """The launcher on an interpreter in the user's work directory: the
    grant names it through a link, the interpreter's real path does not
    start with the grant's name — but the sandbox writes the same file. The
    rule compared the resolved interpreter with the unresolved grant and
    chose it for the helper (a bwrap job step's joining helper starts on it
    outside the sandbox)."""
    real, link = linked_work
    launcher = _launcher_on(user, real / "work" / "py")
    copy = os.path.realpath(launcher[0])
    network = ("NETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2:9)\n"   # bwrap's helper
               if backend == "bwrap" else "")
    user.set_config(f"READONLY_MOUNTS+=({real})\nEXTRA_WRITABLE_PATHS=({link}/work)\n"
                    + network)
    inside = copy.replace(str(real), str(link), 1)
    ran = user.run(launcher + ["run", "--backend", backend, "--", "sh", "-c",
                               f"test -w {inside} && echo writable"], cwd=project)
    assert ran.stdout.strip() == "writable", ran.stderr     # the premise: it is
    planned = user.run(launcher + ["run", "--backend", backend, "--dry-run", "--", "true"],
                       cwd=project)
    assert planned.returncode == 0, planned.stderr
    line = _helper_line(planned.stdout)
    assert "/usr/bin/python3 -I -S -c " in line and copy not in line, planned.stdout
    # … and the report says that the launcher itself is writable inside.
    row = next(line for line in planned.stdout.splitlines() if "self.protected" in line)
    assert row.split()[0] == "partial" and copy in row, row
