"""Secrets in files bound back (SPEC §6), for real on every backend: a
~/.bashrc that exports a token the environment filter removes gives no token
inside — neither by reading the file nor through an interactive bash that
sources it — and the banner and --dry-run name the file and line, never the
secret. bwrap binds a blanked copy; firejail and landlock leave the file out."""
from __future__ import annotations

import pytest

BACKENDS = ["bwrap", "firejail", "landlock"]
TOKEN = "ghp_" + "Zx9Qw7Er5Ty3Ui1Op0As" * 2
BASHRC = ("# test user's bashrc\n"
          "export EDITOR=vi\n"
          f"export GH_TOKEN={TOKEN}\n"
          "alias ll='ls -l'\n")
INSIDE = 'cat ~/.bashrc 2>&1; bash -ic \'echo "token=[$GH_TOKEN] editor=[$EDITOR]"\' 2>/dev/null'


@pytest.fixture
def bashrc(user):
    """The user's ~/.bashrc exports a token; the fixture's own comes back after."""
    path = user.write(".bashrc", BASHRC)
    yield path
    user.write(".bashrc", "# test user's bashrc\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_token_exported_in_bashrc_does_not_reach_the_sandbox(user, project, bashrc,
                                                               backend):
    result = user.sandbox("sh", "-c", INSIDE, cwd=project,
                          env=user.env(SANDBOX_BACKEND=backend, SANDBOX_QUIET="0",
                                       GH_TOKEN=None))
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stdout + result.stderr
    assert "token=[]" in result.stdout, result.stdout
    if backend == "bwrap":       # a blanked copy: the rest of the file still works
        assert "# test user's bashrc\nexport EDITOR=vi\n\nalias ll='ls -l'\n" in result.stdout
        assert "editor=[vi]" in result.stdout
        action = "blanked inside the sandbox"
    else:                        # cannot bind a copy: the file is left out
        assert "EDITOR=vi" not in result.stdout
        action = f"not bound into the sandbox (the {backend} backend cannot bind a blanked copy)"
    assert (f"agent-sandbox: {bashrc} line 3 holds a secret (GitHub token; GH_TOKEN (a "
            f"variable the policy removes)) — {action}.") in result.stderr, result.stderr


def test_dry_run_names_the_file_and_line_but_not_the_secret(user, project, bashrc):
    result = user.sandbox("true", options=["--dry-run"], cwd=project,
                          env=user.env(SANDBOX_BACKEND="bwrap", GH_TOKEN=None))
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stdout + result.stderr
    assert "secrets in bound files (SECRETS_IN_BOUND_FILES=blank): " in result.stdout
    assert (f"  {bashrc} line 3: GitHub token; GH_TOKEN (a variable the policy removes) — "
            "blanked inside the sandbox") in result.stdout
    assert f"ro-data    {bashrc}  (from bound-0)" in result.stdout


def test_skip_leaves_the_file_out_and_off_binds_it_unchecked(user, project, bashrc):
    env = user.env(SANDBOX_BACKEND="bwrap", GH_TOKEN=None)
    user.set_config("SECRETS_IN_BOUND_FILES=skip\n")
    result = user.sandbox("sh", "-c", "cat ~/.bashrc", cwd=project, env=env)
    assert result.returncode == 1 and "No such file" in result.stderr, result
    user.set_config("SECRETS_IN_BOUND_FILES=off\n")
    result = user.sandbox("sh", "-c", "cat ~/.bashrc", cwd=project, env=env)
    assert result.returncode == 0 and TOKEN in result.stdout      # the user's explicit choice
