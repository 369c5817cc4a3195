"""Every srun input variable that names a file, a program, a directory or a
controller, set by the agent inside a real sandbox (each backend) against the
real Slurm, in step mode (inside a job of this project) and allocation mode:
nothing outside the project is opened, written or run, and no secret comes
back (issue 11, item 1).

The driver runs inside the sandbox as the agent would; the assertions look
at the host afterwards (a victim file's content, markers a planted prolog
would create, a PMIx directory root would make, the key in any output)."""
from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.usefixtures("slurm_cluster")

DRIVER = r'''
import json, os, subprocess, sys, time
home, project, mode = os.path.expanduser("~"), os.getcwd(), sys.argv[1]
key, victim, evil, pmix = (f"{home}/.ssh/id_rsa", f"{home}/victim.txt",
                           f"{project}/evil.sh", f"{home}/pmixbase")
CASES = {
    "SLURM_STDOUTMODE": victim, "SLURM_STDERRMODE": victim, "SLURM_STDINMODE": key,
    "SLURM_HOSTFILE": key, "SLURM_SRUN_MULTI": "1", "SLURM_TASK_PROLOG": evil,
    "SLURM_TASK_EPILOG": evil, "SLURM_PROLOG": evil, "SLURM_EPILOG": evil,
    "SLURM_REMOTE_CWD": f"{home}/.ssh", "SLURM_WORKING_DIR": f"{home}/.ssh",
    "SLURMD_DEBUG": "9", "SLURM_BCAST": f"{home}/bcast-copy",
    "SLURM_PMIX_TMPDIR": pmix, "SLURM_WORKING_CLUSTER": "evil:127.0.0.1:1:9728",
    "SLURM_CONF": evil, "SLURM_SPANK_PLANT": evil, "TMPDIR": f"{home}/tmpdir-made",
    "SLURM_SRUN_CR_SOCKET": f"{home}/cr.sock",
}
base = dict(os.environ)
job = None
if mode == "step":
    job = subprocess.run(["sbatch", "--parsable", "--wrap", "sleep 300"], env=base,
                         capture_output=True, text=True).stdout.strip()
    for _ in range(300):
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=base,
                               capture_output=True, text=True).stdout.strip()
        if state == "RUNNING":
            break
        time.sleep(0.2)
    base["SLURM_JOB_ID"] = job
results = {}
for name, value in CASES.items():
    env = dict(base, **{name: value})
    if name == "SLURM_PMIX_TMPDIR":
        env["SLURM_MPI_TYPE"] = "pmix"
    run = subprocess.run(["srun", "-n1", "--overlap", "/bin/sh", "-c", "cat; echo hello"],
                         env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=60)
    results[name] = [run.returncode, run.stdout, run.stderr]
env = dict(base, SLURM_STDOUTMODE="inside.out")
run = subprocess.run(["srun", "-n1", "--overlap", "echo", "to-the-project"], env=env,
                     capture_output=True, text=True, timeout=60)
results["inside"] = [run.returncode, run.stdout, run.stderr]
if job:
    subprocess.run(["scancel", job], env=base)
print(json.dumps(results))
'''
# The variables whose options the allow-list refuses, by name, in both modes.
REFUSED = ["SLURM_STDOUTMODE", "SLURM_STDERRMODE", "SLURM_STDINMODE", "SLURM_HOSTFILE",
           "SLURM_SRUN_MULTI", "SLURM_TASK_PROLOG", "SLURM_TASK_EPILOG", "SLURM_PROLOG",
           "SLURM_EPILOG", "SLURM_REMOTE_CWD", "SLURM_WORKING_DIR", "SLURMD_DEBUG",
           "SLURM_BCAST"]
# The variables that never reach the real srun: it runs as if they were unset.
DROPPED = ["SLURM_WORKING_CLUSTER", "SLURM_CONF", "SLURM_SPANK_PLANT", "TMPDIR",
           "SLURM_SRUN_CR_SOCKET"]


def _write(user, path, text, mode=0o644):
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, user.uid, user.gid)


def _attack(user, project, backend: str, mode: str) -> dict:
    victim = user.write("victim.txt", "victim: unchanged\n")
    pmix = user.home / "pmixbase"
    pmix.mkdir(exist_ok=True)
    os.chown(pmix, user.uid, user.gid)
    for leftover in user.home.glob("planted-*"):
        leftover.unlink()
    _write(user, project / "evil.sh", f"#!/bin/sh\ntouch {user.home}/planted-$$\n", 0o755)
    _write(user, project / "driver.py", DRIVER)
    result = user.sandbox("/usr/bin/python3", "driver.py", mode, cwd=project, timeout=240,
                          env=user.env(SANDBOX_BACKEND=backend))
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    # Nothing outside the project was opened, written or run.
    assert victim.read_text() == "victim: unchanged\n"
    assert not list(user.home.glob("planted-*")), "a planted prolog ran outside the sandbox"
    assert not list(pmix.iterdir()), "slurmstepd made a PMIx directory where the agent said"
    for made in ("tmpdir-made", "bcast-copy", "cr.sock"):
        assert not (user.home / made).exists(), made
    for name, (code, out, err) in results.items():
        assert "PRIVATE KEY" not in out + err, (name, out, err)
    return results


def _check(results: dict, project) -> None:
    for name in REFUSED:
        code, out, err = results[name]
        assert code == 1 and err.startswith("agent-sandbox: srun: ") and (
            name in err or "is refused" in err), (name, code, out, err)
        assert "hello" not in out, name
    for name in DROPPED:
        code, out, err = results[name]
        assert (code, out) == (0, "hello\n"), (name, code, out, err)
    code, out, err = results["inside"]
    assert code == 0, err
    assert (project / "inside.out").read_text() == "to-the-project\n"


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_step_mode_input_variables_open_nothing_outside(user, project, backend):
    _check(_attack(user, project, backend, "step"), project)


def test_allocation_mode_input_variables_open_nothing_outside(user, project):
    _check(_attack(user, project, "bwrap", "allocation"), project)
