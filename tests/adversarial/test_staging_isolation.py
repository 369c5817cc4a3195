"""The chaperon's job staging directories (~/.local/share/agent-sandbox/jobs/
<project hash>/: each submission's snapshotted script, jobstart spec and the
log files slurmstepd writes outside any sandbox) when the user's
configuration makes ~/.local/share writable inside (HOME_WRITABLE+=(.local/share),
or .local), on every backend.

Each sandbox bound its own project's staging directory read-only, but the
other projects' ones lay in the writable tree: a session of project B
planted files and symlinks in project A's (a link where A's next job log
goes has slurmstepd, outside, write the job's output through it, e.g. into
~/.bashrc; a replaced snapshot runs B's code in A's sandbox) and made
staging directories for projects not started yet. Now the staging root is
hidden in every sandbox like the run directory (policy.CREDENTIAL_DIRS),
only the session's own directory shown, read-only.
"""
from __future__ import annotations

import shutil
import sys

import pytest

pytestmark = pytest.mark.usefixtures("slurm_cluster")

BACKENDS = ["bwrap", "firejail", "landlock"]


def _project_hash(path) -> str:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    from chaperon.paths import project_hash

    return project_hash(str(path))


@pytest.mark.parametrize("grant", ["HOME_WRITABLE+=(.local/share)", "HOME_WRITABLE+=(.local)",
                                   "HOME_ACCESS=write"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_sandbox_writes_another_projects_staging_directory(user, project, backend, grant):
    other = project.parent / (project.name + "-other")
    other.mkdir()
    shutil.chown(other, user.uid, user.gid)
    try:
        first = user.sandbox("true", options=["--backend", backend], cwd=other)
        assert first.returncode == 0, first.stderr
        root = user.home / ".local/share/agent-sandbox/jobs"
        theirs = root / _project_hash(other)
        assert theirs.is_dir()
        user.set_config(grant + "\n")
        result = user.sandbox(
            "sh", "-c", f"""
            touch {theirs}/planted; ln -s {user.home}/.bashrc {theirs}/link
            mkdir {root}/feedfacefeedface
            ls {root}/
            echo done""", options=["--backend", backend], cwd=project)
        assert result.returncode == 0 and "done" in result.stdout, result.stderr
        assert sorted(p.name for p in theirs.iterdir()) == []
        assert not (root / "feedfacefeedface").exists()
        assert _project_hash(other) not in result.stdout     # not even listed
    finally:
        shutil.rmtree(other, ignore_errors=True)
        shutil.rmtree(user.home / ".local/share/agent-sandbox/jobs" / _project_hash(other),
                      ignore_errors=True)
        shutil.rmtree(user.home / ".local/share/agent-sandbox/jobs/feedfacefeedface",
                      ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_own_staging_directory_stays_visible_and_read_only(user, project, backend):
    user.set_config("HOME_WRITABLE+=(.local/share)\n")
    own = user.home / ".local/share/agent-sandbox/jobs" / _project_hash(project)
    result = user.sandbox("sh", "-c", f"test -d {own} && echo visible; touch {own}/x",
                          options=["--backend", backend], cwd=project)
    assert "visible" in result.stdout, result.stderr
    assert not (own / "x").exists()
