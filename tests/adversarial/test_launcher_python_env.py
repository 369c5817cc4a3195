"""The launcher runs outside the sandbox, also where the environment is not
the user's own choice: a batch job's launch on the compute node inherits the
job's environment, which the agent shaped when it submitted. Python reads
PYTHONPATH, PYTHONSTARTUP-like hooks (sitecustomize, usercustomize) and the
user site directory at start: any of them would run the agent's code outside
the jail. The entry script (scripts/install.sh) starts the interpreter with
-IS: none of them is read (issue 19 made the entry script ours)."""
from __future__ import annotations

import os

from tests.support.install import INSTALLED

HOOK = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def test_python_variables_and_hooks_never_reach_the_launcher(user, project):
    hooks = project / "hooks"
    marker = project / "HOOK-RAN"
    for relative in ("sitecustomize.py", "usercustomize.py", "agent_sandbox/__init__.py",
                     "agent_sandbox/cli/__init__.py"):
        path = hooks / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HOOK.format(marker=str(marker)) + "def main():\n    return 0\n")
    for path in [hooks, *hooks.rglob("*")]:
        os.chown(path, user.uid, user.gid)
    user_site = user.home / ".local/lib/python3.11/site-packages"
    user_site.mkdir(parents=True, exist_ok=True)
    (user_site / "usercustomize.py").write_text(HOOK.format(marker=str(marker)))
    try:
        env = user.env(PYTHONPATH=str(hooks), PYTHONUSERBASE=str(user.home / ".local"),
                       PYTHONINSPECT="1")
        result = user.run([INSTALLED, "run", "--", "true"], env=env, cwd=project)
        assert result.returncode == 0, result.stderr
        assert not marker.exists(), "code from the launch's environment ran in the launcher"
        first_line = open(INSTALLED, "rb").readline()
        assert first_line.startswith(b"#!") and first_line.rstrip().endswith(b" -IS"), first_line
    finally:
        (user_site / "usercustomize.py").unlink()
