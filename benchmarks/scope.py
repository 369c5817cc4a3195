#!/usr/bin/env python3
"""Scoped squeue with a crowded queue, against the same-run baseline (issue 6).

Setup: another user holds 10,000 jobs in the queue (each its own job record:
a 10,000-task array would be ONE record for slurmctld and squeue, so it
would not crowd anything; it is not used), and a sandbox of a project holds
100 jobs of its own (submitted through the stub, so they are in its ledger).

Measured, median of --runs calls each:
  inside    `squeue` in the sandbox (project scope: the real squeue with
            --jobs=<the 100 ids> --me, answer streamed back through the stub);
  outside   the real `squeue -j <the 100 ids>` as the same user (also shown:
            the argv the chaperon runs, which is faster because --me makes
            slurmctld send one user's jobs instead of all 10,100);
  overhead  the stub round trip itself: `sinfo --version` inside minus outside
            (no slurmctld work either way).
Target: inside <= 2 x outside + overhead.

Run as root with the cluster up (scripts/slurm-cluster.sh start) and two
users in the Slurm accounting (--user, default astest, runs the sandbox in
~/scope-bench; --other, default asother, holds the crowd); every job it
submits is cancelled at the end, also on failure:
    python3 benchmarks/scope.py [--foreign 10000] [--mine 100] [--runs 30]
Prints the figures and PASS/FAIL; exits 1 if the target is missed.

With --history N (issue 15): the user's ledger holds N records of earlier
sessions (2,000 session files, as sessions that ended or crashed leave
them), --in-scope of them (default 20,000, with the --mine live jobs) from
the benchmark's project, the rest from other projects; the ids of earlier
sessions are jobs Slurm has forgotten. Measured in two fresh sandboxes (the
first finds the 2,000 files and folds them, the second finds them folded):
their first `squeue` and the median of their later ones, against the real
`squeue -j <the same in-scope ids>` (one argument, as the user). Target:
each <= 2 x that baseline.
    python3 benchmarks/scope.py --history 100000 [--in-scope 20000] --foreign 0
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

AGENT_SANDBOX = shutil.which("agent-sandbox") or "/opt/agent-sandbox/venv/bin/agent-sandbox"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HISTORY_FILES = 2000
FIRST_ID = 30000      # forgotten ids: 5 digits, so 20,000 of them fit one argument
INSIDE = r'''
import json, subprocess, sys, time
mine, runs = int(sys.argv[1]), int(sys.argv[2])
ids = []
t = time.perf_counter()
for _ in range(mine):
    r = subprocess.run(["sbatch", "--parsable", "--hold", "--job-name=scope-bench",
                        "--wrap", "true"], capture_output=True, text=True)
    if r.returncode:
        print(json.dumps({"error": r.stderr})); sys.exit(1)
    ids.append(r.stdout.strip())
submit = time.perf_counter() - t
seen = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
def timed(argv):
    out = []
    subprocess.run(argv, capture_output=True)
    for _ in range(runs):
        t = time.perf_counter(); subprocess.run(argv, capture_output=True)
        out.append((time.perf_counter() - t) * 1000)
    return out
print(json.dumps({"ids": ids, "submit_s": submit, "seen": seen,
                  "squeue_ms": timed(["squeue"]), "stub_ms": timed(["sinfo", "--version"])}))
'''


def as_user(name: str, argv, **kw) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(name)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": entry.pw_dir, "USER": name,
           "LOGNAME": name, "LANG": "C.UTF-8", "SANDBOX_QUIET": "1"}
    return subprocess.run(argv, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                          env=env, capture_output=True, text=True, **kw)


def timed(name: str, argv, runs: int) -> list[float]:
    as_user(name, argv)
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        as_user(name, argv)
        out.append((time.perf_counter() - start) * 1000)
    return out


def flood(user: str, count: int, workers: int) -> tuple[list[str], float]:
    """`count` held jobs of `user`, each its own record, submitted in parallel."""
    def one(_):
        r = as_user(user, ["sbatch", "--parsable", "--hold", "--job-name=scope-crowd",
                           "--output=/dev/null", "--wrap", "true"], cwd="/tmp")
        return r.stdout.strip() if r.returncode == 0 else None
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ids = [i for i in pool.map(one, range(count)) if i]
    return ids, time.perf_counter() - start


def cancel(ids: list[str]) -> float:
    start = time.perf_counter()
    for i in range(0, len(ids), 2000):
        subprocess.run(["scancel", *ids[i:i + 2000]], capture_output=True)
    return time.perf_counter() - start


TIMED_SQUEUE = r'''
import json, subprocess, sys, time
def once():
    t = time.perf_counter(); r = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True)
    return (time.perf_counter() - t) * 1000, r.stdout.split()
first, seen = once()
later = [once()[0] for _ in range(int(sys.argv[1]))]
print(json.dumps({"first": first, "later": later, "seen": [s.decode() for s in seen]}))
'''


def write_history(entry, project: str, records: int, in_scope: int) -> list[str]:
    """The ledger of earlier sessions: HISTORY_FILES files, `in_scope`
    records of `project`, the rest of other projects; returns the in-scope ids."""
    sys.path.insert(0, REPO)
    from chaperon.paths import project_hash

    directory = os.path.join(entry.pw_dir, ".local/state/agent-sandbox/ledger")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    mine = project_hash(project)
    per = records // HISTORY_FILES
    ids, number = [], FIRST_ID
    for index in range(HISTORY_FILES):
        session = f"hist{index:05d}"
        lines = []
        for _ in range(per):
            ours = number - FIRST_ID < in_scope
            lines.append(json.dumps({"job": str(number), "token": "t", "session": session,
                                     "project": mine if ours else f"{index % 20:016x}",
                                     "time": time.time() - 86400, "kind": "batch"},
                                    separators=(",", ":")))
            if ours:
                ids.append(str(number))
            number += 1
        path = os.path.join(directory, f"benchhost_{session}.jsonl")
        with open(path, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.chown(path, entry.pw_uid, entry.pw_gid)
        os.chmod(path, 0o600)
    for path in (directory, os.path.dirname(directory)):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return ids


def history(args) -> int:
    entry = pwd.getpwnam(args.user)
    project = os.path.join(entry.pw_dir, "scope-bench")
    ledger = os.path.join(entry.pw_dir, ".local/state/agent-sandbox/ledger")
    if os.path.exists(ledger):
        sys.exit(f"{ledger} exists: the benchmark writes its own history (move it away)")
    mine: list[str] = []
    try:
        os.makedirs(project, exist_ok=True)
        os.chown(project, entry.pw_uid, entry.pw_gid)
        live = args.mine
        old = write_history(entry, project, args.history, args.in_scope - live)
        print(f"ledger: {args.history} records in {HISTORY_FILES} session files, "
              f"{len(old)} of this project (forgotten by Slurm) + {live} live jobs")
        submit = as_user(args.user, [args.launcher, "run", "--", "/usr/bin/python3", "-c",
                                     "import subprocess, sys\n"
                                     f"for _ in range({live}):\n"
                                     "    r = subprocess.run(['sbatch', '--parsable', '--hold',"
                                     " '--wrap', 'true'], capture_output=True, text=True)\n"
                                     "    print(r.stdout.strip())"], cwd=project, timeout=3600)
        mine = [i for i in submit.stdout.split() if i.isdigit()]
        if len(mine) != live:
            print(f"submission failed: {submit.stdout[-500:]}{submit.stderr[-1000:]}")
            return 1
        folded = os.path.join(ledger, "compact")
        print(f"first sandbox (submitted {live} jobs) folded the history: "
              f"{len([n for n in os.listdir(ledger) if n.endswith('.jsonl')])} session files left, "
              f"{len(os.listdir(folded)) - 1 if os.path.isdir(folded) else 0} project files")
        ids = old + mine
        baseline = timed(args.user, ["squeue", "-j", ",".join(ids)], args.runs)
        sessions = []
        for _ in range(2):
            result = as_user(args.user, [args.launcher, "run", "--", "/usr/bin/python3", "-c",
                                         TIMED_SQUEUE, str(args.runs)], cwd=project,
                             timeout=600)
            if result.returncode != 0:
                print(f"the in-sandbox part failed: {result.stderr[-2000:]}")
                return 1
            sessions.append(json.loads(result.stdout))
        base = statistics.median(baseline)
        print(f"squeue -j <{len(ids)} ids> outside    median {base:7.1f} ms (baseline)")
        verdict = True
        for name, data in zip(("second sandbox", "third sandbox"), sessions):
            exact = sorted(data["seen"], key=int) == sorted(mine, key=int)
            later = statistics.median(data["later"])
            ok = exact and data["first"] <= 2 * base and later <= 2 * base
            verdict &= ok
            print(f"{name}: first squeue {data['first']:7.1f} ms ({data['first'] / base:.2f}x), "
                  f"later median {later:7.1f} ms ({later / base:.2f}x), lists exactly the "
                  f"{len(mine)} live jobs: {exact}")
        print(f"target: first and later calls <= 2 x baseline = {2 * base:.1f} ms: "
              f"{'PASS' if verdict else 'FAIL'}")
        return 0 if verdict else 1
    finally:
        took = cancel(mine)
        print(f"cleanup: {len(mine)} jobs cancelled in {took:.1f} s")
        shutil.rmtree(project, ignore_errors=True)
        shutil.rmtree(ledger, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--foreign", type=int, default=10000)
    parser.add_argument("--mine", type=int, default=100)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--user", default="astest")
    parser.add_argument("--other", default="asother")
    parser.add_argument("--history", type=int, default=0,
                        help="ledger records of earlier sessions (issue 15 scale figure)")
    parser.add_argument("--in-scope", type=int, default=20000)
    parser.add_argument("--launcher", default=AGENT_SANDBOX)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark acts as two users (--user, --other)")
    if args.history:
        return history(args)
    entry = pwd.getpwnam(args.user)
    project = os.path.join(entry.pw_dir, "scope-bench")
    crowd: list[str] = []
    mine: list[str] = []
    try:
        crowd, took = flood(args.other, args.foreign, args.workers)
        print(f"queue: {len(crowd)} held jobs of {args.other} submitted in {took:.1f} s "
              f"({len(crowd) / took:.0f} jobs/s, {args.workers} parallel sbatch)")
        os.makedirs(project, exist_ok=True)
        os.chown(project, entry.pw_uid, entry.pw_gid)
        inside = as_user(args.user, [AGENT_SANDBOX, "run", "--", "/usr/bin/python3", "-c",
                                     INSIDE, str(args.mine), str(args.runs)],
                         cwd=project, timeout=3600)
        if inside.returncode != 0:
            print(f"the in-sandbox part failed: {inside.stdout[-1000:]}{inside.stderr[-2000:]}")
            return 1
        data = json.loads(inside.stdout)
        mine = data["ids"]
        print(f"sandbox: {len(mine)} held jobs submitted through the stub in "
              f"{data['submit_s']:.1f} s")
        exact = sorted(data["seen"], key=int) == sorted(mine, key=int)
        print(f"scoped squeue lists exactly the sandbox's {len(mine)} jobs: {exact}")
        joined = ",".join(mine)
        outside = timed(args.user, ["squeue", "-j", joined], args.runs)
        same_argv = timed(args.user, ["squeue", "--me", f"--jobs={joined}"], args.runs)
        whole = timed(args.user, ["squeue"], max(5, args.runs // 3))
        stub_out = timed(args.user, ["sinfo", "--version"], args.runs)
        m_in, m_out = statistics.median(data["squeue_ms"]), statistics.median(outside)
        overhead = max(0.0, statistics.median(data["stub_ms"]) - statistics.median(stub_out))
        print(f"squeue inside (scoped)           median {m_in:7.1f} ms")
        print(f"squeue -j <{len(mine)} ids> outside    median {m_out:7.1f} ms")
        print(f"squeue --me --jobs=<ids> outside median {statistics.median(same_argv):7.1f} ms"
              "  (the argv the chaperon runs: --me asks slurmctld for one user's jobs only)")
        print(f"squeue outside, whole queue      median {statistics.median(whole):7.1f} ms")
        print(f"stub round trip (sinfo --version) overhead {overhead:6.1f} ms")
        limit = 2 * m_out + overhead
        verdict = exact and m_in <= limit
        print(f"target: inside <= 2 x outside + overhead = {limit:.1f} ms: "
              f"{'PASS' if verdict else 'FAIL'} ({m_in / m_out:.2f}x outside)")
        return 0 if verdict else 1
    finally:
        took = cancel(mine + crowd)
        print(f"cleanup: {len(mine) + len(crowd)} jobs cancelled in {took:.1f} s")
        shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
