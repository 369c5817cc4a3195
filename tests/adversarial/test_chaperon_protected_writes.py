"""The chaperon writes srun's -o/-e outside the sandbox with the user's full
rights, so it must not write where the sandbox may not: protected paths
(.envrc, .mcp.json, .vscode/, the repository's config and hooks) and any
`.git` directory, nested ones included. Tried from inside a real sandbox on
every backend; the files on the host stay as they were, and the user's own
`git status` afterwards runs nothing planted (found by review, issue 11/12)."""
from __future__ import annotations

import os
import subprocess

import pytest

pytestmark = pytest.mark.usefixtures("slurm_cluster")

TARGETS = [".git/config", ".git/hooks/post-checkout", ".envrc", ".mcp.json",
           ".vscode/tasks.json", "nested/.git/config", "nested/.git/hooks/pre-commit"]


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_srun_output_cannot_write_protected_files(user, project, backend, tmp_path):
    marker = f"/tmp/planted-{project.name}-{backend}"
    for repo in (project, project / "nested"):
        repo.mkdir(exist_ok=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for path in [project, *project.rglob("*")]:
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
    before = {t: (project / t).read_bytes() if (project / t).exists() else None
              for t in TARGETS}
    payload = f'[core]\\n\\tfsmonitor = "touch {marker}; false"\\n'
    script = "\n".join(
        f"srun -t 1 --open-mode=append -o {t} -e /dev/null printf '{payload}'; echo rc=$?"
        for t in TARGETS)
    result = user.sandbox("/bin/bash", "-c", script, cwd=project, timeout=120,
                          env=user.env(SANDBOX_BACKEND=backend))
    assert result.stdout.count("rc=1") == len(TARGETS), result.stdout + result.stderr
    assert result.stderr.count("is read-only inside the sandbox") == len(TARGETS), result.stderr
    # sbatch's -o/-e are linked by the job inside its sandbox: refused the same way.
    for target in TARGETS:
        refused = user.sandbox("sbatch", "--hold", "-o", target, "--wrap", "true", cwd=project,
                               env=user.env(SANDBOX_BACKEND=backend))
        assert refused.returncode == 1 and "read-only inside the sandbox" in refused.stderr, \
            (target, refused.stdout, refused.stderr)
    after = {t: (project / t).read_bytes() if (project / t).exists() else None for t in TARGETS}
    assert after == before
    for repo in (project, project / "nested"):
        user.run(["git", "status"], cwd=repo)
    assert not os.path.exists(marker), "git outside ran a command the session planted"
