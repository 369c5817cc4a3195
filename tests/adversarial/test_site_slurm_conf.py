"""A site Slurm configuration the sandbox could write (issue 15, review finding
4): the chaperon's real srun/sbatch read slurm.conf and what lies beside it
(plugstack.conf → SPANK plugins, cli_filter.lua, Include) outside the sandbox,
so a configuration in the project — here reached through a symlink outside it
— would let the agent run code there. Refused before any sandbox starts, on
every backend (policy/siteconf.py)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("slurm_multinode")

SECOND = "/etc/agent-sandbox-slurm-multinode/slurm.conf"


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_a_slurm_conf_the_sandbox_can_write_is_refused(user, project, backend):
    conf = project / "cluster-b" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text(open(SECOND).read())
    (conf.parent / "plugstack.conf").write_text("")
    link = project.parent / f"{project.name}-etc-slurm"
    link.symlink_to(conf.parent)
    try:
        result = user.sandbox("true", cwd=project,
                              env=user.env(SLURM_CONF=f"{link}/slurm.conf",
                                           SANDBOX_BACKEND=backend))
    finally:
        link.unlink()
    assert result.returncode == 125, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("agent-sandbox:")]
    assert len(lines) == 1 and str(conf) in lines[0] and "unset SLURM_CONF" in lines[0], \
        result.stderr


@pytest.fixture
def slurm_owned_conf():
    """A copy of the second cluster's configuration in a directory that,
    with it, belongs to the `slurm` system account (as at sites where
    /etc/slurm is SlurmUser's), outside /tmp and every writable path."""
    import os
    import pwd
    import shutil
    from pathlib import Path

    slurm = pwd.getpwnam("slurm")
    top = Path("/var/lib") / f"agent-sandbox-test-{os.urandom(4).hex()}"
    directory = top / "etc-slurm"
    directory.mkdir(parents=True)
    os.chmod(top, 0o755)
    conf = directory / "slurm.conf"
    shutil.copyfile(SECOND, conf)
    for path in (directory, conf):
        os.chown(path, slurm.pw_uid, slurm.pw_gid)
    os.chmod(directory, 0o755)
    os.chmod(conf, 0o644)
    yield conf
    shutil.rmtree(top)


def test_a_slurm_conf_of_the_slurm_account_needs_the_admins_word(user, project, admin,
                                                                 slurm_owned_conf):
    """Refused by default (whoever owns those files can run code as every
    Slurm user), with a message naming the admin's SLURM_CONF_OWNERS; a user
    cannot accept it for themselves; the admin can."""
    env = user.env(SLURM_CONF=str(slurm_owned_conf))
    refused = user.sandbox("true", cwd=project, env=env)
    assert refused.returncode == 125, refused.stderr
    assert "SLURM_CONF_OWNERS" in refused.stderr and "neither root nor you" in refused.stderr
    user.set_config("SLURM_CONF_OWNERS=(slurm)\n")
    still = user.sandbox("true", cwd=project, env=env)
    assert still.returncode == 125 and "SLURM_CONF_OWNERS" in still.stderr, still.stderr
    user.set_config("")
    admin("SLURM_CONF_OWNERS=(slurm)\n")
    accepted = user.sandbox("sh", "-c", "sinfo -h -o %P", cwd=project, env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.strip(), accepted.stdout
