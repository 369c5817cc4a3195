#!/usr/bin/env python3
"""What an agent profile costs at launch (issue 17) against a same-run baseline.

Prints the median (and p90) wall time of:
  * agent-sandbox run -- STANDIN      (the baseline: no profile)
  * agent-sandbox codex               (the same stand-in as the codex profile: the
                                       executable resolved, ~/.codex on a session
                                       copy with 20 entries linked, config.toml
                                       copied, and merged back at exit — here
                                       with one allowed key changed each run)
and the difference. A scratch ~/.codex-bench-* is not used: the profile's real
~/.codex is, so run it as a user without Codex state you care about (the test
user). Usage: python3 benchmarks/agents.py [--runs N] [--agent-sandbox PATH]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from launch import measure, summary   # benchmarks/launch.py: one way to time a launch

STANDIN = """#!/bin/sh
d="${CODEX_HOME:-$HOME/.codex}"
[ -f "$d/config.toml" ] && sed "s/^model = .*/model = \\"m$$\\"/" "$d/config.toml" > "$d/config.toml.new" \\
  && mv "$d/config.toml.new" "$d/config.toml"
exit 0
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--agent-sandbox", default=shutil.which("agent-sandbox")
                        or "/opt/agent-sandbox/venv/bin/agent-sandbox")
    args = parser.parse_args()
    home = os.path.expanduser("~")
    codex = os.path.join(home, ".codex")
    if os.path.exists(codex):
        sys.exit(f"{codex} exists: run this as a user without Codex state (the test user)")
    scratch = tempfile.mkdtemp(prefix="agents-bench-", dir=home)
    try:
        project = os.path.join(scratch, "project")
        # The profile's executable must not be writable inside (a session
        # would replace what runs next time): it lives beside the project;
        # `run` gets the same script in the project, where it is visible.
        bin_dir = os.path.join(scratch, "bin")
        os.makedirs(bin_dir)
        os.makedirs(project)
        standin = os.path.join(bin_dir, "codex")
        baseline = os.path.join(project, "codex-standin")
        for path in (standin, baseline):
            with open(path, "w") as handle:
                handle.write(STANDIN)
            os.chmod(path, 0o755)
        os.makedirs(os.path.join(codex, "sessions"))
        for index in range(18):
            with open(os.path.join(codex, f"state-{index}.json"), "w") as handle:
                handle.write("{}\n")
        with open(os.path.join(codex, "config.toml"), "w") as handle:
            handle.write('# bench\nmodel = "start"\n\n[mcp_servers.x]\ncommand = "mine"\n')
        env = dict(os.environ, PATH=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                   SANDBOX_QUIET="1", NETWORK_MODE="open")
        runs = {"run -- standin (baseline)": [], "codex profile (copy + merge)": []}
        for _ in range(args.runs):      # interleaved, so drift hits both alike
            runs["run -- standin (baseline)"] += measure(
                [args.agent_sandbox, "run", "--", baseline], 1, project, env)
            runs["codex profile (copy + merge)"] += measure(
                [args.agent_sandbox, "codex"], 1, project, env)
        for name, times in runs.items():
            print(summary(name, times))
        base, profile = (statistics.median(t) for t in runs.values())
        print(f"profile overhead: {profile - base:+.1f} ms ({profile / base:.2f}x)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(codex, ignore_errors=True)
        shutil.rmtree(os.path.join(home, ".local", "state", "agent-sandbox-run", "agents"),
                      ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
