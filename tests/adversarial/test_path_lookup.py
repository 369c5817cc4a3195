"""The programs the launcher and the chaperon find on PATH and run outside
any sandbox (bwrap, git; the real Slurm commands), as the unprivileged user:
a PATH directory a session may write (~/.local/bin with HOME_ACCESS=write, an
EXTRA_WRITABLE_PATHS entry) must not let the agent plant the program the next
launch or the next chaperon runs unsandboxed. Each test is one attack and
fails on the code it was found against.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

BASE = "CHAPERON=false\n"


@pytest.mark.parametrize("program", ["bwrap", "git"])
def test_a_program_the_launcher_runs_from_path_cannot_be_planted_by_the_sandbox(
        user, project, program):
    """The launcher runs bwrap (and git, to read a configuration that has
    include or hooksPath) found on PATH, outside any sandbox. With
    HOME_ACCESS=write, ~/.local/bin — first on PATH wherever it exists
    (Debian's ~/.profile) — is writable inside: the agent puts its own
    `bwrap` or `git` there, and the user's next launch runs it unsandboxed."""
    local_bin = user.home / ".local/bin"
    marker = user.home / f"escaped-{program}"
    shutil.rmtree(local_bin, ignore_errors=True)
    marker.unlink(missing_ok=True)
    local_bin.mkdir(parents=True)
    os.chown(local_bin, user.uid, user.gid)
    env = user.env(PATH=f"{local_bin}:/usr/local/bin:/usr/bin:/bin")
    user.set_config(BASE + "HOME_ACCESS=write\n")
    gitconfig = user.home / ".gitconfig"
    original = gitconfig.read_bytes()
    real = shutil.which(program, path="/usr/bin:/bin")
    trojan = f"#!/bin/sh\necho escaped > {marker}\nexec {real} \"$@\"\n"
    # The agent's session: plants the program (and, for git, an include in
    # ~/.gitconfig so that the next launch has git read the configuration).
    script = (f"printf '%s' '{trojan}' > {local_bin}/{program} && chmod +x {local_bin}/{program}"
              f" && printf '[include]\\n\\tpath = ~/.gitconfig.local\\n' >> {gitconfig}")
    try:
        planted = user.sandbox("/bin/sh", "-c", script, cwd=project, env=env,
                               options=("--backend", "bwrap"))
        assert planted.returncode == 0, planted.stderr
        assert (local_bin / program).exists()
        user.sandbox("true", cwd=project, env=env, options=("--backend", "bwrap"))
        assert not marker.exists(), f"the next launch ran the sandbox's {program} outside it"
    finally:
        gitconfig.write_bytes(original)
        shutil.rmtree(local_bin, ignore_errors=True)
        marker.unlink(missing_ok=True)


def test_a_slurm_command_the_sandbox_plants_on_path_is_not_run_by_the_chaperon(
        user, project, slurm_cluster):
    """The chaperon runs the real Slurm commands outside the sandbox, taken
    from the system directories and PATH (the first by sorted real path).
    A PATH directory the sandbox may write — EXTRA_WRITABLE_PATHS+=(/opt/…),
    a scratch bin/ — lets the agent put its own `sinfo` there: the next
    session's chaperon runs it unsandboxed (it even sorts before /usr/bin)."""
    bin_dir = Path("/opt") / f"asreview-bin-{project.name}"
    marker = user.home / "escaped-sinfo"
    marker.unlink(missing_ok=True)
    bin_dir.mkdir()
    os.chown(bin_dir, user.uid, user.gid)
    env = user.env(PATH=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin")
    user.set_config(f"EXTRA_WRITABLE_PATHS+=({bin_dir})\n")
    real = shutil.which("sinfo")
    trojan = f"#!/bin/sh\necho escaped > {marker}\nexec {real} \"$@\"\n"
    try:
        planted = user.sandbox("/bin/sh", "-c", f"printf '%s' '{trojan}' > {bin_dir}/sinfo && "
                               f"chmod +x {bin_dir}/sinfo", cwd=project, env=env)
        assert planted.returncode == 0, planted.stderr
        assert (bin_dir / "sinfo").exists()
        result = user.sandbox("sinfo", "-h", cwd=project, env=env)
        assert result.returncode == 0, result.stderr
        assert not marker.exists(), "the chaperon ran the sandbox's sinfo outside it"
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)
        marker.unlink(missing_ok=True)
