#!/usr/bin/env python3
"""Launch latency of `agent-sandbox run -- true` against same-run baselines.

Prints the median (and p90) wall time of:
  * agent-sandbox run -- true           (the product, warm config/seccomp caches;
                                         with the chaperon when the host has Slurm)
  * the same with CHAPERON=false        (no Slurm proxy), for information
  * bwrap --ro-bind / / --unshare-all --die-with-parent true   (the bare primitive)
  * python3 -I -S -c pass               (the interpreter floor)
and checks the target: launch median <= bare bwrap median + 60 ms.
Exit 0 when the target holds, 1 otherwise.

With --baseline PATH (another install, e.g. the commit before a change, built
with scripts/install.sh into another prefix) that install's launch is
measured in the same interleaved rounds and the ratio printed.

Usage: python3 benchmarks/launch.py [--runs N] [--agent-sandbox PATH] [--baseline PATH]
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

TARGET_MS = 60.0


def measure(argv, runs, cwd, env) -> list[float]:
    times = []
    for _ in range(runs):
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
    args = parser.parse_args()
    bwrap = shutil.which("bwrap")
    if not bwrap:
        sys.exit("bwrap is not installed (apt-get install bubblewrap)")
    project = os.path.join(os.path.expanduser("~"), ".cache", "agent-sandbox-bench", "project")
    os.makedirs(project, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.expanduser("~"),
           "LANG": "C.UTF-8", "SANDBOX_QUIET": "1"}
    cases = {
        "agent-sandbox run -- true": [args.agent_sandbox, "run", "--", "true"],
        "bwrap (bare)": [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
                         "true"],
        "python3 -I -S -c pass": ["/usr/bin/python3", "-I", "-S", "-c", "pass"],
    }
    # Without Slurm's proxy too: on a host with Slurm the default launch also
    # starts and stops the chaperon.
    no_chaperon = dict(env, CHAPERON="false")
    envs = {"agent-sandbox run -- true (CHAPERON=false)": no_chaperon}
    cases["agent-sandbox run -- true (CHAPERON=false)"] = cases["agent-sandbox run -- true"]
    if args.baseline:
        cases["baseline run -- true"] = [args.baseline, "run", "--", "true"]
        measure(cases["baseline run -- true"], 3, project, env)
    measure(cases["agent-sandbox run -- true"], 3, project, env)   # warm the caches
    measure(cases["agent-sandbox run -- true"], 3, project, no_chaperon)
    results = {}
    # Interleave the cases so that machine noise hits all of them alike.
    for _ in range(args.runs):
        for name, argv in cases.items():
            results.setdefault(name, []).extend(measure(argv, 1, project,
                                                        envs.get(name, env)))
    for name, times in results.items():
        print(summary(name, times))
    launch = statistics.median(results["agent-sandbox run -- true"])
    bare = statistics.median(results["bwrap (bare)"])
    added = launch - bare
    if args.baseline:
        base = statistics.median(results["baseline run -- true"])
        print(f"against the baseline install: {launch:.1f} vs {base:.1f} ms "
              f"({(launch / base - 1) * 100:+.1f}%)")
    verdict = "PASS" if added <= TARGET_MS else "FAIL"
    print(f"added over bare bwrap: {added:.1f} ms (target <= {TARGET_MS:.0f} ms): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
