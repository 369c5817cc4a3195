"""Descriptor hygiene (SPEC §5 fd.clean), for real on every backend: a
descriptor the caller holds open on a credential does not enter the sandbox,
and `--keep-fd N` lets exactly N in.

The caller is the test user's own shell, which opens ~/.ssh/id_rsa on a
descriptor and then execs the installed agent-sandbox, as a user (or a tool
that leaks descriptors) would."""
from __future__ import annotations

import shlex

import pytest

from tests.support.install import INSTALLED
from tests.support.launcher import SECRET_FILES

BACKENDS = ["bwrap", "firejail", "landlock"]
KEY = SECRET_FILES[".ssh/id_rsa"]
# Inside: ls lists its own descriptors (what it inherited, plus 3: the directory
# it reads), then each route to fd 9 and fd 7 is tried.
INSIDE = ('printf "fds: "; ls /proc/self/fd | sort -n | tr "\\n" " "; echo; '
          'cat /proc/self/fd/9 2>/dev/null; cat <&9 2>/dev/null; '
          'cat <&7 2>/dev/null && echo "kept readable"; true')


def launch(user, project, backend: str, options=()) -> str:
    """The user's shell opens the key on fd 9 (and a second copy on fd 7),
    then becomes `agent-sandbox run OPTIONS -- sh -c INSIDE`."""
    run = shlex.join([INSTALLED, "run", *options, "--", "sh", "-c", INSIDE])
    result = user.run(["sh", "-c", f"exec 9<~/.ssh/id_rsa 7<~/.ssh/id_rsa; exec {run}"],
                      cwd=project, env=user.env(SANDBOX_BACKEND=backend))
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_descriptor_the_caller_holds_on_a_credential_is_not_open_inside(user, project,
                                                                          backend):
    out = launch(user, project, backend)
    assert "fds: 0 1 2 3 \n" in out, out
    assert KEY not in out and "kept readable" not in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_keep_fd_keeps_exactly_the_named_descriptor(user, project, backend):
    out = launch(user, project, backend, options=["--keep-fd", "7"])
    assert "fds: 0 1 2 3 7 \n" in out, out
    assert out.count(KEY) == 1 and "kept readable" in out      # through 7, never through 9


def test_dry_run_reports_fd_clean_and_what_keep_fd_kept(user, project):
    for options, line in (((), "  yes     fd.clean"),
                          (("--keep-fd", "1"), "  yes     fd.clean"),
                          (("--keep-fd", "2", "--keep-fd", "0"), "  yes     fd.clean")):
        result = user.sandbox("true", options=["--dry-run", *options], cwd=project,
                              env=user.env(SANDBOX_BACKEND="bwrap"))
        assert result.returncode == 0 and line in result.stdout, (options, result)
    result = user.run(["sh", "-c", f"exec 7</dev/null; exec {INSTALLED} run --dry-run "
                       "--keep-fd 7 -- true"], cwd=project, env=user.env(SANDBOX_BACKEND="bwrap"))
    assert result.returncode == 0, result.stderr
    assert "  partial fd.clean" in result.stdout and "kept by --keep-fd: 7" in result.stdout


def test_keep_fd_of_a_descriptor_that_is_not_open_refuses(user, project):
    result = user.sandbox("true", options=["--keep-fd", "42"], cwd=project,
                          env=user.env(SANDBOX_BACKEND="bwrap"))
    assert result.returncode == 125
    assert result.stderr.startswith("agent-sandbox: --keep-fd 42: descriptor 42 is not open")
