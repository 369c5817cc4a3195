"""The chaperon for real: stubs inside a bwrap jail as an unprivileged user,
the chaperon outside, the real Slurm cluster behind it."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.support.install import INSTALLED, PREFIX

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def outside(user, *argv):
    return subprocess.run(list(argv), user=user.uid, group=user.gid, extra_groups=[],
                          env=user.env(), capture_output=True, cwd=str(user.home))


def session_dirs(user) -> list[Path]:
    return list((user.home / ".local/state/agent-sandbox-run").glob("agent-sandbox-*"))


def audit_lines(user) -> set[str]:
    """Every audit record of the user, as its raw JSON line (one log file per
    session, so "the new ones" is a set difference, not a tail)."""
    directory = user.home / ".local/state/agent-sandbox/chaperon"
    return {line for path in directory.glob("*.log") for line in path.read_text().splitlines()}


def test_allowed_command_gives_the_real_bytes_and_exit_code(user, project):
    for argv in (["sinfo"], ["sinfo", "-h", "-o", "%P\n%a|%l"], ["sinfo", "--version"]):
        real = outside(user, *argv)
        inside = user.sandbox(*argv, cwd=project, text=False)
        assert (inside.returncode, inside.stdout) == (real.returncode, real.stdout), argv
        assert inside.stderr == real.stderr, argv
    # sinfo's options pass an allow-list (issue 11): an unknown one is refused.
    refused = user.sandbox("sinfo", "--bogus-flag", cwd=project)
    assert refused.returncode == 1 and refused.stderr.startswith("agent-sandbox: sinfo: ")


def test_help_usage_and_version_of_sbatch_and_srun_pass_through(user, project):
    """Issue 32: Slurm's own text, byte for byte, inside as outside (they were
    refused: no script, no command)."""
    for argv in (["sbatch", "--help"], ["sbatch", "--version"], ["sbatch", "--usage"],
                 ["srun", "--help"], ["srun", "-V"], ["srun", "--usage"]):
        real = outside(user, *argv)
        inside = user.sandbox(*argv, cwd=project, text=False)
        assert (inside.returncode, inside.stdout) == (real.returncode, real.stdout), argv
        assert real.stdout.strip(), argv
    # Anything more than the print-only options is still a submission, checked as one.
    assert user.sandbox("sbatch", "--help", "-p", "x", cwd=project).returncode != 0


def test_refused_stubs_exit_1_with_a_reason(user, project):
    for command in ("salloc", "sattach", "sbcast", "strigger", "sreport", "scrontab"):
        result = user.sandbox(command, "--help", cwd=project)
        assert result.returncode == 1, command
        assert result.stderr.startswith(f"agent-sandbox: {command}: {command} is refused — ")
        assert result.stderr.rstrip().endswith(".")


def test_real_slurm_and_munge_are_unreachable_inside(user, project):
    script = ("import os, json, subprocess\n"
              "out = {}\n"
              "out['etc_slurm'] = os.listdir('/etc/slurm') if os.path.isdir('/etc/slurm') else None\n"
              "out['munge'] = os.path.exists('/run/munge/munge.socket.2')\n"
              "out['sbatch_on_path'] = subprocess.run(['sh','-c','command -v sbatch'],"
              " capture_output=True, text=True).stdout.strip()\n"
              "try:\n    subprocess.run(['/usr/bin/sbatch', '--version'])\n    out['real'] = 'ran'\n"
              "except OSError as e:\n    out['real'] = e.errno\n"
              "out['slurm_conf'] = os.environ.get('SLURM_CONF')\n"
              "print(json.dumps(out))\n")
    result = user.sandbox("/usr/bin/python3", "-c", script, cwd=project,
                          env=user.env(SLURM_CONF="/etc/slurm/slurm.conf"))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["etc_slurm"] in (None, [])
    assert seen["munge"] is False
    assert seen["sbatch_on_path"] == "/run/agent-sandbox/bin/sbatch"
    assert seen["real"] != "ran"
    assert seen["slurm_conf"] is None


def test_chaperon_ends_with_the_launcher_and_leaves_nothing(user, project):
    before = set(session_dirs(user))
    result = user.sandbox("sinfo", "-h", cwd=project)
    assert result.returncode == 0
    # The launcher does not wait for its chaperon to exit; allow it a moment.
    deadline = time.monotonic() + 10
    while True:
        leftovers = [p for p in psutil.process_iter(["cmdline", "username", "status"])
                     if "chaperon.server" in " ".join(p.info["cmdline"] or [])
                     and p.info["username"] == user.name and p.info["status"] != "zombie"]
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert leftovers == []
    after = set(session_dirs(user))
    assert after <= before   # this launch left no session directory


def test_sigkill_of_the_launcher_leaves_no_chaperon(user, project):
    before = set(session_dirs(user))
    proc = subprocess.Popen([INSTALLED, "run", "--", "/bin/sh", "-c",
                             "sinfo -h >/dev/null; touch ready; sleep 300"],
                            user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                            cwd=project)
    deadline = time.monotonic() + 20
    while not (project / "ready").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    chaperons = [c for c in children if "chaperon.server" in " ".join(c.cmdline())]
    assert len(chaperons) == 1
    own_dirs = [d for d in session_dirs(user) if d not in before]   # this launch's own
    assert own_dirs
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(children, timeout=10)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], [p.cmdline() for p in alive]
    deadline = time.monotonic() + 5
    while any(d.exists() for d in own_dirs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(d.exists() for d in own_dirs)


def test_a_command_that_never_calls_slurm_starts_no_chaperon(user, project):
    """Issue 19: the chaperon is started on demand; until a stub calls, only
    its directory and announcement FIFO exist, and the launch pays nothing."""
    before = set(session_dirs(user))
    proc = subprocess.Popen([INSTALLED, "run", "--", "/bin/sh", "-c",
                             "touch ready; while [ ! -e go ]; do sleep 0.05; done; "
                             "sinfo -h >/dev/null && touch answered; sleep 300"],
                            user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                            cwd=project)
    try:
        deadline = time.monotonic() + 20
        while not (project / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        def chaperons():
            return [c for c in psutil.Process(proc.pid).children(recursive=True)
                    if "chaperon.server" in " ".join(c.cmdline())]
        assert chaperons() == []
        assert [d for d in session_dirs(user) if d not in before]   # ready for a stub
        (project / "go").touch()
        while not (project / "answered").exists():
            assert proc.poll() is None and time.monotonic() < deadline + 20
            time.sleep(0.05)
        assert len(chaperons()) == 1
    finally:
        proc.kill()
        proc.wait()


def test_the_directory_of_a_killed_launcher_on_standby_goes_at_a_later_launch(user, project):
    """No chaperon ran to remove it when the launcher was SIGKILLed; a later
    launch removes it once it is older than a starting session's could be."""
    before = set(session_dirs(user))
    proc = subprocess.Popen([INSTALLED, "run", "--", "/bin/sh", "-c", "touch ready; sleep 300"],
                            user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                            cwd=project)
    deadline = time.monotonic() + 20
    while not (project / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    [own] = [d for d in session_dirs(user) if d not in before]
    proc.kill()
    proc.wait()
    assert own.exists()
    assert user.sandbox("true", cwd=project).returncode == 0
    assert own.exists()                    # young: it could be a session starting
    os.utime(own, (1, 1))
    assert user.sandbox("true", cwd=project).returncode == 0
    assert not own.exists()


def test_slurm_calls_racing_at_the_first_instant_are_all_answered(user, project):
    """Several stubs announce themselves before the chaperon runs: the first
    announcement starts it, and it answers every one of them."""
    real = outside(user, "sinfo", "-h").stdout.decode()
    result = user.sandbox("/bin/sh", "-c", "for i in 1 2 3 4 5 6; do sinfo -h > out.$i & done; "
                          "wait; cat out.*", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == real * 6


HOSTILE = r'''
import os, sys, time
sys.path.insert(0, sys.argv[1])
from chaperon.wire import protocol
from chaperon.wire.session import announcement
session = os.environ["AGENT_SANDBOX_CHAPERON"]
mode = sys.argv[2]
name = os.urandom(16).hex()
conn = os.path.join(session, "conn")
req = os.path.join(conn, name + ".req")
os.mkfifo(req, 0o600)
elsewhere = os.path.join(os.getcwd(), "elsewhere.fifo")
os.mkfifo(elsewhere, 0o600)
if mode == "outside":
    resp = elsewhere
else:
    resp = os.path.join(conn, name + ".resp")
    os.symlink(elsewhere, resp)
fd = os.open(os.path.join(session, "req"), os.O_WRONLY)
os.write(fd, announcement(name)); os.close(fd)
frame = protocol.encode_request(protocol.Request("sinfo", [], cwd=os.getcwd(), env={},
                                                 resp_path=resp))
fd = os.open(req, os.O_WRONLY); os.write(fd, frame); os.close(fd)
rfd = os.open(elsewhere, os.O_RDONLY | os.O_NONBLOCK)
time.sleep(1.5)
try:
    data = os.read(rfd, 100)
except BlockingIOError:
    data = b""
print("got-answer" if data else "no-answer")
'''


@pytest.mark.parametrize("mode,reason", [("outside", "bad_response_path"),
                                         ("symlink", "bad_connection")])
def test_response_fifo_outside_the_session_or_a_symlink_is_refused(user, project, mode,
                                                                   reason):
    site = subprocess.run([f"{PREFIX}/venv/bin/python", "-I", "-c",
                           "import chaperon, os; print(os.path.dirname(os.path.dirname("
                           "chaperon.__file__)))"], capture_output=True, text=True).stdout.strip()
    before = audit_lines(user)
    result = user.sandbox("/usr/bin/python3", "-c", HOSTILE, site, mode, cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no-answer"
    new = [json.loads(line) for line in audit_lines(user) - before]
    assert any(r.get("event") == "refusal" and r.get("reason") == reason for r in new), new


REACH_SCRIPT = """
import errno, json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        if path.endswith("/req"):      # the announcement FIFO: announce a request
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        else:                          # a connection: make its request FIFO
            os.mkfifo(path)
        out[path] = "done"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend,private_tmp,home_access", [
    ("bwrap", "true", "tmpwrite"), ("firejail", "true", "tmpwrite"),
    ("landlock", "true", "tmpwrite"),
    ("bwrap", "false", "tmpwrite"), ("landlock", "false", "tmpwrite"),   # a shared /tmp
    ("bwrap", "true", "read"), ("firejail", "true", "write"),            # the real home
    ("landlock", "true", "read"), ("landlock", "true", "write")])
def test_another_sessions_chaperon_cannot_be_driven_from_inside(user, project, backend,
                                                                  private_tmp, home_access):
    """SPEC §9: only this session's chaperon directory is reachable — also on
    landlock, which has no mount namespace to hide the others."""
    before = set(session_dirs(user))
    other = subprocess.Popen([INSTALLED, "run", "--", "/bin/sh", "-c", "touch ready; sleep 60"],
                             user=user.uid, group=user.gid, extra_groups=[], env=user.env(),
                             cwd=project)
    try:
        deadline = time.monotonic() + 20
        while not (project / "ready").exists():
            assert time.monotonic() < deadline, "the first session never started"
            time.sleep(0.05)
        theirs = [d for d in session_dirs(user) if d not in before]
        assert len(theirs) == 1
        targets = [str(theirs[0] / "req"), str(theirs[0] / "conn" / ("a" * 32 + ".req"))]
        result = user.sandbox("/usr/bin/python3", "-c", REACH_SCRIPT, *targets,
                              options=("--backend", backend), cwd=project,
                              env=user.env(PRIVATE_TMP=private_tmp,
                                           HOME_ACCESS=home_access))
        assert result.returncode == 0, result.stderr
        seen = json.loads(result.stdout)
        assert set(seen.values()) <= {"ENOENT", "EACCES"}, seen
        # while this session's own chaperon answers
        assert user.sandbox("sinfo", "-h", options=("--backend", backend),
                            cwd=project).returncode == 0
    finally:
        other.terminate()
        other.wait(timeout=20)


def test_one_session_id_inside_and_in_the_chaperon_audit_log(user, project):
    before = audit_lines(user)
    result = user.sandbox("/bin/sh", "-c", 'echo "$AGENT_SANDBOX_SESSION"; sinfo -h >/dev/null',
                          cwd=project)
    assert result.returncode == 0, result.stderr
    inside = result.stdout.strip()
    assert len(inside) == 12
    sessions = {json.loads(line)["session"] for line in audit_lines(user) - before}
    assert sessions == {inside}


def test_a_chaperon_that_cannot_be_prepared_refuses_the_launch(user, project,
                                                                no_session_dirs):
    """Fail closed, with the cause and the fix, when the session directory
    cannot be made (here: a file stands where the directory goes)."""
    result = user.sandbox("/bin/sh", "-c", "touch ran", cwd=project)
    assert result.returncode == 125, result
    assert "cannot prepare the Slurm proxy (chaperon)" in result.stderr
    assert "CHAPERON=false" in result.stderr and "Traceback" not in result.stderr
    assert not (project / "ran").exists()
