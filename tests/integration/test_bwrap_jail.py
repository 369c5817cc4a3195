"""The bwrap jail, for real: the installed agent-sandbox run by an unprivileged
user on this kernel, asserting what a process inside can and cannot do."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import HIDDEN, INSTALLED, SECRET_ENV

HOME_MODES = ["tmpwrite", "restricted", "read", "write"]

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

WRITE_SCRIPT = """
import errno, json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "w") as handle:
            handle.write("planted")
        out[path] = "written"
    except OSError as exc:
        out[path] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""


def stat_inside(user, paths, *, env=None, cwd=None, options=()):
    result = user.sandbox("/usr/bin/python3", "-c", STAT_SCRIPT, *paths, env=env, cwd=cwd,
                          options=options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def home_env(user, mode):
    return user.env(HOME_ACCESS=mode)


@pytest.mark.parametrize("mode", HOME_MODES)
def test_hidden_paths_do_not_exist_in_every_home_mode(user, project, mode):
    paths = [str(user.home / p) for p in HIDDEN]
    seen = stat_inside(user, paths, env=home_env(user, mode), cwd=project)
    assert seen == {p: "ENOENT" for p in paths}


@pytest.mark.parametrize("mode", HOME_MODES)
def test_symlink_in_project_does_not_reach_hidden_path(user, project, mode):
    for name, target in (("key", ".ssh/id_rsa"), ("awsdir", ".aws"), ("netrc", ".netrc")):
        link = project / name
        link.symlink_to(user.home / target)
        os.lchown(link, user.uid, user.gid)
    result = user.sandbox("/bin/sh", "-c", "cat key; ls awsdir/; cat netrc; echo done",
                          env=home_env(user, mode), cwd=project)
    assert result.returncode == 0
    assert "PRIVATE KEY" not in result.stdout and "hunter2" not in result.stdout
    assert result.stderr.count("No such file or directory") == 3, result.stderr
    assert result.stdout.strip() == "done"


def test_visible_home_entries_in_read_mode_but_credentials_absent(user, project):
    seen = stat_inside(user, [str(user.home / ".bashrc"), str(user.home / ".config/other"),
                              str(user.home / ".config/gh"), str(user.home / ".ssh")],
                       env=home_env(user, "read"), cwd=project)
    assert seen == {str(user.home / ".bashrc"): "exists",
                    str(user.home / ".config/other"): "exists",
                    str(user.home / ".config/gh"): "ENOENT",
                    str(user.home / ".ssh"): "ENOENT"}


def test_granting_a_parent_of_a_hidden_path_keeps_it_hidden(user, project):
    user.set_config("HOME_READONLY+=(.config .aws)\n")
    seen = stat_inside(user, [str(user.home / ".config/other/settings.txt"),
                              str(user.home / ".config/gh/hosts.yml"),
                              str(user.home / ".aws/credentials")], cwd=project)
    assert seen == {str(user.home / ".config/other/settings.txt"): "exists",
                    str(user.home / ".config/gh/hosts.yml"): "ENOENT",
                    str(user.home / ".aws/credentials"): "ENOENT"}


def test_environment_is_scrubbed_and_identity_comes_from_passwd(user, project):
    env = user.env(HOME="/tmp/forged-home", MY_SETTING="kept")
    result = user.sandbox("/usr/bin/env", env=env, cwd=project)
    assert result.returncode == 0, result.stderr
    inside = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    for name in ("GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "VAULT_TOKEN"):
        assert name not in inside
    assert SECRET_ENV["GH_TOKEN"] not in result.stdout
    assert inside["ANTHROPIC_API_KEY"] == SECRET_ENV["ANTHROPIC_API_KEY"]
    assert inside["MY_SETTING"] == "kept"
    assert inside["HOME"] == str(user.home)
    assert inside["USER"] == user.name
    assert inside["AGENT_SANDBOX"] == "1"
    assert inside["SANDBOX_PROJECT_DIR"] == str(project)


def test_secrets_do_not_appear_in_the_backend_command_line(user, project):
    """Other users of a login node can read /proc/PID/cmdline."""
    script = ("import os\nfor p in os.listdir('/proc'):\n if p.isdigit():\n"
              "  try: print(open(f'/proc/{p}/cmdline','rb').read())\n  except OSError: pass\n")
    proc = subprocess.Popen([INSTALLED, "run", "--", "sleep", "5"], user=user.uid,
                            group=user.gid, extra_groups=[], env=user.env(), cwd=project)
    try:
        time.sleep(1.5)
        outside = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True,
                                 text=True).stdout
        assert "bwrap" in outside
        assert SECRET_ENV["ANTHROPIC_API_KEY"] not in outside
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_writes_outside_the_project_fail_and_the_project_is_writable(user, project):
    targets = ["/etc/planted", "/usr/planted", "/opt/planted", str(user.home / ".bashrc"),
               str(user.home.parent / "asother" / "planted"), "/var/planted",
               str(project / "result.txt")]
    result = user.sandbox("/usr/bin/python3", "-c", WRITE_SCRIPT, *targets, cwd=project)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen.pop(str(project / "result.txt")) == "written"
    assert set(seen.values()) <= {"EROFS", "ENOENT"}, seen
    assert (project / "result.txt").read_text() == "planted"
    assert not Path("/etc/planted").exists()
    assert (user.home / ".bashrc").read_text() == "# test user's bashrc\n"


def test_tmpwrite_home_writes_vanish(user, project):
    result = user.sandbox("/bin/sh", "-c", "echo x > ~/scratch && cat ~/scratch", cwd=project)
    assert result.returncode == 0 and result.stdout == "x\n"
    assert not (user.home / "scratch").exists()


def test_restricted_home_is_read_only(user, project):
    result = user.sandbox("/bin/sh", "-c", "echo x > ~/scratch", env=home_env(user, "restricted"),
                          cwd=project)
    assert result.returncode != 0
    assert "Read-only file system" in result.stderr


def test_protected_paths_stay_read_only_and_leave_nothing_behind(user, project):
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    for path in (project / ".git", project / ".git" / "config"):
        os.chown(path, user.uid, user.gid)
    targets = [str(project / ".git/config"), str(project / ".git/hooks/post-checkout"),
               str(project / ".envrc"), str(project / ".vscode/tasks.json"),
               str(project / ".mcp.json"), str(project / "ok.txt")]
    result = user.sandbox("/usr/bin/python3", "-c", WRITE_SCRIPT, *targets, cwd=project)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen.pop(str(project / "ok.txt")) == "written"
    assert set(seen.values()) == {"EROFS"}, seen
    assert (project / ".git/config").read_text() == "[core]\n"
    # Placeholders for the missing ones are gone again after the session.
    assert sorted(p.name for p in project.iterdir()) == [".git", "ok.txt"]
    assert sorted(p.name for p in (project / ".git").iterdir()) == ["config"]


def test_user_config_tree_is_read_only_inside(user, project):
    user.set_config("# mine\n")
    result = user.sandbox("/bin/sh", "-c",
                          "echo 'HOME_ACCESS=write' >> ~/.config/agent-sandbox/sandbox.conf",
                          cwd=project)
    assert result.returncode != 0
    assert (user.home / ".config/agent-sandbox/sandbox.conf").read_text() == "# mine\n"


def test_getent_passwd_lists_no_other_accounts(user, project, other_user):
    result = user.sandbox("getent", "passwd", cwd=project)
    assert result.returncode == 0, result.stderr
    names = {line.split(":")[0] for line in result.stdout.splitlines()}
    assert user.name in names and "root" in names
    assert other_user.pw_name not in names
    lookup = user.sandbox("getent", "passwd", other_user.pw_name, cwd=project)
    assert lookup.returncode == 2 and lookup.stdout == ""
    outside = subprocess.run(["getent", "passwd", other_user.pw_name], capture_output=True)
    assert outside.returncode == 0   # the account does exist on the host


def test_private_tmp_ipc_and_run(user, project):
    marker = Path("/tmp/agent-sandbox-host-file")
    marker.write_text("host")
    try:
        seen = stat_inside(user, [str(marker), "/run/munge", "/run/dbus", "/run/user",
                                  "/etc/slurm", "/home/asother"], cwd=project)
    finally:
        marker.unlink()
    assert seen[str(marker)] == "ENOENT"
    for path in ("/run/munge", "/run/dbus", "/run/user", "/home/asother"):
        assert seen[path] == "ENOENT", path
    assert seen["/etc/slurm"] in ("ENOENT", "exists")   # masked empty when installed
    result = user.sandbox("/bin/sh", "-c", "ls -A /dev/shm | wc -l; readlink /proc/1/ns/ipc",
                          cwd=project)
    host_ipc = os.readlink("/proc/self/ns/ipc")
    count, ipc = result.stdout.split()
    assert count == "0" and ipc != host_ipc


def test_seccomp_denied_syscalls_answer_eperm(user, project, probes):
    result = user.sandbox("/usr/bin/python3", probes / "syscalls.py", cwd=project)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["uid"] == user.uid
    assert report["native"] and report["i386"]
    assert {k: v for k, v in report["native"].items() if v != 1} == {}
    assert {k: v for k, v in report["i386"].items() if v != 1} == {}, "32-bit ABI bypass"
    assert set(report["allowed"].values()) == {0}


def test_seccomp_false_really_removes_the_filter(user, project, probes):
    """The EPERMs above come from our filter, not from the environment."""
    user.set_config("SECCOMP=false\n")
    unfiltered = user.sandbox("/usr/bin/python3", probes / "syscalls.py", cwd=project)
    assert unfiltered.returncode == 0, unfiltered.stderr
    report = json.loads(unfiltered.stdout)
    for name in ("io_uring_setup", "kcmp", "bpf", "personality"):
        assert report["native"][name] != 1, name
        assert report["i386"][name] != 1, name


def test_exit_code_and_stdio_pass_through(user, project):
    result = user.sandbox("/bin/sh", "-c", "cat; echo err >&2; exit 42", input="from stdin\n",
                          cwd=project)
    assert result.returncode == 42
    assert result.stdout == "from stdin\n"
    assert result.stderr.endswith("err\n")


def test_not_found_and_not_executable_like_the_shell(user, project):
    plain = project / "not-executable"
    plain.write_text("echo should not run\n")
    plain.chmod(0o644)
    assert user.sandbox("no-such-command", cwd=project).returncode == 127
    result = user.sandbox(str(plain), cwd=project)
    assert result.returncode == 126 and "should not run" not in result.stdout


def _start(user, project, *command):
    return subprocess.Popen([INSTALLED, "run", "--", *command], user=user.uid, group=user.gid,
                            extra_groups=[], env=user.env(), cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_the_launcher_reaches_the_command(user, project, signum):
    script = ("trap 'echo got-$1 > caught; exit 7' TERM INT HUP; "
              "touch ready; while :; do sleep 0.1; done")
    proc = _start(user, project, "/bin/bash", "-c", script.replace("$1", str(int(signum))))
    _wait_for(project / "ready")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 7, err
    assert (project / "caught").read_text() == f"got-{int(signum)}\n"


def test_sigkill_of_the_launcher_leaves_no_sandbox_behind(user, project):
    proc = _start(user, project, "/bin/sh", "-c", "touch ready; exec sleep 300")
    _wait_for(project / "ready")
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert any(p.name() == "bwrap" for p in tree)
    proc.kill()
    proc.wait(timeout=10)
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]


def test_dry_run_prints_the_plan_and_runs_nothing(user, project):
    result = user.sandbox("/bin/sh", "-c", "touch ran", options=["--dry-run"], cwd=project)
    assert result.returncode == 0, result.stderr
    assert not (project / "ran").exists()
    out = result.stdout
    for expected in ("backend:   bwrap", "mounts in order", "--seccomp", "--unshare-pid",
                     f"--bind {project} {project}", "removed: ", "GH_TOKEN", "argv:"):
        assert expected in out, expected
    assert SECRET_ENV["ANTHROPIC_API_KEY"] not in out


def test_nested_run_does_not_rewrap(user, project):
    result = user.sandbox(INSTALLED, "run", "--", "/bin/sh", "-c",
                          "readlink /proc/1/exe; echo $AGENT_SANDBOX", cwd=project,
                          env=user.env(SANDBOX_QUIET=None))
    assert result.returncode == 0, result.stderr
    assert "without re-wrapping" in result.stderr
    assert result.stdout.splitlines()[-1] == "1"


def test_stray_marker_variable_outside_does_not_skip_the_sandbox(user, project):
    result = user.sandbox("/usr/bin/python3", "-c", STAT_SCRIPT, str(user.home / ".ssh"),
                          env=user.env(AGENT_SANDBOX="1"), cwd=project)
    assert json.loads(result.stdout) == {str(user.home / ".ssh"): "ENOENT"}


@pytest.mark.parametrize("where", ["home", "root", "hidden"])
def test_refused_project_directories(user, where):
    cwd = {"home": user.home, "root": Path("/"), "hidden": user.home / ".ssh"}[where]
    result = user.run([INSTALLED, "run", "--project-dir", str(cwd), "--", "true"],
                      cwd=user.home)
    assert result.returncode == 125
    assert result.stderr.startswith("agent-sandbox: refusing project directory")


def test_bwrap_missing_fails_closed(user, project, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.chmod(tmp_path, 0o755)
    for tool in ("env", "setpriv", "true"):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    result = user.sandbox("true", env=user.env(PATH=str(bin_dir)), cwd=project)
    assert result.returncode == 125
    assert "bwrap" in result.stderr and "apt-get install bubblewrap" in result.stderr


def test_user_namespaces_blocked_fails_closed(user, project):
    """As on a site with user.max_user_namespaces=0: an outer bwrap sets that
    limit for everything it starts (--disable-userns), then we launch."""
    outer = ["bwrap", "--unshare-user", "--disable-userns", "--bind", "/", "/", "--dev", "/dev",
             "--proc", "/proc", "--", INSTALLED, "run", "--", "/bin/sh", "-c", "echo ran > ran"]
    result = user.run(outer, cwd=project)
    assert result.returncode == 125, result.stderr
    assert "user namespaces" in result.stderr
    assert not (project / "ran").exists()
