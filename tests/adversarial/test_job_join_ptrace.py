"""A member of a job's sandbox cannot strip the seccomp filter from a task
that joins it (jobs/share.py, helper/joinns.py). After its fork into
the sandbox's PID namespace the joining helper is a same-uid member, and
until its filter is loaded a member could stop it (SIGSTOP), wait until it
has dropped its capabilities, and rewrite the filter in its memory through
/proc/PID/mem. The helper makes itself non-dumpable before setns, so that
write is refused. Driven as the unprivileged user: a bwrap sandbox running
the attacker, and the installed helper's real join (as jobs/join.py
starts it) with a filter that denies mkdir."""
from __future__ import annotations

import glob
import json
import struct

import pytest

from tests.support.install import PREFIX

# Inside the sandbox: stop the next process of the PID namespace (pids are
# handed out in order) if it is the joining helper, single-step it until its
# capabilities are gone, then overwrite the filter wherever it is in memory.
ATTACKER = r'''
import os, re, signal, struct, sys, time
ALLOW = struct.pack("HBBI", 0x06, 0, 0, 0x7fff0000)
BPF = open(sys.argv[1], "rb").read()
def status(p):
    s = open(f"/proc/{p}/status").read()
    return int(re.search(r"CapEff:\s*(\w+)", s).group(1), 16), int(re.search(r"Seccomp:\s*(\d)", s).group(1))
def attack(p):
    for _ in range(200000):
        caps, filt = status(p)
        if filt:
            return "too late: seccomp already on"
        if caps == 0:
            break
        os.kill(p, signal.SIGCONT); time.sleep(0.00005); os.kill(p, signal.SIGSTOP); time.sleep(0.0005)
    try:
        mem = open(f"/proc/{p}/mem", "r+b", buffering=0)
    except OSError as exc:
        return f"memory refused: {exc.strerror}"
    n = 0
    for line in open(f"/proc/{p}/maps"):
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) rw", line)
        if not m:
            continue
        lo, hi = int(m.group(1), 16), int(m.group(2), 16)
        try:
            mem.seek(lo); data = mem.read(hi - lo)
        except OSError:
            continue
        i = data.find(BPF)
        while i >= 0:
            mem.seek(lo + i); mem.write(ALLOW * (len(BPF) // 8)); n += 1
            i = data.find(BPF, i + 1)
    return f"filter rewritten in {n} place(s)"
target = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
print("ready", flush=True)
deadline = time.monotonic() + 30
verdict = "no joiner seen"
while time.monotonic() < deadline:
    try:
        os.kill(target, signal.SIGSTOP)
    except ProcessLookupError:
        continue
    try:
        if b"--join-ns" in open(f"/proc/{target}/cmdline", "rb").read():
            # A dumpable process's /proc files are its owner's; else root's.
            dumpable = os.stat(f"/proc/{target}/mem").st_uid == os.getuid()
            verdict = f"dumpable={dumpable} " + attack(target)
            break
    finally:
        os.kill(target, signal.SIGCONT)
    target += 1
print("attacker:", verdict, flush=True)
sys.stdin.read()            # the sandbox lives until the joined task is done
'''

# Outside, as the user: the sandbox, then the join as jobjoin.join_plan makes it.
DRIVER = r'''
import json, os, subprocess, sys
from agent_sandbox.jobs import share as jobshare
site, work, backend, python = sys.argv[1:5]
bpf = open(f"{work}/deny_mkdir.bpf", "rb").read()
attacker = ["/usr/bin/python3", "-I", f"{work}/attacker.py", f"{work}/deny_mkdir.bpf"]
if backend == "bwrap":
    box = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
           "--proc", "/proc", "--tmpfs", "/tmp", "--bind", work, work, "--"]
else:
    box = ["firejail", "--quiet", "--noprofile", "--nonewprivs", "--caps.drop=all", "--"]
box = subprocess.Popen(box + attacker, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert box.stdout.readline().strip() == "ready"
member = jobshare.sandbox_member(box.pid)
pidfd = os.pidfd_open(member)
spec = jobshare.namespaces_of(pidfd)
r, w = os.pipe()
os.write(w, bpf)
os.close(w)
task = ("import os, sys\ntry:\n os.mkdir(sys.argv[1]); print('mkdir allowed')\n"
        "except OSError as e: print('mkdir denied', e.strerror)")
helper = [python, "-I", "-S", "-c",
          "import sys; sys.path.insert(0, sys.argv[1]); import sandbox_exec; "
          "sys.exit(sandbox_exec.main(sys.argv[2:]))", site, "--seccomp", str(r),
          "--join-ns", ",".join(f"{k}:{v}" for k, v in spec.items())]
if backend == "bwrap":
    helper += ["--join", str(pidfd)]
else:
    helper = ["firejail", "--quiet", "--keep-fd=all", f"--join={member}"] + helper
helper += ["--", "/usr/bin/python3", "-I", "-c", task, f"{work}/made-by-joined-task"]
joined = subprocess.run(helper, pass_fds=(r, pidfd), capture_output=True, text=True, timeout=60)
attacker = box.communicate("", timeout=60)[0]
print(json.dumps({"task": joined.stdout + joined.stderr, "code": joined.returncode,
                  "attacker": attacker}))
'''

# deny mkdir (83) and mkdirat (258) with EPERM, allow the rest (x86_64)
DENY_MKDIR = b"".join(struct.pack("HBBI", *i) for i in [
    (0x20, 0, 0, 0), (0x15, 0, 1, 83), (0x06, 0, 0, 0x00050001), (0x15, 0, 1, 258),
    (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x7fff0000)])


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_sandbox_member_cannot_rewrite_the_filter_of_a_joining_task(user, backend):
    """bwrap: the helper joins by setns itself; firejail: `firejail --join`
    execs it inside the sandbox, with the execute-only interpreter
    (jobjoin.join_python) that makes it non-dumpable from its exec on."""
    work = user.home / "join-race"
    user.write("join-race/attacker.py", ATTACKER)
    user.write("join-race/driver.py", DRIVER)
    (work / "deny_mkdir.bpf").write_bytes(DENY_MKDIR)
    site = glob.glob(f"{PREFIX}/venv/lib/python3*/site-packages/agent_sandbox/helper")[0]
    python = "/usr/bin/python3" if backend == "bwrap" else f"{PREFIX}/venv/libexec/python3-join"
    for _ in range(5):      # the attacker, descheduled, may miss the joiner: try again
        result = user.run([f"{PREFIX}/venv/bin/python", "-I", str(work / "driver.py"), site,
                           str(work), backend, python], cwd=work, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        out = json.loads(result.stdout.strip().splitlines()[-1])
        if "no joiner seen" not in out["attacker"]:
            break
    # The attack ran against the joining helper (else this proves nothing)...
    assert "attacker: dumpable=" in out["attacker"], out
    # ...which no member could write to (its /proc files are not the user's)...
    assert "dumpable=False" in out["attacker"], out
    # ...so the attack failed: the filter held in the task.
    assert "filter rewritten" not in out["attacker"], out
    assert out["task"].startswith("mkdir denied"), out
    assert not (work / "made-by-joined-task").exists(), out
