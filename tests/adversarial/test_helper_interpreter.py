"""The jail-side helper may run on the launcher's own interpreter (issue 29,
backends/helperpython.py) only while nothing the sandbox can write reaches
it. Two routes found in review of 04b718e, each failing there (the plan
chose the writable interpreter for the helper; a bwrap job step's joining
helper starts on it outside the sandbox, the next launcher too):
- a writable grant named through a symlink ($WORK -> /gpfs/work): the rule
  compared the interpreter's real path with the grant's name only (failed
  on bwrap and landlock; firejail's read-only mount of the real tree wins);
- a writable pyvenv.cfg the interpreter reads at its start (one level above
  its bin/: it can name another `home` and so another standard library): the
  rule checked the executable and the standard library only (failed on
  bwrap and landlock with the rule before 5dd5764: the plan chose the copy).
Real backends, the unprivileged test user, planned and checked inside."""
from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from tests.support.pythons import helper_line, launcher_on


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
    launcher = launcher_on(user, real / "work" / "py")
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
    line = helper_line(planned.stdout)
    assert "/usr/bin/python3 -I -S -c " in line and copy not in line, planned.stdout
    # … and the report says that the launcher itself is writable inside.
    row = next(line for line in planned.stdout.splitlines() if "self.protected" in line)
    assert row.split()[0] == "partial" and copy in row, row


@pytest.fixture
def readonly_tree(user):
    """A site file system shown read-only (READONLY_MOUNTS+=(/srv/…-site))."""
    tree = pathlib.Path(f"/srv/{user.name}-site")
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    yield tree
    shutil.rmtree(tree, ignore_errors=True)


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_writable_pyvenv_cfg_beside_the_interpreter_makes_it_unusable(
        user, project, backend, readonly_tree):
    """The launcher on an interpreter in a read-only tree whose prefix holds
    a pyvenv.cfg granted writable (EXTRA_WRITABLE_PATHS names the file): the
    sandbox rewrites it, and the next start of that interpreter reads its
    `home` from it. The helper runs on the system python3 instead."""
    place = readonly_tree / "py"
    launcher = launcher_on(user, place)
    copy = os.path.realpath(launcher[0])
    config = place / "pyvenv.cfg"            # the copy is place/bin/python3.N
    config.write_text("include-system-site-packages = false\n")
    os.chown(config, user.uid, user.gid)
    network = ("NETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2:9)\n"   # bwrap's helper
               if backend == "bwrap" else "")
    user.set_config(f"READONLY_MOUNTS+=({readonly_tree})\nEXTRA_WRITABLE_PATHS=({config})\n"
                    + network)
    ran = user.run(launcher + ["run", "--backend", backend, "--", "sh", "-c",
                               f"test -w {config} && echo writable"], cwd=project)
    assert ran.stdout.strip() == "writable", ran.stderr     # the premise: it is
    planned = user.run(launcher + ["run", "--backend", backend, "--dry-run", "--", "true"],
                       cwd=project)
    assert planned.returncode == 0, planned.stderr
    line = helper_line(planned.stdout)
    assert "/usr/bin/python3 -I -S -c " in line and copy not in line, planned.stdout
