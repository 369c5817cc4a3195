"""MPI in sandboxed jobs (SPEC §9 "One sandbox per node per job", issue 14):
Open MPI (Debian's openmpi-bin, python3-mpi4py) with a ring that passes
1 MiB from rank to rank, submitted from inside a sandbox on the multi-node
cluster, with its default transports — shared memory with single-copy (CMA)
between ranks of a node, TCP between nodes. Before one sandbox per node, two
ranks on one node crashed in the shared-memory transport (each task had its
own user, PID and IPC namespaces). On landlock every task is a sandbox of its
own by design, and the job runs with jobstart's Open MPI settings: shared
memory without single-copy, its segments in the job's directory in /dev/shm
(jobs/shm.py) — forced there for the ranks on one node
(OMPI_MCA_btl=self,vader), so a fall-back to TCP fails the test."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.clusters import read_output, sandboxed_sbatch

pytestmark = pytest.mark.usefixtures("slurm_multinode")

RING = """\
import os, socket
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
size_bytes = 1 << 20
received = bytearray(size_bytes)
comm.Sendrecv(bytes([rank % 256]) * size_bytes, dest=(rank + 1) % size,
              recvbuf=received, source=(rank - 1) % size)
ok = received == bytes([(rank - 1) % size % 256]) * size_bytes
print(f"rank {rank}/{size} node={socket.gethostname()} "
      f"AGENT_SANDBOX={os.environ.get('AGENT_SANDBOX')} ok={ok} "
      f"ipc={os.readlink('/proc/self/ns/ipc')}", flush=True)
"""
RANK = re.compile(r"^rank (\d+)/(\d+) node=(\S+) AGENT_SANDBOX=(\S+) ok=(\S+) ipc=(\S+)$", re.M)
# Two steps of one job: two ranks on one node, then four on two nodes.
SCRIPT = ("srun --mpi=pmix -N1 -n2 python3 ring.py > one-node.txt && "
          "srun --mpi=pmix -N2 -n4 --ntasks-per-node=2 python3 ring.py > two-nodes.txt && "
          "echo batch node=$(hostname) ipc=$(readlink /proc/self/ns/ipc)")


def ranks(path: Path) -> list[tuple]:
    text = read_output(path)
    found = sorted((int(r), int(n), node, marker, ok, ipc)
                   for r, n, node, marker, ok, ipc in RANK.findall(text))
    assert found, text
    return found


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_an_mpi_ring_runs_on_one_node_and_on_two_nodes(slurm_multinode, user, project, backend):
    user.write(str((project / "ring.py").relative_to(user.home)), RING)
    # On landlock the ranks on one node must use shared memory (vader), nothing else.
    script = ("OMPI_MCA_btl=self,vader " + SCRIPT) if backend == "landlock" else SCRIPT
    result = sandboxed_sbatch(slurm_multinode, user, project, "-N2", "-n4",
                              "--ntasks-per-node=2", "-o", "job.out", "--wrap", script,
                              options=("--backend", backend))
    job_out = (project / "job.out").read_text() if (project / "job.out").exists() else ""
    assert result.returncode == 0, result.stdout + result.stderr + job_out
    one, two = ranks(project / "one-node.txt"), ranks(project / "two-nodes.txt")
    assert [(r, n, marker, ok) for r, n, _, marker, ok, _ in one] == [
        (0, 2, "1", "True"), (1, 2, "1", "True")]
    assert len({node for _, _, node, _, _, _ in one}) == 1
    assert [(r, n, marker, ok) for r, n, _, marker, ok, _ in two] == [
        (r, 4, "1", "True") for r in range(4)]
    assert sorted(node for _, _, node, _, _, _ in two) == ["n1", "n1", "n2", "n2"]
    batch = re.search(r"^batch node=(\S+) ipc=(\S+)$", job_out, re.M)
    assert batch, job_out
    by_node: dict[str, set] = {}
    for _, _, node, _, _, ipc in one + two:
        by_node.setdefault(node, set()).add(ipc)
    if backend == "landlock":      # no namespaces: the host's, and the report says so
        return
    # One sandbox per node: every rank on a node, in both steps, shares the IPC
    # namespace, the batch script's on the batch node.
    assert all(len(ipcs) == 1 for ipcs in by_node.values()), by_node
    assert by_node[batch.group(1)] == {batch.group(2)}, (by_node, batch.groups())
    assert len({ipc for ipcs in by_node.values() for ipc in ipcs}) == 2


CONFINEMENT = """\
for f in CapEff CapPrm CapBnd CapAmb NoNewPrivs Seccomp; do
    printf '%s ' "$(grep "^$f:" /proc/self/status | tr -d ' \\t')"
done
test -e "$HOME/.ssh" && ssh=seen || ssh=hidden
echo "fds=$(ls /proc/self/fd | wc -l) ssh=$ssh"
"""


def test_a_joined_task_is_confined_like_the_batch_script(slurm_multinode, user, project):
    """A task that joined the batch script's sandbox holds no capability (it
    held all of them in the sandbox's user namespace after setns), has
    no_new_privs, the seccomp filter, only stdin/stdout/stderr, and the
    sandbox's view (hidden paths absent)."""
    user.write(str((project / "confine.sh").relative_to(user.home)), CONFINEMENT)
    result = sandboxed_sbatch(slurm_multinode, user, project, "-N1", "-n2", "-o", "job.out",
                              "--wrap", "srun -N1 -n2 sh confine.sh > tasks.txt; sh confine.sh")
    assert result.returncode == 0, result.stdout + result.stderr
    batch = read_output(project / "job.out").strip()
    tasks = read_output(project / "tasks.txt").strip().splitlines()
    expected = ("CapEff:0000000000000000 CapPrm:0000000000000000 CapBnd:0000000000000000 "
                "CapAmb:0000000000000000 NoNewPrivs:1 Seccomp:2 fds=4 ssh=hidden")
    assert batch == expected, batch
    assert tasks == [expected, expected], tasks
