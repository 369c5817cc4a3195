"""Job submission through the chaperon, on the real Slurm cluster, from inside
a real bwrap jail as an unprivileged user: every job and every step runs in
the sandbox on the compute node, and nothing the agent controls escapes it."""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("slurm_cluster")

PROBE = """#!/bin/bash
echo "AGENT_SANDBOX=${AGENT_SANDBOX:-unset}"
ls ~/.ssh >/dev/null 2>&1 && echo "ssh=visible" || echo "ssh=hidden"
echo "GH_TOKEN=${GH_TOKEN:-absent}"
test -e ~/not-granted && echo "home=real" || echo "home=private"
"""


def write(user, path: Path, text: str, mode=0o755) -> Path:
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, user.uid, user.gid)
    return path


def wait_for_file(path: Path, timeout=60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            time.sleep(0.3)
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"{path} was not written within {timeout}s")


def job_state(job_id: str, timeout=60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
                             capture_output=True, text=True).stdout.strip()
        if out and out.split()[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return out.split()[0]
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish within {timeout}s")


@pytest.fixture
def marker_in_home(user):
    path = user.write("not-granted", "a file the sandbox home does not bind")
    yield path
    path.unlink()


def test_sbatch_job_runs_sandboxed_on_the_compute_node(user, project, marker_in_home):
    write(user, project / "probe.sh", PROBE)
    result = user.sandbox("sbatch", "probe.sh", cwd=project)
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(r"Submitted batch job (\d+)\n", result.stdout)
    assert match, result.stdout
    job = match.group(1)
    assert job_state(job) == "COMPLETED"
    output = project / f"slurm-{job}.out"
    text = wait_for_file(output)
    assert text.split() == ["AGENT_SANDBOX=1", "ssh=hidden", "GH_TOKEN=absent", "home=private"]
    assert output.is_symlink()   # slurmstepd wrote to staging; the job linked it


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
@pytest.mark.parametrize("home_access", ["tmpwrite", "restricted", "read", "write"])
def test_the_stubs_answer_on_every_backend_in_every_home_mode(user, project, backend,
                                                               home_access):
    env = user.env(HOME_ACCESS=home_access)
    # A live cluster: a job of another test may start or end between the two
    # calls (idle -> mix), so the real sinfo is asked before and after, and
    # the stub's answer must be one of them.
    before = subprocess.run(["sinfo", "-h"], capture_output=True)
    inside = user.sandbox("sinfo", "-h", options=("--backend", backend), cwd=project,
                          text=False, env=env)
    after = subprocess.run(["sinfo", "-h"], capture_output=True)
    assert (inside.returncode, inside.stdout) in (
        (before.returncode, before.stdout), (after.returncode, after.stdout)), inside.stderr


@pytest.mark.parametrize("backend", ["firejail", "landlock"])
def test_slurm_works_inside_the_other_backends(user, project, marker_in_home, backend):
    """The stubs and the session directory are on disk for backends that
    cannot mount: the same calls work, and the job runs under the session's
    backend on the compute node."""
    options = ("--backend", backend)
    real = subprocess.run(["sinfo", "-h"], capture_output=True)
    inside = user.sandbox("sinfo", "-h", options=options, cwd=project, text=False)
    assert (inside.returncode, inside.stdout) == (real.returncode, real.stdout), inside.stderr
    refused = user.sandbox("salloc", options=options, cwd=project)
    assert refused.returncode == 1 and refused.stderr.startswith("agent-sandbox: salloc:")
    write(user, project / "probe.sh", PROBE + 'echo "BACKEND=$SANDBOX_BACKEND"\n')
    result = user.sandbox("sbatch", "probe.sh", options=options, cwd=project)
    assert result.returncode == 0, result.stderr
    job = re.fullmatch(r"Submitted batch job (\d+)\n", result.stdout).group(1)
    assert job_state(job) == "COMPLETED"
    text = wait_for_file(project / f"slurm-{job}.out")
    assert text.split()[:3] == ["AGENT_SANDBOX=1", "ssh=hidden", "GH_TOKEN=absent"]
    assert text.split()[-1] == f"BACKEND={backend}"


def test_job_environment_cannot_steer_the_compute_side_sandbox(user, project, marker_in_home):
    """The agent sets every variable that could steer the job's sandbox or
    hook its interpreter before submitting; the job still runs sandboxed. The
    hooks are the job's environment as Slurm would give it, so they act, but
    only inside the job's sandbox (BASH_ENV runs in the job's bash there)."""
    write(user, project / "probe.sh", PROBE)
    write(user, project / "evil.sh", 'echo "EVIL-RAN AGENT_SANDBOX=$AGENT_SANDBOX"\n')
    exports = (f"export HOME_ACCESS=write SANDBOX_CONF=/tmp/x PYTHONPATH={project} "
               f"PYTHONHOME=/nonexistent BASH_ENV={project}/evil.sh ENV={project}/evil.sh "
               f"LD_PRELOAD={project}/evil.so PRIVATE_TMP=false FILTER_PASSWD=false "
               "SLURM_CONF=/tmp/slurm.conf SBATCH_EXPORT=NONE SANDBOX_BACKEND=landlock; ")
    # Steering the sandbox through an --export name is refused as a whole.
    result = user.sandbox("/bin/sh", "-c",
                          exports + "sbatch --parsable --export=ALL,HOME_ACCESS=write probe.sh",
                          cwd=project)
    assert result.returncode == 1 and "agent-sandbox: sbatch:" in result.stderr, result.stderr
    result = user.sandbox("/bin/sh", "-c", exports + "sbatch --parsable probe.sh", cwd=project)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip()
    assert job.isdigit()
    assert job_state(job) == "COMPLETED"
    text = wait_for_file(project / f"slurm-{job}.out")
    lines = [line for line in text.split("\n") if line and "LD_PRELOAD" not in line]
    assert lines and all(line == "EVIL-RAN AGENT_SANDBOX=1" for line in lines
                         if line.startswith("EVIL")), text
    assert [line for line in lines if not line.startswith("EVIL")] == [
        "AGENT_SANDBOX=1", "ssh=hidden", "GH_TOKEN=absent", "home=private"], text


def test_srun_from_the_login_sandbox_and_inside_a_job_run_sandboxed(user, project):
    result = user.sandbox("srun", "/bin/bash", "-c", PROBE.split("\n", 1)[1], cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:3] == ["AGENT_SANDBOX=1", "ssh=hidden", "GH_TOKEN=absent"]
    write(user, project / "probe.sh", PROBE)
    write(user, project / "job.sh", "#!/bin/bash\nsrun ./probe.sh\n")
    result = user.sandbox("sbatch", "--wait", "--parsable", "job.sh", cwd=project, timeout=120)
    assert result.returncode == 0, result.stderr
    text = wait_for_file(project / f"slurm-{result.stdout.strip()}.out")
    assert text.split()[:3] == ["AGENT_SANDBOX=1", "ssh=hidden", "GH_TOKEN=absent"]


DENIED = [
    ["--prolog=/x"], ["--chdir=/tmp"], ["-D", "/tmp"], ["-D/tmp"], ["--ch=/tmp"],
    ["--uid=0"], ["--get-user-env"], ["--propagate"], ["--container=/x"], ["--bb=x"],
    ["--mail-user=a@b"], ["--export=SANDBOX_CONF=/x"], ["--export-file=/x"], ["--totally-unknown"],
]


@pytest.mark.parametrize("options", DENIED, ids=lambda o: " ".join(o))
def test_denied_sbatch_options_are_refused_on_the_command_line(user, project, options):
    result = user.sandbox("sbatch", *options, "--wrap", "true", cwd=project)
    assert result.returncode == 1
    assert result.stderr.startswith("agent-sandbox: sbatch: ") and " — " in result.stderr


@pytest.mark.parametrize("line", ["#SBATCH --export=ALL --prolog=/x", "#SBATCH -D /tmp",
                                  "#SBATCH --chdir=/tmp", "#SBATCH --wrap=true",
                                  "#SBATCH --uid=0", "#SBATCH --get-user-env"])
def test_denied_options_smuggled_in_sbatch_lines_are_refused(user, project, line):
    write(user, project / "job.sh", f"#!/bin/bash\n#SBATCH --time=1\n{line}\ntrue\n")
    result = user.sandbox("sbatch", "job.sh", cwd=project)
    assert result.returncode == 1
    assert "script line 3" in result.stderr, result.stderr


def test_output_outside_the_project_is_refused(user, project):
    for target in ("/tmp/out.txt", "../../out.txt", str(user.home / "out.txt")):
        result = user.sandbox("sbatch", f"--output={target}", "--wrap", "true", cwd=project)
        assert result.returncode == 1, target
        assert "outside the project" in result.stderr


def test_planted_symlink_cannot_redirect_the_job_output(user, project):
    victim = user.home / ".bashrc"
    before = victim.read_text()
    link = project / "out.txt"
    link.symlink_to(victim)
    os.lchown(link, user.uid, user.gid)
    result = user.sandbox("sbatch", "--parsable", "--output=out.txt", "--wrap",
                          "echo job-output", cwd=project)
    assert result.returncode == 0, result.stderr
    assert job_state(result.stdout.strip()) == "COMPLETED"
    assert wait_for_file(link) == "job-output\n"
    assert victim.read_text() == before
    assert link.is_symlink() and ".local/share/agent-sandbox/jobs" in os.readlink(link)


def test_newline_in_an_argument_round_trips(user, project):
    result = user.sandbox("sbatch", "--wait", "--parsable", "--wrap", "echo first\necho second",
                          cwd=project, timeout=120)
    assert result.returncode == 0, result.stderr
    text = wait_for_file(project / f"slurm-{result.stdout.strip()}.out")
    assert text == "first\nsecond\n"


def test_parsable_wait_and_test_only_behave_like_sbatch(user, project):
    result = user.sandbox("sbatch", "--wait", "--wrap", "exit 3", cwd=project, timeout=120)
    assert result.returncode == 3
    assert re.fullmatch(r"Submitted batch job \d+\n", result.stdout)
    result = user.sandbox("sbatch", "--test-only", "--wrap", "true", cwd=project)
    assert result.returncode == 0
    assert re.match(r"sbatch: Job \d+ to start at ", result.stderr), result.stderr
    real = subprocess.run(["sbatch", "--test-only", "--wrap", "true"], capture_output=True,
                          text=True, cwd="/tmp")
    assert real.returncode == 0 and real.stderr.startswith("sbatch: Job ")


def test_job_is_tagged_and_recorded_in_the_ledger(user, project):
    result = user.sandbox("sbatch", "--parsable", "--hold", "--comment=my note", "--wrap", "true",
                          cwd=project)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip()
    try:
        comment = subprocess.run(["squeue", "-h", "-j", job, "-o", "%k"], capture_output=True,
                                 text=True).stdout.strip()
        assert comment.startswith("chaperon:sid=") and comment.endswith(",user=my%20note:END")
        ledger = user.home / ".local/state/agent-sandbox/ledger"
        assert any(f'"job":"{job}"' in p.read_text() for p in ledger.rglob("*.jsonl"))
    finally:
        subprocess.run(["scancel", job])


def test_script_from_stdin(user, project):
    result = user.sandbox("sbatch", "--parsable", "--wait", cwd=project,
                          input="#!/bin/sh\necho from-stdin\n", timeout=120)
    assert result.returncode == 0, result.stderr
    assert wait_for_file(project / f"slurm-{result.stdout.strip()}.out") == "from-stdin\n"


def test_job_names_are_those_the_real_sbatch_gives(user, project):
    """Slurm would name every job after the chaperon's wrapper; the names
    must be the ones a direct submission gets."""
    write(user, project / "myjob.sh", "#!/bin/sh\ntrue\n")
    cases = [(["myjob.sh"], {}, None), (["./myjob.sh"], {}, None),
             (["--wrap", "true"], {}, None), ([], {}, "#!/bin/sh\ntrue\n"),
             (["-J", "given", "myjob.sh"], {}, None),
             (["myjob.sh"], {"SBATCH_JOB_NAME": "fromenv"}, None)]
    ids = []
    try:
        for args, extra, stdin in cases:
            argv = ["sbatch", "--parsable", "--hold", *args]
            real = user.run(argv, env=user.env(**extra), cwd=project, input=stdin)
            inside = user.sandbox(*argv, env=user.env(**extra), cwd=project, input=stdin)
            assert real.returncode == 0 and inside.returncode == 0, (real.stderr, inside.stderr)
            pair = [real.stdout.strip(), inside.stdout.strip()]
            ids += pair
            names = subprocess.run(["squeue", "-h", "-j", ",".join(pair), "-o", "%i %j"],
                                   capture_output=True, text=True).stdout.split()
            named = dict(zip(names[::2], names[1::2]))
            assert named[pair[0]] == named[pair[1]], (args, extra, named)
    finally:
        subprocess.run(["scancel", *ids])


def test_srun_job_and_step_names_are_those_the_real_srun_gives(user, project):
    """Issue 32: the real srun runs the chaperon's wrapper (python), so jobs
    and steps started by srun in the sandbox were named `python`; they are
    named after the user's command, or as the user named them."""
    show = "echo $SLURM_JOB_NAME"
    for argv, extra, expected in ((["srun", "-n1", "/bin/sh", "-c", show], {}, "sh"),
                                  (["srun", "-n1", "-J", "given", "sh", "-c", show], {},
                                   "given"),
                                  (["srun", "-n1", "sh", "-c", show],
                                   {"SLURM_JOB_NAME": "fromenv"}, "fromenv")):
        real = user.run(argv, env=user.env(**extra), cwd=project)
        inside = user.sandbox(*argv, env=user.env(**extra), cwd=project, timeout=120)
        assert real.returncode == 0 and inside.returncode == 0, (real.stderr, inside.stderr)
        assert real.stdout.split() == inside.stdout.split() == [expected], (argv, real, inside)


def test_sbatch_input_variables_act_as_with_the_real_sbatch(user, project):
    """SBATCH_* variables apply between #SBATCH lines and the command line,
    through the same allow-list; sinfo's own variables reach sinfo."""
    write(user, project / "timed.sh", "#!/bin/sh\n#SBATCH --time=5\ntrue\n")
    cases = [({"SBATCH_TIMELIMIT": "7", "SBATCH_JOB_NAME": "envjob"}, ["timed.sh"]),
             ({"SBATCH_TIMELIMIT": "7"}, ["--time=9", "timed.sh"]),
             ({"SBATCH_REQUEUE": "", "SBATCH_OVERCOMMIT": "no"}, ["timed.sh"])]
    ids = []
    try:
        for extra, args in cases:
            argv = ["sbatch", "--parsable", "--hold", *args]
            real = user.run(argv, env=user.env(**extra), cwd=project)
            inside = user.sandbox(*argv, env=user.env(**extra), cwd=project)
            assert real.returncode == 0 and inside.returncode == 0, (real.stderr, inside.stderr)
            pair = [real.stdout.strip(), inside.stdout.strip()]
            ids += pair
            shown = [subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                                    text=True).stdout for job in pair]
            fields = [{k: v for k, v in re.findall(r"(JobName|TimeLimit|Requeue|OverSubscribe)"
                                                   r"=(\S+)", text)} for text in shown]
            assert fields[0] == fields[1], (extra, args, fields)
        assert fields[0]["Requeue"] == "1"
        refused = user.sandbox("sbatch", "--hold", "timed.sh", cwd=project,
                               env=user.env(SBATCH_GET_USER_ENV="1"))
        assert refused.returncode == 1
        assert refused.stderr.startswith("agent-sandbox: sbatch: SBATCH_GET_USER_ENV (read by "
                                         "sbatch as --get-user-env=1) is refused — ")
    finally:
        subprocess.run(["scancel", *ids])
    env = user.env(SINFO_FORMAT="%P|%a|%D")
    real = user.run(["sinfo"], env=env, cwd=project)
    inside = user.sandbox("sinfo", env=env, cwd=project)
    assert inside.stdout == real.stdout and "|" in real.stdout


def test_srun_input_variables_act_as_with_the_real_srun(user, project):
    """Outside a job, srun's SLURM_* input variables become options through
    the same allow-list (the command line still wins); a refused one is named."""
    env = user.env(SLURM_JOB_NAME="envname", SLURM_TIMELIMIT="3", SLURM_LABELIO="1")
    argv = ["srun", "-n1", "sh", "-c", 'echo "$SLURM_JOB_ID"']
    real = user.run(argv, env=env, cwd=project)
    inside = user.sandbox(*argv, env=env, cwd=project)
    assert real.returncode == 0 and inside.returncode == 0, (real.stderr, inside.stderr)
    assert real.stdout.startswith("0: ") and inside.stdout.startswith("0: ")   # --label
    jobs = [out.stdout.split()[-1] for out in (real, inside)]
    fields = [re.findall(r"(?:JobName|TimeLimit)=(\S+)", subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True).stdout)
        for job in jobs]                                  # slurmctld keeps ended jobs 300 s
    assert fields[0] == fields[1] == ["envname", "00:03:00"], fields
    overridden = user.sandbox("srun", "-n1", "-J", "given", "true", env=env, cwd=project)
    assert overridden.returncode == 0, overridden.stderr
    refused = user.sandbox(*argv, env=user.env(SLURM_TASK_PROLOG="/tmp/x"), cwd=project)
    assert refused.returncode == 1
    assert refused.stderr.startswith("agent-sandbox: srun: SLURM_TASK_PROLOG (read by srun as "
                                     "--task-prolog=/tmp/x) is refused — "), refused.stderr


def test_a_pmi2_task_keeps_the_socket_slurm_gives_it(user, project):
    """Descriptor hygiene closes everything a caller left open, but the PMI-2
    socket slurmstepd hands a task (PMI_FD) is what MPI needs inside."""
    result = user.sandbox("srun", "--mpi=pmi2", "-n1", "/bin/sh", "-c",
                          'test -S /proc/self/fd/"$PMI_FD" && echo "kept $PMI_FD"', cwd=project,
                          timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("kept "), (result.stdout, result.stderr)
