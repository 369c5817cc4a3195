"""The chaperon against a real Slurm 24.11 authenticated with auth/slurm and
sackd (issue 32, "Proven by"): scripts/slurm-root-cluster.sh starts a
single-node cluster inside a Debian 13 root (scripts/platform-root.sh with
slurmctld, slurmd, slurm-client and sackd; no munge, slurm.key generated; its
own ports, StateSave and spool — the host's 22.05 cluster keeps running); the
product is installed in the root as the platform smoke set does (a venv of the
root's Python 3.13 from a wheelhouse, tests/probes/platform_smoke.py setup),
then a named subset of the chaperon's behaviours runs through the sandbox:
sbatch with #SBATCH directives and srun steps in the job, --wrap, an array,
--wait, scoped squeue/scontrol/scancel. Left out: sacct (no slurmdbd in the
root: accounting_storage/none), and every option added after 22.05 (the
chaperon's tables are 22.05's; another part of issue 32 adds them).

Adversarial (the real sackd, not a stand-in): a sandboxed session on every
backend cannot connect to /run/slurm/sack.socket nor read slurm.key, while
the same user reaches the socket outside (the control)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.support.install import PREFIX
from tests.support.platformroot import REPO, SMOKE, script

pytestmark = pytest.mark.timeout(900)

CLUSTER = REPO / "scripts" / "slurm-root-cluster.sh"
SUITE = "trixie"
EXTRA = "slurmctld slurmd slurm-client sackd"
BACKENDS = ("bwrap", "firejail", "landlock")


class SlurmRoot:
    def __init__(self):
        self.env = {**os.environ, "AGENT_SANDBOX_ROOT_EXTRA": EXTRA,
                    "AGENT_SANDBOX_HOST_PYTHON": f"{PREFIX}/venv/bin/python"}

    def cluster(self, *args, timeout=600) -> subprocess.CompletedProcess:
        return subprocess.run([str(CLUSTER), *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env)

    def case(self, *args, timeout=300) -> dict:
        import json

        result = self.cluster("exec", SUITE, "python3", "/probes/platform_smoke.py", *args,
                              timeout=timeout)
        assert result.returncode == 0, f"the smoke driver failed ({args[0]}): {result.stderr}"
        return json.loads(result.stdout)

    def sandbox(self, backend: str, shell: str) -> dict:
        return self.case("sandbox", backend, shell)


@pytest.fixture(scope="module")
def slurm_root():
    if os.geteuid() != 0:
        pytest.fail("the Slurm root needs root (debootstrap, mount namespaces): run as root")
    root = SlurmRoot()
    wheels = subprocess.run([str(REPO / "scripts" / "platform-root.sh"), "wheels", SUITE],
                            capture_output=True, text=True, timeout=900, env=root.env)
    assert wheels.returncode == 0, wheels.stderr
    started = root.cluster("start", SUITE, "--ro", f"{wheels.stdout.strip()}:/wheels",
                           "--ro", f"{SMOKE.parent}:/probes", timeout=900)
    assert started.returncode == 0, started.stderr
    try:
        made = root.case("setup", "/wheels", timeout=900)
        assert made["rc"] == 0 and made["stdout"].startswith("agent-sandbox "), made
        yield root
    finally:
        stopped = root.cluster("stop", SUITE)
        assert stopped.returncode == 0, stopped.stderr


def test_the_cluster_is_slurm_24_11_with_auth_slurm_and_no_munge(slurm_root):
    out = slurm_root.cluster("exec", SUITE, "sh", "-c",
                             "sinfo -V; scontrol show config | grep -E '^AuthType|^SlurmctldPort';"
                             " test -S /run/slurm/sack.socket && echo sack-ok;"
                             " test -e /run/munge || echo no-munge").stdout
    assert re.search(r"^slurm(-wlm)? 24\.11\.", out, re.M), out
    assert re.search(r"^AuthType += auth/slurm", out, re.M), out
    assert re.search(r"^SlurmctldPort += 26817$", out, re.M), out
    assert "sack-ok" in out and "no-munge" in out, out
    # The host's own cluster still answers (never touched).
    host = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                          timeout=30)
    assert host.returncode == 0, host.stderr


JOB = """\
rm -f job.out
cat > job.sh <<'EOF'
#!/bin/sh
#SBATCH -J sackjob
#SBATCH -n 1
#SBATCH -o job.out
srun -n 1 sh -c 'echo step-$SLURM_STEP_ID on $SLURMD_NODENAME'
echo batch-done
EOF
sbatch --wait job.sh; rc=$?; cat job.out; exit $rc
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_sbatch_with_directives_and_srun_steps(slurm_root, backend):
    result = slurm_root.sandbox(backend, JOB)
    if backend == "firejail":
        # The root's install is a user's venv in the home: a firejail job
        # step cannot join its sandbox safely (docs/jobs.md), refused with
        # that reason in the job's output, the task not run — as on 22.05.
        assert result["rc"] != 0, result
        assert "step-0" not in result["stdout"], result
        assert "firejail job step cannot join" in result["stdout"] + result["stderr"], result
        return
    assert result["rc"] == 0, result
    assert "step-0 on sack1" in result["stdout"] and "batch-done" in result["stdout"], result


def test_wrap_and_an_array_with_wait(slurm_root):
    result = slurm_root.sandbox(
        "bwrap", "sbatch --wait --array=1-2 -o 'arr-%a.out' --wrap 'echo task-$SLURM_ARRAY_TASK_ID'"
                 " && cat arr-1.out arr-2.out")
    assert result["rc"] == 0, result
    assert "task-1" in result["stdout"] and "task-2" in result["stdout"], result


def test_squeue_scontrol_scancel_are_scoped(slurm_root):
    # A job of root's outside the sandbox: never shown inside.
    other = slurm_root.cluster("exec", SUITE, "sbatch", "--parsable", "-o", "/dev/null",
                               "--wrap", "sleep 120")
    assert other.returncode == 0, other.stderr
    other_id = other.stdout.strip().split(";")[0]
    try:
        result = slurm_root.sandbox(
            "bwrap", "id=$(sbatch --parsable -o /dev/null --wrap 'sleep 120'); echo mine=$id;"
                     " squeue -h -o '%i'; scontrol show job $id | head -1;"
                     f" scontrol show job {other_id} >/dev/null 2>&1 || echo other-hidden;"
                     " scancel $id && echo cancelled")
        assert result["rc"] == 0, result
        out = result["stdout"]
        mine = re.search(r"mine=(\d+)", out).group(1)
        assert re.search(rf"^{mine}$", out, re.M) and f"JobId={mine}" in out, out
        assert not re.search(rf"^{other_id}$", out, re.M) and "other-hidden" in out, out
        assert "cancelled" in out, out
    finally:
        slurm_root.cluster("exec", SUITE, "scancel", other_id)


PROBE = ("python3 -c \"import socket\n"
         "s = socket.socket(socket.AF_UNIX)\n"
         "try:\n    s.connect('/run/slurm/sack.socket'); print('sack reached')\n"
         "except OSError as e:\n    print('sack refused', type(e).__name__)\n"
         "try:\n    open('/etc/slurm/slurm.key', 'rb').read(); print('key read')\n"
         "except OSError as e:\n    print('key unreadable', type(e).__name__)\n\"")


def test_sackd_is_reachable_outside(slurm_root):
    """The control: the root's user reaches sackd's socket outside the sandbox
    (so a refusal inside is the sandbox's), and the real squeue works."""
    result = slurm_root.case("shell", PROBE + "; squeue -h >/dev/null && echo squeue-ok")
    assert "sack reached" in result["stdout"] and "squeue-ok" in result["stdout"], result


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_sack_socket_or_key_inside(slurm_root, backend):
    result = slurm_root.sandbox(backend, PROBE)
    assert result["rc"] == 0, result
    assert "sack refused" in result["stdout"], result
    assert "key unreadable" in result["stdout"], result
