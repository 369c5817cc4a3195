#!/usr/bin/env python3
"""Two Open MPI ranks on one node in a landlock job: shared memory through
the job's directory in /dev/shm (jobs/shm.py) against TCP, the
transport landlock jobs used before, in the same job.

One sandboxed `sbatch --wait` (landlock) runs, in alternating rounds, a
ping-pong between two ranks of one node with OMPI_MCA_btl=self,vader and
with OMPI_MCA_btl=self,tcp (the same-run baseline): round-trip time for
8 bytes and for 1 MiB. Prints the medians and their ratio. Target: vader's
1 MiB round trip at most half TCP's.

Run as an ordinary user, in a project directory, with the cluster up
(scripts/slurm-cluster.sh start) and Open MPI + mpi4py on the node:
    python3 benchmarks/mpi_shm.py [--rounds N] [--launcher PATH]
Exits 1 if the target fails or the job does not run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

PINGPONG = """\
import sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.Get_rank()
for size, n in ((8, 2000), (1 << 20, 200)):
    buf = bytearray(size)
    c.Barrier(); t = time.perf_counter()
    for _ in range(n):
        if r == 0:
            c.Send(buf, 1); c.Recv(buf, 1)
        else:
            c.Recv(buf, 0); c.Send(buf, 0)
    if r == 0:
        print(f"{sys.argv[1]} {size} {(time.perf_counter() - t) / n * 1e6:.2f}", flush=True)
"""
LINE = re.compile(r"^(vader|tcp) (\d+) ([\d.]+)$", re.M)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launcher", default=shutil.which("agent-sandbox") or "agent-sandbox")
    args = parser.parse_args()
    with open(".bench-pingpong.py", "w", encoding="utf-8") as handle:
        handle.write(PINGPONG)
    step = "OMPI_MCA_btl=self,{0} srun --mpi=pmix -N1 -n2 python3 .bench-pingpong.py {0}"
    script = f"for i in $(seq {args.rounds}); do {step.format('vader')}; {step.format('tcp')}; done"
    try:
        result = subprocess.run(
            [args.launcher, "run", "--backend", "landlock", "--", "sbatch", "--wait", "-N1",
             "-n2", "-o", ".bench-pingpong.out", "--wrap", script],
            capture_output=True, text=True, timeout=600)
        out = open(".bench-pingpong.out", encoding="utf-8").read() \
            if os.path.exists(".bench-pingpong.out") else ""
    finally:
        for name in (".bench-pingpong.py", ".bench-pingpong.out"):
            if os.path.exists(name):
                os.unlink(name)
    times: dict[tuple[str, int], list[float]] = {}
    for transport, size, rtt in LINE.findall(out):
        times.setdefault((transport, int(size)), []).append(float(rtt))
    if result.returncode != 0 or len(times) != 4:
        print(f"the job failed (exit {result.returncode}):\n{result.stdout}{result.stderr}{out}")
        return 1
    print(f"two ranks on one node, landlock job, {args.rounds} alternating rounds (median RTT):")
    for size, label in ((8, "8 B"), (1 << 20, "1 MiB")):
        vader = statistics.median(times[("vader", size)])
        tcp = statistics.median(times[("tcp", size)])
        print(f"  {label:6} shared memory {vader:9.1f} us   TCP (baseline) {tcp:9.1f} us   "
              f"ratio {vader / tcp:.2f}")
    big = 1 << 20
    ratio = statistics.median(times[("vader", big)]) / statistics.median(times[("tcp", big)])
    ok = ratio <= 0.5
    print(f"target: 1 MiB round trip over shared memory at most half TCP's — "
          f"{'PASS' if ok else 'FAIL'} ({ratio:.2f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
