"""The site's Slurm configuration (policy/siteconf.py): accepted only when
no sandbox can write it or its directory — finding 4 of review-jobs.md: the
chaperon's real srun/sbatch read slurm.conf and what lies beside it
(plugstack.conf, cli_filter.lua, Include) OUTSIDE the sandbox."""
from __future__ import annotations

import os

import pytest

from agent_sandbox.errors import SETUP_FAILED, PolicyError
from agent_sandbox.policy import siteconf
from agent_sandbox.policy.resolve import resolve_policy
from agent_sandbox.policy.view import Tmpfs, mount_ops
from tests.support.homes import context, settings_for


@pytest.fixture
def outside_tmp(monkeypatch):
    """The test's trees lie in /tmp, which the rule refuses as a whole."""
    monkeypatch.setattr(siteconf, "SHARED_TMP", ())


def conf_in(directory) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "slurm.conf").write_text("ClusterName=b\n")
    return str(directory / "slurm.conf")


def launch(home, settings=None, **environ):
    return resolve_policy(settings or settings_for(home),
                          context(home, environ={"PATH": "/usr/bin", **environ}),
                          backend="bwrap")


def refused(home, settings=None, **environ) -> str:
    with pytest.raises(PolicyError) as info:
        launch(home, settings, **environ)
    assert info.value.exit_code == SETUP_FAILED and info.value.reason == "unsafe_slurm_conf"
    return str(info.value)


def test_a_config_in_the_project_is_refused(home, outside_tmp):
    conf = conf_in(home / "proj" / "cluster-b")
    message = refused(home, SLURM_CONF=conf)
    assert conf in message and "unset SLURM_CONF" in message and str(home / "proj") in message


def test_a_symlink_to_the_project_is_followed(home, tmp_path, outside_tmp):
    conf_in(home / "proj" / "conf")
    (tmp_path / "etc-slurm-b").symlink_to(home / "proj" / "conf")
    message = refused(home, SLURM_CONF=str(tmp_path / "etc-slurm-b" / "slurm.conf"))
    assert str(home / "proj" / "conf" / "slurm.conf") in message


def test_the_admin_path_is_checked_too(home, outside_tmp):
    conf = conf_in(home / "proj" / "c")
    assert "SLURM_CONF_PATH of the admin file" in refused(
        home, settings_for(home, SLURM_CONF_PATH=conf))


def test_writable_paths_and_a_writable_home_are_refused(home, tmp_path, outside_tmp):
    scratch = tmp_path / "scratch"
    conf = conf_in(scratch / "slurm")
    refused(home, settings_for(home, EXTRA_WRITABLE_PATHS=(str(scratch),)), SLURM_CONF=conf)
    mine = conf_in(home / "cluster-b")
    assert launch(home, SLURM_CONF=mine).slurm_conf == mine        # home not writable inside
    refused(home, settings_for(home, "HOME_ACCESS=write\n"), SLURM_CONF=mine)


def test_another_owner_or_a_world_writable_directory_is_refused(home, tmp_path, outside_tmp):
    conf = conf_in(tmp_path / "site")
    os.chown(conf, 4242, 4242)
    assert "owned by uid 4242" in refused(home, SLURM_CONF=conf)
    os.chown(conf, 0, 0)
    os.chmod(tmp_path / "site", 0o777)
    assert "writable by everyone" in refused(home, SLURM_CONF=conf)
    os.chmod(tmp_path / "site", 0o755)
    assert launch(home, SLURM_CONF=conf).slurm_conf == conf


def test_a_shared_tmp_and_a_missing_file_are_refused(home, tmp_path):
    conf = conf_in(tmp_path / "site")
    assert "lies in /tmp" in refused(home, SLURM_CONF=conf)
    assert "cannot be read" in siteconf.refusal("/nonexistent/slurm.conf", uid=0, writable=())


def test_the_directory_is_masked_after_the_home_it_lies_in(home, outside_tmp):
    conf = conf_in(home / "cluster-b")
    policy = launch(home, settings_for(home, "HOME_ACCESS=read\n"), SLURM_CONF=conf)
    ops = mount_ops(policy)
    masks = [i for i, op in enumerate(ops) if op == Tmpfs(str(home / "cluster-b"), 0o755)]
    grants = [i for i, op in enumerate(ops) if op.kind in ("bind", "ro-bind")
              and op.dest.startswith(str(home / "cluster-b"))]
    assert masks and all(g < masks[-1] for g in grants), ops
