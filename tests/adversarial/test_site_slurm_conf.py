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
