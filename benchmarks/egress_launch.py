#!/usr/bin/env python3
"""What NETWORK_MODE=allowlist adds to a launch, against same-run baselines.

Prints the median (and p90) wall time, interleaved round by round, of
  * agent-sandbox run -- true                          (NETWORK_MODE=open)
  * agent-sandbox run -- true  with NETWORK_MODE=isolated (own network namespace)
  * agent-sandbox run -- true  with NETWORK_MODE=allowlist
    (egress proxy started and stopped, relay started inside before `true`)
and the difference allowlist − open. For information (issue 16 sets targets
for connections and throughput through relay and proxy: benchmarks/network.py).

Usage: python3 benchmarks/egress_launch.py [--runs N] [--agent-sandbox PATH] [--backend B]
Run it as an ordinary user; it uses a scratch project below $HOME.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

from launch import measure, summary   # benchmarks/launch.py: one way to time a launch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--agent-sandbox", default=shutil.which("agent-sandbox")
                        or "/opt/agent-sandbox/venv/bin/agent-sandbox")
    parser.add_argument("--backend", default="bwrap")
    args = parser.parse_args()
    project = os.path.join(os.path.expanduser("~"), ".cache", "agent-sandbox-bench", "project")
    os.makedirs(project, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.expanduser("~"),
           "LANG": "C.UTF-8", "SANDBOX_QUIET": "1", "CHAPERON": "false"}
    argv = [args.agent_sandbox, "run", "--backend", args.backend, "--", "true"]
    modes = ("open", "isolated", "allowlist")
    results: dict[str, list[float]] = {}
    # Blocks of 5 per mode, the modes interleaved block by block: the
    # validated configuration is cached per install for one set of inputs
    # (NETWORK_MODE from the environment is one), so the first launch of a
    # block validates again and is not counted.
    for _ in range(max(1, args.runs // 5)):
        for mode in modes:
            measure(argv, 1, project, dict(env, NETWORK_MODE=mode))
            results.setdefault(mode, []).extend(
                measure(argv, 5, project, dict(env, NETWORK_MODE=mode)))
    for mode in modes:
        print(summary(f"run -- true, NETWORK_MODE={mode}", results[mode]))
    added = statistics.median(results["allowlist"]) - statistics.median(results["open"])
    print(f"allowlist adds {added:.1f} ms to a launch on {args.backend} (proxy + relay start)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
