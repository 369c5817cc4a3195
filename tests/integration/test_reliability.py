"""Reliability of the chaperon under hostile input and faults, on the real
cluster, from inside a real bwrap jail as an unprivileged user. Each test
prints its figures (run with -s to see them; CI logs keep them)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.install import INSTALLED, PREFIX

pytestmark = pytest.mark.usefixtures("slurm_cluster")
SITE = f"{PREFIX}/venv/lib/python3.11/site-packages"
SLURM_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-cluster.sh"
CTLD_PIDFILE = Path("/run/slurm/slurmctld.pid")    # scripts/slurm-cluster.sh SlurmctldPidFile


def stop_slurmctld() -> None:
    """SIGTERM the single-node cluster's slurmctld, by its pid file: the
    multi-node test cluster's slurmctld (scripts/slurm-multinode.sh) runs
    beside it and later tests use it (`pkill -x slurmctld` stopped both)."""
    pid = int(CTLD_PIDFILE.read_text().split()[0])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld", \
        f"{CTLD_PIDFILE} names pid {pid}, which is not slurmctld"
    os.kill(pid, signal.SIGTERM)

HOSTILE = r'''
import json, os, subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
from chaperon.wire import protocol
from chaperon.wire.session import announcement
session = os.environ["AGENT_SANDBOX_CHAPERON"]
conn = os.path.join(session, "conn")

def open_conn():
    name = os.urandom(16).hex()
    req = os.path.join(conn, name + ".req"); resp = os.path.join(conn, name + ".resp")
    os.mkfifo(req, 0o600); os.mkfifo(resp, 0o600)
    fd = os.open(os.path.join(session, "req"), os.O_WRONLY)
    os.write(fd, announcement(name)); os.close(fd)
    return name, req, resp

def frame(resp):
    return protocol.encode_request(protocol.Request("sinfo", ["-h"], cwd=os.getcwd(), env={},
                                                    resp_path=resp))

def half_frame_and_stall():
    name, req, resp = open_conn()
    fd = os.open(req, os.O_WRONLY)
    os.write(fd, frame(resp)[:40]); time.sleep(20); os.close(fd)

def garbage_flood():
    fd = os.open(os.path.join(session, "req"), os.O_WRONLY)
    end = time.monotonic() + 8
    chunk = os.urandom(65536).replace(b"\n", b"x")
    while time.monotonic() < end:
        os.write(fd, chunk)
    os.close(fd)

def huge_frame():
    name, req, resp = open_conn()
    fd = os.open(req, os.O_WRONLY)
    head = b"CHAPERON/1 sinfo\nARG "
    try:
        os.write(fd, head)
        block = b"A" * (1 << 20)
        for _ in range(100):
            os.write(fd, block)
    except OSError:
        pass
    os.close(fd)

def symlink_response():
    name = os.urandom(16).hex()
    req = os.path.join(conn, name + ".req"); resp = os.path.join(conn, name + ".resp")
    os.mkfifo(req, 0o600)
    target = os.path.join(os.getcwd(), "target.fifo"); os.mkfifo(target, 0o600)
    os.symlink(target, resp)
    fd = os.open(os.path.join(session, "req"), os.O_WRONLY)
    os.write(fd, announcement(name)); os.close(fd)
    fd = os.open(req, os.O_WRONLY); os.write(fd, frame(resp)); os.close(fd)

def never_reads():
    name, req, resp = open_conn()
    fd = os.open(req, os.O_WRONLY)
    big = protocol.encode_request(protocol.Request("sinfo", ["-N", "-l"], cwd=os.getcwd(),
                                                   env={}, resp_path=resp))
    os.write(fd, big); os.close(fd)
    rfd = os.open(resp, os.O_RDONLY)   # open, then never read
    time.sleep(20)

attacks = [half_frame_and_stall, garbage_flood, huge_frame, symlink_response, never_reads]
for attack in attacks:
    threading.Thread(target=attack, daemon=True).start()
time.sleep(0.5)
latencies = []
codes = []
end = time.monotonic() + 8
while time.monotonic() < end:
    start = time.perf_counter()
    r = subprocess.run(["sinfo", "-h"], capture_output=True)
    latencies.append(time.perf_counter() - start)
    codes.append(r.returncode)
print(json.dumps({"latencies": latencies, "codes": codes}))
'''


def chaperon_of(proc: subprocess.Popen):
    for child in psutil.Process(proc.pid).children(recursive=True):
        if "chaperon.server" in " ".join(child.cmdline()):
            return child
    return None


def start_waiting(user, project, script: str):
    """A sandbox running the Python `script`, once it has written `ready`;
    returns (launcher process, its chaperon)."""
    # A first Slurm call starts the chaperon (on demand, issue 19).
    script = ("import subprocess\nsubprocess.run(['sinfo', '-h'], capture_output=True)\n"
              + script)
    proc = subprocess.Popen([INSTALLED, "run", "--", "/usr/bin/python3", "-c", script],
                            user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 20
    while not (project / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    chaperon = chaperon_of(proc)
    assert chaperon is not None
    return proc, chaperon


def test_hostile_clients_do_not_delay_others(user, project):
    baseline = user.sandbox("/usr/bin/python3", "-c",
                            "import subprocess,time\nts=[]\nfor _ in range(10):\n"
                            " t=time.perf_counter(); subprocess.run(['sinfo','-h'],"
                            "capture_output=True); ts.append(time.perf_counter()-t)\n"
                            "print(max(ts))", cwd=project)
    assert baseline.returncode == 0, baseline.stderr
    result = user.sandbox("/usr/bin/python3", "-c", HOSTILE, SITE, cwd=project, timeout=120)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout.splitlines()[-1])
    worst = max(data["latencies"])
    print(f"\nhostile clients: {len(data['latencies'])} normal sinfo calls answered during "
          f"the attacks, worst {worst * 1000:.0f} ms (quiet baseline worst "
          f"{float(baseline.stdout) * 1000:.0f} ms)")
    assert set(data["codes"]) == {0}
    assert len(data["latencies"]) >= 20
    assert worst < float(baseline.stdout) + 1.0


def test_slurmctld_down_gives_the_real_error_not_a_hang(user, project):
    stop_slurmctld()
    try:
        time.sleep(1)
        real = subprocess.run(["squeue"], capture_output=True, text=True, timeout=120,
                              user=user.uid, group=user.gid, env=user.env())
        start = time.monotonic()
        inside = user.sandbox("squeue", cwd=project, timeout=120)
        took = time.monotonic() - start
        print(f"\nslurmctld down: stub answered in {took:.1f} s, exit {inside.returncode}")
        assert (inside.returncode, inside.stdout, inside.stderr.splitlines()[-1:]) == (
            real.returncode, real.stdout, real.stderr.splitlines()[-1:])
        assert real.returncode != 0
    finally:
        subprocess.run(["bash", str(SLURM_SCRIPT), "start"], capture_output=True, check=True,
                       timeout=300)


def test_chaperon_killed_the_stub_says_so_and_the_sandbox_keeps_working(user, project):
    script = ("import subprocess, time, sys\n"
              "open('ready','w').close()\n"
              "while not __import__('os').path.exists('killed'): time.sleep(0.05)\n"
              "t=time.monotonic(); r=subprocess.run(['squeue'],capture_output=True,text=True)\n"
              "print(r.returncode, round(time.monotonic()-t, 2), r.stderr.strip())\n"
              "print(subprocess.run(['echo','still-working'],capture_output=True,"
              "text=True).stdout.strip())\n")
    proc, chaperon = start_waiting(user, project, script)
    chaperon.kill()
    deadline = time.monotonic() + 10
    while chaperon.is_running() and chaperon.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (project / "killed").touch()
    out, err = proc.communicate(timeout=60)
    first, second = out.strip().splitlines()
    code, took, message = first.split(" ", 2)
    print(f"\nchaperon killed: stub exit {code} after {took} s: {message}")
    assert code == "1" and float(took) < 30
    assert "chaperon" in message and "not running" in message
    assert second == "still-working"
    assert proc.returncode == 0


def test_a_frozen_chaperon_costs_the_stub_its_timeout_not_a_hang(user, project):
    """The chaperon is stopped (SIGSTOP) after the stub announced itself: the
    stub gives up after its 30 s silence bound with a clear message — even
    when its caller blocked SIGALRM, the signal that bounds the wait."""
    script = ("import os, signal, subprocess, sys, time\n"
              "open('ready','w').close()\n"
              "while not os.path.exists('frozen'): time.sleep(0.05)\n"
              "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
              "t=time.monotonic(); r=subprocess.run(['squeue'],capture_output=True,text=True)\n"
              "print(r.returncode, round(time.monotonic()-t, 1), r.stderr.strip())\n")
    proc, chaperon = start_waiting(user, project, script)
    chaperon.suspend()
    try:
        (project / "frozen").touch()
        out, err = proc.communicate(timeout=90)
    finally:
        if chaperon.is_running():
            chaperon.resume()
    code, took, message = out.strip().split(" ", 2)
    print(f"\nfrozen chaperon: stub exit {code} after {took} s: {message}")
    assert code == "1" and 29 <= float(took) < 40
    assert message.startswith("agent-sandbox: squeue: no answer from the Slurm proxy")


def test_disk_full_in_the_state_dir_refuses_the_submission(user, project):
    ledger = user.home / ".local/state/agent-sandbox/ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    os.chown(ledger, user.uid, user.gid)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64k,uid={user.uid},mode=0700",
                    "tmpfs", str(ledger)], check=True)
    try:
        filler = ledger / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k", "count=100"],
                       capture_output=True)
        before = subprocess.run(["squeue", "-h", "-u", user.name, "-o", "%i"],
                                capture_output=True, text=True).stdout.split()
        result = user.sandbox("sbatch", "--hold", "--wrap", "true", cwd=project)
        after = subprocess.run(["squeue", "-h", "-u", user.name, "-o", "%i"],
                               capture_output=True, text=True).stdout.split()
        print(f"\ndisk full: sbatch exit {result.returncode}: {result.stderr.strip()}")
        assert result.returncode == 1
        assert "ledger cannot be written" in result.stderr
        assert sorted(after) == sorted(before)        # no job without a ledger entry
    finally:
        subprocess.run(["umount", str(ledger)], check=True)


def test_concurrent_ledger_writer_from_another_node_does_not_corrupt(user, project):
    from chaperon.ledger import Ledger

    state = user.home / ".local/state/agent-sandbox"
    other = Ledger(str(state), "othernode0001", str(project))
    other.path = os.path.join(other.directory, "othernode_othernode0001.jsonl")
    stop = threading.Event()
    written = []

    def second_node():
        n = 0
        while not stop.is_set():
            other.record(f"9{n:06d}", f"tok{n}")
            written.append(n)
            n += 1

    writer = threading.Thread(target=second_node)
    writer.start()
    try:
        result = user.sandbox("/bin/sh", "-c",
                              "for i in 1 2 3 4 5 6 7 8; do sbatch --parsable --hold --wrap true;"
                              " done", cwd=project, timeout=120)
    finally:
        stop.set()
        writer.join()
        for path in Path(other.directory).glob("othernode_*"):
            os.chown(path, user.uid, user.gid)
    ids = result.stdout.split()
    try:
        assert result.returncode == 0 and len(ids) == 8
        mine = Ledger(str(state), "reader", str(project)).jobs("user")
        assert set(ids) <= set(mine)
        assert {f"9{n:06d}" for n in written} <= set(mine)
        print(f"\nconcurrent ledger writer: {len(written)} foreign records and 8 submissions, "
              "all readable")
    finally:
        subprocess.run(["scancel", *ids])
        for path in Path(other.directory).glob("othernode_*"):
            path.unlink()


BURST = r'''
import json, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
def submit(i):
    r = subprocess.run(["sbatch", "--parsable", "--hold", f"--job-name={sys.argv[2]}{i}",
                        "--wrap", "true"], capture_output=True, text=True)
    return r.returncode, r.stdout.strip(), r.stderr.strip()[-200:]
with ThreadPoolExecutor(8) as pool:
    print(json.dumps(list(pool.map(submit, range(int(sys.argv[1]))))))
'''


def test_slurmctld_restart_mid_burst_loses_and_doubles_nothing(user, project):
    count = 60
    prefix = f"restart{os.urandom(3).hex()}-"      # this run's jobs only
    proc = subprocess.Popen([INSTALLED, "run", "--", "/usr/bin/python3", "-c", BURST, str(count),
                             prefix],
                            user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(1.0)
    stop_slurmctld()
    time.sleep(1.0)
    subprocess.run(["bash", str(SLURM_SCRIPT), "start"], capture_output=True, check=True,
                   timeout=300)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    outcomes = json.loads(out.strip().splitlines()[-1])
    ids = [o[1] for o in outcomes if o[0] == 0]
    queued_ids: set[str] = set()
    try:
        queue = subprocess.run(["squeue", "-h", "-u", user.name, "-o", "%i %j %k"],
                               capture_output=True, text=True).stdout.splitlines()
        names = [line.split()[1] for line in queue if line.split()[1].startswith(prefix)]
        queued_ids = {line.split()[0] for line in queue if line.split()[1].startswith(prefix)}
        print(f"\nslurmctld restart mid-burst: {len(ids)} of {count} submissions accepted, "
              f"{count - len(ids)} refused with Slurm's error, {len(names)} jobs queued")
        assert len(set(ids)) == len(ids)                 # no id handed out twice
        assert set(ids) == queued_ids                    # every accepted job exists, no extra
        assert len(names) == len(set(names))             # no submission doubled
        for code, _, message in outcomes:
            assert code == 0 or message, "a failed submission must say why"
    finally:
        subprocess.run(["scancel", *ids, *queued_ids])


LOAD = r'''
import json, os, queue, random, subprocess, sys, threading, time
requests, clients, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
subprocess.run(["sinfo", "-h"], capture_output=True)   # the chaperon starts on demand
open("load-ready", "w").close()
while not os.path.exists("load-go"):
    time.sleep(0.05)
kinds = ["sbatch", "squeue", "scontrol", "scancel"]
tasks = iter([(i, kinds[i % 4]) for i in range(requests)])
task_lock = threading.Lock()
submitted, to_cancel, results = [], queue.Queue(), []

def call(i, kind):
    if kind == "sbatch":
        return ["sbatch", "--parsable", "--hold", f"--job-name={prefix}{i}", "--wrap", "true"]
    if kind == "squeue":
        return ["squeue", "-h", "-o", "%i %j %T"]
    if kind == "scontrol":
        while not submitted:
            time.sleep(0.01)
        return ["scontrol", "show", "job", random.choice(submitted)]
    return ["scancel", to_cancel.get(timeout=300)]   # each held job cancelled exactly once

def client():
    while True:
        with task_lock:
            task = next(tasks, None)
        if task is None:
            return
        i, kind = task
        argv = call(i, kind)
        start = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True)
        took = time.monotonic() - start
        if kind == "sbatch" and r.returncode == 0:
            submitted.append(r.stdout.strip())
            to_cancel.put(r.stdout.strip())
        results.append([kind, r.returncode, round(took, 3), r.stdout.strip()[:40],
                        r.stderr.strip()[-200:]])

start = time.monotonic()
threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
wall = time.monotonic() - start
open("load-done", "w").close()
while not os.path.exists("load-end"):
    time.sleep(0.05)
print(json.dumps({"wall": wall, "results": results, "session": os.environ["AGENT_SANDBOX_SESSION"]}))
'''


def _wait_file(path: Path, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_mixed_load_of_1000_requests_from_32_clients(user, project):
    """SPEC/issue #8 load: sbatch --hold, squeue, scontrol show job and
    scancel of in-scope jobs, 1,000 requests from 32 clients in one sandbox."""
    from chaperon.ledger import Ledger

    requests, clients = 1000, 32
    prefix = f"load{os.urandom(3).hex()}-"
    proc = subprocess.Popen([INSTALLED, "run", "--", "/usr/bin/python3", "-c", LOAD,
                             str(requests), str(clients), prefix],
                            user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    ids: list[str] = []
    try:
        _wait_file(project / "load-ready", proc, 30)
        chaperon = chaperon_of(proc)
        rss_before = chaperon.memory_info().rss
        peak = [rss_before]
        sampling = threading.Event()

        def sample():
            while not sampling.wait(0.2):
                try:
                    peak.append(chaperon.memory_info().rss)
                except psutil.Error:
                    return

        sampler = threading.Thread(target=sample)
        sampler.start()
        (project / "load-go").touch()
        try:
            _wait_file(project / "load-done", proc, 900)
        finally:
            sampling.set()
            sampler.join()
        rss_after = chaperon.memory_info().rss
        (project / "load-end").touch()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        results = report["results"]
        ids = [r[3] for r in results if r[0] == "sbatch" and r[1] == 0]
        failed = [r for r in results if r[1] != 0]
        slowest = max(r[2] for r in results)
        by_kind = {k: sorted(r[2] for r in results if r[0] == k)
                   for k in ("sbatch", "squeue", "scontrol", "scancel")}
        medians = {k: v[len(v) // 2] for k, v in by_kind.items()}

        # Slurm's own view: every accepted job exists once, with its tag.
        listed = subprocess.run(["squeue", "-h", "-t", "all", "-u", user.name,
                                 "-o", "%i|%j|%k"], capture_output=True, text=True).stdout
        rows = [line.split("|", 2) for line in listed.splitlines()
                if line.split("|")[1].startswith(prefix)]
        deadline = time.monotonic() + 60      # slurmdbd records asynchronously
        while True:
            accounted = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(ids),
                                        "-o", "JobID,JobName,State"], capture_output=True,
                                       text=True).stdout
            sacct_rows = [line.split("|") for line in accounted.splitlines()
                          if len(line.split("|")) == 3 and line.split("|")[1].startswith(prefix)]
            # Every row, and each one's cancellation: slurmdbd records the
            # state change after the row (a row still PENDING is not yet told).
            settled = all(r[2].split()[0] != "PENDING" for r in sacct_rows)
            if (len(sacct_rows) >= len(ids) and settled) or time.monotonic() > deadline:
                break
            time.sleep(1)
        ledger = [r for r in Ledger(str(user.home / ".local/state/agent-sandbox"), "reader",
                                    str(project)).records("user")
                  if r.get("job") in set(ids)]
        print(f"\nload: {len(results)} of {requests} requests answered by {clients} clients in "
              f"{report['wall']:.1f} s; {len(failed)} failed; slowest {slowest:.2f} s; "
              f"median s {medians}; {len(ids)} jobs submitted, {len(rows)} in squeue, "
              f"{len(sacct_rows)} in sacct, {len(ledger)} ledger records; chaperon RSS "
              f"{rss_before / 2**20:.1f} MB before, peak {max(peak) / 2**20:.1f} MB, "
              f"{rss_after / 2**20:.1f} MB after")
        assert len(results) == requests                      # every request answered
        assert failed == [], failed[:5]
        assert slowest < 30.0                                # the stub's silence timeout
        assert len(ids) == requests // 4 and len(set(ids)) == len(ids)
        assert sorted(r[0] for r in rows) == sorted(ids)     # 0 lost, 0 doubled (squeue)
        assert sorted(r[0] for r in sacct_rows) == sorted(ids)                     # (sacct)
        assert all(f"sid={report['session']}" in r[2] for r in rows)               # (tags)
        assert sorted(r["job"] for r in ledger) == sorted(ids)                     # (ledger)
        assert {r[2].split()[0] for r in sacct_rows} == {"CANCELLED"}   # every scancel acted
        assert rss_after - rss_before < 20 * 2**20           # bounded, not growing per request
    finally:
        if proc.poll() is None:
            (project / "load-end").touch()
            proc.kill()
        if ids:
            subprocess.run(["scancel", *ids])
