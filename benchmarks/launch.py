#!/usr/bin/env python3
"""Launch latency of `agent-sandbox run -- true` against same-run baselines.

Prints the median (and p90) wall time of:
  * agent-sandbox run -- true           (the product: warm compiled plan cache;
                                         the chaperon on standby when the host has
                                         Slurm — it starts only at a Slurm call)
  * the same with a cold plan cache     (the cache's plans removed before each run:
                                         a full compile, which also stores the plan)
  * agent-sandbox run -- sinfo -h       (with --slurm: a Slurm call, which starts
                                         the chaperon; beside `sinfo -h` outside)
  * bwrap --ro-bind / / --unshare-all --die-with-parent true   (the bare primitive)
  * python3 -I -S -c pass               (the interpreter floor)
and checks the target of issue 19: warm launch median <= bare bwrap median +
2 x the interpreter floor. Exit 0 when the target holds, 1 otherwise.

With --baseline PATH (another install, e.g. the commit before a change, built
with scripts/install.sh into another prefix) that install's launch is
measured in the same interleaved rounds and the ratio printed.

Usage: python3 benchmarks/launch.py [--runs N] [--agent-sandbox PATH] [--baseline PATH]
                                    [--slurm]
Run it as an ordinary user from any directory; it uses a scratch project
below $HOME.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

def measure(argv, runs, cwd, env, before=None) -> list[float]:
    times = []
    for _ in range(runs):
        if before:
            before()
        start = time.perf_counter()
        result = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        times.append((time.perf_counter() - start) * 1000)
        if result.returncode != 0:
            sys.exit(f"{argv[0]} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    return times


def summary(name, times) -> str:
    times = sorted(times)
    p90 = times[int(len(times) * 0.9) - 1]
    return f"{name:<34} median {statistics.median(times):7.1f} ms   p90 {p90:7.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--agent-sandbox", default=shutil.which("agent-sandbox")
                        or "/opt/agent-sandbox/venv/bin/agent-sandbox")
    parser.add_argument("--baseline", help="another agent-sandbox to measure beside it")
    parser.add_argument("--slurm", action="store_true", help="also a launch calling sinfo")
    args = parser.parse_args()
    bwrap = shutil.which("bwrap")
    if not bwrap:
        sys.exit("bwrap is not installed (apt-get install bubblewrap)")
    project = os.path.join(os.path.expanduser("~"), ".cache", "agent-sandbox-bench", "project")
    os.makedirs(project, exist_ok=True)
    plans = os.path.join(os.path.expanduser("~"), ".local", "state", "agent-sandbox", "cache",
                         "plans")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.expanduser("~"),
           "LANG": "C.UTF-8", "SANDBOX_QUIET": "1"}
    warm = "agent-sandbox run -- true"
    cold = "agent-sandbox run -- true (cold cache)"
    cases = {
        warm: [args.agent_sandbox, "run", "--", "true"],
        cold: [args.agent_sandbox, "run", "--", "true"],
        "bwrap (bare)": [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
                         "true"],
        "python3 -I -S -c pass": ["/usr/bin/python3", "-I", "-S", "-c", "pass"],
    }
    before = {cold: lambda: shutil.rmtree(plans, ignore_errors=True)}
    if args.slurm:
        cases["agent-sandbox run -- sinfo -h"] = [args.agent_sandbox, "run", "--", "sinfo",
                                                  "-h"]
        cases["sinfo -h (outside)"] = ["sinfo", "-h"]
    if args.baseline:
        cases["baseline run -- true"] = [args.baseline, "run", "--", "true"]
        measure(cases["baseline run -- true"], 3, project, env)
    measure(cases[warm], 3, project, env)   # warm the caches
    results = {}
    # Interleave the cases so that machine noise hits all of them alike.
    for _ in range(args.runs):
        for name, argv in cases.items():
            results.setdefault(name, []).extend(measure(argv, 1, project, env,
                                                        before.get(name)))
    for name, times in results.items():
        print(summary(name, times))
    launch = statistics.median(results[warm])
    bare = statistics.median(results["bwrap (bare)"])
    floor = statistics.median(results["python3 -I -S -c pass"])
    if args.baseline:
        base = statistics.median(results["baseline run -- true"])
        print(f"against the baseline install: {launch:.1f} vs {base:.1f} ms "
              f"({(launch / base - 1) * 100:+.1f}%)")
    target = bare + 2 * floor
    print(f"cold cache: {statistics.median(results[cold]):.1f} ms; warm: {launch:.1f} ms")
    verdict = "PASS" if launch <= target else "FAIL"
    print(f"warm launch {launch:.1f} ms, target <= bare bwrap + 2 x python3 -I -S = "
          f"{target:.1f} ms (added over bare bwrap: {launch - bare:.1f} ms): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
