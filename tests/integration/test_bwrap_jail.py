"""The jail, for real, on each backend: the installed agent-sandbox run by an
unprivileged user on this kernel, asserting what a process inside can and
cannot do. A test runs on every backend that claims the guarantee it checks;
where a backend disclaims it, the test asserts that the report says so (and
what the process sees instead)."""
from __future__ import annotations

import errno
import glob
import json
import shutil
import marshal
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from agent_sandbox.backends.base import HELPER_BOOT
from tests.support.install import INSTALLED, PREFIX
from tests.support.launcher import HIDDEN, SECRET_ENV
from tests.support.scripts import WRITE_SCRIPT
from agent_sandbox.paths import helper_module
ll = helper_module("landlock")

BACKENDS = ["bwrap", "firejail", "landlock"]
HOME_MODES = ["tmpwrite", "restricted", "read", "write"]
PROCESS_NAME = {"bwrap": "bwrap", "firejail": "firejail", "landlock": "python3"}

STAT_SCRIPT = """
import errno, json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        os.stat(path)
        out[path] = "exists"
    except OSError as exc:
        out[path] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""

# What a process can get out of a path: its content (or listing), else the errno.
READ_SCRIPT = """
import errno, json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read()
        out[path] = "readable"
    except OSError as exc:
        out[path] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""

CALL_SCRIPT = """
import errno, os, signal, socket, sys
kind, target = sys.argv[1], sys.argv[2]
try:
    if kind == "kill":
        os.kill(int(target), signal.SIGTERM)
    elif kind == "unix":
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect("\\0" + target)
    elif kind == "tcp":
        socket.create_connection(("127.0.0.1", int(target)), timeout=5)
    print("ok")
except OSError as exc:
    print(errno.errorcode.get(exc.errno, str(exc)))
"""


class Jail:
    """The test user, running agent-sandbox with one backend."""

    def __init__(self, user, backend: str):
        self.user = user
        self.backend = backend

    def env(self, **extra):
        return self.user.env(SANDBOX_BACKEND=self.backend, **extra)

    def sandbox(self, *command, env=None, **kwargs):
        return self.user.sandbox(*command, env=env if env is not None else self.env(), **kwargs)

    def python(self, script: str, *args, **kwargs) -> dict:
        result = self.sandbox("/usr/bin/python3", "-c", script, *map(str, args), **kwargs)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def call(self, kind: str, target, **kwargs) -> str:
        result = self.sandbox("/usr/bin/python3", "-c", CALL_SCRIPT, kind, str(target), **kwargs)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def report(self, **kwargs) -> tuple[dict, str]:
        """The --dry-run guarantee table {name: yes|partial|no} and the full text."""
        result = self.sandbox("true", options=["--dry-run"], **kwargs)
        assert result.returncode == 0, result.stderr
        table, inside = {}, False
        for line in result.stdout.splitlines():
            if line == "guarantees:":
                inside = True
            elif inside and line.startswith("  ") and line.split()[0] in ("yes", "partial", "no"):
                table[line.split()[1]] = line.split()[0]
            elif inside:
                inside = False
        return table, result.stdout

    def disclaims(self, guarantee: str, **kwargs) -> str:
        table, text = self.report(**kwargs)
        assert table[guarantee] in ("no", "partial"), (guarantee, table)
        return text


@pytest.fixture(params=BACKENDS)
def jail(request, user) -> Jail:
    return Jail(user, request.param)


def helper(user, *args, fds=(), **kwargs):
    """The installed helper, run directly as the test user."""
    site = glob.glob(f"{PREFIX}/venv/lib/python3*/site-packages/agent_sandbox/helper")[0]
    return user.run(["/usr/bin/python3", "-I", "-S", "-c", HELPER_BOOT, site, *args],
                    pass_fds=fds, **kwargs)


def spec_fd(spec: dict) -> int:
    read, write = os.pipe()
    os.write(write, marshal.dumps(spec))
    os.close(write)
    return read


SCOPED = ll.ruleset(6, scoped=ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL)


# ---------------------------------------------------------------- hiding
@pytest.mark.parametrize("mode", HOME_MODES)
def test_hidden_paths_do_not_exist_in_every_home_mode(jail, project, mode):
    paths = [str(jail.user.home / p) for p in HIDDEN]
    env = jail.env(HOME_ACCESS=mode)
    if jail.backend == "landlock":
        assert "EACCES" in jail.disclaims("fs.hidden", env=env, cwd=project)
        seen = jail.python(READ_SCRIPT, *paths, env=env, cwd=project)
        assert set(seen.values()) <= {"EACCES", "ENOENT"}, seen
        return
    assert jail.python(STAT_SCRIPT, *paths, env=env, cwd=project) == {p: "ENOENT" for p in paths}


@pytest.mark.parametrize("mode", HOME_MODES)
def test_symlink_in_project_does_not_reach_hidden_path(jail, project, mode):
    user = jail.user
    for name, target in (("key", ".ssh/id_rsa"), ("awsdir", ".aws"), ("netrc", ".netrc")):
        link = project / name
        link.symlink_to(user.home / target)
        os.lchown(link, user.uid, user.gid)
    result = jail.sandbox("/bin/sh", "-c", "cat key; ls awsdir/; cat netrc; echo done",
                          env=jail.env(HOME_ACCESS=mode), cwd=project)
    assert result.returncode == 0
    assert "PRIVATE KEY" not in result.stdout and "hunter2" not in result.stdout
    error = "Permission denied" if jail.backend == "landlock" else "No such file or directory"
    assert result.stderr.count(error) == 3, result.stderr
    assert result.stdout.strip() == "done"


def test_visible_home_entries_in_read_mode_but_credentials_absent(jail, project):
    home = jail.user.home
    paths = [home / ".bashrc", home / ".config/other", home / ".config/gh", home / ".ssh"]
    seen = jail.python(READ_SCRIPT, *paths, env=jail.env(HOME_ACCESS="read"), cwd=project)
    absent = "EACCES" if jail.backend == "landlock" else "ENOENT"
    assert seen == {str(home / ".bashrc"): "readable", str(home / ".config/other"): "readable",
                    str(home / ".config/gh"): absent, str(home / ".ssh"): absent}


def test_granting_a_parent_of_a_hidden_path_keeps_it_hidden(jail, project):
    jail.user.set_config("HOME_READONLY+=(.config .aws)\n")
    home = jail.user.home
    seen = jail.python(READ_SCRIPT, home / ".config/other/settings.txt",
                       home / ".config/gh/hosts.yml", home / ".aws/credentials", cwd=project)
    absent = "EACCES" if jail.backend == "landlock" else "ENOENT"
    assert seen == {str(home / ".config/other/settings.txt"): "readable",
                    str(home / ".config/gh/hosts.yml"): absent,
                    str(home / ".aws/credentials"): absent}


def test_stray_marker_variable_outside_does_not_skip_the_sandbox(jail, project):
    key = str(jail.user.home / ".ssh" / "id_rsa")
    seen = jail.python(READ_SCRIPT, key, env=jail.env(AGENT_SANDBOX="1"), cwd=project)
    assert seen[key] in ("ENOENT", "EACCES")


# ---------------------------------------------------------------- environment
def test_environment_is_scrubbed_and_identity_comes_from_passwd(jail, project):
    # LD_LIBRARY_PATH: a setuid firejail would lose it (the kernel strips it).
    env = jail.env(HOME="/tmp/forged-home", MY_SETTING="kept", LD_LIBRARY_PATH="/opt/x/lib")
    result = jail.sandbox("/usr/bin/env", env=env, cwd=project)
    assert result.returncode == 0, result.stderr
    inside = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    for name in ("GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "VAULT_TOKEN"):
        assert name not in inside
    assert SECRET_ENV["GH_TOKEN"] not in result.stdout
    assert inside["ANTHROPIC_API_KEY"] == SECRET_ENV["ANTHROPIC_API_KEY"]
    assert inside["MY_SETTING"] == "kept" and inside["LD_LIBRARY_PATH"] == "/opt/x/lib"
    assert inside["HOME"] == str(jail.user.home)
    assert inside["USER"] == jail.user.name
    assert inside["AGENT_SANDBOX"] == "1" and inside["SANDBOX_BACKEND"] == jail.backend
    assert inside["SANDBOX_PROJECT_DIR"] == str(project)
    assert "container" not in inside                   # nothing firejail adds


def test_secrets_do_not_appear_in_the_backend_command_line(jail, project):
    """Other users of a login node can read /proc/PID/cmdline."""
    script = ("import os\nfor p in os.listdir('/proc'):\n if p.isdigit():\n"
              "  try: print(open(f'/proc/{p}/cmdline','rb').read())\n  except OSError: pass\n")
    # The process that carries the backend's command line (bwrap's argv on
    # bwrap; the helper's on the others) must be seen, or the check proves nothing.
    launcher_mark = {"bwrap": "--unshare-user", "firejail": "firejail",
                     "landlock": "sandbox_exec"}
    proc = _start(jail, project, "sleep", "60")
    try:
        # Poll: a cold first launch on a fresh machine can take seconds.
        deadline = time.monotonic() + 30
        while True:
            outside = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True,
                                     text=True).stdout
            if "sleep" in outside and launcher_mark[jail.backend] in outside:
                break
            assert proc.poll() is None, f"launch ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the sandboxed sleep never appeared in /proc"
            time.sleep(0.2)
        assert SECRET_ENV["ANTHROPIC_API_KEY"] not in outside
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---------------------------------------------------------------- writes
def test_writes_outside_the_project_fail_and_the_project_is_writable(jail, project):
    user = jail.user
    targets = ["/etc/planted", "/usr/planted", "/opt/planted", str(user.home / ".bashrc"),
               str(user.home.parent / "asother" / "planted"), "/var/planted",
               str(project / "result.txt")]
    seen = jail.python(WRITE_SCRIPT, *targets, cwd=project)
    assert seen.pop(str(project / "result.txt")) == "written"
    if jail.backend == "firejail":
        # ~/.bashrc there is the helper's copy in the private home: written, discarded
        assert seen.pop(str(user.home / ".bashrc")) in ("written", "EROFS")
    assert set(seen.values()) <= {"EROFS", "ENOENT", "EACCES"}, seen
    assert (project / "result.txt").read_text() == "planted"
    assert not Path("/etc/planted").exists()
    assert (user.home / ".bashrc").read_text() == "# test user's bashrc\n"


def test_a_writable_home_cannot_plant_a_user_config(jail, project):
    """Even when ~/.config/agent-sandbox did not exist before the launch, a
    session with HOME_ACCESS=write cannot create the config the next launch
    would read."""
    config_dir = jail.user.home / ".config" / "agent-sandbox"
    shutil.rmtree(config_dir, ignore_errors=True)
    target = config_dir / "sandbox.conf"
    mkdir = ("import os, sys\ntry:\n    os.makedirs(os.path.dirname(sys.argv[1]), "
             "exist_ok=True)\nexcept OSError:\n    pass\n")
    result = jail.sandbox("/usr/bin/python3", "-c", mkdir + WRITE_SCRIPT, str(target),
                          cwd=project, env=jail.env(HOME_ACCESS="write"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[str(target)] in ("EROFS", "EACCES", "ENOENT")
    assert not target.exists()


def test_tmpwrite_home_writes_vanish(jail, project):
    result = jail.sandbox("/bin/sh", "-c", "echo x > ~/scratch && cat ~/scratch", cwd=project)
    if jail.backend == "landlock":
        assert result.returncode != 0 and "Permission denied" in result.stderr
        _, text = jail.report(cwd=project)
        assert "HOME_ACCESS=tmpwrite: no tmpfs home" in text
    else:
        assert result.returncode == 0 and result.stdout == "x\n"
    assert not (jail.user.home / "scratch").exists()


def test_restricted_home_is_read_only(jail, project):
    result = jail.sandbox("/bin/sh", "-c", "echo x > ~/scratch",
                          env=jail.env(HOME_ACCESS="restricted"), cwd=project)
    assert result.returncode != 0
    error = "Permission denied" if jail.backend == "landlock" else "Read-only file system"
    assert error in result.stderr
    assert not (jail.user.home / "scratch").exists()


def test_protected_paths_stay_read_only_and_leave_nothing_behind(jail, project):
    user = jail.user
    if jail.backend == "landlock":
        assert "PROTECTED_PATHS" in jail.disclaims("fs.protected", cwd=project)
        return
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    for path in (project / ".git", project / ".git" / "config"):
        os.chown(path, user.uid, user.gid)
    targets = [str(project / ".git/config"), str(project / ".git/hooks/post-checkout"),
               str(project / ".envrc"), str(project / ".vscode/tasks.json"),
               str(project / ".mcp.json"), str(project / "ok.txt")]
    seen = jail.python(WRITE_SCRIPT, *targets, cwd=project)
    assert seen.pop(str(project / "ok.txt")) == "written"
    assert set(seen.values()) == {"EROFS"}, seen
    assert (project / ".git/config").read_text() == "[core]\n"
    # Placeholders for the missing ones are gone again after the session.
    assert sorted(p.name for p in project.iterdir()) == [".git", "ok.txt"]
    assert sorted(p.name for p in (project / ".git").iterdir()) == ["config"]


def test_placeholders_outlive_the_session_that_made_them_while_another_uses_them(
        jail, project):
    """Session A makes the .envrc placeholder; session B of the same project
    mounts it. A ending must not end B's protection; B, the last, removes it."""
    if jail.backend == "landlock":
        return   # no placeholders without a mount namespace (stated above)
    user = jail.user
    waiter = ("touch {0}-ready; while [ ! -e {0}-stop ]; do sleep 0.05; done; {1}")
    write_envrc = "(echo planted > .envrc) 2>/dev/null && echo written > b-result " \
                  "|| echo refused > b-result"
    sessions = {}
    try:
        for name, then in (("a", "true"), ("b", write_envrc)):
            sessions[name] = _start(jail, project, "/bin/sh", "-c", waiter.format(name, then))
            _wait_for(project / f"{name}-ready")
        assert (project / ".envrc").read_bytes() == b""      # A's placeholder, mounted by B
        (project / "a-stop").touch()
        assert sessions["a"].wait(timeout=30) == 0
        assert (project / ".envrc").exists()                  # kept: B still runs
        (project / "b-stop").touch()
        assert sessions["b"].wait(timeout=30) == 0
    finally:
        for name, proc in sessions.items():
            (project / f"{name}-stop").touch()
            if proc.poll() is None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    assert (project / "b-result").read_text().strip() == "refused"
    assert not (project / ".envrc").exists()                  # the last session removed it
    assert not (project / ".vscode").exists()
    # This project's list of placeholders is gone (other projects' lists, e.g.
    # those of an earlier test's killed launcher, are not this test's).
    from agent_sandbox.services.placeholders import _list_path

    assert not os.path.exists(_list_path(str(user.home), os.path.realpath(project)))


def test_user_config_tree_is_read_only_inside(jail, project):
    jail.user.set_config("# mine\n")
    result = jail.sandbox("/bin/sh", "-c",
                          "echo 'HOME_ACCESS=write' >> ~/.config/agent-sandbox/sandbox.conf",
                          cwd=project)
    assert result.returncode != 0
    assert (jail.user.home / ".config/agent-sandbox/sandbox.conf").read_text() == "# mine\n"


# ---------------------------------------------------------------- identity, /tmp, IPC, /run
def test_getent_passwd_lists_no_other_accounts(jail, project, other_user):
    if jail.backend == "landlock":
        jail.disclaims("passwd.filtered", cwd=project)
        return
    if jail.backend == "firejail":
        assert "nsswitch.conf is the host's" in jail.disclaims("passwd.filtered", cwd=project)
    result = jail.sandbox("getent", "passwd", cwd=project)
    assert result.returncode == 0, result.stderr
    names = {line.split(":")[0] for line in result.stdout.splitlines()}
    assert jail.user.name in names and "root" in names
    assert other_user.pw_name not in names
    lookup = jail.sandbox("getent", "passwd", other_user.pw_name, cwd=project)
    assert lookup.returncode == 2 and lookup.stdout == ""
    outside = subprocess.run(["getent", "passwd", other_user.pw_name], capture_output=True)
    assert outside.returncode == 0   # the account does exist on the host


def test_private_tmp_ipc_and_run(jail, project):
    marker = Path("/tmp/agent-sandbox-host-file")
    marker.write_text("host")
    marker.chmod(0o644)
    paths = [str(marker), "/run/munge", "/run/dbus", "/run/user", "/etc/slurm", "/home/asother"]
    try:
        seen = jail.python(READ_SCRIPT, *paths, cwd=project)
    finally:
        marker.unlink()
    if jail.backend == "landlock":
        text = jail.disclaims("ipc.isolated", cwd=project)
        assert "SysV IPC is shared" in text and "per-session directory" in text
        assert seen[str(marker)] == "EACCES"          # /tmp is not granted, TMPDIR is private
        result = jail.sandbox("/bin/sh", "-c", 'echo $TMPDIR; touch "$TMPDIR/x" && echo ok',
                              cwd=project)
        tmpdir, ok = result.stdout.split()
        assert ok == "ok" and tmpdir.startswith(f"/tmp/agent-sandbox.tmp-{jail.user.uid}-")
        assert not os.path.exists(tmpdir)              # removed at exit
        return
    assert seen[str(marker)] == "ENOENT"
    for path in ("/run/munge", "/run/dbus", "/run/user", "/home/asother"):
        assert seen[path] == "ENOENT", path
    assert seen["/etc/slurm"] in ("ENOENT", "readable", "EACCES")   # masked when installed
    result = jail.sandbox("/bin/sh", "-c", "ls -A /dev/shm | wc -l; readlink /proc/self/ns/ipc",
                          cwd=project)
    count, ipc = result.stdout.split()
    assert count == "0" and ipc != os.readlink("/proc/self/ns/ipc")


# ---------------------------------------------------------------- seccomp
def test_seccomp_denied_syscalls_answer_eperm(jail, project, probes):
    result = jail.sandbox("/usr/bin/python3", probes / "syscalls.py", "--landlock", cwd=project)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["uid"] == jail.user.uid
    assert report["native"] and report["i386"]
    assert {k: v for k, v in report["native"].items() if v != 1} == {}
    assert {k: v for k, v in report["i386"].items() if v != 1} == {}, "32-bit ABI bypass"
    assert set(report["allowed"].values()) == {0}
    ptrace_family = {k: v for k, v in report["landlock"].items()}
    if jail.backend == "landlock":      # no PID namespace: denied there
        assert set(ptrace_family.values()) == {errno.EPERM}, ptrace_family


def test_seccomp_false_really_removes_the_filter(jail, project, probes):
    """The EPERMs above come from our filter, not from the environment."""
    jail.user.set_config("SECCOMP=false\n")
    result = jail.sandbox("/usr/bin/python3", probes / "syscalls.py", cwd=project)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for name in ("io_uring_setup", "kcmp", "bpf", "personality"):
        if name == "io_uring_setup" and jail.backend == "landlock":
            # The supervisor's own filter (not SECCOMP's) refuses io_uring:
            # it would make sockets and connect past the supervisor.
            continue
        assert report["native"][name] != 1, name
        assert report["i386"][name] != 1, name


# ---------------------------------------------------------------- Landlock scoping
@pytest.fixture
def abstract_listener():
    name = f"agent-sandbox-test-{uuid.uuid4().hex[:8]}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(16)
    yield name
    server.close()


def test_abstract_socket_outside_is_unreachable(jail, project, abstract_listener):
    # Landlock's scope answers EPERM; on landlock the supervisor sees the
    # connect first and refuses it with EACCES (docs/supervisor.md).
    expected = "EACCES" if jail.backend == "landlock" else "EPERM"
    assert jail.call("unix", abstract_listener, cwd=project) == expected


def test_abstract_socket_control_reachable_outside_and_without_scoping(user, project,
                                                                       abstract_listener):
    """The test above can fail: the same connect works outside, and through the
    helper when it is told the kernel has only ABI 5 (no scoping)."""
    outside = user.run(["/usr/bin/python3", "-c", CALL_SCRIPT, "unix", abstract_listener])
    assert outside.stdout.strip() == "ok", outside.stderr
    fd = spec_fd(SCOPED)
    try:
        degraded = helper(user, "--landlock", str(fd), "--max-abi", "5", "--degrade", "--",
                          "/usr/bin/python3", "-c", CALL_SCRIPT, "unix", abstract_listener,
                          fds=(fd,))
    finally:
        os.close(fd)
    assert degraded.stdout.strip() == "ok", degraded.stderr
    assert "not enforced: scoping of abstract unix sockets" in degraded.stderr


@pytest.fixture
def outside_process(user):
    proc = subprocess.Popen(["sleep", "300"], user=user.uid, group=user.gid, extra_groups=[])
    yield proc
    proc.kill()
    proc.wait()


def test_kill_of_an_outside_process_fails(jail, project, outside_process):
    pid = outside_process.pid
    visible = jail.sandbox("/bin/sh", "-c", f"test -d /proc/{pid} && echo visible",
                           cwd=project).stdout.strip()
    if jail.backend == "landlock":
        assert visible == "visible"          # no PID namespace: signal scoping is the guard
        assert jail.call("kill", pid, cwd=project) == "EPERM"
    else:
        assert visible == ""                 # no pid to name inside the PID namespace
        assert jail.call("kill", pid, cwd=project) == "ESRCH"
    time.sleep(0.2)
    assert outside_process.poll() is None


def test_kill_control_succeeds_without_scoping(user, outside_process):
    fd = spec_fd(SCOPED)
    try:
        result = helper(user, "--landlock", str(fd), "--max-abi", "5", "--degrade", "--",
                        "/usr/bin/python3", "-c", CALL_SCRIPT, "kill", str(outside_process.pid),
                        fds=(fd,))
    finally:
        os.close(fd)
    assert result.stdout.strip() == "ok", result.stderr
    assert outside_process.wait(timeout=10) == -signal.SIGTERM


def test_older_landlock_abi_simulated_by_the_helper_degrades_and_reports(user, project,
                                                                         abstract_listener):
    """The helper told the kernel has ABI 3: without --degrade it refuses (the
    plan promised more); with it, it applies what ABI 3 knows (writes stay
    confined) and says what it did not (scoping, ioctl)."""
    abi = ll.abi_version()
    spec = ll.ruleset(abi, fs=ll.fs_rights(abi), scoped=ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL,
                      paths=[(ll.READ, "/usr"), (ll.READ, "/etc"), (ll.DEVICE, "/dev/null"),
                             (ll.READ | ll.WRITE, str(project))])
    script = (CALL_SCRIPT.replace('print("ok")', 'print("ok", end=" ")')
              + f"\ntry:\n    open('{user.home}/.bashrc', 'a')\nexcept OSError as e:\n"
              "    print(errno.errorcode[e.errno])\n")

    def attempt(*extra):
        fd = spec_fd(spec)
        try:
            return helper(user, "--landlock", str(fd), "--max-abi", "3", *extra, "--",
                          "/usr/bin/python3", "-c", script, "unix", abstract_listener,
                          fds=(fd,), cwd=project)
        finally:
            os.close(fd)

    refused = attempt()
    assert refused.returncode == 125 and refused.stdout == ""
    assert f"needs Landlock ABI {abi} but this kernel offers ABI 3" in refused.stderr
    degraded = attempt("--degrade")
    assert degraded.returncode == 0, degraded.stderr
    assert degraded.stdout.split() == ["ok", "EACCES"]     # unscoped; writes still confined
    assert f"Landlock ABI 3 (planned {abi}) — not enforced:" in degraded.stderr
    for lost in ("ioctl restrictions", "scoping of abstract unix sockets", "scoping of signals"):
        assert lost in degraded.stderr


# ---------------------------------------------------------------- network
@pytest.fixture
def tcp_listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


def test_isolated_network(jail, project, tcp_listener):
    assert jail.call("tcp", tcp_listener, cwd=project) == "ok"          # open: reachable
    env = jail.env(NETWORK_MODE="isolated")
    outcome = jail.call("tcp", tcp_listener, env=env, cwd=project)
    if jail.backend == "landlock":
        assert outcome == "EACCES"
        _, text = jail.report(env=env, cwd=project)
        assert "NETWORK_MODE=isolated: the supervisor refuses every inet connect()" in text
    else:
        assert outcome in ("ECONNREFUSED", "ENETUNREACH")   # an empty network namespace


# ---------------------------------------------------------------- REQUIRE
def test_require_pid_isolated_on_landlock_refuses_naming_a_backend(user, project):
    user.set_config("REQUIRE=(pid.isolated)\n")
    result = user.sandbox("/bin/sh", "-c", "touch ran", options=["--backend", "landlock"],
                          cwd=project)
    assert result.returncode == 125
    assert not (project / "ran").exists()
    assert result.stderr.startswith("agent-sandbox: REQUIRE=(pid.isolated) cannot hold on the "
                                    "landlock backend")
    assert "bwrap or firejail would give it" in result.stderr
    assert "--backend bwrap" in result.stderr
    assert user.sandbox("true", options=["--backend", "firejail"], cwd=project).returncode == 0


# ---------------------------------------------------------------- process handling
def test_exit_code_and_stdio_pass_through(jail, project):
    result = jail.sandbox("/bin/sh", "-c", "cat; echo err >&2; exit 42", input="from stdin\n",
                          cwd=project)
    assert result.returncode == 42
    assert result.stdout == "from stdin\n"
    assert result.stderr.endswith("err\n")


def test_not_found_and_not_executable_like_the_shell(jail, project):
    plain = project / "not-executable"
    plain.write_text("echo should not run\n")
    plain.chmod(0o644)
    assert jail.sandbox("no-such-command", cwd=project).returncode == 127
    result = jail.sandbox(str(plain), cwd=project)
    assert result.returncode == 126 and "should not run" not in result.stdout


def test_background_processes_end_with_the_command(jail, project):
    result = jail.sandbox("/bin/sh", "-c", "sleep 60 & echo $! > bg.pid", cwd=project)
    assert result.returncode == 0, result.stderr
    inner = int((project / "bg.pid").read_text())
    deadline = time.monotonic() + 10
    while any(p.info["cmdline"] == ["sleep", "60"] and p.info["username"] == jail.user.name
              for p in psutil.process_iter(["cmdline", "username"])):
        assert time.monotonic() < deadline, f"sleep {inner} outlived the sandbox"
        time.sleep(0.05)


def _start(jail, project, *command):
    return subprocess.Popen([INSTALLED, "run", "--", *command], user=jail.user.uid,
                            group=jail.user.gid, extra_groups=[], env=jail.env(), cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_the_launcher_reaches_the_command(jail, project, signum):
    script = ("trap 'echo got-$1 > caught; exit 7' TERM INT HUP; "
              "touch ready; while :; do sleep 0.1; done")
    proc = _start(jail, project, "/bin/bash", "-c", script.replace("$1", str(int(signum))))
    _wait_for(project / "ready")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 7, err
    assert (project / "caught").exists(), (out, err, sorted(os.listdir(project)))
    assert (project / "caught").read_text() == f"got-{int(signum)}\n"


def test_sigkill_of_the_launcher_leaves_no_sandbox_behind(jail, project):
    proc = _start(jail, project, "/bin/sh", "-c", "touch ready; exec sleep 300")
    _wait_for(project / "ready")
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert any(p.name() in (PROCESS_NAME[jail.backend], "sleep") for p in tree)
    proc.kill()
    proc.wait(timeout=10)
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]
    time.sleep(0.2)
    leftovers = [p for p in psutil.process_iter(["cmdline", "username"])
                 if p.info["cmdline"] == ["sleep", "300"] and p.info["username"] == jail.user.name]
    assert leftovers == []
    # landlock's private $TMPDIR: removed by the helper's watcher, the launcher could not
    deadline = time.monotonic() + 5
    while glob.glob(f"/tmp/agent-sandbox.tmp-{jail.user.uid}-*"):
        assert time.monotonic() < deadline, glob.glob(f"/tmp/agent-sandbox.tmp-{jail.user.uid}-*")
        time.sleep(0.05)


# ---------------------------------------------------------------- report and choice
DRY_RUN_EXPECTED = {
    "bwrap": ("mounts in order", "--seccomp", "--unshare-pid", "--bind {p} {p}",
              "scoping:   Landlock ABI"),
    "firejail": ("firejail profile (--profile)", "whitelist {p}", "--private-tmp",
                 "--ipc-namespace", "--env", "--seccomp", "--landlock"),
    "landlock": ("Landlock rules", "rw         {p}", "--landlock", "--seccomp", "--lifeline"),
}


def test_dry_run_prints_the_plan_and_runs_nothing(jail, project):
    result = jail.sandbox("/bin/sh", "-c", "touch ran", options=["--dry-run"], cwd=project)
    assert result.returncode == 0, result.stderr
    assert not (project / "ran").exists()
    out = result.stdout
    expected = (f"backend:   {jail.backend} (requested by SANDBOX_BACKEND in the environment)",
                "removed: ", "GH_TOKEN", "argv:", "guarantees:")
    for item in expected + tuple(e.format(p=project) for e in DRY_RUN_EXPECTED[jail.backend]):
        assert item in out, item
    assert SECRET_ENV["ANTHROPIC_API_KEY"] not in out


def test_banner_says_which_backend_and_what_it_does_not_enforce(jail, project):
    result = jail.sandbox("true", env=jail.env(SANDBOX_QUIET="0"), cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"agent-sandbox: {jail.backend} sandbox (requested by "
                                    "SANDBOX_BACKEND in the environment)")
    if jail.backend == "landlock":
        assert "not enforced: fs.hidden, fs.protected, pid.isolated" in result.stderr
    if jail.backend == "firejail":
        assert "partly enforced: fs.write_confined, passwd.filtered" in result.stderr


def test_nested_run_does_not_rewrap(jail, project):
    """On every backend: the nested run executes the command under the
    current policy (no second sandbox, no second chaperon)."""
    script = (f'echo "$AGENT_SANDBOX_SESSION"; {INSTALLED} run -- /bin/sh -c '
              '\'echo "$AGENT_SANDBOX $SANDBOX_BACKEND $AGENT_SANDBOX_SESSION"\'')
    result = jail.sandbox("/bin/sh", "-c", script, cwd=project,
                          env=jail.env(SANDBOX_QUIET=None))
    assert result.returncode == 0, result.stderr
    assert "without re-wrapping" in result.stderr
    outer, inner = result.stdout.splitlines()
    assert inner.split() == ["1", jail.backend, outer]     # the same session: not re-wrapped


def test_forged_evidence_outside_does_not_skip_the_sandbox(user, project):
    """AGENT_SANDBOX=1 with each backend's name outside: the command is
    still sandboxed (the evidence is checked, not the variables)."""
    key = str(user.home / ".ssh" / "id_rsa")
    for backend in ("bwrap", "firejail", "landlock"):
        result = user.sandbox("/bin/sh", "-c", f"cat {key} >/dev/null 2>&1 && echo READ",
                              cwd=project, env=user.env(AGENT_SANDBOX="1",
                                                        SANDBOX_BACKEND=backend))
        assert result.returncode == 1 and "READ" not in result.stdout, (backend, result)


def _bin_dir(user, project, tools) -> Path:
    """A PATH directory the test user can read, holding only `tools`."""
    bin_dir = project / "bin"
    bin_dir.mkdir()
    for tool in tools:
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    os.chown(bin_dir, user.uid, user.gid)
    return bin_dir


def test_auto_picks_bwrap_here(user, project):
    result = user.sandbox("true", options=["--dry-run"], cwd=project)
    assert "backend:   bwrap (auto: the first of bwrap → firejail → landlock whose probe " \
           "passed)" in result.stdout


@pytest.mark.parametrize("tools, expected, reason", [
    (("env", "firejail"), "firejail", "auto: bwrap not found; firejail passed its probe"),
    (("env",), "landlock", "auto: bwrap not found; firejail not found; landlock passed its "
                           "probe"),
])
def test_auto_falls_back_when_bwrap_is_not_on_path(user, project, admin, tools, expected,
                                                   reason):
    env = user.env(PATH=str(_bin_dir(user, project, tools)))
    # On this Slurm host auto needs slurm.boundary (issue 31): landlock gives
    # it where its supervisor runs, so the fall-back lands there too.
    dry = user.sandbox("true", options=["--dry-run"], env=env, cwd=project)
    assert f"backend:   {expected} ({reason})" in dry.stdout, dry.stdout + dry.stderr
    result = user.sandbox("/bin/sh", "-c", "echo $SANDBOX_BACKEND", env=env, cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_auto_falls_back_when_user_namespaces_are_blocked(user, project):
    outer = ["bwrap", "--unshare-user", "--disable-userns", "--bind", "/", "/", "--dev", "/dev",
             "--proc", "/proc", "--", INSTALLED, "run"]
    # On this Slurm host auto needs slurm.boundary (issue 31), which landlock
    # gives where its supervisor runs: it falls back there, saying why.
    dry = user.run(outer + ["--dry-run", "--", "true"], cwd=project)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "landlock (auto: bwrap probe failed (" in dry.stdout, dry.stdout
    assert "firejail probe failed (" in dry.stdout
    result = user.run(outer + ["--", "/bin/sh", "-c", "echo $SANDBOX_BACKEND"], cwd=project)
    assert result.returncode == 0 and result.stdout.strip() == "landlock", result.stderr


# ---------------------------------------------------------------- refusals, fail closed
@pytest.mark.parametrize("where", ["home", "root", "hidden"])
def test_refused_project_directories(user, where):
    cwd = {"home": user.home, "root": Path("/"), "hidden": user.home / ".ssh"}[where]
    result = user.run([INSTALLED, "run", "--project-dir", str(cwd), "--", "true"],
                      cwd=user.home)
    assert result.returncode == 125
    assert result.stderr.startswith("agent-sandbox: refusing project directory")


def test_bwrap_missing_fails_closed(user, project):
    env = user.env(PATH=str(_bin_dir(user, project, ("env", "true"))))
    result = user.sandbox("/bin/sh", "-c", "echo ran > ran", options=["--backend", "bwrap"],
                          env=env, cwd=project)
    assert result.returncode == 125
    assert "bwrap" in result.stderr and "apt-get install bubblewrap" in result.stderr
    assert not (project / "ran").exists()


def test_no_backend_at_all_fails_closed(user, project):
    user.set_config("ALLOWED_BACKENDS=(bwrap firejail)\n")
    env = user.env(PATH=str(_bin_dir(user, project, ("env",))))
    result = user.sandbox("/bin/sh", "-c", "echo ran > ran", env=env, cwd=project)
    assert result.returncode == 125
    assert "no usable sandbox backend" in result.stderr
    assert "apt-get install bubblewrap" in result.stderr and "apt-get install firejail" in \
        result.stderr
    assert not (project / "ran").exists()


def test_user_namespaces_blocked_fails_closed(user, project):
    """As on a site with user.max_user_namespaces=0: an outer bwrap sets that
    limit for everything it starts (--disable-userns), then we launch."""
    outer = ["bwrap", "--unshare-user", "--disable-userns", "--bind", "/", "/", "--dev", "/dev",
             "--proc", "/proc", "--", INSTALLED, "run", "--backend", "bwrap", "--",
             "/bin/sh", "-c", "echo ran > ran"]
    result = user.run(outer, cwd=project)
    assert result.returncode == 125, result.stderr
    assert "user namespaces" in result.stderr
    assert not (project / "ran").exists()
