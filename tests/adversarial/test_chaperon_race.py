"""The check-then-use race, tried as the agent would: while submissions run,
a separate process swaps a regular file (or directory) and a symlink to a
credential with renameat2(RENAME_EXCHANGE), hundreds of times a second. The
targets are the job script, --input, the working directory and the output
directory; 200 submissions per target on bwrap, 50 on firejail and landlock
(`sbatch --hold`, cancelled after). The secret never appears in a staged
file or in any output, and the job's Slurm working directory is always
chaperon-owned (issue 11, item 3)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.install import PREFIX

pytestmark = pytest.mark.usefixtures("slurm_cluster")

DRIVER = r'''
import ctypes, json, os, sys, threading
sys.path.insert(0, sys.argv[1])
from chaperon.wire import protocol
from chaperon.wire.session import CONN_DIR, ENV_SESSION_DIR, SANDBOX_DIR
from stubs import client

count = int(sys.argv[2])
project, home = os.getcwd(), os.path.expanduser("~")
session = os.environ.get(ENV_SESSION_DIR, SANDBOX_DIR)
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
collected = []
client.yield_event = lambda event: collected.append(
    event.data.decode(errors="replace")) if isinstance(event, protocol.Output) else None

def prepare(target):
    for name in ("a", "b", "w", "w2", "d", "d2"):
        path = os.path.join(project, name)
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
    if target in ("script", "input"):
        with open("a", "w") as handle:
            handle.write("#!/bin/sh\ntrue\n")
        os.symlink(f"{home}/.ssh/id_rsa", "b")
        return b"a", b"b"
    name = "w" if target == "cwd" else "d"
    os.makedirs(name, exist_ok=True)
    os.symlink(f"{home}/.ssh", name + "2")
    return name.encode(), (name + "2").encode()

def swapper(first, second, stop, swaps):
    while not stop.is_set():
        if libc.renameat2(AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE) == 0:
            swaps[0] += 1

ARGS = {"script": ["--hold", "--job-name=race", "a"],
        "input": ["--hold", "--job-name=race", "--input=a", "--wrap=true"],
        "cwd": ["--hold", "--job-name=race", "--wrap=true"],
        "outdir": ["--hold", "--job-name=race", "-o", "d/x.out", "--wrap=true"]}
results = {}
for target, args in ARGS.items():
    first, second = prepare(target)
    stop, swaps = threading.Event(), [0]
    thread = threading.Thread(target=swapper, args=(first, second, stop, swaps))
    thread.start()
    ids, refused = [], 0
    cwd = os.path.join(project, "w") if target == "cwd" else project
    try:
        for _ in range(count):
            collected.clear()
            name = os.urandom(16).hex()
            request = protocol.encode_request(protocol.Request(
                command="sbatch", args=tuple(a.encode() for a in args), cwd=cwd.encode(),
                env=tuple(os.environb.items()), stdin=None,
                resp_path=f"{session}/{CONN_DIR}/{name}.resp"))
            code, error = client.exchange("sbatch", request, session, name)
            text = "".join(collected)
            if code == 0:
                ids.append(text.split()[-1])
            else:
                refused += 1
            results.setdefault("outputs", []).append(text)
    finally:
        stop.set()
        thread.join()
    results[target] = {"ids": ids, "refused": refused, "swaps": swaps[0]}
print(json.dumps(results))
'''
COUNTS = {"bwrap": 200, "firejail": 50, "landlock": 50}


@pytest.mark.parametrize("backend", list(COUNTS))
def test_swapping_a_symlink_in_never_stages_the_secret(user, project, backend):
    site = subprocess.run([f"{PREFIX}/venv/bin/python", "-I", "-c",
                           "import chaperon, os; print(os.path.dirname(os.path.dirname("
                           "chaperon.__file__)))"], capture_output=True, text=True).stdout.strip()
    driver = project / "race.py"
    driver.write_text(DRIVER)
    os.chown(driver, user.uid, user.gid)
    staging = user.home / ".local/share/agent-sandbox/jobs"
    before = set(staging.glob("*/*")) if staging.exists() else set()
    result = user.sandbox("/usr/bin/python3", str(driver), site, str(COUNTS[backend]),
                          cwd=project, timeout=300, env=user.env(SANDBOX_BACKEND=backend))
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    ids = [i for target in ("script", "input", "cwd", "outdir") for i in results[target]["ids"]]
    print({t: (len(r["ids"]), r["refused"], r["swaps"]) for t, r in results.items()
           if t != "outputs"})
    try:
        for target in ("script", "input", "cwd", "outdir"):
            assert results[target]["swaps"] > COUNTS[backend], (target, results[target])
        assert not any("PRIVATE KEY" in text for text in results["outputs"])
        staged = [p for p in set(staging.glob("*/*")) - before]
        for stage in staged:
            for path in stage.rglob("*"):
                if path.is_file():
                    assert b"PRIVATE KEY" not in path.read_bytes(), path
        # Slurm's working directory for every job is its chaperon-owned stage.
        if ids:
            workdirs = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%Z"],
                                      capture_output=True, text=True).stdout.split()
            assert workdirs and all(w.startswith(str(staging) + "/") for w in workdirs), \
                sorted(set(workdirs))[:5]
    finally:
        for start in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[start:start + 500]])
