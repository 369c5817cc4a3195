"""The jail-side helper never runs on an interpreter the sandbox can write
(issue 29 item 2, backends/helperpython.py): the launcher started from a
copy of its interpreter that lies in a writable grant runs its helper on
/usr/bin/python3; the same copy, shown read-only, is the helper's — as the
unprivileged test user, on each backend, planned and run."""
from __future__ import annotations

import os

import pytest

from tests.support.pythons import helper_line, launcher_on

BACKENDS = ["bwrap", "firejail", "landlock"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_writable_launcher_interpreter_never_runs_the_helper(user, project, backend):
    launcher = launcher_on(user, project / "py")          # the project: writable inside
    copy = os.path.realpath(launcher[0])
    assert copy.startswith(f"{project}/py/bin/python3.")
    if backend == "bwrap":          # bwrap starts the helper for the egress relay (or a tty)
        user.set_config("NETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2:9)\n")
    planned = user.run(launcher + ["run", "--backend", backend, "--dry-run", "--", "true"],
                       cwd=project)
    assert planned.returncode == 0, planned.stderr
    assert "Traceback" not in planned.stderr
    line = helper_line(planned.stdout)
    assert "/usr/bin/python3 -I -S -c " in line and copy not in line, planned.stdout
    ran = user.run(launcher + ["run", "--backend", backend, "--", "sh", "-c", "echo ran"],
                   cwd=project)
    assert (ran.returncode, ran.stdout.strip()) == (0, "ran"), ran.stderr


@pytest.mark.parametrize("access, helper", [("read", "copy"), ("write", "system")])
def test_the_same_interpreter_is_the_helpers_only_while_no_grant_writes_it(
        user, project, access, helper):
    launcher = launcher_on(user, user.home / "py39-python")   # in the home, not the project
    user.set_config(f"HOME_ACCESS={access}\nNETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2:9)\n")
    planned = user.run(launcher + ["run", "--backend", "bwrap", "--dry-run", "--", "true"],
                       cwd=project)
    assert planned.returncode == 0, planned.stderr
    line = helper_line(planned.stdout)
    expected = os.path.realpath(launcher[0]) if helper == "copy" else "/usr/bin/python3"
    assert f"{expected} -I -S -c " in line, planned.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_stubs_and_a_job_start_on_the_chosen_interpreter(user, project, slurm_cluster,
                                                             backend):
    """Not /usr/bin/python3 whatever it is (RHEL 8's 3.6): the interpreter
    the rule chose — here the user's own copy, shown read-only — is the
    stubs' `#!` line inside, and the job wrapper's and jobstart's on the
    node (the batch script Slurm holds), and both run."""
    import subprocess

    from tests.support.waiting import until

    launcher = launcher_on(user, user.home / f"py-jobs-{backend}")   # one held by a job
    copy = os.path.realpath(launcher[0])
    if backend == "firejail":       # a firejail job joins by the install's own join interpreter
        added = user.run([launcher[0], "-m", "agent_sandbox.cli.userinstall"], timeout=120)
        assert added.returncode == 0, added.stdout + added.stderr
    user.set_config("HOME_ACCESS=read\n")
    inside = ('head -n 1 "$(command -v squeue)"; squeue -h -j 1 >/dev/null 2>&1; '
              'squeue -h -u "$USER" -o %i >/dev/null && echo squeue-ran; '
              f'sbatch --hold --parsable -o held-{backend}.out --wrap "echo job-ran"')
    ran = user.run(launcher + ["run", "--backend", backend, "--", "sh", "-c", inside],
                   cwd=project, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    first, said, job = ran.stdout.split("\n")[:3]
    assert (first, said) == (f"#!{copy} -IS", "squeue-ran"), ran.stdout
    try:
        script = subprocess.run(["scontrol", "write", "batch_script", job, "-"],
                                capture_output=True, text=True, timeout=30)
        assert script.returncode == 0, script.stderr
        assert script.stdout.startswith(f"#!{copy} -IS\n"), script.stdout[:200]
        assert f"'--', {copy!r}, '-IS', " in script.stdout     # jobstart's, in the spec
        assert subprocess.run(["scontrol", "release", job], timeout=30).returncode == 0
        out = project / f"held-{backend}.out"
        until(lambda: out.exists() and "job-ran" in out.read_text(), f"job {job} wrote "
              f"{out}", timeout=90, interval=0.2)
    finally:
        subprocess.run(["scancel", job], timeout=30)
