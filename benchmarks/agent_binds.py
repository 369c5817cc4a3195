#!/usr/bin/env python3
"""The mounts of an agent profile launch and what they cost, against a baseline.

Runs `agent-sandbox claude` with a stand-in agent (a shell script printing
how many mounts its sandbox has: /proc/self/mountinfo's lines) for this
install and a baseline install (e.g. the commit before a change, built with
scripts/install.sh into another prefix), in the same interleaved rounds,
NETWORK_MODE=open (no egress proxy and relay: the launch is the launcher and
bwrap), warm plan caches, in two projects: one that is no repository and one
that is (`git init`). Prints per install and project the median and p90
wall time and the mounts inside.

With --config-entries the user's ~/.claude first gets the entries a Claude
Code user has (scratch entries such as statsig/ and shell-snapshots/, a
CLAUDE.md, settings, history, plugins …) — only those missing, removed again
at the end — since how many of them a plan binds is what this round changed.

Usage (as an ordinary user):
    python3 benchmarks/agent_binds.py --baseline PATH [--agent-sandbox PATH]
                                      [--runs N] [--config-entries]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

# What ~/.claude holds after some use of Claude Code (directories end in /).
CONFIG_ENTRIES = ("statsig/", "shell-snapshots/", "debug/", "ide/", "session-env/",
                  "paste-cache/", "telemetry/", "stats-cache.json", "CLAUDE.md", "settings.json",
                  "history.jsonl", "plans/", "file-history/", "sessions/", "plugins/", "agents/",
                  "commands/", "projects/", "todos/")


def populate(claude: str) -> list[str]:
    """The entries of CONFIG_ENTRIES missing from `claude`, made; returns them."""
    made = []
    os.makedirs(claude, mode=0o700, exist_ok=True)
    for entry in CONFIG_ENTRIES:
        path = os.path.join(claude, entry.rstrip("/"))
        if os.path.lexists(path):
            continue
        if entry.endswith("/"):
            os.mkdir(path, 0o700)
        else:
            with open(path, "w") as handle:
                handle.write("{}\n" if entry.endswith(".json") else "# mine\n")
        made.append(path)
    return made


def run(argv, cwd, env) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if result.returncode != 0:
        sys.exit(f"{argv[0]} failed ({result.returncode}): {result.stderr[-500:]}")
    return elapsed, result.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--agent-sandbox", default=shutil.which("agent-sandbox")
                        or "/opt/agent-sandbox/venv/bin/agent-sandbox")
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--config-entries", action="store_true")
    args = parser.parse_args()
    home = os.path.expanduser("~")
    root = os.path.join(home, ".cache", "agent-sandbox-bench")
    standin_dir = os.path.join(root, "bin")
    os.makedirs(standin_dir, exist_ok=True)
    with open(os.path.join(standin_dir, "claude"), "w") as handle:
        handle.write("#!/bin/sh\nwc -l < /proc/self/mountinfo\n")
    os.chmod(os.path.join(standin_dir, "claude"), 0o755)
    projects = {"no repository": os.path.join(root, "agent-project"),
                "repository": os.path.join(root, "agent-repo")}
    for path in projects.values():
        os.makedirs(path, exist_ok=True)
    if not os.path.isdir(os.path.join(projects["repository"], ".git", "objects")):
        subprocess.run(["git", "init", "-q", projects["repository"]], check=True)
    env = {"PATH": f"{standin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": home,
           "LANG": "C.UTF-8", "SANDBOX_QUIET": "1", "NETWORK_MODE": "open"}
    made = populate(os.path.join(home, ".claude")) if args.config_entries else []
    try:
        installs = {"this install": args.agent_sandbox, "baseline": args.baseline}
        times: dict = {}
        mounts: dict = {}
        for project in projects.values():
            for install in installs.values():
                for _ in range(3):                     # warm the plan caches
                    run([install, "claude"], project, env)
        for _ in range(args.runs):
            for where, project in projects.items():
                for name, install in installs.items():
                    elapsed, out = run([install, "claude"], project, env)
                    times.setdefault((where, name), []).append(elapsed)
                    mounts[(where, name)] = out
    finally:
        for path in reversed(made):
            (os.rmdir if os.path.isdir(path) else os.unlink)(path)
    entries = "with the usual ~/.claude entries" if args.config_entries else "~/.claude as it is"
    print(f"agent-sandbox claude (stand-in, NETWORK_MODE=open, {entries}), "
          f"{args.runs} interleaved runs:")
    for where in projects:
        for name in installs:
            series = sorted(times[(where, name)])
            p90 = series[int(len(series) * 0.9) - 1]
            print(f"  {where:<14} {name:<13} median {statistics.median(series):6.1f} ms   "
                  f"p90 {p90:6.1f} ms   mounts inside {mounts[(where, name)]}")
        mine = statistics.median(times[(where, "this install")])
        base = statistics.median(times[(where, "baseline")])
        print(f"  {where}: {(mine / base - 1) * 100:+.1f}% against the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
