"""The agent executable cannot be planted by a session for the next launch
(security review of issue 17, F7): an agent found through a relative PATH
entry (node_modules/.bin, .) or inside the project — trees a sandboxed
session writes — is refused with the path and what to change, never run."""
from __future__ import annotations

import pytest

from tests.support.install import INSTALLED

PLANTED = "#!/bin/sh\ntouch \"$HOME/planted-ran\"\necho planted-ran\n"


@pytest.fixture
def clean(user):
    yield
    for name in ("tools", "planted-ran"):
        path = user.home / name
        if path.is_dir():
            import shutil

            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


@pytest.mark.parametrize("entry", ["node_modules/.bin", "{project}/bin"])
def test_an_agent_a_session_could_plant_is_refused(user, project, clean, entry):
    user.write("tools/bin/claude", "#!/bin/sh\necho real-agent\n", 0o755)
    planted_dir = project / entry.replace("{project}/", "")
    planted_dir.mkdir(parents=True)
    (planted_dir / "claude").write_text(PLANTED)
    (planted_dir / "claude").chmod(0o755)
    import os

    os.chown(planted_dir / "claude", user.uid, user.gid)
    path = f"{entry.format(project=project)}:{user.home}/tools/bin:/usr/bin:/bin"
    result = user.run([INSTALLED, "claude"], cwd=project,
                      env=user.env(PATH=path, NETWORK_MODE="open", SANDBOX_QUIET="1"))
    assert result.returncode == 125, (result.stdout, result.stderr)
    assert "planted-ran" not in result.stdout and "real-agent" not in result.stdout
    assert str(planted_dir) in result.stderr or entry in result.stderr
    assert not (user.home / "planted-ran").exists()
