#!/usr/bin/env python3
"""The compute-side launch of a job step (issue 19 item 3): from the compiled
plan cache against a full compile, in the same run.

Runs inside a Slurm step (started outside one, it runs itself under
`srun -N1 -n1`), so every launch has a real task's environment and its
slurmstepd; each launch gets new per-task values (SLURM_JOB_ID,
SLURM_PROCID, SLURM_TASK_PID: what the key leaves out) and a fresh
directory shaped like the chaperon's stage as its working directory, as the
chaperon's wrapper and srun start it. Prints the median (and p90) of,
interleaved:
  * run --job -- true                  a batch script (or a landlock task): its
                                       plan from the cache
  * the same, cold                     the cache's plans removed before each
                                       run: a full compile (which stores it)
  * run --job --job-shared -- true     the first task on a node: the holder's
                                       launch and the joiner's policy from the cache
  * the same, cold
  * python3 -I -S -c pass              the interpreter floor
and the saving. Run it with the install's interpreter as an ordinary user:

  <prefix>/venv/bin/python benchmarks/job_launch.py [--runs N] [--agent-sandbox PATH]
                                                    [--backend bwrap|firejail|landlock]
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
    parser.add_argument("--agent-sandbox", default=os.path.join(os.path.dirname(
        sys.executable), "agent-sandbox"))
    parser.add_argument("--backend", choices=("bwrap", "firejail", "landlock"),
                        help="the backend of every launch (default: the configured one)")
    args = parser.parse_args()
    if "SLURM_STEP_ID" not in os.environ:
        os.execvp("srun", ["srun", "-N1", "-n1", sys.executable, os.path.abspath(__file__),
                           *sys.argv[1:]])
    from agent_sandbox.paths import staging_root, state_dir

    here = sys.path.pop(0)        # benchmarks/chaperon.py is not the package
    from chaperon.paths import project_hash
    sys.path.insert(0, here)

    home = os.path.expanduser("~")
    project = os.path.join(home, ".cache", "agent-sandbox-bench", "job-project")
    os.makedirs(project, exist_ok=True)
    plans = os.path.join(state_dir(home), "cache", "plans")
    stages = os.path.join(staging_root(home), project_hash(project))
    env = dict(os.environ)
    backend = ["--backend", args.backend] if args.backend else []
    launch = [args.agent_sandbox, "run", "--job", *backend, "--project-dir", project, "--",
              "true"]
    shared = launch[:3] + ["--job-shared"] + launch[3:]
    cases = {"run --job (cached)": (launch, False), "run --job (cold)": (launch, True),
             "run --job --job-shared (cached)": (shared, False),
             "run --job --job-shared (cold)": (shared, True),
             "python3 -I -S -c pass": (["/usr/bin/python3", "-I", "-S", "-c", "pass"], False)}
    count = [0]

    def next_task(cold: bool):
        def before():
            count[0] += 1     # a new task: what the key leaves out changes
            env.update(SLURM_JOB_ID=str(900000 + count[0]), SLURM_JOBID=str(900000 + count[0]),
                       SLURM_PROCID=str(count[0] % 4), SLURM_TASK_PID=str(40000 + count[0]))
            if cold:
                shutil.rmtree(plans, ignore_errors=True)
        return before

    def stage() -> str:
        path = os.path.join(stages, os.urandom(8).hex())
        os.makedirs(path, mode=0o700)
        return path

    for argv, _ in (cases["run --job (cached)"], cases["run --job --job-shared (cached)"]):
        measure(argv, 3, stage(), env, next_task(False))     # warm the caches
    results: dict[str, list[float]] = {}
    for _ in range(args.runs):
        for name, (argv, cold) in cases.items():
            where = stage()
            results.setdefault(name, []).extend(measure(argv, 1, where, env, next_task(cold)))
            shutil.rmtree(where, ignore_errors=True)
    for name, times in results.items():
        print(summary(name, times))
    for kind in ("run --job", "run --job --job-shared"):
        cached = statistics.median(results[f"{kind} (cached)"])
        cold = statistics.median(results[f"{kind} (cold)"])
        print(f"{kind}: cached {cached:.1f} ms vs compiled {cold:.1f} ms "
              f"(saves {cold - cached:.1f} ms, {(1 - cached / cold) * 100:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
