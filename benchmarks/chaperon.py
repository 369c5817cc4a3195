#!/usr/bin/env python3
"""The chaperon's cost against same-run baselines on the real Slurm cluster.

1. squeue: median of `squeue` through the stub inside the jail vs the real
   squeue outside (both as this user). Target: at most 15 ms added.
2. burst: 200 `sbatch --hold --wrap true` from 20 parallel clients inside one
   sandbox vs the same burst with the real sbatch outside. Target: all 200
   accepted, none lost or duplicated (job ids, ledger, comment tags), wall
   time at most 1.5x the outside burst.
3. idle RSS of the chaperon process. Target: at most 40 MB.

Run as an ordinary user with the cluster up (scripts/slurm-cluster.sh start):
    python3 benchmarks/chaperon.py [--runs N] [--agent-sandbox PATH]
    python3 benchmarks/chaperon.py --baseline PATH [--runs N] [--agent-sandbox PATH]
With --baseline only the stub round trip is measured: `squeue` through the
stub of this install and of another (e.g. the commit before a change, built
with scripts/install.sh into another prefix), in alternating rounds, each
inside its own sandbox; the medians and their ratio are printed.
Prints the figures and PASS/FAIL per target; exits 1 if a target fails.
Held jobs it submits are cancelled at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

INSIDE = r'''
import json, os, statistics, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
runs, burst, clients, rounds = (int(a) for a in sys.argv[1:5])
result = {}
times = []
subprocess.run(["squeue"], capture_output=True)
# In rounds, the harness measuring the real squeue outside between them, so a
# queue or machine that changes over the run weighs on both sides alike.
for r in range(rounds):
    for _ in range(max(1, runs // rounds)):
        t = time.perf_counter(); subprocess.run(["squeue"], capture_output=True)
        times.append((time.perf_counter() - t) * 1000)
    open(f".bench-round{r}", "w").close()
    while not os.path.exists(f".bench-next{r}"):
        time.sleep(0.01)
result["squeue_ms"] = times
def submit(_):
    r = subprocess.run(["sbatch", "--parsable", "--hold", "--job-name=bench", "--wrap", "true"],
                       capture_output=True, text=True)
    return r.returncode, r.stdout.strip(), r.stderr.strip()
t = time.perf_counter()
with ThreadPoolExecutor(clients) as pool:
    outcomes = list(pool.map(submit, range(burst)))
result["burst_s"] = time.perf_counter() - t
result["burst"] = outcomes
print(json.dumps(result))
'''


def real(argv):
    return subprocess.run(argv, capture_output=True, text=True)


def outside_burst(sbatch: str, burst: int, clients: int, cwd: str):
    from concurrent.futures import ThreadPoolExecutor

    def submit(_):
        r = real([sbatch, "--parsable", "--hold", "--job-name=bench-outside", "--wrap", "true"])
        return r.returncode, r.stdout.strip()
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(submit, range(burst)))
    return time.perf_counter() - start, outcomes


def chaperon_rss() -> float | None:
    """RSS in MiB of this user's chaperon (read from /proc: no dependencies)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read()
            if b"chaperon.server" not in cmdline or os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            continue
    return None


COMPARE = r'''
import json, subprocess, sys, time
times = []
subprocess.run(["squeue"], capture_output=True)
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); subprocess.run(["squeue"], capture_output=True)
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps(times))
'''


def compare(current: str, baseline: str, runs: int, project: str, env: dict) -> int:
    """The stub round trip of two installs, in alternating rounds."""
    results: dict[str, list[float]] = {"this install": [], "baseline": []}
    rounds = 10
    for _ in range(rounds):
        for name, program in (("this install", current), ("baseline", baseline)):
            out = subprocess.run([program, "run", "--", "/usr/bin/python3", "-c", COMPARE,
                                  str(max(1, runs // rounds))], cwd=project, env=env,
                                 capture_output=True, text=True, check=True).stdout
            results[name].extend(json.loads(out))
    medians = {name: statistics.median(times) for name, times in results.items()}
    for name, value in medians.items():
        print(f"squeue through the stub ({name}): median {value:.1f} ms of {len(results[name])}")
    ratio = medians["this install"] / medians["baseline"] - 1
    print(f"against the baseline: {ratio * 100:+.1f}%")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--agent-sandbox", default=shutil.which("agent-sandbox")
                        or "/opt/agent-sandbox/venv/bin/agent-sandbox")
    parser.add_argument("--baseline", help="another agent-sandbox: compare the stub round trip")
    args = parser.parse_args()
    agent_sandbox = args.agent_sandbox
    squeue, sbatch, scancel = (shutil.which(n) for n in ("squeue", "sbatch", "scancel"))
    if not (squeue and sbatch):
        sys.exit("Slurm is not installed here (scripts/slurm-cluster.sh start)")
    # (a squeue that fails at once would be measured as a fast one)
    if real([squeue, "-h"]).returncode != 0:
        sys.exit("the Slurm cluster is not up: squeue fails (scripts/slurm-cluster.sh start)")
    home = os.path.expanduser("~")
    project = os.path.join(home, ".cache", "agent-sandbox-bench", "project")
    os.makedirs(project, exist_ok=True)
    env = dict(os.environ, SANDBOX_QUIET="1")
    if args.baseline:
        return compare(agent_sandbox, args.baseline, args.runs, project, env)
    verdicts = []
    try:
        # idle RSS: a sandbox that sleeps while we look at its chaperon (started
        # on demand: one Slurm call first)
        sleeper = subprocess.Popen([agent_sandbox, "run", "--", "/bin/sh", "-c",
                                    "sinfo -h >/dev/null; sleep 4"], cwd=project, env=env)
        time.sleep(2.5)
        rss = chaperon_rss()
        sleeper.wait()

        rounds = 3
        for leftover in os.listdir(project):
            if leftover.startswith(".bench-"):
                os.unlink(os.path.join(project, leftover))
        proc = subprocess.Popen([agent_sandbox, "run", "--", "/usr/bin/python3", "-c", INSIDE,
                                 str(args.runs), str(args.burst), str(args.clients),
                                 str(rounds)], cwd=project, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        real([squeue])
        outside_times = []
        for r in range(rounds):
            while not os.path.exists(os.path.join(project, f".bench-round{r}")):
                if proc.poll() is not None:
                    sys.exit(f"the in-sandbox part failed: {proc.stderr.read()[-2000:]}")
                time.sleep(0.01)
            for _ in range(max(1, args.runs // rounds)):
                start = time.perf_counter()
                real([squeue])
                outside_times.append((time.perf_counter() - start) * 1000)
            open(os.path.join(project, f".bench-next{r}"), "w").close()
        out, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"the in-sandbox part failed: {err[-2000:]}")
        data = json.loads(out)
        out_wall, out_outcomes = outside_burst(sbatch, args.burst, args.clients, project)

        stub = statistics.median(data["squeue_ms"])
        bare = statistics.median(outside_times)
        print(f"squeue through the stub (median)   {stub:7.1f} ms")
        print(f"real squeue outside (median)       {bare:7.1f} ms")
        added = stub - bare
        verdicts.append(added <= 15)
        print(f"  added: {added:.1f} ms (target <= 15 ms): {'PASS' if added <= 15 else 'FAIL'}")

        ids = [o[1] for o in data["burst"] if o[0] == 0 and o[1].isdigit()]
        failed = [o for o in data["burst"] if o[0] != 0]
        ledger_ids = set()
        ledger_dir = os.path.join(home, ".local/state/agent-sandbox/ledger")
        for name in os.listdir(ledger_dir):
            for line in open(os.path.join(ledger_dir, name)):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if "job" in record:
                    ledger_ids.add(record["job"])
        tagged = real([squeue, "--me", "-h", "-t", "PD", "-o", "%i %k"]).stdout.split("\n")
        tagged_ids = {line.split()[0] for line in tagged if "chaperon:sid=" in line}
        ok_burst = (len(ids) == args.burst and len(set(ids)) == args.burst and not failed
                    and set(ids) <= ledger_ids and set(ids) <= tagged_ids)
        print(f"burst inside: {len(ids)}/{args.burst} accepted, {len(set(ids))} distinct, "
              f"{len(failed)} failed, {len(set(ids) & ledger_ids)} in the ledger, "
              f"{len(set(ids) & tagged_ids)} tagged; wall {data['burst_s']:.2f} s")
        print(f"burst outside: {sum(1 for o in out_outcomes if o[0] == 0)}/{args.burst} "
              f"accepted; wall {out_wall:.2f} s")
        ratio = data["burst_s"] / out_wall
        verdicts.append(ok_burst and ratio <= 1.5)
        print(f"  ratio {ratio:.2f} (target <= 1.5, nothing lost or doubled): "
              f"{'PASS' if ok_burst and ratio <= 1.5 else 'FAIL'}")
        if rss is None:
            print("chaperon idle RSS: not found: FAIL")
            verdicts.append(False)
        else:
            print(f"chaperon idle RSS: {rss:.1f} MB (target <= 40 MB): "
                  f"{'PASS' if rss <= 40 else 'FAIL'}")
            verdicts.append(rss <= 40)
    finally:
        if scancel:
            real([scancel, "--me", "--name=bench"])
            real([scancel, "--me", "--name=bench-outside"])
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
