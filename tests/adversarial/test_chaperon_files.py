"""Files a submission names, from inside a real sandbox against the real
Slurm (issue 11, items 2-4): opened once beneath the project without
following a symlink, regular files and directories only (a literal /dev/null
excepted), refused with the house message, never an internal error; a
failed submission leaves nothing staged; the user's environment reaches the
job beside Slurm, by --export rules."""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def _write(user, path, text, mode=0o644):
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, user.uid, user.gid)
    return path


def _staged(user) -> set:
    staging = user.home / ".local/share/agent-sandbox/jobs"
    return set(staging.glob("*/*")) if staging.exists() else set()


def _wait_done(job: str, timeout=90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"],
                               capture_output=True, text=True).stdout.strip()
        if state and state.split()[0] in ("COMPLETED", "FAILED", "CANCELLED"):
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not end within {timeout}s")


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_unusable_files_are_refused_with_the_house_message(user, project, backend):
    (project / "dir").mkdir()
    os.chown(project / "dir", user.uid, user.gid)
    os.mkfifo(project / "fifo")
    os.chown(project / "fifo", user.uid, user.gid)
    (project / "keylink").symlink_to(user.home / ".ssh/id_rsa")
    (project / "homelink").symlink_to(user.home)
    victim = user.write("victim.txt", "victim: unchanged\n")
    before = _staged(user)
    calls = [["sbatch", "--input=.", "--wrap", "true"],
             ["sbatch", "--input=dir", "--wrap", "true"],
             ["sbatch", "--input=keylink", "--wrap", "true"],
             ["sbatch", "fifo"], ["sbatch", "keylink"], ["sbatch", "dir"],
             ["sbatch", "-o", "homelink/victim.txt", "--wrap", "true"],
             ["sbatch", "--partition=no-such-partition", "--wrap", "true"],
             ["sbatch", "--test-only", "--wrap", "true"],
             ["srun", "-o", "homelink/victim.txt", "true"],
             ["srun", "-i", "keylink", "cat"], ["srun", "-i", "fifo", "cat"],
             ["srun", "-o", "dir", "true"]]
    script = "\n".join(f"{' '.join(call)} </dev/null; echo \"rc=$?\"" for call in calls)
    result = user.sandbox("/bin/bash", "-c", script, cwd=project, timeout=120,
                          env=user.env(SANDBOX_BACKEND=backend))
    codes = re.findall(r"rc=(\d+)", result.stdout)
    assert len(codes) == len(calls), result.stdout + result.stderr
    messages = [line for line in result.stderr.splitlines() if line.startswith("agent-sandbox:")]
    for call, code in zip(calls, codes):
        if "--test-only" in call or "--partition=no-such-partition" in call:
            continue     # the real sbatch answers these itself
        assert code == "1", (call, result.stderr)
    assert len(messages) >= len(calls) - 2, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert "PRIVATE KEY" not in result.stdout + result.stderr
    assert victim.read_text() == "victim: unchanged\n"
    assert _staged(user) == before, "a failed submission left files staged"


def test_dev_null_passes_as_written(user, project):
    result = user.sandbox("sbatch", "--hold", "--parsable", "-o", "/dev/null", "-e", "/dev/null",
                          "-i", "/dev/null", "--wrap", "true", cwd=project)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip()
    try:
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                               text=True).stdout
        assert "StdOut=/dev/null" in shown and "StdErr=/dev/null" in shown, shown
        assert "StdIn=/dev/null" in shown, shown
    finally:
        subprocess.run(["scancel", job])
    result = user.sandbox("srun", "-o", "/dev/null", "echo", "gone", cwd=project)
    assert (result.returncode, result.stdout) == (0, ""), result.stderr


def test_the_user_environment_reaches_the_job_beside_slurm(user, project):
    sub = project / "sub"
    sub.mkdir()
    os.chown(sub, user.uid, user.gid)
    _write(user, sub / "env.sh", "#!/bin/bash\necho \"pwd=$PWD submit=$SLURM_SUBMIT_DIR "
                                 "mine=${MINE:-unset} other=${OTHER:-unset} "
                                 "export=${SLURM_EXPORT_ENV:-unset}\"\n", 0o755)
    outputs = {}
    for export in (None, "NONE", "OTHER=set"):
        options = [f"--export={export}"] if export else []
        result = user.sandbox("sbatch", "--parsable", *options, "env.sh", cwd=sub,
                              env=user.env(MINE="from-the-sandbox"))
        assert result.returncode == 0, result.stderr
        job = result.stdout.strip()
        _wait_done(job)
        outputs[export] = (sub / f"slurm-{job}.out").read_text().strip()
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                               text=True).stdout
        workdir = re.search(r"WorkDir=(\S+)", shown).group(1)
        assert workdir.startswith(str(user.home / ".local/share/agent-sandbox/jobs/")), workdir
    assert outputs[None] == (f"pwd={sub} submit={sub} mine=from-the-sandbox other=unset "
                             "export=unset")
    assert outputs["NONE"] == f"pwd={sub} submit={sub} mine=unset other=unset export=NONE"
    assert outputs["OTHER=set"] == (f"pwd={sub} submit={sub} mine=unset other=set "
                                    "export=OTHER=set")
    result = user.sandbox("srun", "/bin/bash", "-c", "echo $PWD ${MINE:-unset}", cwd=sub,
                          env=user.env(MINE="from-the-sandbox"))
    assert result.stdout == f"{sub} from-the-sandbox\n", result.stderr
