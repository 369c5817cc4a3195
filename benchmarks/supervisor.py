#!/usr/bin/env python3
"""What the landlock supervisor costs (issue 31 item 6, docs/supervisor.md).

Measured in one run, in two children of this process that confine
themselves as the helper does (no_new_privs, a Landlock ruleset: / read,
a scratch project writable) — the second also loads the supervisor's
notify filter and is served by process/supervisor.py in a thread here:
  connect   socket() + connect() to a unix socket in the project + close()
  chmod     chmod() of a file in the project
  getppid   a call the filter does not watch (the supervisor must add nothing)
each the median of --runs calls, in microseconds; then the launch time of
`agent-sandbox run --backend landlock -- true` (median of --launches), for
this install and, with --baseline PREFIX, an install without the supervisor.

Run as an unprivileged user (the sandbox refuses root's launches on some hosts):
    python3 benchmarks/supervisor.py [--runs 2000] [--launches 20] [--baseline /opt/x]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "agent_sandbox", "helper"))

import landlock as ll                                     # noqa: E402
import sandbox_exec                                       # noqa: E402
from agent_sandbox.policy.seccomp import compile_notify_filter   # noqa: E402
from agent_sandbox.process import supervisor              # noqa: E402


def measure(project: str, runs: int) -> dict:
    sock_path = os.path.join(project, "server.sock")
    target = os.path.join(project, "file")
    out = {}
    t = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock_path)
        s.close()
        t.append(time.perf_counter_ns() - start)
    out["connect"] = statistics.median(t) / 1000
    t = []
    for i in range(runs):
        start = time.perf_counter_ns()
        os.chmod(target, 0o600 | (i & 1) << 2)
        t.append(time.perf_counter_ns() - start)
    out["chmod"] = statistics.median(t) / 1000
    t = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        os.getppid()
        t.append(time.perf_counter_ns() - start)
    out["getppid"] = statistics.median(t) / 1000
    return out


def child(project: str, runs: int, with_supervisor: bool) -> dict:
    results_r, results_w = os.pipe()
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(results_r)
            os.close(report_r)
            ll.no_new_privs()
            abi = ll.abi_version()
            ll.restrict_self(ll.ruleset(abi, fs=ll.fs_rights(abi),
                                        paths=[(ll.READ, "/"), (ll.READ | ll.WRITE, project),
                                               (ll.READ | ll.WRITE, "/dev/null")]))
            if with_supervisor:
                sandbox_exec.load_notify(compile_notify_filter(), report_w)
            os.write(results_w, json.dumps(measure(project, runs)).encode())
        finally:
            os._exit(0)
    os.close(results_w)
    os.close(report_w)
    if with_supervisor:
        rules = {"project": project, "writable": [project]}
        supervisor.start(pid, report_r, rules, lambda why: print("supervisor failed:", why))
    else:
        os.close(report_r)
    data = b""
    while True:
        chunk = os.read(results_r, 4096)
        if not chunk:
            break
        data += chunk
    os.close(results_r)
    os.waitpid(pid, 0)
    return json.loads(data)


def launch_times(installs: dict, launches: int, cwd: str) -> dict:
    """Median launch time (ms) of each install, interleaved launch by launch
    so that the host's load falls on all alike."""
    times = {name: [] for name in installs}
    env = dict(os.environ, SANDBOX_QUIET="1")
    for _ in range(launches + 2):
        for name, installed in installs.items():
            start = time.perf_counter()
            r = subprocess.run([installed, "run", "--backend", "landlock", "--", "/bin/true"],
                               cwd=cwd, env=env, capture_output=True)
            times[name].append(time.perf_counter() - start)
            if r.returncode != 0:
                raise SystemExit(f"{installed}: launch failed: {r.stderr.decode()[-500:]}")
    # the first two warm the caches
    return {name: statistics.median(t[2:]) * 1000 for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--installed", default=os.path.join(
        sys.prefix, "bin", "agent-sandbox"))
    parser.add_argument("--baseline", help="prefix of an install without the supervisor")
    args = parser.parse_args()
    project = tempfile.mkdtemp(prefix="supervisor-bench-", dir=os.path.expanduser("~"))
    server = socket.socket(socket.AF_UNIX)
    server.bind(os.path.join(project, "server.sock"))
    server.listen(4096)

    def accept():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    open(os.path.join(project, "file"), "w").close()
    without = child(project, args.runs, False)
    with_sup = child(project, args.runs, True)
    print(f"{'call (median, µs)':<22}{'landlock':>10}{'+supervisor':>13}{'added':>9}")
    for name in ("connect", "chmod", "getppid"):
        print(f"{name:<22}{without[name]:>10.1f}{with_sup[name]:>13.1f}"
              f"{with_sup[name] - without[name]:>9.1f}")
    installs = {"this install": args.installed}
    if args.baseline:
        installs["baseline"] = os.path.join(args.baseline, "venv", "bin", "agent-sandbox")
    launches = launch_times(installs, args.launches, project)
    for name, ms in launches.items():
        print(f"landlock launch, {name:<14} {ms:8.1f} ms (median of {args.launches})")
    server.close()
    import shutil

    shutil.rmtree(project, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
