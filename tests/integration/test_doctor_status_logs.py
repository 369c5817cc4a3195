"""doctor, status and logs for real, as the unprivileged test user: doctor on
this host (and without bwrap, and under an admin REQUIRE nothing can give),
status seeing a running sandbox and forgetting it after it ends (also after
a SIGKILL), and logs showing a refused sbatch with its reason code."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.install import ADMIN_FILE, INSTALLED


def doctor(user, project, *extra, env=None):
    result = user.run([INSTALLED, "doctor", *extra], cwd=project, env=env, timeout=120)
    assert result.stderr == "", result.stderr
    return result


def doctor_json(user, project, env=None):
    result = doctor(user, project, "--json", env=env)
    return result.returncode, json.loads(result.stdout)


def item(data, name):
    return next(i for i in data["items"] if i["name"] == name)


def status_line(text: str, name: str) -> list[str]:
    line = next((l for l in text.splitlines() if re.match(rf"\s+\S+\s+{re.escape(name)}\s", l)),
                None)
    assert line is not None, f"no {name} line in:\n{text}"
    return line.split()


# ---------------------------------------------------------------- doctor
def test_doctor_on_this_host_is_go_for_bwrap(user, project):
    result = doctor(user, project)
    assert result.returncode == 0, result.stdout
    assert status_line(result.stdout, "bwrap")[0] == "GO"
    assert status_line(result.stdout, "seccomp")[0] == "GO"
    assert "a launch uses bwrap" in result.stdout
    assert re.search(r"^verdict: (GO|GAPS) — ", result.stdout, re.M)
    assert len(result.stdout.splitlines()) < 45, "doctor must fit one screen"

    code, data = doctor_json(user, project)
    assert code == 0 and data["exit_code"] == 0
    assert data["pick"]["backend"] == "bwrap"
    assert "bwrap" in data["pick"]["reason"]
    bwrap = data["backends"][0]
    assert bwrap["name"] == "bwrap" and bwrap["usable"] and bwrap["probe"]["ok"]
    assert bwrap["version"].startswith("bubblewrap ")
    assert {"fs.hidden", "pid.isolated", "slurm.boundary"} <= set(bwrap["provides"])
    assert item(data, "user namespaces")["status"] == "GO"
    assert item(data, "config")["status"] == "GO"
    landlock = data["backends"][2]
    assert "fs.hidden" in landlock["cannot"]      # the table per backend, as the SPEC has it


def test_doctor_without_bwrap_names_the_next_backend_and_the_fix(user, project, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("firejail", "sinfo", "sbatch", "srun", "squeue", "env", "sh"):
        target = Path("/usr/bin") / name
        assert target.exists(), f"{target} is missing on this machine"
        (tools / name).symlink_to(target)
    tmp_path.chmod(0o755)
    env = user.env(PATH=str(tools))
    result = doctor(user, project, env=env)
    # On this Slurm host auto needs slurm.boundary (issue 31), which landlock
    # gives where its supervisor runs: landlock alone (firejail not found
    # from here) is a launch auto may make.
    assert result.returncode == 0, result.stdout
    line = status_line(result.stdout, "bwrap")
    assert line[0] == "GAPS" and "not found" in " ".join(line)
    assert "fix: install bubblewrap" in result.stdout
    assert re.search(r"a launch uses (firejail|landlock) — auto: bwrap not found",
                     result.stdout), result.stdout

    code, data = doctor_json(user, project, env=env)
    assert code == 0
    assert data["pick"]["backend"] in ("firejail", "landlock")
    assert data["backends"][0]["state"] == "not found"
    assert "install bubblewrap" in item(data, "bwrap")["fix"]


@pytest.mark.parametrize("admin_text,guarantee", [
    ("ALLOWED_BACKENDS=(landlock)\nREQUIRE=(pid.isolated)\n", "pid.isolated"),
    ("SECCOMP=false\nREQUIRE=(seccomp)\n", "seccomp"),
])
def test_doctor_fails_when_no_backend_gives_an_admin_requirement(user, project, admin,
                                                                 admin_text, guarantee):
    admin(admin_text)
    result = doctor(user, project)
    assert result.returncode == 1, result.stdout
    # On this Slurm host auto also requires slurm.boundary (issue 31: never a
    # backend that would be a full escape, launch/run.py implied_require).
    assert re.search(rf"^verdict: NO-GO — no usable backend gives every guarantee in "
                     rf"REQUIRE=\({guarantee} slurm.boundary\)", result.stdout, re.M), \
        result.stdout
    locks = status_line(result.stdout, "admin locks")
    assert "REQUIRE=(" + guarantee + ")," in " ".join(locks) + ","

    code, data = doctor_json(user, project)
    assert code == 1 and data["verdict"] == "NO-GO"
    assert data["require"] == [guarantee, "slurm.boundary"]
    assert item(data, "admin locks")["data"]["locks"]["REQUIRE"]["at"] == f"{ADMIN_FILE}:2"
    assert all(guarantee in b["missing_required"] for b in data["backends"] if b["usable"])


def test_doctor_reports_a_malformed_admin_file_as_no_go(user, project, admin):
    admin("HOME_ACCESS=(\n")
    result = doctor(user, project)
    assert result.returncode == 1
    line = status_line(result.stdout, "config")
    assert line[0] == "NO-GO" and str(ADMIN_FILE) in " ".join(line)
    assert "verdict: NO-GO — no sandbox can start: config" in result.stdout


def test_doctor_says_when_the_chaperon_can_make_its_pipes(user, project, slurm_cluster):
    code, data = doctor_json(user, project)
    assert item(data, "chaperon pipes")["status"] == "GO"


def test_doctor_says_when_the_chaperon_cannot_make_its_pipes(user, project, slurm_cluster,
                                                              no_session_dirs):
    result = doctor(user, project)
    assert result.returncode == 1
    line = status_line(result.stdout, "chaperon pipes")
    assert line[0] == "NO-GO" and "CHAPERON=false" in result.stdout


# ---------------------------------------------------------------- status
def start_sandbox(user, project, *command) -> subprocess.Popen:
    return subprocess.Popen([INSTALLED, "run", "--", *command], user=user.uid, group=user.gid,
                            extra_groups=[], env=user.env(), cwd=project,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def status(user) -> dict:
    result = user.run([INSTALLED, "status", "--json"], cwd=user.home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_listed(user, proc, project, timeout=30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for session in status(user)["sessions"]:
            if session["pid"] == proc.pid:
                return session
        assert proc.poll() is None, f"the sandbox ended early: {proc.stderr.read()}"
        time.sleep(0.2)
    pytest.fail(f"status did not list the sandbox of pid {proc.pid} within {timeout}s")


def registry_file(user, session: dict) -> Path:
    return user.home / ".local/state/agent-sandbox/sessions" / f"{session['session']}.json"


def test_status_lists_a_running_sandbox_and_forgets_it_when_it_ends(user, project,
                                                                    slurm_cluster):
    # The chaperon starts at the first Slurm call (issue 19): on standby
    # until then, listed with its pid once the command called sinfo.
    proc = start_sandbox(user, project, "sh", "-c",
                         "while [ ! -e go ]; do sleep 0.05; done; sinfo -h >/dev/null; sleep 30")
    try:
        session = wait_listed(user, proc, project)
        assert session["chaperon_pid"] == 0 and not session["chaperon_alive"], session
        text = user.run([INSTALLED, "status"], cwd=user.home).stdout
        row = next(l for l in text.splitlines() if l.startswith(session["session"]))
        assert row.split()[3] == "standby"
        (project / "go").touch()
        deadline = time.monotonic() + 30
        while not session["chaperon_pid"] and time.monotonic() < deadline:
            time.sleep(0.1)
            session = wait_listed(user, proc, project)
        assert session["project"] == str(project)
        assert session["backend"] == "bwrap" and session["command"] == "sh"
        assert session["chaperon_pid"] and session["chaperon_alive"], session
        assert session["jobs"] == 0
        text = user.run([INSTALLED, "status"], cwd=user.home).stdout
        row = next(l for l in text.splitlines() if l.startswith(session["session"]))
        assert row.split()[1:4] == [str(proc.pid), "bwrap", str(session["chaperon_pid"])]
        assert row.rstrip().endswith(str(project))
        record = registry_file(user, session)
        assert record.stat().st_mode & 0o777 == 0o600
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not record.exists()
    assert all(s["pid"] != proc.pid for s in status(user)["sessions"])


def test_status_removes_the_record_of_a_killed_launcher(user, project):
    proc = start_sandbox(user, project, "sleep", "30")
    try:
        session = wait_listed(user, proc, project)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    record = registry_file(user, session)
    assert record.exists(), "SIGKILL cannot run the launcher's cleanup"
    data = status(user)
    assert all(s["session"] != session["session"] for s in data["sessions"])
    assert data["stale_removed"] >= 1
    assert not record.exists()


def test_status_and_logs_inside_a_sandbox_say_the_state_is_hidden(user, project):
    for command in ("status", "logs"):
        result = user.sandbox(INSTALLED, command, cwd=project)
        assert result.returncode == 1
        assert "hidden inside the sandbox" in result.stderr, result.stderr


# ---------------------------------------------------------------- logs
def test_logs_show_a_refused_sbatch_with_its_reason(user, project, slurm_cluster):
    script = "sbatch --chdir=/tmp --wrap true; echo $? > refused; sleep 30"
    proc = start_sandbox(user, project, "/bin/sh", "-c", script)
    try:
        session = wait_listed(user, proc, project)["session"]
        deadline = time.monotonic() + 30
        while not (project / "refused").exists():
            assert time.monotonic() < deadline, "sbatch did not return inside the sandbox"
            time.sleep(0.1)
        assert (project / "refused").read_text().strip() == "1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    result = user.run([INSTALLED, "logs", "--denials", "--session", session], cwd=user.home)
    assert result.returncode == 0, result.stderr
    # --denials puts the Slurm proxy's refusals under a heading of their own,
    # apart from the network's (issue 36 item 5).
    heading, *lines = result.stdout.splitlines()
    assert heading == "Slurm (the chaperon):" and len(lines) == 1, result.stdout
    fields = lines[0].split()
    assert fields[2:6] == [session, "sbatch", "refusal", "chdir:"]
    assert "--chdir=/tmp is refused" in lines[0]

    everything = user.run([INSTALLED, "logs", "--denials"], cwd=user.home).stdout
    assert lines[0] in everything.splitlines()
    full = user.run([INSTALLED, "logs", "--session", session[:8]], cwd=user.home).stdout
    events = [l.split()[4] for l in full.splitlines()]
    assert events[0] == "start"      # ("stop" depends on the chaperon's own shutdown timing)
    assert events.index("request") < events.index("refusal")
    assert "--chdir=/tmp --wrap true" in full
