"""GPU devices of a job: gres.conf and Slurm's indices → device files."""
from __future__ import annotations

import pytest

from agent_sandbox.policy import gres
from agent_sandbox.policy.resolve import _devices
from tests.support.homes import make_home, settings_for


@pytest.mark.parametrize("expression,expected", [
    ("n1", ["n1"]), ("n[1-3]", ["n1", "n2", "n3"]), ("gpu[08-10],x", ["gpu08", "gpu09", "gpu10", "x"]),
    ("/dev/nvidia[0-1,3]", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"]),
    ("r[1-2]c[1-2]", ["r1c1", "r1c2", "r2c1", "r2c2"]), ("n[a-b]", []),
])
def test_host_lists(expression, expected):
    assert gres.hostlist(expression) == expected


GRES_CONF = """# site gres.conf
AutoDetect=off
NodeName=n[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-1]
NodeName=n[1-2] Name=gpu Type=t4 File=/dev/nvidia2
NodeName=n3 Name=gpu File=/dev/dri/renderD128
Name=mps Count=100
NodeName=n4 Name=gpu Type=a100 Count=2
"""


def test_gres_conf_names_the_files_of_this_node_in_index_order():
    assert gres.parse(GRES_CONF, "n2") == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert gres.parse(GRES_CONF, "n3") == ["/dev/dri/renderD128"]
    assert gres.parse(GRES_CONF, "n4") is None        # autodetected: no File=
    assert gres.parse(GRES_CONF, "n9") == []


def test_the_indices_slurm_gave_this_task_or_batch_script():
    assert gres.allocated({"SLURM_JOB_GPUS": "0,2"}) == [0, 2]
    assert gres.allocated({"SLURM_JOB_GPUS": "0,1,2", "SLURM_STEP_ID": "0",
                           "SLURM_STEP_GPUS": "1"}) == [1]
    assert gres.allocated({"SLURM_STEP_GPUS": "1"}) == []   # not a task: the batch script's
    assert gres.allocated({}) == []


def test_a_jobs_gpus_are_bound_and_the_blacklist_still_applies(tmp_path):
    conf = tmp_path / "slurm"
    conf.mkdir()
    (conf / "gres.conf").write_text("NodeName=n1 Name=gpu File=/dev/null\n"
                                    "NodeName=n1 Name=gpu File=/dev/zero\n")
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "1", "SLURMD_NODENAME": "n1"}
    site = str(conf / "slurm.conf")
    assert gres.devices(env, site) == ("/dev/zero",)
    assert gres.devices({**env, "SLURM_JOB_GPUS": ""}, site) == ()
    assert gres.devices({k: v for k, v in env.items() if k != "SLURM_JOB_ID"}, site) == ()
    home = make_home(tmp_path)
    assert _devices(settings_for(home), env, site) == ("/dev/zero",)
    assert _devices(settings_for(home, DEVICES=("/dev/null",)), env, site) == (
        "/dev/null", "/dev/zero")
    blocked = settings_for(home, DEVICES_BLACKLIST=("/dev/z*",))
    assert _devices(blocked, env, site) == ()


def test_nvidia_gpus_bring_their_control_devices(tmp_path, monkeypatch):
    (tmp_path / "gres.conf").write_text("Name=gpu File=/dev/nvidia[0-1]\n")
    fake = {"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    monkeypatch.setattr(gres, "device_node", lambda p: p if p in fake else None)
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "1", "SLURMD_NODENAME": "n1"}
    assert gres.devices(env, str(tmp_path / "slurm.conf")) == (
        "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm")


def test_only_device_nodes_under_dev_are_bound(tmp_path):
    """Finding 5 (review-jobs.md): File=/dev/../etc/passwd passed the
    startswith("/dev/") check and was bound as a device."""
    conf = tmp_path / "gres.conf"
    conf.write_text("NodeName=n1 Name=gpu File=/dev/../etc/passwd\n"
                    "NodeName=n1 Name=gpu File=/dev/shm\n"
                    "NodeName=n1 Name=gpu File=/dev/stdin\n"
                    "NodeName=n1 Name=gpu File=/dev/null\n")
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1,2,3", "SLURMD_NODENAME": "n1"}
    assert gres.devices(env, str(tmp_path / "slurm.conf")) == ("/dev/null",)
    assert gres.device_node("/dev/../etc/passwd") is None      # leaves /dev
    assert gres.device_node("/dev/shm") is None                 # a directory
    assert gres.device_node("/dev/fd") is None                  # a link out of /dev
    assert gres.device_node("/dev/null") == "/dev/null"         # a character device
