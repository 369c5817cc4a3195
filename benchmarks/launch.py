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
  * the plan's own bwrap                (the warm plan's argv and payloads, spawned
                                         by this script: what the sandbox itself
                                         costs, without any launcher)
  * python3 -I -S -c pass               (the interpreter floor)
  * agent-sandbox claude --version      (the claude profile with a stand-in agent,
                                         a shell script printing a version, first
                                         on PATH; its NETWORK_MODE=allowlist starts
                                         the egress proxy; warm plan cache, as
                                         profiles are cached since this session)
                                         beside the stand-in run outside
and checks the target of issue 19: warm launch median <= bare bwrap median +
2 x the interpreter floor. Exit 0 when the target holds, 1 otherwise. It also
prints the launcher's own share: warm launch minus the plan's own bwrap.

With --baseline PATH (another install, e.g. the commit before a change, built
with scripts/install.sh into another prefix) that install's launch and its
plan's own bwrap are measured in the same interleaved rounds and the ratios
printed.

Usage: python3 benchmarks/launch.py [--runs N] [--agent-sandbox PATH] [--baseline PATH]
                                    [--slurm] [--no-agent]
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


# Run by the install's own interpreter (its venv's python, -I: nothing of the
# benchmark's path): read the newest `run` plan of the cache with that
# install's own code and print what spawning it takes, as JSON. Each install
# reads its own plans in a process of its own: the baseline and the current
# install keep their modules (and their cache formats) apart. The modules
# are looked up in the rooms of issue 28 and, for the commit before it, in
# launch/ (spelt as pairs, so that a renaming of imports leaves both).
LOADER = r'''
import glob, importlib, json, marshal, os, sys

def room(*places):
    for package, name in places:
        try:
            return importlib.import_module(f"agent_sandbox.{package}.{name}")
        except ImportError:
            continue
    raise ImportError(f"none of {places}")

plancache = room(("plancache", "plans"), ("launch", "plancache"))
spawn = room(("process", "spawn"), ("launch", "spawn"))
run = room(("launch", "run"),)
plans, environ = sys.argv[1], json.loads(sys.stdin.read())
# The newest plan of a `run` (an agent profile's is stored with its profile).
for path in sorted(glob.glob(os.path.join(plans, "*.marshal")), key=os.path.getmtime,
                   reverse=True):
    with open(path, "rb") as handle:
        frozen = marshal.loads(handle.read())[3]
    launch = plancache.thaw(frozen["launch"], lambda s: s, lambda b: b, {})
    if "profile" not in launch:
        break
if hasattr(plancache, "filled"):       # the environment template
    launch = plancache.filled(launch, environ)
plan = launch["plan"]
slot = getattr(run, "COMMAND_SLOT", None)
assert slot is None or plan.argv[-1] == slot, "the cached plan has no command slot"
print(json.dumps({
    "argv": [a if isinstance(a, str) else {"fd": a.name, "prefix": a.prefix}
             for a in plan.argv[:-1]],
    "env": plan.env, "status_fd": plan.status_fd, "mounts": len(plan.mounts),
    "payloads": {name: {"path": p.path} if p.path else {"data": p.data.decode("latin-1")}
                 for name, p in plan.payloads.items()},
    "wrapper": spawn._pdeathsig_wrapper(),
    "session_dir": (launch["chaperon"] or {}).get("session_dir"),
    "placeholders": [[c.path, c.is_dir, c.placeholder.decode("latin-1")]
                     for c in launch["placeholders"]]}))
'''


class PlanSpawner:
    """The warm plan of the cache, spawned without the launcher (setpriv and
    bwrap with the plan's argv, environment and payloads; its placeholders
    and chaperon directory made as a launch makes them): the sandbox's own
    cost. The newest `run` plan in the cache, read by the install's own
    code in its own interpreter (LOADER)."""

    def __init__(self, agent_sandbox: str, plans: str, environ: dict):
        import json

        venv = os.path.dirname(os.path.dirname(os.path.realpath(agent_sandbox)))
        loaded = subprocess.run([os.path.join(venv, "bin", "python"), "-I", "-c", LOADER,
                                 plans], input=json.dumps(environ), capture_output=True,
                                text=True)
        if loaded.returncode != 0:
            sys.exit(f"cannot read the cached plan of {agent_sandbox}: {loaded.stderr[-1500:]}")
        recipe = json.loads(loaded.stdout)
        self.argv, self.env = recipe["argv"], recipe["env"]
        self.status_fd, self.mounts = recipe["status_fd"], recipe["mounts"]
        self.payloads = recipe["payloads"]
        self.wrapper, self.directory = recipe["wrapper"], recipe["session_dir"]
        self.candidates = recipe["placeholders"]

    def _placeholders(self) -> list:
        """The missing protected paths made (as placeholders.create makes
        them: parents, then an empty directory or the placeholder's bytes)."""
        made = []
        for path, is_dir, content in self.candidates:
            if os.path.lexists(path):
                continue
            missing = []
            parent = os.path.dirname(path)
            while not os.path.lexists(parent):
                missing.append(parent)
                parent = os.path.dirname(parent)
            for directory in reversed(missing):
                os.mkdir(directory, 0o755)
                made.append((directory, True))
            if is_dir:
                os.mkdir(path, 0o755)
            else:
                with open(path, "xb") as handle:
                    handle.write(content.encode("latin-1"))
            made.append((path, is_dir))
        return made

    def measure(self, runs: int) -> list[float]:
        """Made and removed around each run, as a launch does: a placeholder
        left between runs would change the launcher's cached inputs."""
        times = []
        for _ in range(runs):
            if self.directory:
                os.makedirs(self.directory, exist_ok=True)
            made = self._placeholders()
            fds = {}
            status_read, fds[self.status_fd] = os.pipe()
            for name, payload in self.payloads.items():
                if "path" in payload:
                    fds[name] = os.open(payload["path"], os.O_RDONLY)
                else:
                    fds[name] = os.memfd_create(name, 0)
                    os.write(fds[name], payload["data"].encode("latin-1"))
                    os.lseek(fds[name], 0, os.SEEK_SET)
            for arg in self.argv:
                # A descriptor the launcher brings itself (bwrap's --sync-fd
                # of the sandbox lock, services/registry.py): any open one.
                if not isinstance(arg, str) and arg["fd"] not in fds:
                    fds[arg["fd"]] = os.open(os.devnull, os.O_RDONLY)
            for fd in fds.values():
                os.set_inheritable(fd, True)
            argv = self.wrapper + [a if isinstance(a, str) else a["prefix"] + str(fds[a["fd"]])
                                   for a in self.argv] + ["true"]
            start = time.perf_counter()
            pid = os.posix_spawn(argv[0], argv, self.env)
            _, status = os.waitpid(pid, 0)
            times.append((time.perf_counter() - start) * 1000)
            for fd in [status_read, *fds.values()]:
                os.close(fd)
            for path, is_dir in reversed(made):
                (os.rmdir if is_dir else os.unlink)(path)
            if self.directory:
                os.rmdir(self.directory)
            if status:
                sys.exit(f"the plan's bwrap failed ({status})")
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
    parser.add_argument("--no-agent", action="store_true",
                        help="leave out claude --version (a baseline install whose "
                             "configuration cache holds one entry per install would "
                             "recompile every launch when profiles and runs alternate)")
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
    standin_dir = os.path.join(os.path.dirname(project), "bin")
    os.makedirs(standin_dir, exist_ok=True)
    standin = os.path.join(standin_dir, "claude")
    with open(standin, "w") as handle:
        handle.write('#!/bin/sh\necho "1.0.0 (Claude Code stand-in)"\n')
    os.chmod(standin, 0o755)
    agent_env = dict(env, PATH=f"{standin_dir}:{env['PATH']}")
    agent = "agent-sandbox claude --version"
    warm = "agent-sandbox run -- true"
    cold = "agent-sandbox run -- true (cold cache)"
    cases = {
        warm: [args.agent_sandbox, "run", "--", "true"],
        cold: [args.agent_sandbox, "run", "--", "true"],
        "bwrap (bare)": [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
                         "true"],
        "python3 -I -S -c pass": ["/usr/bin/python3", "-I", "-S", "-c", "pass"],
    }
    if not args.no_agent:
        cases[agent] = [args.agent_sandbox, "claude", "--version"]
        cases["stand-in claude --version"] = [standin, "--version"]
    envs = {agent: agent_env}
    kept: set = set()        # the baseline's own plans (a baseline with a plan cache)

    def cold_cache():
        """This install's `run` plan removed, the baseline's and the agent's
        kept: they share the user's cache directory, and their warm figures
        must stay warm."""
        for name in os.listdir(plans) if os.path.isdir(plans) else ():
            if name not in kept:
                os.unlink(os.path.join(plans, name))

    before = {cold: cold_cache}
    if args.slurm:
        cases["agent-sandbox run -- sinfo -h"] = [args.agent_sandbox, "run", "--", "sinfo",
                                                  "-h"]
        cases["sinfo -h (outside)"] = ["sinfo", "-h"]
    if args.baseline:
        cases["baseline run -- true"] = [args.baseline, "run", "--", "true"]
        if not args.no_agent:
            cases["baseline claude --version"] = [args.baseline, "claude", "--version"]
            envs["baseline claude --version"] = agent_env
        shutil.rmtree(plans, ignore_errors=True)
        measure(cases["baseline run -- true"], 3, project, env)
        kept.update(os.listdir(plans) if os.path.isdir(plans) else ())
        # Its plan is the newest `run` plan now: the baseline's own bwrap.
        base_spawner = PlanSpawner(args.baseline, plans, env)
    measure(cases[warm], 3, project, env)   # warm the caches
    if not args.no_agent:
        # The agent's plan is kept too: the cold case is `run`'s alone.
        before_agent = set(os.listdir(plans) if os.path.isdir(plans) else ())
        measure(cases[agent], 3, project, agent_env)
        if args.baseline:      # the baseline's agent plan too (it was compiled every round)
            measure(cases["baseline claude --version"], 3, project, agent_env)
        kept.update(set(os.listdir(plans) if os.path.isdir(plans) else ()) - before_agent)
    own = "the plan's own bwrap (no launcher)"
    base_own = "the baseline plan's own bwrap"
    results = {}
    os.chdir(project)
    spawner = PlanSpawner(args.agent_sandbox, plans, env)
    # Interleave the cases so that machine noise hits all of them alike.
    for _ in range(args.runs):
        for name, argv in cases.items():
            results.setdefault(name, []).extend(measure(argv, 1, project,
                                                        envs.get(name, env),
                                                        before.get(name)))
            if name == warm:
                results.setdefault(own, []).extend(spawner.measure(1))
                if args.baseline:
                    results.setdefault(base_own, []).extend(base_spawner.measure(1))
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
    if not args.no_agent:
        own_start = statistics.median(results["stand-in claude --version"])
        profile = statistics.median(results[agent])
        line = (f"claude --version (stand-in): {profile:.1f} ms, bound "
                f"{target + own_start:.1f} ms (target + the stand-in's own {own_start:.1f} ms)")
        if args.baseline:
            line += f"; baseline {statistics.median(results['baseline claude --version']):.1f} ms"
        print(line)
    sandbox = statistics.median(results[own])
    if args.baseline:
        base_sandbox = statistics.median(results[base_own])
        print(f"the plan's own bwrap against the baseline's: {sandbox:.1f} vs "
              f"{base_sandbox:.1f} ms ({(sandbox / base_sandbox - 1) * 100:+.1f}%; "
              f"{spawner.mounts} vs {base_spawner.mounts} mount operations)")
    print(f"the launcher's own share: {launch - sandbox:.1f} ms over the plan's own bwrap "
          f"({sandbox:.1f} ms; the interpreter alone is {floor:.1f} ms)")
    print(f"cold cache: {statistics.median(results[cold]):.1f} ms; warm: {launch:.1f} ms")
    verdict = "PASS" if launch <= target else "FAIL"
    print(f"warm launch {launch:.1f} ms, target <= bare bwrap + 2 x python3 -I -S = "
          f"{target:.1f} ms (added over bare bwrap: {launch - bare:.1f} ms): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
