"""One sandbox per node per job (SPEC §9): the batch script and every task of
every step on a node run in one sandbox, so MPI's shared memory and
single-copy (CMA) transports, NCCL and CUDA IPC work between ranks.

Strategy
--------
* Only launches the chaperon made for a job opt in (`run --job-shared`, set by
  chaperon/jobwrap.launch_argv); an `agent-sandbox run` a user starts in a
  plain job keeps its own sandbox.
* The job and step come from the process tree, never from the environment
  the agent influenced: the nearest ancestor that is a `slurmstepd` run by
  root, whose title is `slurmstepd: [JOB.STEP]` (slurm_step). Where the node
  puts jobs into cgroups (proctrack/cgroup), the `job_<id>` component of
  /proc/PID/cgroup must agree. The user can neither start a root process nor
  move a process under another job's slurmstepd.
* The holder: the first launch for a key forks a holder process (in the
  step's process tree, so Slurm tracks and ends it) that runs the ordinary
  launch — chaperon, registry, placeholders, the backend — with a command
  that only waits, and serves a Unix socket in the per-user run directory
  (hidden in every sandbox; 0700). The key is `<host>-<job>` for the batch
  step, which lives as long as the job, so every step on the batch node
  joins the batch script's sandbox; on other nodes it is
  `<host>-<job>.<step>` (slurmstepd ends a step's processes with the step,
  so a holder made by one step cannot serve a later one). A lock file
  orders the first launches of a key.
* Every launch, the first included, joins: it connects, the holder checks
  the peer (SO_PEERCRED: same uid; same Slurm job by slurm_step of the peer's
  pid; not itself sandboxed: no no_new_privs, no seccomp — a landlock task
  can reach the socket; all read while SO_PEERPIDFD pins the pid — on
  kernels without it, a pidfd of the SO_PEERCRED pid whose process holds
  the connection's other end by inode, pin_peer) and answers with its project, backend and
  chaperon directories and, by SCM_RIGHTS, a pidfd of the sandbox's init.
  The joiner refuses another project or backend, reads the namespaces of that
  pid while the pidfd proves it alive, and hands them to the helper, which
  enters them (bwrap: setns; firejail: `firejail --join`), verifies
  /proc/self/ns, drops every capability, sets no_new_privs, loads the
  session's seccomp filter and execs the task. The connection stays open
  while the task runs: the holder ends its sandbox when the last member has
  gone (the kernel would kill the members if its init ended first).
* Joined tasks get no Landlock domain of their own: two sibling domains may
  not ptrace each other, and process_vm_readv (CMA) is a ptrace access.
* landlock has no namespaces to join: each task keeps its own sandbox; the
  job's ranks on a node share memory without single-copy through the job's
  directory in /dev/shm (jobs/shm.py), and jobstart points Open MPI there.
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys

from agent_sandbox.errors import SETUP_FAILED, BackendUnavailable, PolicyError
from agent_sandbox.paths import run_dir

# slurmstepd's title, 22.05 through 26.05 (slurmstepd.c _set_job_log_prefix:
# "[%s]", from 24.11 "[%s%s]" with " stepmgr" in the batch step of a job
# whose steps the step manager runs). 26.05 prints the job id, not the SLUID,
# whenever the job has one (log.c log_build_step_id_str).
STEPD_TITLE = re.compile(rb"slurmstepd: \[(\d+)\.(\w+)(?: stepmgr)?\]")
NAMESPACES = ("user", "mnt", "ipc", "net", "uts", "pid", "cgroup")
WAITER = ["/bin/sh", "-c", "echo ready && read -r line"]
READY_TIMEOUT = 60
JOIN_TIMEOUT = 60
RETIRE_RETRY = 0.2   # seconds: a retirement the per-host lock put off is tried again


# What shapes a sandbox, by Policy field: a task joins only a sandbox made
# from the same ones, for the same submitting session (its chaperon serves
# the task's Slurm calls). `protected` counts by path.
SHAPING = ("backend", "project_dir", "home_access", "system_readonly", "home_readonly",
           "home_writable", "home_seeded", "extra_writable", "hidden", "readonly_overlays",
           "run_binds", "slurm_masks", "slurm_binaries", "devices", "private_tmp", "private_ipc",
           "private_mounts",
           "filter_passwd", "network_isolated", "seccomp", "seccomp_extra", "pinned")
# Set by the chaperon's job wrapper (chaperon/jobwrap.py) to the id of the
# session that submitted the job or step; the agent cannot set it.
JOB_SESSION_ENV = "AGENT_SANDBOX_JOB_SESSION"


def shape(policy, session: str) -> dict[str, str]:
    """{part: digest} of what shapes `policy`'s sandbox, the submitting
    session included: the holder publishes it, a joiner must match it."""
    import hashlib

    parts = {name: getattr(policy, name) for name in SHAPING}
    parts["protected"] = sorted(p.path for p in policy.protected)
    parts["session"] = session
    return {name: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:32]
            for name, value in parts.items()}


def shape_differs(theirs, ours: dict[str, str]) -> list[str]:
    """The parts in which a holder's shape differs from ours (all, when it
    published none)."""
    if not isinstance(theirs, dict):
        return sorted(ours)
    return sorted(name for name in ours.keys() | theirs.keys()
                  if theirs.get(name) != ours.get(name))


# ---------------------------------------------------------------- identity
def slurm_step(pid: int | None = None) -> tuple[str, str] | None:
    """(job, step) of the Slurm step whose slurmstepd is the nearest root-owned
    ancestor of `pid` (default: this process); None outside a step, or when
    the process's cgroup names another job."""
    start = os.getpid() if pid is None else pid
    current = start
    for _ in range(64):
        try:
            with open(f"/proc/{current}/stat", "rb") as handle:
                current = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None
        if current <= 1:
            return None
        found = _stepd(current)
        if found:
            return found if _cgroup_agrees(start, found[0]) else None
    return None


def stepd_pidfd(job: str) -> int | None:
    """A pidfd of the nearest root-owned slurmstepd above this process, when
    it runs a step of `job` (None elsewhere): the holder's end of life."""
    current = os.getpid()
    for _ in range(64):
        try:
            with open(f"/proc/{current}/stat", "rb") as handle:
                current = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None
        if current <= 1:
            return None
        found = _stepd(current)
        if found:
            if found[0] != job:
                return None
            try:
                pidfd = os.pidfd_open(current)
            except OSError:
                return None
            return pidfd if _stepd(current) == found else None   # still that stepd
    return None


def _stepd(pid: int) -> tuple[str, str] | None:
    """(job, step) when `pid` is a slurmstepd run by root, by its title."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            if handle.read().strip() != b"slurmstepd" or os.stat(f"/proc/{pid}").st_uid != 0:
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            match = STEPD_TITLE.match(handle.read())
    except OSError:
        return None
    return (match.group(1).decode(), match.group(2).decode()) if match else None


def _cgroup_agrees(pid: int, job: str) -> bool:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return False
    return cgroup_agrees(text, job, job_sluid(job) if names_sluid(text) else None)


def job_sluid(job: str) -> str | None:
    """The job's SLUID as slurmctld answers it (squeue -O SLUID, 26.05+),
    never from the environment the agent influenced; None when not known."""
    import shutil
    import subprocess
    squeue = shutil.which("squeue", path=os.defpath + ":/usr/local/bin")
    if not squeue:
        return None
    try:
        answer = subprocess.run([squeue, "--noheader", f"--jobs={job}", "--Format=SLUID"],
                                capture_output=True, text=True, timeout=30,
                                stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    value = answer.stdout.strip()
    return value if answer.returncode == 0 and _SLUID.fullmatch(value) else None


def _confined(pid: int) -> str | None:
    """Why `pid` is inside some sandbox, or None: every sandboxed process has
    no_new_privs (and usually a seccomp filter); a launcher has neither. So a
    landlock task of the job, which can connect() to the holder's socket
    (Landlock does not restrict that), is never handed another sandbox."""
    with open(f"/proc/{pid}/status", "rb") as handle:
        for line in handle:
            name, _, value = line.partition(b":")
            if name == b"NoNewPrivs" and value.strip() != b"0":
                return "no_new_privs"
            if name == b"Seccomp" and value.strip() != b"0":
                return "a seccomp filter"
    return None


# Slurm's cgroup hierarchy: v2 `<...>slurmstepd.scope/<job>/step_<x>/...`
# (cgroup_v2.c), v1 `/slurm[_<node>]/uid_<n>/<job>/...` (cgroup_v1.c). The job
# component is `job_<id>`, or from 26.05 without CgroupJobIdPaths the job's
# SLUID (`s` + 13 Crockford base32 characters, sluid.c print_sluid).
_SLURM_CGROUP = re.compile(r"(?:slurmstepd\.scope|/slurm(?:_[^/\n]*)?/uid_\d+)/([^/\n]+)",
                           flags=re.M)
_JOB_ID = re.compile(r"job_(\d+)")
_SLUID = re.compile(r"[sS][0-9A-Za-z]{13}")


def cgroup_jobs(text: str) -> set[str] | None:
    """The jobs /proc/PID/cgroup names: any `job_<id>` component as the id;
    below Slurm's hierarchy also a SLUID as itself (upper case, `s` prefix); an empty set when
    no line is below it (proctrack/linuxproc, or no cgroup plugin); None when
    a line is below it but its job component is neither (cannot tell)."""
    named = set(re.findall(r"/job_(\d+)(?=/|$)", text, flags=re.M))
    for component in _SLURM_CGROUP.findall(text):
        match = _JOB_ID.fullmatch(component)
        if match:
            named.add(match.group(1))
        elif _SLUID.fullmatch(component):
            named.add("s" + component[1:].upper())
        else:
            return None
    return named


def cgroup_agrees(text: str, job: str, sluid: str | None = None) -> bool:
    """proctrack/cgroup puts every process of a job below its job directory:
    when a line of /proc/PID/cgroup is below Slurm's hierarchy it must name
    this job, by `job_<id>` or by the job's SLUID (`sluid`, from slurmctld;
    None when not known: a SLUID directory then never agrees). Fails closed
    when the job directory is of a form it cannot read."""
    named = cgroup_jobs(text)
    if named is None:
        return False
    own = {job} | ({"s" + sluid[1:].upper()} if sluid and _SLUID.fullmatch(sluid) else set())
    return named <= own


def names_sluid(text: str) -> bool:
    """Does /proc/PID/cgroup name a job by SLUID (26.05's default)?"""
    return any(_SLUID.fullmatch(c) for c in _SLURM_CGROUP.findall(text))


def key_for(job: str, step: str) -> list[str]:
    """The holder keys a launch of `job`'s step `step` looks for, in order."""
    host = socket.gethostname().split(".")[0]
    if step == "batch":
        return [f"{host}-{job}"]
    return [f"{host}-{job}", f"{host}-{job}.{step}"]


def jobs_dir(home: str) -> int:
    """The directory of the holders' sockets and locks, as an O_PATH
    descriptor (socket paths go through /proc/self/fd: a long home never
    exceeds sun_path)."""
    base = os.path.join(run_dir(home), "jobs")
    os.makedirs(base, mode=0o700, exist_ok=True)
    fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    info = os.fstat(fd)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        os.close(fd)
        raise BackendUnavailable(f"{base} is not a private directory of yours (mode "
                                 f"{info.st_mode & 0o777:o}) — remove it; the job's tasks "
                                 "were not started.")
    return fd


def _address(dirfd: int, name: str) -> str:
    return f"/proc/self/fd/{dirfd}/{name}"


def lock_name() -> str:
    """The per-host lock (in the jobs directory) under which launches find
    or start a holder and holders retire."""
    return socket.gethostname().split(".")[0] + ".lock"


# ---------------------------------------------------------------- holder
class Holder:
    """The socket side of a holder: answers joiners of its job, counts them,
    and retires (removes its socket) once the last member has gone."""

    def __init__(self, job: str, info: dict, target_pidfd: int, listener: socket.socket,
                 *, dirfd: int = -1, key: str = "", stepd: int | None = None):
        self.job, self.info, self.pidfd, self.listener = job, info, target_pidfd, listener
        self.dirfd, self.key = dirfd, key
        self.stepd = stepd   # a pidfd of the step's slurmstepd: readable once it has ended
        self.inode = os.stat(f"{key}.sock", dir_fd=dirfd).st_ino if key else None
        self.members: list[socket.socket] = []
        self.joined = 0

    def admit(self, conn: socket.socket) -> str | None:
        """None when the peer may join, else why not."""
        import struct

        pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
        if uid != os.getuid():
            return f"uid {uid} is not the job's owner"
        from agent_sandbox.jobs import peer

        pinned = peer.pidfd(conn, pid)
        if pinned is None:
            return ("this kernel cannot pin the peer (no SO_PEERPIDFD, Linux 6.5, and no unix "
                    "socket diagnostics, unix_diag)")
        try:
            step = slurm_step(pid)
            confined = _confined(pid)
            import signal

            signal.pidfd_send_signal(pinned, 0)   # the pid read was still the peer
        except OSError:
            return "the peer is gone"
        finally:
            os.close(pinned)
        if step is None or step[0] != self.job:
            return f"the peer (pid {pid}) is not a process of job {self.job}"
        if confined:
            return f"the peer (pid {pid}) is itself sandboxed ({confined})"
        return None

    def serve(self, stop_fd: int) -> None:
        """Until the holder retires, its step's slurmstepd ends (the job
        ended: the holder never outlives it, even where proctrack/linuxproc
        lost track of it because the launch that forked it had ended and it
        was reparented), or `stop_fd` is readable."""
        import select

        while True:
            # A holder nobody joins (its first launch failed) does not linger;
            # one whose members have all gone but whose retirement the
            # per-host lock put off tries again soon (it used to wait for a
            # connection that may never come: a holder that outlived its job).
            if not self.joined:
                wait = JOIN_TIMEOUT
            else:
                wait = None if self.members else RETIRE_RETRY
            ends = [self.stepd] if self.stepd is not None else []
            ready, _, _ = select.select([self.listener, stop_fd, *ends, *self.members], [], [],
                                        wait)
            if stop_fd in ready or (ends and self.stepd in ready):
                return
            if self.listener in ready:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    conn = None
                if conn is not None:
                    self._answer(conn)
            for member in [m for m in self.members if m in ready]:
                try:
                    data = member.recv(64)
                except OSError:
                    data = b""
                if not data:
                    self.members.remove(member)
                    member.close()
            if not self.members and (self.joined or not ready) and self.retire():
                return

    def remove_socket(self) -> None:
        """Remove the socket file if it is still the one this holder bound."""
        try:
            if os.stat(f"{self.key}.sock", dir_fd=self.dirfd).st_ino == self.inode:
                os.unlink(f"{self.key}.sock", dir_fd=self.dirfd)
        except OSError:
            pass

    def retire(self) -> bool:
        """Remove the socket unless a launch is joining right now: launches
        connect under the per-host lock, so holding it (without waiting:
        the joiner that holds it waits for our answer) and finding no queued
        connection means none can come after the socket is gone."""
        import fcntl
        import select

        lock = os.open(lock_name(), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                       0o600, dir_fd=self.dirfd)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if select.select([self.listener], [], [], 0)[0]:
                return False
            self.remove_socket()
            return True
        finally:
            os.close(lock)

    def _answer(self, conn: socket.socket) -> None:
        refused = self.admit(conn)
        try:
            if refused:
                conn.sendall(json.dumps({"refused": refused}).encode())
                conn.close()
                return
            conn.sendmsg([json.dumps(self.info).encode()],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                           self.pidfd.to_bytes(4, sys.byteorder, signed=True))])
        except OSError:
            conn.close()
            return
        self.members.append(conn)
        self.joined += 1


def start_holder(key: str, job: str, dirfd: int, launch, *, close=(),
                 shaped: dict | None = None) -> None:
    """Fork the holder of `key` and return once its socket answers; raise
    BackendUnavailable with its reason when it could not start. `launch`
    runs the ordinary launch of a command in the holder (a callable taking
    the command and a callback that gets the chaperon session and policy).
    `close`: descriptors the holder must not keep (the lock); `shaped`: the
    launch's shape(), published to joiners."""
    sweep(dirfd, job)
    report_r, report_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(report_r)
        for fd in close:
            os.close(fd)
        code = SETUP_FAILED
        try:
            code = _hold(key, job, dirfd, launch, report_w, shaped or {})
        except BaseException as exc:   # never back into the parent's code
            _report(report_w, f"error {exc}")
        finally:
            os._exit(code)
    os.close(report_w)
    with os.fdopen(report_r, "rb") as handle:
        answer = handle.readline().decode("utf-8", "replace").strip()
    if answer != "ok":
        raise BackendUnavailable(f"the job's sandbox on this node could not start — "
                                 f"{answer.removeprefix('error ') or 'its holder ended'}. "
                                 "The task was not run.")


def sweep(dirfd: int, job: str) -> None:
    """Remove this host's sockets of other jobs that no holder listens on any
    more (one killed with its job); run under the per-host lock. A live
    holder of another job refuses the probe, so probing changes nothing."""
    host = socket.gethostname().split(".")[0]
    # Exactly this host's keys (key_for): on a shared home the hosts c1 and
    # c1-2 must not take each other's sockets.
    pattern = re.compile(rf"{re.escape(host)}-(\d+)(\.\w+)?\.sock")
    for name in os.listdir(f"/proc/self/fd/{dirfd}"):   # an O_PATH descriptor
        match = pattern.fullmatch(name)
        if match and match.group(1) != job:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(_address(dirfd, name))
            except ConnectionRefusedError:
                try:
                    os.unlink(name, dir_fd=dirfd)
                except OSError:
                    pass
            except OSError:
                pass
            finally:
                probe.close()


def _report(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode("utf-8", "replace") + b"\n")
        os.close(fd)
    except OSError:
        pass


def _hold(key: str, job: str, dirfd: int, launch, report_w: int, shaped: dict) -> int:
    """The holder process: the waiter runs in the sandbox with a pipe on each
    of stdin (closed to end it) and stdout (it says `ready`)."""
    import threading

    stay_r, stay_w = os.pipe()
    ready_r, ready_w = os.pipe()
    os.dup2(stay_r, 0)
    os.dup2(ready_w, 1)
    for fd in (stay_r, ready_w):
        os.close(fd)
    stop_r, stop_w = os.pipe()
    context: dict = {"stepd": stepd_pidfd(job)}   # the launch that forked us still runs
    reported: list = []

    def report(text: str) -> None:      # once: the descriptor is closed after
        if not reported:
            reported.append(text)
            _report(report_w, text)

    def serve():
        try:
            holder = _listen(key, job, dirfd, ready_r, context)
        except (OSError, ValueError) as exc:
            report(f"error {exc}")
            os.close(stay_w)
            return
        report("ok")
        try:
            holder.serve(stop_r)
        finally:
            holder.remove_socket()         # ended otherwise (scancel): if still ours
            holder.listener.close()
            os.close(stay_w)           # the waiter reads EOF: the sandbox ends

    def started(session, policy):
        context["info"] = {"project": policy.project_dir, "backend": policy.backend,
                           "chaperon": session.directory if session else None,
                           "staging": session.staging if session else None,
                           "shape": shaped}

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = launch(WAITER, started)
    os.write(stop_w, b"x")
    thread.join(5)
    report(f"error the holder's sandbox ended (exit {code})")
    return code


def _listen(key: str, job: str, dirfd: int, ready_r: int, context: dict) -> Holder:
    import select

    ready, _, _ = select.select([ready_r], [], [], READY_TIMEOUT)
    if not ready or not os.read(ready_r, 16).startswith(b"ready"):
        raise ValueError("the sandbox did not start (read its message above)")
    target = sandbox_member(os.getpid())
    if target is None:
        raise ValueError("no process of the sandbox was found")
    pidfd = os.pidfd_open(target)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(f"{key}.sock", dir_fd=dirfd)     # a stale one (we hold the lock)
    except FileNotFoundError:
        pass
    listener.bind(_address(dirfd, f"{key}.sock"))
    listener.listen(64)
    return Holder(job, context["info"], pidfd, listener, dirfd=dirfd, key=key,
                  stepd=context.get("stepd"))


def sandbox_member(root: int) -> int | None:
    """The process to join: of `root`'s descendants in a PID namespace below
    ours and owned by us, the one with the lowest pid in there — bwrap's init
    (pid 1), or under firejail (whose pid 1 is root's) the waiter. It lives
    as long as the sandbox does."""
    from agent_sandbox.process.spawn import descendants

    best = None
    for pid, fields in descendants(root):
        try:
            inner = [int(p) for p in fields.get(b"NSpid", [])]
            uid = int(fields[b"Uid"][0])
        except (ValueError, KeyError, IndexError):
            continue
        if (len(inner) > 1 and uid == os.getuid()
                and (best is None or inner[-1] < best[0]) and _readable_ns(pid)):
            best = (inner[-1], pid)
    return best[1] if best else None


def _readable_ns(pid: int) -> bool:
    """Its namespaces are ours to read (not a setuid program such as
    firejail's own pid 1, which the kernel keeps from us)."""
    try:
        os.stat(f"/proc/{pid}/ns/mnt")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- joiner
class Joined:
    """A membership: the connection (kept open while the task runs), the
    holder's facts and the sandbox init's pidfd."""

    def __init__(self, conn: socket.socket, info: dict, pidfd: int):
        self.conn, self.info, self.pidfd = conn, info, pidfd

    def close(self) -> None:
        os.close(self.pidfd)
        self.conn.close()


def connect(dirfd: int, key: str) -> Joined | None:
    """Join the holder of `key`; None when none answers there."""
    import array

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_address(dirfd, f"{key}.sock"))
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    _check_server(conn)
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if not data and not fds:        # it retired as we came: as if there were none
        conn.close()
        return None
    try:
        info = json.loads(data.decode("utf-8"))
    except ValueError:
        info = {"refused": "the holder's answer was unreadable"}
    if "refused" in info or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        conn.close()
        raise PolicyError(f"the job's sandbox on this node refused this task — "
                          f"{info.get('refused', 'no sandbox was handed over')}. The task "
                          "was not run.", reason="job_join_refused")
    return Joined(conn, info, fds[0])


def _check_server(conn: socket.socket) -> None:
    import struct

    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                    struct.calcsize("3i")))
    if uid != os.getuid():
        conn.close()
        raise PolicyError(f"the job sandbox's socket is served by uid {uid}, not you — "
                          "the task was not run.", reason="job_join_refused")


def namespaces_of(pidfd: int) -> dict[str, int]:
    """{kind: inode} of the sandbox init behind `pidfd`, for each namespace in
    which it differs from this process; read while the pidfd proves that the
    pid still names that process."""
    import signal

    pid = _pid_of(pidfd)
    spec = {}
    for kind in NAMESPACES:
        theirs = os.stat(f"/proc/{pid}/ns/{kind}").st_ino
        if theirs != os.stat(f"/proc/self/ns/{kind}").st_ino:
            spec[kind] = theirs
    signal.pidfd_send_signal(pidfd, 0)
    return spec


def _pid_of(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Pid:"):
                pid = int(line.split()[1])
                if pid > 0:
                    return pid
    raise OSError("the job sandbox's init has ended")
