"""Site paths (issue 15 item 4): a site's software tree is readable inside
without the user listing it, doctor lists the top-level directories a
sandbox would not show, and a missing EXTRA_WRITABLE_PATHS entry is a
warning that names it — also in a job on another node, where the path may
be missing though it exists on the login node."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.install import INSTALLED

SITE_TREE = Path("/apps")   # one of the shipped READONLY_MOUNTS site trees


@pytest.fixture
def site_tree():
    """/apps with one module file, made for this test (the host has none)."""
    if SITE_TREE.exists():
        pytest.fail(f"{SITE_TREE} exists on this host: the test makes and removes its own")
    (SITE_TREE / "modules").mkdir(parents=True)
    (SITE_TREE / "modules" / "tool").write_text("#%Module\n")
    yield SITE_TREE
    shutil.rmtree(SITE_TREE)


def test_a_site_software_tree_is_read_only_inside(user, project, site_tree):
    result = user.sandbox("/bin/sh", "-c", "cat /apps/modules/tool; touch /apps/x || echo ro",
                          cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["#%Module", "ro"]


def test_doctor_lists_top_level_directories_invisible_inside(user, project):
    result = user.run([INSTALLED, "doctor"], cwd=project)
    line = next(line for line in result.stdout.split("\n") if " site paths " in line)
    shown = line.split("not visible inside: ", 1)[1].split()
    expected = sorted(f"/{n}" for n in os.listdir("/") if os.path.isdir(f"/{n}")
                      and not os.path.islink(f"/{n}") and n in ("mnt", "srv", "root", "boot"))
    assert expected and set(expected) <= set(shown), line
    assert "/usr" not in shown and "/home" not in shown and "/sys" not in shown


def test_a_missing_writable_path_is_a_warning_that_names_it(user, project):
    user.set_config("EXTRA_WRITABLE_PATHS=(/nonexistent-hpc2/scratch)\n")
    result = user.sandbox("true", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "EXTRA_WRITABLE_PATHS: dropped /nonexistent-hpc2/scratch — it does not exist" \
        in result.stderr, result.stderr


@pytest.mark.usefixtures("slurm_multinode")
def test_a_job_says_which_writable_path_its_node_lacks(slurm_multinode, user, project):
    user.set_config("EXTRA_WRITABLE_PATHS=(/nonexistent-hpc2/scratch)\n")
    result = slurm_multinode.run_as(user, [INSTALLED, "run", "--", "sbatch", "--wait", "-o",
                                           "job.out", "--wrap", "echo ran"], cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (project / "job.out").read_text().split("\n")
    assert lines[-2:] == ["ran", ""], lines
    assert any("EXTRA_WRITABLE_PATHS: dropped /nonexistent-hpc2/scratch — it does not exist"
               in line for line in lines[:-2]), lines


@pytest.mark.parametrize("backend,hidden", [("bwrap", "No such file or directory"),
                                            ("firejail", "Permission denied"),
                                            ("landlock", "Permission denied")])
def test_sys_is_read_only_inside_with_hidden_parts_masked(user, project, backend, hidden):
    """SPEC §5: /sys read-only (NVML, hwloc, UCX read it), a hidden part of
    it masked as each backend hides (ENOENT on bwrap, EACCES elsewhere)."""
    user.set_config("EXTRA_BLOCKED_PATHS=(/sys/firmware)\n")
    result = user.sandbox("/bin/sh", "-c", "ls /sys/class >/dev/null && echo shown; "
                          "ls /sys/firmware 2>&1; touch /sys/kernel/x 2>/dev/null || echo ro",
                          options=("--backend", backend), cwd=project)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == "shown" and hidden in lines[1] and lines[2] == "ro", result.stdout
