"""One sandbox per node per job, the parts that need no Slurm: the keys, the
slurmstepd title and cgroup checks, and the holder's answer over a real Unix
socket (jobs/share.py; the real thing: tests/integration/test_mpi.py and
tests/adversarial/test_job_sandbox_join.py)."""
from __future__ import annotations

import os
import socket

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.jobs import share as jobshare


def test_the_batch_step_has_the_jobs_key_and_a_step_looks_there_first(monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "n7.cluster.example")
    assert jobshare.key_for("42", "batch") == ["n7-42"]
    assert jobshare.key_for("42", "3") == ["n7-42", "n7-42.3"]


@pytest.mark.parametrize("title,expected", [
    (b"slurmstepd: [700058.batch]\0\0", ("700058", "batch")),
    (b"slurmstepd: [12.0]", ("12", "0")),
    (b"slurmstepd: [12.extern]", ("12", "extern")),
])
def test_the_step_is_read_from_slurmstepds_title(title, expected):
    match = jobshare.STEPD_TITLE.match(title)
    assert match and (match.group(1).decode(), match.group(2).decode()) == expected


@pytest.mark.parametrize("title", [b"slurmstepd: [x.0]", b"python3 slurmstepd: [1.0]", b""])
def test_other_titles_name_no_step(title):
    assert jobshare.STEPD_TITLE.match(title) is None


def test_a_cgroup_that_names_a_job_must_name_this_one():
    assert jobshare.cgroup_agrees("0::/\n4:memory:/process_api/3c9c\n", "42")   # linuxproc
    assert jobshare.cgroup_agrees("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n",
                                  "42")
    assert not jobshare.cgroup_agrees("0::/system.slice/slurmstepd.scope/job_43/step_0\n", "42")
    assert not jobshare.cgroup_agrees("4:memory:/slurm/uid_1/job_42/step_0\n"
                                      "5:cpuset:/slurm/uid_1/job_43/step_0\n", "42")
    assert not jobshare.cgroup_agrees("0::/job_420/step_0\n", "42")


def test_this_process_is_in_no_slurm_step():
    assert jobshare.slurm_step() is None


@pytest.fixture
def holder(tmp_path):
    dirfd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(jobshare._address(dirfd, "n1-42.sock"))
    listener.listen(4)
    pidfd = os.pidfd_open(os.getpid())
    made = jobshare.Holder("42", {"project": "/p", "backend": "bwrap"}, pidfd, listener,
                           dirfd=dirfd, key="n1-42")
    yield made, dirfd
    listener.close()
    os.close(pidfd)
    os.close(dirfd)


def answered(made, dirfd, key="n1-42"):
    """connect() against the holder, which answers once (no thread: the
    kernel queues the connection until accept)."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(jobshare._address(dirfd, f"{key}.sock"))
    conn, _ = made.listener.accept()
    made._answer(conn)
    return client


def test_a_peer_outside_the_job_is_refused_and_gets_no_descriptor(holder):
    made, dirfd = holder
    client = answered(made, dirfd)
    data, ancillary, _, _ = client.recvmsg(4096, socket.CMSG_SPACE(4))
    assert ancillary == [] and made.members == []
    assert f"(pid {os.getpid()}) is not a process of job 42" in data.decode()
    client.close()


def test_a_peer_of_the_job_gets_the_sandbox_and_counts_as_a_member(holder, monkeypatch):
    made, dirfd = holder
    monkeypatch.setattr(jobshare, "slurm_step", lambda pid=None: ("42", "0"))
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(jobshare._address(dirfd, "n1-42.sock"))
    conn, _ = made.listener.accept()
    made._answer(conn)
    import array

    fds = array.array("i")
    data, ancillary, _, _ = client.recvmsg(4096, socket.CMSG_SPACE(4))
    for _, _, payload in ancillary:
        fds.frombytes(payload)
    assert data == b'{"project": "/p", "backend": "bwrap"}' and len(fds) == 1
    assert jobshare._pid_of(fds[0]) == os.getpid() and made.joined == 1
    # Our own namespaces: nothing differs, so nothing here is a sandbox.
    assert jobshare.namespaces_of(fds[0]) == {}
    os.close(fds[0])
    client.close()


def test_the_joiner_refuses_a_holder_that_refused(holder, monkeypatch):
    made, dirfd = holder
    monkeypatch.setattr(jobshare, "_check_server", lambda conn: None)
    client_side = {}

    def fake_connect(conn, address, original=socket.socket.connect):
        original(conn, address)
        accepted, _ = made.listener.accept()
        made._answer(accepted)
        client_side["done"] = True

    monkeypatch.setattr(socket.socket, "connect", fake_connect)
    with pytest.raises(PolicyError, match="refused this task — the peer"):
        jobshare.connect(dirfd, "n1-42")
    assert client_side


def test_no_holder_is_no_answer(holder):
    _, dirfd = holder
    assert jobshare.connect(dirfd, "n1-43") is None


def test_a_holder_retires_only_when_no_launch_is_joining(holder, tmp_path):
    """Launches connect under the per-host lock: while one holds it, the
    holder keeps its socket; a queued connection keeps it too."""
    import fcntl

    made, dirfd = holder
    lock = os.open(tmp_path / jobshare.lock_name(), os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    assert not made.retire() and (tmp_path / "n1-42.sock").exists()
    os.close(lock)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(jobshare._address(dirfd, "n1-42.sock"))
    assert not made.retire() and (tmp_path / "n1-42.sock").exists()
    made.listener.accept()[0].close()
    client.close()
    assert made.retire() and not (tmp_path / "n1-42.sock").exists()


def test_sockets_nobody_listens_on_are_swept_but_not_this_jobs(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "n1")
    dirfd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        # n1-2-7: job 7 of the host n1-2, sharing the home (not n1's to sweep)
        for name in ("n1-7.sock", "n1-42.sock", "n1-42.3.sock", "n2-7.sock", "n1-2-7.sock"):
            dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            dead.bind(str(tmp_path / name))
            dead.close()                       # bound, never listening: stale
        live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        live.bind(str(tmp_path / "n1-8.sock"))
        live.listen(1)
        jobshare.sweep(dirfd, "42")
        assert sorted(os.listdir(tmp_path)) == ["n1-2-7.sock", "n1-42.3.sock", "n1-42.sock",
                                                "n1-8.sock", "n2-7.sock"]
        live.close()
    finally:
        os.close(dirfd)


CONFINED_PEER = r'''
import ctypes, socket, sys
ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)        # PR_SET_NO_NEW_PRIVS, as every sandboxed process has
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect(sys.argv[1])
data, anc, _, _ = c.recvmsg(4096, socket.CMSG_SPACE(4))
print(len(anc))
'''


def test_a_confined_peer_of_the_job_is_not_handed_the_sandbox(tmp_path, monkeypatch):
    """A landlock task of the job can connect() to the holder's socket (Landlock
    does not restrict that) and passes the job check: its no_new_privs (every
    sandboxed process has it) is what refuses it (review of issue 14, finding 3)."""
    import subprocess
    import sys

    monkeypatch.setattr(jobshare, "slurm_step", lambda pid=None: ("42", "3"))
    path = str(tmp_path / "n1-42.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    holder = jobshare.Holder("42", {"project": "/p", "backend": "bwrap"},
                             os.pidfd_open(os.getpid()), listener)
    peer = subprocess.Popen([sys.executable, "-c", CONFINED_PEER, path], stdout=subprocess.PIPE,
                            text=True)
    conn, _ = listener.accept()
    refused = holder.admit(conn)
    holder._answer(conn)
    out = peer.communicate(timeout=10)[0].strip()
    assert refused == f"the peer (pid {peer.pid}) is itself sandboxed (no_new_privs)"
    assert out == "0"


def test_without_a_pinned_peer_the_holder_refuses(holder, monkeypatch):
    """Where SO_PEERPIDFD is missing (kernel < 6.5) and the peer cannot be
    pinned otherwise (no unix_diag), its pid could be reused between the
    check and the answer: fail closed (finding 7)."""
    from agent_sandbox.jobs import peer

    monkeypatch.setattr(jobshare, "slurm_step", lambda pid=None: ("42", "3"))
    monkeypatch.setattr(peer, "SO_PEERPIDFD", 0x7fff)   # an option no kernel has
    monkeypatch.setattr(peer, "peer_inode", lambda conn: None)
    made, dirfd = holder
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(jobshare._address(dirfd, "n1-42.sock"))
    conn, _ = made.listener.accept()
    assert "cannot pin the peer" in made.admit(conn)
    conn.close()
    client.close()


def test_without_so_peerpidfd_the_peer_is_pinned_by_its_socket(holder, monkeypatch):
    """Kernels 5.3-6.4 (RHEL 9): the SO_PEERCRED pid is opened as a pidfd and
    taken only if that process holds the connection's other end (by inode,
    from unix_diag) — a job's task is admitted there as on 6.5."""
    from agent_sandbox.jobs import peer

    monkeypatch.setattr(jobshare, "slurm_step", lambda pid=None: ("42", "3"))
    monkeypatch.setattr(peer, "SO_PEERPIDFD", 0x7fff)
    made, dirfd = holder
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(jobshare._address(dirfd, "n1-42.sock"))
    conn, _ = made.listener.accept()
    assert peer.peer_inode(conn) == os.fstat(client.fileno()).st_ino
    assert made.admit(conn) is None
    conn.close()
    client.close()


# ---------------------------------------------------------------- shape (finding 2)
def _policy(home, **changes):
    from agent_sandbox.policy.resolve import resolve_policy
    from tests.support.homes import context, settings_for

    return resolve_policy(settings_for(home, **changes), context(home), backend="bwrap")


def _joined(info):
    from types import SimpleNamespace

    return SimpleNamespace(info=info, pidfd=-1)


def test_a_task_of_another_session_or_policy_does_not_join(tmp_path):
    """A step from session S1 (network isolated) must not run in the sandbox
    of session S2 of the same project (network open) nor use S2's chaperon;
    nor a step from S2 with a different setting, nor one of S1 alone."""
    from types import SimpleNamespace

    from agent_sandbox.jobs.join import _run_joined
    from tests.support.homes import make_home

    home = make_home(tmp_path)
    open_policy = _policy(home)
    isolated = _policy(home, NETWORK_MODE="isolated")
    holder = {"project": open_policy.project_dir, "backend": "bwrap",
              "chaperon": "/elsewhere/s2", "staging": "/elsewhere/s2-staging",
              "shape": jobshare.shape(open_policy, "S2")}
    bwrap = SimpleNamespace(name="bwrap")
    assert jobshare.shape_differs(holder["shape"], jobshare.shape(open_policy, "S2")) == []
    for policy, session, differ in ((isolated, "S1", "network_isolated, session"),
                                    (open_policy, "S1", "session"),
                                    (isolated, "S2", "network_isolated")):
        with pytest.raises(PolicyError, match=f"with other settings \\({differ} differ\\)"):
            _run_joined(_joined(holder), ["true"], bwrap, policy, {}, (),
                        jobshare.shape(policy, session))
    # A holder that published no shape is refused too (fail closed).
    bare = {k: v for k, v in holder.items() if k != "shape"}
    with pytest.raises(PolicyError, match="other settings"):
        _run_joined(_joined(bare), ["true"], bwrap, open_policy, {}, (),
                    jobshare.shape(open_policy, "S2"))


def test_firejail_execs_the_joining_helper_directly_with_the_execute_only_interpreter(
        tmp_path, monkeypatch):
    """`firejail --join=PID -- CMD` runs CMD through `bash -c`: a dumpable
    process inside the sandbox before the helper starts. Without `--` it
    execs CMD, here an execute-only interpreter (non-dumpable from exec)."""
    from types import SimpleNamespace

    from agent_sandbox.jobs import join as jobjoin
    from tests.support.homes import make_home

    monkeypatch.setattr(jobjoin, "join_python", lambda: "/prefix/venv/libexec/python3-join")
    policy = _policy(make_home(tmp_path))
    firejail = SimpleNamespace(name="firejail", path="/usr/bin/firejail")
    plan = jobjoin.join_plan(policy, ["true"], firejail, {"mnt": 1, "pid": 2}, pid=77, pidfd=9)
    assert list(plan.argv[:5]) == ["/usr/bin/firejail", "--quiet", "--keep-fd=all",
                                   "--join=77", "/prefix/venv/libexec/python3-join"]
    assert "--" not in plan.argv[:plan.argv.index("--join-ns")]


def test_without_the_execute_only_interpreter_a_firejail_join_fails_closed(
        tmp_path, monkeypatch):
    import sys

    from agent_sandbox.jobs import join as jobjoin

    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    (tmp_path / "libexec").mkdir()
    with pytest.raises(PolicyError, match="reinstall agent-sandbox"):
        jobjoin.join_python()
    readable = tmp_path / "libexec" / "python3-join"
    readable.write_bytes(b"")
    readable.chmod(0o755)              # readable: the exec would leave it dumpable
    with pytest.raises(PolicyError, match="not an execute-only root-owned file"):
        jobjoin.join_python()


# Captured from slurmstepd.c _set_job_log_prefix: 24.11-26.05 add " stepmgr"
# to the batch step's title when the job's step manager runs there.
@pytest.mark.parametrize("title,expected", [
    (b"slurmstepd: [700058.batch stepmgr]\0", ("700058", "batch")),
    (b"slurmstepd: [9.extern]\0\0", ("9", "extern")),
])
def test_the_step_managers_title_names_its_step(title, expected):
    match = jobshare.STEPD_TITLE.match(title)
    assert match and (match.group(1).decode(), match.group(2).decode()) == expected


@pytest.mark.parametrize("title", [b"slurmstepd: [s0KQ3ZVX1P0000.0]",   # a SLUID, never printed
                                   b"slurmstepd: [42.0 other]", b"slurmstepd: [42:namespace]"])
def test_titles_of_other_forms_name_no_step(title):
    assert jobshare.STEPD_TITLE.match(title) is None


# 26.05 cgroup_v2.c cgroup_p_step_create: "/%s" of print_sluid unless
# CgroupJobIdPaths=yes ("/job_%u").
SLUID_PATH = "0::/system.slice/node1_slurmstepd.scope/s0KQ3ZVX1P0A12/step_0/user/task_0\n"


def test_a_sluid_cgroup_agrees_only_with_the_jobs_sluid_from_slurmctld():
    assert jobshare.cgroup_jobs(SLUID_PATH) == {"s0KQ3ZVX1P0A12"}
    assert jobshare.names_sluid(SLUID_PATH)
    assert not jobshare.cgroup_agrees(SLUID_PATH, "42")                      # cannot tell
    assert not jobshare.cgroup_agrees(SLUID_PATH, "42", "s0KQ3ZVX1P0A13")    # another job
    assert not jobshare.cgroup_agrees(SLUID_PATH, "42", "42")                # not a SLUID
    assert jobshare.cgroup_agrees(SLUID_PATH, "42", "S0kq3zvx1p0a12")        # case-insensitive


def test_a_slurm_cgroup_of_an_unknown_form_fails_closed():
    assert jobshare.cgroup_jobs("0::/system.slice/slurmstepd.scope/job_x/step_0\n") is None
    assert not jobshare.cgroup_agrees("0::/system.slice/slurmstepd.scope/jobid42/step_0\n", "42")
    assert not jobshare.cgroup_agrees("4:memory:/slurm_node1/uid_1/weird/step_0\n", "42")
    assert jobshare.cgroup_agrees("4:memory:/slurm_node1/uid_1/job_42/step_0\n", "42")
    assert not jobshare.names_sluid("0::/system.slice/slurmstepd.scope/job_42/step_0\n")


def test_the_stepd_scope_itself_names_no_job():
    # slurmstepd's own processes sit in .../slurmstepd.scope/system (v2).
    assert jobshare.cgroup_jobs("0::/system.slice/slurmstepd.scope/system\n") is None


def _serve_in_thread(made, stop_r):
    import threading
    thread = threading.Thread(target=made.serve, args=(stop_r,), daemon=True)
    thread.start()
    return thread


def test_a_holder_whose_retirement_was_put_off_retires_soon_after(holder, tmp_path):
    """Issue 32 (a holder outlived its job): the last member left while a
    launch of another job held the per-host lock; the holder then waited for
    a connection with no timeout, forever. It tries again."""
    import fcntl
    import time

    made, dirfd = holder
    made.joined = 1                                   # its one member has gone
    lock = os.open(tmp_path / jobshare.lock_name(), os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    stop_r, stop_w = os.pipe()
    thread = _serve_in_thread(made, stop_r)
    time.sleep(0.5)
    assert thread.is_alive() and (tmp_path / "n1-42.sock").exists()
    os.close(lock)                                    # the other launch is done
    thread.join(5)
    try:
        assert not thread.is_alive(), "the holder never retired"
        assert not (tmp_path / "n1-42.sock").exists()
    finally:
        os.write(stop_w, b"x")
        os.close(stop_w)


def test_a_holder_ends_with_its_steps_slurmstepd(tmp_path):
    """Even with a member still connected (a task that escaped the step's
    tracking), the holder stops when the step's slurmstepd has ended."""
    import subprocess
    import sys

    dirfd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(jobshare._address(dirfd, "n1-42.sock"))
    listener.listen(4)
    stepd = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    made = jobshare.Holder("42", {}, os.pidfd_open(os.getpid()), listener, dirfd=dirfd,
                           key="n1-42", stepd=os.pidfd_open(stepd.pid))
    member, other = socket.socketpair()
    made.members.append(member)
    made.joined = 1
    stop_r, stop_w = os.pipe()
    thread = _serve_in_thread(made, stop_r)
    try:
        stepd.wait(10)
        thread.join(5)
        assert not thread.is_alive(), "the holder outlived its step"
    finally:
        os.write(stop_w, b"x")
        other.close()
        listener.close()
        os.close(dirfd)


def test_no_stepd_above_a_process_outside_slurm():
    assert jobshare.stepd_pidfd("42") is None
