"""A task that tries to join another job's sandbox is refused (SPEC §9 "One
sandbox per node per job"; jobs/share.py). A job's sandbox on a node is
handed over (a pidfd, by SCM_RIGHTS) through a Unix socket in the per-user
run directory, which no sandbox can reach; the holder hands it only to a peer
of the same uid whose nearest root-owned slurmstepd ancestor runs the same
job. The attacker here is stronger than an agent: a process of the same
user, outside any sandbox, in another job (or in none)."""
from __future__ import annotations

import json

import pytest

from tests.support.install import INSTALLED
from tests.support.waiting import until

pytestmark = pytest.mark.usefixtures("slurm_multinode")

CLIENT = """\
import json, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect": exc.strerror}))
    sys.exit(0)
data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(4))
print(json.dumps({"answer": json.loads(data or b"{}"), "descriptors": len(ancillary)}))
"""


def submit(cluster, user, project, *args) -> str:
    result = cluster.run_as(user, [INSTALLED, "run", "--", "sbatch", "--parsable", *args],
                            cwd=project)
    job = result.stdout.strip()
    assert result.returncode == 0 and job.isdigit(), result.stdout + result.stderr
    return job


def try_join(cluster, user, project, socket_path, *srun: str) -> dict:
    """The client run as the user outside any sandbox: in a step of a job
    (`srun ARGS`), or on the login side when `srun` is empty."""
    argv = (["srun", "--overlap", "-w", "n1", "-n1", *srun] if srun else []) + [
        "/usr/bin/python3", "-I", str(project / "client.py"), str(socket_path)]
    result = cluster.run_as(user, argv, cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_another_jobs_task_cannot_join_the_sandbox(slurm_multinode, user, project):
    (project / "client.py").write_text(CLIENT)
    jobs = user.home / ".local/state/agent-sandbox-run/jobs"
    target = submit(slurm_multinode, user, project, "-w", "n1", "-o", "/dev/null",
                    "--wrap", "sleep 120")
    other = submit(slurm_multinode, user, project, "-w", "n1", "-o", "/dev/null",
                   "--wrap", "sleep 120")
    try:
        sock = jobs / f"n1-{target}.sock"
        until(sock.exists, f"the sandbox holder of job {target} listens")
        until((jobs / f"n1-{other}.sock").exists, f"the sandbox holder of job {other} listens")
        # A process of another job of the same user, outside any sandbox: refused.
        stranger = try_join(slurm_multinode, user, project, sock, f"--jobid={other}")
        assert stranger["descriptors"] == 0, stranger
        assert stranger["answer"] == {"refused": stranger["answer"].get("refused")}
        assert f"is not a process of job {target}" in stranger["answer"]["refused"]
        # A process of the same user in no job at all: refused.
        login = try_join(slurm_multinode, user, project, sock)
        assert login["descriptors"] == 0 and "refused" in login["answer"], login
        # The same request from a step of the job itself is answered: the check,
        # not the transport, is what refuses.
        member = try_join(slurm_multinode, user, project, sock, f"--jobid={target}")
        assert member["descriptors"] == 1, member
        assert member["answer"]["project"] == str(project), member
    finally:
        slurm_multinode.run_as(user, ["scancel", target, other])


def test_the_holders_socket_is_out_of_reach_inside_a_job(slurm_multinode, user, project):
    """From inside a job's sandbox, the sockets of the user's job sandboxes
    (its own and any other) cannot even be reached."""
    (project / "client.py").write_text(CLIENT)
    jobs = user.home / ".local/state/agent-sandbox-run/jobs"
    target = submit(slurm_multinode, user, project, "-w", "n1", "-o", "/dev/null",
                    "--wrap", "sleep 120")
    try:
        sock = jobs / f"n1-{target}.sock"
        until(sock.exists, f"the sandbox holder of job {target} listens")
        result = slurm_multinode.run_as(
            user, [INSTALLED, "run", "--", "sbatch", "--wait", "-w", "n1", "-o", "probe.out",
                   "--wrap", f"/usr/bin/python3 -I client.py {sock}"], cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr
        answer = json.loads((project / "probe.out").read_text().strip().splitlines()[-1])
        assert "connect" in answer, answer       # never an answer, never a descriptor
    finally:
        slurm_multinode.run_as(user, ["scancel", target])
