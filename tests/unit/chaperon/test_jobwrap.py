"""The job wrapper (chaperon/jobwrap.py), generated and run for real: it pins
the session's backend unless the admin allows weaker ones, and when the
sandbox never starts it writes one `agent-sandbox:` line into the user's
output file — beneath the project, never through a symlink, never into a file
with another link — and exits non-zero."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaperon.jobwrap import launch_argv, wrapper_script

JOBSTART = str(Path(__file__).resolve().parents[3] / "agent_sandbox" / "helper" / "jobstart.py")


# The session's helper interpreter (backends/helperpython.py): here the
# interpreter running the tests, so the wrapper is started through its `#!`
# line, by the kernel, as Slurm starts it.
PYTHON = os.path.realpath(sys.executable)


def config(launcher, backend="bwrap", python=PYTHON):
    return {"launcher": launcher, "jobstart": JOBSTART, "job_backend": backend,
            "overrides": {}, "job_session": "s2", "python": python}


@pytest.fixture
def layout(tmp_path):
    project, stage = tmp_path / "proj", tmp_path / "stage"
    (project / "logs").mkdir(parents=True)
    stage.mkdir()
    return project, stage


def run_wrapper(layout, launcher, backend="bwrap", env=None):
    project, stage = layout
    text = wrapper_script(config=config(launcher, backend), project_dir=str(project),
                          spec_path=str(stage / "spec.json"),
                          outputs=[("logs/%j.out", f"{stage}/%j.out")])
    wrapper = stage / "wrapper"
    wrapper.write_text(text)
    wrapper.chmod(0o700)
    return subprocess.run([str(wrapper)], capture_output=True,
                          text=True, env={"SLURM_JOB_ID": "42", "PATH": "/usr/bin:/bin",
                                          **(env or {})},
                          timeout=30)


def test_the_backend_is_pinned_unless_weaker_ones_are_allowed():
    assert launch_argv(config(["L"]), "/p", "/j.py", "/s.json") == [
        "L", "run", "--job", "--job-shared", "--backend", "bwrap", "--project-dir", "/p", "--",
        PYTHON, "-IS", "/j.py", "/s.json"]
    assert "--backend" not in launch_argv(config(["L"], backend=None), "/p", "/j.py", "/s")


@pytest.mark.parametrize("python", ["/usr/bin/python3", "/opt/site/python3.11/bin/python3.11"])
def test_the_wrapper_and_jobstart_run_on_the_sessions_helper_interpreter(python):
    """Not /usr/bin/python3 whatever it is (RHEL 8's 3.6): the helper rule's
    choice, which the compile put in the chaperon's config (issue 29)."""
    text = wrapper_script(config=config(["L"], python=python), project_dir="/p",
                          spec_path="/s.json", outputs=[])
    assert text.splitlines()[0] == f"#!{python} -IS"
    assert launch_argv(config(["L"], python=python), "/p", "/j.py", "/s")[-4:] == [
        python, "-IS", "/j.py", "/s"]


def test_the_launcher_is_told_the_submitting_session_whatever_the_environment(layout):
    """The job's sandbox on a node is joined only by launches of the session
    that submitted the job (jobs/share.py shape): the session comes from
    the wrapper the chaperon wrote, never from the job's environment."""
    project, stage = layout
    result = run_wrapper(layout, ["/bin/sh", "-c", 'echo "$AGENT_SANDBOX_JOB_SESSION" > "$0"',
                                  str(stage / "seen")],
                         env={"AGENT_SANDBOX_JOB_SESSION": "s1"})
    assert result.returncode == 0, result.stderr
    assert (stage / "seen").read_text() == "s2\n"


def test_a_missing_launcher_is_reported_in_the_output_file(layout):
    project, _ = layout
    result = run_wrapper(layout, ["/nonexistent/agent-sandbox/python"])
    assert result.returncode == 127
    text = (project / "logs/42.out").read_text()
    assert text.startswith("agent-sandbox: the job did not start on node ")
    assert "/nonexistent/agent-sandbox/python cannot run there (No such file or directory)" in text
    assert text.count("\n") == 1


def test_the_launchers_own_refusal_is_carried_over(layout):
    project, stage = layout
    (stage / "42.out").write_text("agent-sandbox: the bwrap backend cannot be used — gone.\n")
    result = run_wrapper(layout, ["/bin/sh", "-c", "exit 125"])
    assert result.returncode == 125
    assert (project / "logs/42.out").read_text().endswith(
        "(it must run on bwrap, as the session that submitted it): the bwrap backend "
        "cannot be used — gone.\n")


def test_a_job_that_started_is_left_alone(layout):
    project, stage = layout
    (project / "logs/42.out").symlink_to(f"{stage}/42.out")   # what jobstart makes
    result = run_wrapper(layout, ["/bin/sh", "-c", "exit 3"])
    assert result.returncode == 3                              # the script's own code
    assert not (stage / "42.out").exists()


def test_a_symlink_at_the_output_path_is_never_followed(layout, tmp_path):
    project, _ = layout
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (project / "logs/42.out").symlink_to(victim)
    assert run_wrapper(layout, ["/nonexistent/python"]).returncode == 127
    assert victim.read_text() == "precious\n"


def test_a_symlinked_directory_is_never_followed(layout, tmp_path):
    project, _ = layout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / "logs").rmdir()
    (project / "logs").symlink_to(elsewhere)
    assert run_wrapper(layout, ["/nonexistent/python"]).returncode == 127
    assert list(elsewhere.iterdir()) == []


def test_a_file_with_another_link_is_not_written(layout, tmp_path):
    project, _ = layout
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.link(victim, project / "logs/42.out")
    assert run_wrapper(layout, ["/nonexistent/python"]).returncode == 127
    assert victim.read_text() == "precious\n"


def test_the_environment_cannot_steer_the_output_out_of_the_project(layout, tmp_path):
    project, stage = layout
    text = wrapper_script(config=config(["/nonexistent/python"]), project_dir=str(project),
                          spec_path="/s", outputs=[("logs/%x.out", f"{stage}/%j.out")])
    (stage / "wrapper").write_text(text)
    result = subprocess.run(["/usr/bin/python3", "-IS", str(stage / "wrapper")],
                            env={"SLURM_JOB_NAME": "../../escaped", "SLURM_JOB_ID": "1"},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 127
    assert not (tmp_path / "escaped.out").exists()
    assert not (project / "escaped.out").exists()


def test_a_steps_tasks_are_told_the_submitting_session():
    """srun's tasks start the launcher directly (no wrapper): the session
    travels in the environment the chaperon gives the real srun."""
    from types import SimpleNamespace

    from chaperon.environment import command_env
    from chaperon.submit import launcher_env

    ctx = SimpleNamespace(config={"overrides": {}, "job_session": "s2"})
    env = command_env([], validated=launcher_env(ctx))
    assert env["AGENT_SANDBOX_JOB_SESSION"] == "s2"
