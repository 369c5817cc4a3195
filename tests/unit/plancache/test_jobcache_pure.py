"""plancache/jobs.py without Slurm: which variables the key leaves out, when
a compiled job launch may be stored, and what a hit puts back — the next
task's values, and nothing of the task that compiled it."""
from __future__ import annotations

import os

import pytest

from agent_sandbox.backends.base import Payload
from agent_sandbox.config.load import ENV_OVERRIDES
from agent_sandbox.plancache import jobs as jobcache
from agent_sandbox.plancache.jobs import MARK, PER_TASK, JobCache
from agent_sandbox.plancache.plans import Recorder
from agent_sandbox.paths import staging_root
from agent_sandbox.policy.resolve import resolve_policy
from tests.support.plans import plan_for
from tests.support.homes import context, settings_for

STEP_A = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242",
          "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_TASK_PID": "31337",
          "SLURM_JOB_NODELIST": "n[1-2]", "SLURMD_NODENAME": "n1",
          "AGENT_SANDBOX_JOB_SESSION": "aaaaaaaaaaaa"}
STEP_B = dict(STEP_A, SLURM_JOB_ID="5151", SLURM_JOBID="5151", SLURM_STEP_ID="3",
              SLURM_PROCID="1", SLURM_TASK_PID="27182", SLURM_JOB_NODELIST="n[3-4]",
              AGENT_SANDBOX_JOB_SESSION="bbbbbbbbbbbb")


@pytest.fixture
def home(home, monkeypatch):
    """The shared fake home, its project the working directory."""
    monkeypatch.chdir(home / "proj")
    return home


def compiled(home, environ, backend="bwrap", conf=""):
    """(settings, launch) as run.py stores them, compiled for `environ`."""
    settings = settings_for(home, conf)
    policy = resolve_policy(settings, context(home, environ=environ), backend=backend)
    return settings, {"policy": policy, "plan": plan_for(backend, policy), "denied": (),
                      "chaperon": None}


def stored(home, environ, backend="bwrap", conf="", chaperon=None) -> JobCache:
    settings, launch = compiled(home, environ, backend, conf)
    if chaperon is not None:
        launch["chaperon"] = chaperon
    cache = JobCache((str(home / "proj"), None, (), False, True), environ, str(home))
    cache.settings = settings
    cache.store(Recorder(), launch, launch["policy"].session_id, None)
    return cache


def loaded(home, environ):
    return JobCache((str(home / "proj"), None, (), False, True), environ,
                    str(home)).load("0123456789ab", "01234567")


# ---------------------------------------------------------------- the key
def test_the_key_leaves_out_only_the_per_task_values():
    key = jobcache.key_environ(STEP_A, jobcache.per_task(STEP_A, "/home/alice"))
    assert key["SLURM_JOB_ID"] == key["SLURM_PROCID"] == MARK
    assert key["SLURMD_NODENAME"] == "n1" and key["PATH"] == "/usr/bin:/bin"
    assert set(key) == set(STEP_A)        # every name stays in the key
    assert key == jobcache.key_environ(STEP_B, jobcache.per_task(STEP_B, "/home/alice"))


def test_nothing_a_compile_reads_of_the_environment_is_left_out_of_the_key():
    read = {"PATH", "TMPDIR", "SLURM_CONF", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS",
            "SLURMD_NODENAME", "PMI_FD", "HOME", "USER", *ENV_OVERRIDES}
    assert not PER_TASK & read


def test_the_submit_dir_is_left_out_only_when_it_is_a_chaperon_stage():
    home = "/home/alice"
    stage = f"{staging_root(home)}/0123456789abcdef/fedcba9876543210"
    assert "SLURM_SUBMIT_DIR" in jobcache.per_task({"SLURM_SUBMIT_DIR": stage}, home)
    for other in (f"{home}/proj", f"{staging_root(home)}/x/fedcba9876543210",
                  f"{stage}/deeper"):
        assert "SLURM_SUBMIT_DIR" not in jobcache.per_task({"SLURM_SUBMIT_DIR": other}, home)
    assert jobcache.stage_cwd(home, stage).endswith("/0123456789abcdef/" + jobcache.STAGE)
    assert jobcache.stage_cwd(home, f"{home}/proj") is None


def test_a_stage_as_working_directory_is_one_key_for_every_stage(tmp_path, monkeypatch):
    home = str(tmp_path)
    slots = []
    for token in ("0123456789abcdef", "fedcba9876543210"):
        stage = os.path.join(staging_root(home), "00112233445566aa", token)
        os.makedirs(stage)
        monkeypatch.chdir(stage)
        slots.append(JobCache(("/p", None, (), False, True), STEP_A, home))
    assert slots[0].path == slots[1].path and slots[0].stage
    assert slots[0].Recorder is jobcache.StageRecorder
    monkeypatch.chdir(tmp_path)
    assert JobCache(("/p", None, (), False, True), STEP_A, home).path != slots[0].path


def test_a_stage_compile_that_looks_up_a_relative_path_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with jobcache.StageRecorder(()) as recorder:
        os.path.exists("relative")
    assert not recorder.cacheable and "relative" in recorder.why


# ---------------------------------------------------------------- store, then hit
@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_a_hit_carries_the_next_tasks_values_and_equals_its_compile(home, backend):
    stored(home, STEP_A, backend)
    hit = loaded(home, STEP_B)
    assert hit is not None
    _, fresh = compiled(home, STEP_B, backend)
    for launch in (hit, fresh):     # the session id is the launch's own
        sid = launch["policy"].session_id
        launch["policy"] = launch["policy"]._replace(
            session_id="S", env={k: v.replace(sid, "S") for k, v in launch["policy"].env.items()})
    hit_plan, fresh_plan = hit.pop("plan"), fresh.pop("plan")
    assert hit == fresh
    assert hit["policy"].env["SLURM_JOB_ID"] == "5151"
    assert hit["policy"].env["AGENT_SANDBOX_JOB_SESSION"] == "bbbbbbbbbbbb"
    for name in ("SLURM_JOB_ID", "SLURM_TASK_PID", "SLURM_JOB_NODELIST"):
        assert hit_plan.env.get(name, STEP_B[name]) == STEP_B[name]
    if "env" in fresh_plan.payloads:       # firejail: the command's environment
        text = hit_plan.payloads["env"].data
        assert b"SLURM_JOB_ID=5151\0" in text and b"4242" not in text and b"31337" not in text


def test_a_variable_set_by_sandbox_env_is_not_substituted(home):
    """SANDBOX_ENV=(SLURM_JOB_NAME=fixed): the policy's value is the
    configuration's, so a hit must not put the task's in — never stored."""
    conf = "SANDBOX_ENV=(SLURM_JOB_NAME=wrap)\n"
    environ = dict(STEP_A, SLURM_JOB_NAME="wrap")
    stored(home, environ, conf=conf)
    assert loaded(home, dict(STEP_B, SLURM_JOB_NAME="other")) is None


def test_a_value_found_elsewhere_in_the_plan_is_not_stored(home):
    """A per-task value that the plan holds anywhere but the environment (a
    path derived from the job id) would be stale in the next task."""
    settings, launch = compiled(home, STEP_A)
    plan = launch["plan"]
    launch["plan"] = plan._replace(argv=plan.argv + ("/tmp/job-4242",))
    assert jobcache.mentions(jobcache.without_env(launch), ["4242"], [])
    cache = JobCache((str(home / "proj"), None, (), False, True), STEP_A, str(home))
    cache.settings = settings
    cache.store(Recorder(), launch, launch["policy"].session_id, None)
    assert loaded(home, STEP_B) is None


def test_a_value_differing_from_the_launchs_in_the_plan_is_not_stored(home):
    settings, launch = compiled(home, STEP_A)
    names = ("SLURM_JOB_ID",)
    assert jobcache.passed_through(launch, names, STEP_A, settings) is False
    changed = dict(launch, policy=launch["policy"]._replace(
        env=dict(launch["policy"].env, SLURM_JOB_ID="1")))
    assert jobcache.passed_through(changed, names, STEP_A, settings) is None
    plan = launch["plan"]
    changed = dict(launch, plan=plan._replace(env=dict(plan.env, SLURM_JOB_ID="1")))
    assert jobcache.passed_through(changed, names, STEP_A, settings) is None
    changed = dict(launch, plan=plan._replace(payloads=dict(plan.payloads,
                                                            env=Payload(data=b"X=1"))))
    assert jobcache.passed_through(changed, names, STEP_A, settings) is None
    assert jobcache.passed_through(launch, names, STEP_A, None) is None


def test_short_values_and_the_sessions_own_ids_are_not_mentions():
    value = {"argv": ("/usr/bin/bwrap", "--fd", "0"), "dir": "/run/agent-sandbox-4242abcdef01"}
    assert not jobcache.mentions(value, ["0", "wrap", "n1"], [])
    assert not jobcache.mentions(value, ["4242"], ["4242abcdef01"])
    assert jobcache.mentions(value, ["4242"], [])
    assert jobcache.mentions({"p": Payload(data=b"x/4242/y")}, ["4242"], [])


def test_the_submitting_session_is_substituted_in_the_chaperons_configuration(home):
    stored(home, STEP_A, chaperon={"session_id": "x", "job_session": "aaaaaaaaaaaa",
                                   "home": str(home)})
    hit = loaded(home, STEP_B)
    assert hit["chaperon"]["job_session"] == "bbbbbbbbbbbb"
    assert hit["policy"].env["AGENT_SANDBOX_JOB_SESSION"] == "bbbbbbbbbbbb"


def test_a_chaperon_configured_for_another_session_is_not_stored(home):
    stored(home, STEP_A, chaperon={"session_id": "x", "job_session": "cccccccccccc",
                                   "home": str(home)})
    assert loaded(home, STEP_B) is None


def test_a_hit_is_refused_when_the_launchs_descriptors_differ(home):
    """PMI_FD is keyed by value, and kept only while it is a socket: a stored
    plan that keeps it is not used when this launch's PMI_FD is no socket."""
    import socket

    left, right = socket.socketpair()
    try:
        fd = str(left.fileno())
        settings, launch = compiled(home, dict(STEP_A, PMI_FD=fd))
        # the plan keeps it (a launch fact: PlanContext.keep_fds, and the key)
        launch["plan"] = plan_for("bwrap", launch["policy"], keep_fds=(left.fileno(),))
        cache = JobCache((str(home / "proj"), None, (), False, True), dict(STEP_A, PMI_FD=fd),
                         str(home))
        cache.settings = settings
        cache.store(Recorder(), launch, launch["policy"].session_id, None)
        assert loaded(home, dict(STEP_B, PMI_FD=fd)) is not None
        left.close()
        other = os.open(os.devnull, os.O_RDONLY)     # the number now names a file
        if other != int(fd):
            os.dup2(other, int(fd))
            os.close(other)
        try:
            assert loaded(home, dict(STEP_B, PMI_FD=fd)) is None
        finally:
            os.close(int(fd))
    finally:
        right.close()
