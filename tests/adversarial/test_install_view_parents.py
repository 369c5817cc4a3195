"""A firejail job step joins its job's sandbox with `firejail --join`, which
finds the join interpreter and the helper's folder by their path *inside*
the sandbox, after the launcher checked the real files outside. For an
install in the home below directories of the sandbox's private home (a pipx
or uv tool install: ~/.local/share/pipx/venvs/NAME, HOME_ACCESS=tmpwrite),
the install is bound read-only but `.local/share/pipx` above it is the
sandbox's own tmpfs: the session renames it away (the mount moves with it)
and makes its own NAME/libexec/python3-join and helper — shown here on bwrap
and firejail — and the joining task would run that code before it loads the
session's seccomp filter (found in review of 04b718e). The join is refused
for an install the sandbox can write or rename above (jobs/join.py
join_view_refusal): the refusal's tests below failed on 04b718e (no refusal;
the plan joined).

Real backends and the unprivileged test user for the premise; the join
plan's refusal is pure (the cluster is not needed to see it)."""
from __future__ import annotations

import glob
import os
import pathlib
import shutil
import uuid
from types import SimpleNamespace

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.jobs import join as jobjoin
from tests.support.install import PREFIX
from tests.support.policies import policy_of

FIREJAIL = SimpleNamespace(name="firejail", path="/usr/bin/firejail")


@pytest.fixture
def pipx_like(user):
    """argv of the launcher from a venv at ~/.local/share/pipx/venvs/NAME
    (its sys.prefix: a read-only overlay of every launch)."""
    top = user.home / ".local" / "share" / "pipx"
    venv = top / "venvs" / f"rv-{uuid.uuid4().hex[:8]}"
    for path in (user.home / ".local", user.home / ".local" / "share", top, top / "venvs"):
        path.mkdir(exist_ok=True)
        os.chown(path, user.uid, user.gid)
    made = user.run([os.path.realpath(f"{PREFIX}/venv/bin/python"), "-I", "-m", "venv",
                     "--without-pip", venv], cwd=user.home)
    assert made.returncode == 0, made.stderr
    site, = glob.glob(f"{PREFIX}/venv/lib/python3.*/site-packages")
    own_site, = glob.glob(f"{venv}/lib/python3.*/site-packages")
    pth = pathlib.Path(own_site) / "agent_sandbox_install.pth"
    pth.write_text(site + "\n")
    os.chown(pth, user.uid, user.gid)
    yield venv, [str(venv / "bin" / "python"), "-I", "-m", "agent_sandbox"]
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_user_install_in_the_private_home_can_be_replaced_at_its_path_inside(
        user, project, backend, pipx_like):
    """The premise of the refusal below (if this ever stops holding, the
    refusal may be narrowed): the session moves the install's parent away
    and plants a join interpreter at the install's path, in its own view."""
    venv, launcher = pipx_like
    top = venv.parent.parent
    planter = (f"mv {top} {top}.moved && mkdir -p {venv}/libexec && "
               f"echo planted > {venv}/libexec/python3-join && cat {venv}/libexec/python3-join")
    result = user.run(launcher + ["run", "--backend", backend, "--", "/bin/sh", "-c", planter],
                      env=user.env(HOME_ACCESS="tmpwrite"), cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["planted"], result.stdout
    assert not (venv / "libexec" / "python3-join").exists()     # the real home is untouched


@pytest.mark.parametrize("home_access", ["tmpwrite", "tmpfs", "restricted", "write"])
def test_a_firejail_join_from_an_install_in_the_home_is_refused(monkeypatch, home_access):
    monkeypatch.setattr(jobjoin, "join_python",
                        lambda: "/h/u/.local/share/pipx/venvs/as/libexec/python3-join")
    policy = policy_of("/h/u", backend="firejail", home_access=home_access)
    with pytest.raises(PolicyError, match="cannot join its job's sandbox .* lies in your home"):
        jobjoin.join_plan(policy, ["true"], FIREJAIL, {"mnt": 1, "pid": 2}, pid=77, pidfd=9)


def test_a_join_path_in_a_writable_tree_or_reached_through_a_link_is_refused():
    policy = policy_of("/h/u", backend="firejail", home_access="read",
                       extra_writable=("/scratch/u",))
    site = ("/opt/agent-sandbox/venv/libexec/python3-join", "/opt/agent-sandbox/helper")
    assert jobjoin.join_view_refusal(policy, site, realpath=lambda p: p) is None
    # With the home shown read-only as a whole, nothing above the install moves.
    assert jobjoin.join_view_refusal(policy, ("/h/u/venv/libexec/python3-join",),
                                     realpath=lambda p: p) is None
    assert "can write" in jobjoin.join_view_refusal(
        policy, ("/scratch/u/venv/libexec/python3-join",), realpath=lambda p: p)
    assert "can write" in jobjoin.join_view_refusal(
        policy, ("/h/u/proj/venv/libexec/python3-join",), realpath=lambda p: p)
    # A name outside that leads into the project (/opt/as -> /h/u/proj/as).
    links = {"/opt/as/libexec/python3-join": "/h/u/proj/as/libexec/python3-join"}
    assert "can write" in jobjoin.join_view_refusal(
        policy, ("/opt/as/libexec/python3-join",), realpath=lambda p: links.get(p, p))
