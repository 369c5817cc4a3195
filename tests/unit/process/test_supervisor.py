"""The landlock supervisor's pure parts (process/supervisor.py Rules, the
plan's rules and guarantee rows, the notify filter) — the attacks on the
running supervisor are tests/adversarial/test_landlock_supervisor.py."""
from __future__ import annotations

import errno
import json
import marshal
import struct
import subprocess
import sys
import textwrap

import pytest

from agent_sandbox.backends import landlock as landlock_backend
from agent_sandbox.backends.base import Payload, PlanContext
from agent_sandbox.process.supervisor import AF_INET, AF_INET6, SOCK_STREAM, Rules
from tests.support.plans import PLAN_HOME, SECCOMP, policy_for

pytestmark = pytest.mark.home(**PLAN_HOME)     # the `home` fixture's layout

RULES = Rules({"sockets": ("/h/.local/state/run/chaperon-1", "/tmp/agent-sandbox.tmp-1"),
               "socket_files": ("/h/.local/state/run/egress-1/proxy.sock",),
               "project": "/h/proj", "writable": ("/h/proj", "/h/.cache/tool"),
               "network": "allowlist", "relay_port": 41234})


def test_only_the_sessions_own_sockets_are_connectable():
    assert RULES.may_connect("/h/.local/state/run/chaperon-1/stub.sock")
    assert RULES.may_connect("/h/.local/state/run/egress-1/proxy.sock")
    assert RULES.may_connect("/tmp/agent-sandbox.tmp-1/tmux-1/default")
    assert RULES.may_connect("/h/proj/.devserver.sock")
    # Merely writable is not enough (a tmux socket in a writable tree).
    assert not RULES.may_connect("/h/.cache/tool/tmux.sock")
    assert not RULES.may_connect("/h/.local/state/run/egress-2/proxy.sock")
    assert not RULES.may_connect("/h/.local/state/run/chaperon-10/stub.sock")
    assert not RULES.may_connect("/run/user/1000/bus")


def test_munge_and_slurms_auth_sockets_never():
    rules = Rules({"sockets": ("/run",), "project": "/", "writable": ("/",)})
    for path in ("/run/munge/munge.socket.2", "/run/slurm/sack.socket",
                 "/run/slurmctld/sack.socket", "/var/run/munge/munge.socket.2"):
        assert not rules.may_connect(path), path


def test_metadata_only_beneath_a_writable_grant():
    assert RULES.may_write("/h/proj/a/b") and RULES.may_write("/h/.cache/tool")
    assert not RULES.may_write("/h/projection") and not RULES.may_write("/h/.ssh/id_rsa")


def test_allowlist_lets_tcp_reach_only_the_relay_on_the_loopback():
    relay4 = struct.pack("=H", AF_INET) + struct.pack("!H4s", 41234, b"\x7f\0\0\x01") + bytes(8)
    other4 = struct.pack("=H", AF_INET) + struct.pack("!H4s", 41234, b"\x08\x08\x08\x08") + bytes(8)
    relay6 = struct.pack("=H", AF_INET6) + struct.pack("!H", 41234) + bytes(4) \
        + bytes(15) + b"\x01" + bytes(4)
    assert RULES.may_inet(AF_INET, relay4, SOCK_STREAM)
    assert RULES.may_inet(AF_INET6, relay6, SOCK_STREAM)
    assert not RULES.may_inet(AF_INET, other4, SOCK_STREAM)
    assert not RULES.may_inet(AF_INET, relay4, 2)                    # UDP
    isolated = Rules({"network": "isolated", "relay_port": 41234})
    assert not isolated.may_inet(AF_INET, relay4, SOCK_STREAM)
    assert Rules({"network": "open"}).may_inet(AF_INET, other4, 2)




def _supervised_plan(home, text=""):
    policy = policy_for(home, text, backend="landlock")
    payloads = {"seccomp": SECCOMP, "marker": Payload(data=b"m"),
                "notify": Payload(data=b"\0" * 8)}
    return policy, landlock_backend.plan(policy, ["claude"], payloads,
                                         context=PlanContext("/usr/bin/python3", landlock_abi=7))


def test_the_supervised_plan(home):
    policy, plan = _supervised_plan(home)
    argv = [a if isinstance(a, str) else f"<{a.name}>" for a in plan.argv]
    at = argv.index("--notify")
    assert argv[at + 1:at + 3] == ["<notify>", "<supervise>"]
    assert "notify" in plan.payloads and plan.supervise is not None
    for row in ("slurm.boundary", "unix_sockets.confined"):
        assert row in plan.provides, plan.cannot
    spec = marshal.loads(plan.payloads["landlock"].data)
    writable = {path for access, path in spec["paths"] if access & 2}
    assert set(plan.supervise["writable"]) <= writable | {p for p in writable}
    assert plan.supervise["project"] == policy.project_dir


def test_allowlist_is_held_where_the_supervisor_runs(home):
    _, plan = _supervised_plan(home, "NETWORK_MODE=isolated\n")
    assert "net.egress_filtered" in plan.provides
    assert plan.supervise["network"] == "isolated"


def test_without_the_supervisor_the_rows_say_no(home):
    policy = policy_for(home, backend="landlock")
    _, _, cannot = landlock_backend.guarantees(policy, landlock_abi=7, supervisor=False)
    assert {"slurm.boundary", "unix_sockets.confined"} <= dict(cannot).keys()


def test_the_notify_filter_refuses_udp_only_in_restricted_modes():
    from agent_sandbox.policy.seccomp import compile_notify_filter

    open_filter, restricted = compile_notify_filter(False), compile_notify_filter(True)
    assert len(open_filter) % 8 == 0 and len(restricted) > len(open_filter)
    assert errno.EACCES.to_bytes(2, "little") in restricted


# Load a notify filter in a fresh process (no listener: the supervised calls
# would answer ENOSYS; the refusals below are decided in the kernel) and try
# each way to make a socket; print what each gave.
TRY_SOCKETS = textwrap.dedent("""\
    import ctypes, errno, json, os, socket, sys
    sys.path.insert(0, sys.argv[1])           # the helper, by path
    import sandbox_exec
    sandbox_exec._landlock().no_new_privs()
    sandbox_exec.load_seccomp(sys.stdin.buffer.read())
    libc = ctypes.CDLL(None, use_errno=True)
    NR = {'x86_64': {'socket': 41, 'socketpair': 53, 'io_uring_setup': 425},
          'aarch64': {'socket': 198, 'socketpair': 199, 'io_uring_setup': 425}}[os.uname().machine]
    high = 1 << 32
    pair = (ctypes.c_int * 2)()
    cases = {
        'unix-dgram': ('socket', 1, 2), 'unix-dgram-flags': ('socket', 1, 2 | 0o2000000 | 0o4000),
        'unix-dgram-high': ('socket', high | 1, high | 2), 'pair-dgram': ('socketpair', 1, 2),
        'pair-dgram-high': ('socketpair', high | 1, 2), 'unix-stream': ('socket', 1, 1),
        'unix-seqpacket': ('socket', 1, 5), 'pair-stream': ('socketpair', 1, 1),
        'udp': ('socket', 2, 2), 'udp-high': ('socket', high | 2, 2), 'tcp': ('socket', 2, 1),
        'udp6': ('socket', 10, 2), 'io_uring': ('io_uring_setup', 1, 0),
    }
    out = {}
    for label, (name, a, b) in cases.items():
        args = [ctypes.c_long(a), ctypes.c_long(b), ctypes.c_long(0)]
        if name == 'socketpair':
            args.append(pair)
        r = libc.syscall(ctypes.c_long(NR[name]), *args)
        out[label] = 'ok' if r >= 0 else errno.errorcode[ctypes.get_errno()]
    print(json.dumps(out))
    """)


def _try_sockets(bpf: bytes) -> dict:
    from agent_sandbox.paths import HELPER_DIR

    result = subprocess.run([sys.executable, "-c", TRY_SOCKETS, HELPER_DIR], input=bpf,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_the_notify_filter_refuses_unix_datagram_sockets_in_the_kernel():
    """sendmsg()'s destination is in memory: where the supervisor runs no unix
    datagram socket can be made (socket(), socketpair(), flags and the
    registers' upper halves included); the other unix types and, in open
    mode, inet datagrams can. io_uring (which makes sockets without these
    calls) is refused; EFAULT for it would mean the filter let it through."""
    from agent_sandbox.policy.seccomp import compile_notify_filter

    got = _try_sockets(compile_notify_filter(False))
    for label in ("unix-dgram", "unix-dgram-flags", "unix-dgram-high", "pair-dgram",
                  "pair-dgram-high"):
        assert got[label] == "EACCES", got
    for label in ("unix-stream", "unix-seqpacket", "pair-stream", "udp", "tcp", "udp6"):
        assert got[label] == "ok", got
    assert got["io_uring"] == "EPERM", got
    restricted = _try_sockets(compile_notify_filter(True))
    for label in ("udp", "udp-high", "udp6", "unix-dgram", "pair-dgram"):
        assert restricted[label] == "EACCES", restricted
    assert restricted["tcp"] == restricted["unix-stream"] == "ok", restricted


def test_a_failing_supervisor_kills_the_sandbox(capfd):
    """The failure path itself (the launcher killed from outside is
    tests/adversarial's): the supervisor takes a "listener" that is a pipe
    with data waiting, its loop fails on the first RECV (ENOTTY), and the
    launcher SIGKILLs the sandbox's process group and says why."""
    import os
    import signal
    import types

    from agent_sandbox.process import spawn

    sandbox = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE, start_new_session=True)
    try:
        sandbox.stdin.write(b"wake the loop")
        sandbox.stdin.flush()
        read_report, write_report = os.pipe()
        os.write(write_report, b"0\n")           # its stdin: not a seccomp listener
        os.close(write_report)
        spawn._supervise(types.SimpleNamespace(supervise={}), sandbox.pid, read_report)
        assert sandbox.wait(10) == -signal.SIGKILL
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
            sandbox.wait()
    assert "the landlock supervisor failed" in capfd.readouterr().err


def _run_prefix(program: bytes, arch: int, nr: int):
    """Run the hand-written prefix (ld/jeq/ja/ret only) on (arch, nr):
    the value it returns, or None where it falls through to libseccomp's."""
    ops = [struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)]
    pc, acc = 0, 0
    while pc < len(ops):
        code, jt, jf, k = ops[pc]
        if code == 0x20:
            acc = {4: arch, 0: nr}[k]
        elif code == 0x15:
            pc += jt if acc == k else jf
        elif code == 0x05:
            pc += k
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected op {code:#x}")
        pc += 1
    return None


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_numbered_calls_are_refused_on_every_abi(machine):
    """setxattrat, removexattrat, file_setattr on every ABI (x32's carry the
    syscall bit), fchmodat2 off the native one; nothing else is touched."""
    from agent_sandbox.policy.seccomp import AUDIT_ARCH, numbered_prefix

    prefix = numbered_prefix(machine)
    native = AUDIT_ARCH[machine]
    compat = 0x40000003 if machine == "x86_64" else 0x40000028     # i386, arm
    refuse = 0x00050000 | errno.EACCES
    for number in (463, 466, 469):
        assert _run_prefix(prefix, native, number) == refuse
        assert _run_prefix(prefix, compat, number) == refuse
    assert _run_prefix(prefix, compat, 452) == refuse
    assert _run_prefix(prefix, native, 452) is None          # notified natively
    if machine == "x86_64":
        for number in (452, 463, 466, 469):
            assert _run_prefix(prefix, native, 0x40000000 | number) == refuse
    for number in (0, 1, 42, 90, 462, 464, 470):
        assert _run_prefix(prefix, native, number) is None
        assert _run_prefix(prefix, compat, number) is None


def test_metadata_is_never_granted_on_devices_or_proc(home):
    """/dev/pts, /dev/tty, /dev/null and /proc are writable, never a place for
    chmod; the project and $TMPDIR are."""
    policy, plan = _supervised_plan(home)
    writable = plan.supervise["writable"]
    assert policy.project_dir in writable
    for path in writable:
        assert not path.startswith(("/proc", "/sys", "/dev/pts")), writable
        assert not path.startswith("/dev/") or path.startswith("/dev/shm"), writable


CHILD = textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, sys.argv[1])
    import sandbox_exec
    sandbox_exec._landlock().no_new_privs()
    if sys.argv[2] == 'filter':
        sandbox_exec.load_seccomp(sys.stdin.buffer.read())
    print('ready', flush=True)
    time.sleep(60)
    """)


def test_sandbox_members_are_the_helpers_tree_under_its_filter():
    """A launcher running with no_new_privs: its other children (the
    chaperon, the egress proxy) have NoNewPrivs 1 too and never count as
    inside; the helper's tree under its seccomp filter does."""
    from agent_sandbox.paths import HELPER_DIR
    from agent_sandbox.policy.seccomp import compile_filter
    from agent_sandbox.process.supervisor import sandbox_members

    bpf = compile_filter(["kexec_load"])
    children = []
    try:
        for kind in ("filter", "nnp"):
            child = subprocess.Popen([sys.executable, "-c", CHILD, HELPER_DIR, kind],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            child.stdin.write(bpf)
            child.stdin.close()
            assert child.stdout.readline().strip() == b"ready"
            children.append(child)
        helper, chaperon = children
        import os

        assert sandbox_members(os.getpid(), helper.pid) == [helper.pid]
        assert chaperon.pid not in sandbox_members(os.getpid())
    finally:
        for child in children:
            child.kill()
            child.wait(10)


def test_blocking_calls_share_a_bounded_pool_of_workers():
    """Each blocking connect started a thread of its own: 40 calls that wait
    now use at most MAX_WORKERS threads, the rest wait their turn and are all
    answered."""
    import threading

    from agent_sandbox.process import supervisor as sup

    gate, done = threading.Event(), []
    lock = threading.Lock()
    supervisor = sup.Supervisor(-1, Rules({}))

    def answer(*job):
        gate.wait(10)
        with lock:
            done.append(job)
    supervisor.answer = answer
    before = threading.active_count()
    for number in range(40):
        supervisor._dispatch((number,))
    assert threading.active_count() - before <= sup.MAX_WORKERS
    gate.set()
    for _ in range(100):
        if len(done) == 40:
            break
        __import__("time").sleep(0.05)
    assert sorted(done) == [(n,) for n in range(40)]
