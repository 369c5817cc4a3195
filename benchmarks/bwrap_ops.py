#!/usr/bin/env python3
"""What each class of the plan's bwrap operations costs.

bubblewrap 0.8 rereads /proc/self/mountinfo at every bind and --remount-ro,
so an operation costs in proportion to the mounts already in the namespace
(the host's plus the sandbox's so far). This script spawns the warm plan's own
bwrap (no launcher: benchmarks/launch.py's PlanSpawner) and, in the same
interleaved rounds, the same argv with one class of operations removed, and
bare `bwrap --ro-bind / / --unshare-all true`; it prints the medians and what
each class adds. The variants are measurements only: several would weaken
the sandbox (the Slurm masks, the protected paths) and are never plans.

Usage (as an ordinary user, after one `agent-sandbox run -- true` from the
project, with the environment benchmarks/launch.py uses):
    python3 benchmarks/bwrap_ops.py [--runs N] [--agent-sandbox PATH]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import PlanSpawner  # noqa: E402

# bwrap's options and how many values each takes (the mount operations and the rest).
MOUNT_OPTIONS = {"--ro-bind": 2, "--bind": 2, "--dev-bind": 2, "--symlink": 2, "--tmpfs": 1,
                 "--proc": 1, "--dev": 1, "--ro-bind-data": 2, "--file": 2, "--remount-ro": 1}
OTHER_OPTIONS = {"--chdir": 1, "--json-status-fd": 1, "--seccomp": 1, "--perms": 1}


def split(argv) -> tuple[list, list, list]:
    """(options before the mounts, the mount operations with their --perms, the rest)."""
    head, ops, pending, index = [argv[0]], [], [], 1
    while argv[index] != "--":
        option = argv[index]
        width = MOUNT_OPTIONS.get(option, OTHER_OPTIONS.get(option, 0))
        tokens, index = list(argv[index:index + 1 + width]), index + 1 + width
        if option == "--perms":
            pending = tokens
        elif option in MOUNT_OPTIONS:
            ops.append(pending + tokens)
            pending = []
        else:
            head += tokens
    return head, ops, list(argv[index:])


def _dest(op) -> str:
    return op[-1]


CLASSES = {
    "Slurm binary masks": lambda op: op[0] == "--ro-bind" and op[1] == "/dev/null",
    "--remount-ro": lambda op: op[0] == "--remount-ro",
    "--ro-bind-data": lambda op: "--ro-bind-data" in op,
    "ro-binds inside writable binds": None,     # filled in per plan (protected paths)
    "/sys": lambda op: op[:3] == ["--ro-bind", "/sys", "/sys"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--agent-sandbox", default=shutil.which("agent-sandbox")
                        or "/opt/agent-sandbox/venv/bin/agent-sandbox")
    args = parser.parse_args()
    plans = os.path.join(os.path.expanduser("~"), ".local", "state", "agent-sandbox", "cache",
                         "plans")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.expanduser("~"),
           "LANG": "C.UTF-8", "SANDBOX_QUIET": "1"}
    spawner = PlanSpawner(args.agent_sandbox, plans, env)
    plan = spawner.plan
    head, ops, tail = split(plan.argv)
    writable = [_dest(op) for op in ops if op[0] == "--bind"]
    CLASSES["ro-binds inside writable binds"] = lambda op: op[0] == "--ro-bind" and any(
        _dest(op).startswith(w + "/") for w in writable)
    variants = {"the plan": ops}
    for name, member in CLASSES.items():
        kept = [op for op in ops if not member(op)]
        if len(kept) < len(ops):
            variants[f"without {name} ({len(ops) - len(kept)})"] = kept
    bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
    bare = [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"]
    results: dict[str, list] = {name: [] for name in variants}
    results["bwrap (bare)"] = []
    for _ in range(args.runs):
        for name, kept in variants.items():
            spawner.plan = plan._replace(argv=tuple(head + [t for op in kept for t in op] + tail))
            results[name].extend(spawner.measure(1))
        start = time.perf_counter()
        os.spawnv(os.P_WAIT, bare[0], bare)
        results["bwrap (bare)"].append((time.perf_counter() - start) * 1000)
    full = statistics.median(results["the plan"])
    print(f"{len(ops)} mount operations in the plan")
    for name, times in results.items():
        median = statistics.median(times)
        share = "" if name == "the plan" else f"   the plan takes {full - median:4.1f} ms more"
        print(f"{name:<44} median {median:6.2f} ms{share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
