"""A landlock job's shared-memory directory (jobs/shm.py) belongs to
that job alone. On landlock the tasks of a job are sandboxes of their own, so
the job's ranks on a node share one directory in /dev/shm for Open MPI's
segments; the attackers are other sandboxes of the same user (another job,
which sees the same process list) and other users of the node, who can
create entries in /dev/shm.

* Another job's landlock sandbox cannot list /dev/shm nor the directory.
  (Since issue 31 a landlock sandbox may make and open regular files in
  /dev/shm — POSIX semaphores, shm_open — so one that knew the name could
  write there: the name's secret is what keeps it apart, docs/backends.md
  "Shared memory on landlock". The probe shows that exposure as it is.)
* Its name, and the job's key it derives from, are in no process's argv.
* An entry planted at its name — a symlink, another user's directory, a
  directory of the wrong mode — is refused: the job does not start (exit
  125) and its output file says why.
* The directory is gone when the job ends."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from agent_sandbox.jobs import shm as jobshm
from tests.support.install import INSTALLED
from tests.support.waiting import until

pytestmark = pytest.mark.usefixtures("slurm_multinode")

LANDLOCK = ("--backend", "landlock")
PROBE = """\
import os, sys
target = sys.argv[1]
for what, act in (("list", lambda: os.listdir(target)),
                  ("list /dev/shm", lambda: os.listdir("/dev/shm")),
                  ("subdirectory", lambda: os.mkdir(os.path.join(target, "planted.d"))),
                  ("write", lambda: open(os.path.join(target, "planted"), "w").close())):
    try:
        act()
        print(what, "allowed")
    except OSError as exc:
        print(what, exc.strerror)
"""


def sbatch(cluster, user, project, *args: str):
    return cluster.run_as(user, [INSTALLED, "run", *LANDLOCK, "--", "sbatch", *args],
                          cwd=project)


def submit(cluster, user, project, *args: str) -> str:
    result = sbatch(cluster, user, project, "--parsable", *args)
    job = result.stdout.strip()
    assert result.returncode == 0 and job.isdigit(), result.stdout + result.stderr
    return job


def job_state(cluster, user, job: str) -> dict:
    shown = cluster.run_as(user, ["scontrol", "show", "job", job]).stdout
    return dict(re.findall(r"(\w+)=(\S+)", shown))


def argv_of_every_process() -> list[bytes]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:
            pass
    return found


def test_another_jobs_sandbox_cannot_reach_the_directory_and_no_argv_names_it(
        slurm_multinode, user, project):
    (project / "probe.py").write_text(PROBE)
    target = submit(slurm_multinode, user, project, "-w", "n1", "-o", "target.out", "--wrap",
                    'echo "$AGENT_SANDBOX_JOB_SHM $TMPDIR" > names.txt; '
                    "while [ ! -e done ]; do sleep 0.2; done")
    try:
        names = project / "names.txt"
        until(lambda: names.exists() and names.read_text().endswith("\n"),
              f"job {target} starts")
        shm, tmpdir = names.read_text().split()
        key = re.fullmatch(rf".*/agent-sandbox-job-{target}-([0-9a-f]{{32}})", tmpdir).group(1)
        assert (os.stat(shm).st_uid, os.stat(shm).st_mode & 0o7777) == (user.uid, 0o700)
        # The process list is shared on landlock: neither the key nor the name.
        secrets = (key.encode(), os.path.basename(shm).encode())
        leaks = [argv for argv in argv_of_every_process() if any(s in argv for s in secrets)]
        assert leaks == [], leaks
        # Another job of the same user, in its own landlock sandbox on the same node.
        other = sbatch(slurm_multinode, user, project, "--wait", "-w", "n1", "-o", "other.out",
                       "--wrap", f"/usr/bin/python3 -I probe.py {shm}")
        assert other.returncode == 0, other.stdout + other.stderr
        assert (project / "other.out").read_text().splitlines() == [
            "list Permission denied", "list /dev/shm Permission denied",
            "subdirectory Permission denied", "write allowed"]
        assert os.listdir(shm) == ["planted"]     # knowing the name: the exposure above
        os.unlink(os.path.join(shm, "planted"))
        assert shm == jobshm.directory(target, key, "n1")
    finally:
        (project / "done").touch()
    until(lambda: job_state(slurm_multinode, user, target).get("JobState") == "COMPLETED",
          f"job {target} ends")
    assert not os.path.lexists(shm)      # the last launcher out removed it


def plant_symlink(path: str, user, other_user, scratch: Path) -> None:
    os.symlink(scratch, path)            # to a directory of the user's, 0700
    os.lchown(path, user.uid, user.gid)


def plant_foreign(path: str, user, other_user, scratch: Path) -> None:
    os.mkdir(path)
    os.chmod(path, 0o777)                # open to anyone: made to be used
    os.chown(path, other_user.pw_uid, other_user.pw_gid)


def plant_wrong_mode(path: str, user, other_user, scratch: Path) -> None:
    os.mkdir(path)
    os.chmod(path, 0o755)
    os.chown(path, user.uid, user.gid)


@pytest.mark.parametrize("plant,why", [
    (plant_symlink, "is a symbolic link"),
    (plant_foreign, "belongs to uid"),
    (plant_wrong_mode, "has mode 0755, not 0700"),
])
def test_an_entry_planted_at_the_name_is_refused(slurm_multinode, user, other_user, project,
                                                 plant, why):
    scratch = project / "attacker"       # where the node sees it too (not its own /tmp)
    scratch.mkdir(mode=0o700)
    os.chown(scratch, user.uid, user.gid)
    job = submit(slurm_multinode, user, project, "--hold", "-w", "n1", "-o", "job.out",
                 "--wrap", "echo the-script-ran")
    # The name, as whoever planted it would need to know it: from the key in
    # the job's staged spec (the user's, 0600), beside the wrapper Slurm runs.
    spec = Path(job_state(slurm_multinode, user, job)["Command"]).with_name("spec.json")
    path = jobshm.directory(job, json.loads(spec.read_text())["tmp_key"], "n1")
    try:
        plant(path, user, other_user, scratch)
        released = slurm_multinode.run_as(user, ["scontrol", "release", job])
        assert released.returncode == 0, released.stdout + released.stderr
        until(lambda: job_state(slurm_multinode, user, job).get("JobState") in (
            "COMPLETED", "FAILED"), f"job {job} ends")
        state = job_state(slurm_multinode, user, job)
        text = (project / "job.out").read_text()
        assert state["JobState"] == "FAILED" and state["ExitCode"] == "125:0", (state, text)
        assert text.startswith("agent-sandbox: the job did not start on node n1"), text
        assert f"shared-memory directory {path} {why}" in text, text
        assert "the-script-ran" not in text
        assert os.listdir(scratch) == []
    finally:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
