"""The input-variable tables and the environment a real Slurm command gets
(issue 11, item 1): unit tests of the tables and hypothesis properties that
no accepted environment hands a real command a denied option or a variable
outside the allow-lists."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from chaperon import environment
from chaperon.handlers.srun import step_variables
from chaperon.refusal import Refusal
from chaperon.slurm.sbatch_options import SBATCH
from chaperon.slurm.srun_options import (INPUT_ENV, SRUN_ALLOCATION, SRUN_STEP, STEP_DROPPED,
                                         STEP_FACTS, parse_env)

DENIED_STEP = {name for name, option in INPUT_ENV.items()
               if SRUN_STEP.by_long.get(option) is None
               or SRUN_STEP.by_long[option].denial is not None}


def test_every_variable_maps_to_an_option_srun_knows():
    for name, option in INPUT_ENV.items():
        assert option in SRUN_ALLOCATION.by_long, (name, option)


def test_the_variables_that_name_files_or_programs_are_in_the_table():
    # From the 22.05 sources: each makes srun or slurmstepd open or run a path.
    for name in ("SLURM_STDOUTMODE", "SLURM_STDERRMODE", "SLURM_STDINMODE", "SLURM_HOSTFILE",
                 "SLURM_SRUN_MULTI", "SLURM_TASK_PROLOG", "SLURM_TASK_EPILOG", "SLURM_PROLOG",
                 "SLURM_EPILOG", "SLURM_REMOTE_CWD", "SLURM_WORKING_DIR", "SLURM_BCAST",
                 "SRUN_CONTAINER", "SLURM_CONTAINER"):
        assert name in INPUT_ENV, name
    for name in ("SLURM_CONF", "SLURM_WORKING_CLUSTER", "SLURM_SRUN_CR_SOCKET"):
        assert name not in INPUT_ENV and name not in STEP_FACTS
        assert any(name in key for key in STEP_DROPPED), name


@pytest.mark.parametrize("name,value", [
    ("SLURM_TASK_PROLOG", "/x"), ("SLURM_HOSTFILE", "/etc/hosts"), ("SLURM_SRUN_MULTI", "1"),
    ("SLURM_REMOTE_CWD", "/"), ("SLURMD_DEBUG", "9"), ("SLURM_BCAST", "/tmp/x"),
])
def test_a_denied_variable_is_refused_by_name_in_step_mode(name, value):
    with pytest.raises(Refusal) as refused:
        step_variables({name: value, "SLURM_JOB_ID": "5"}, "5")
    assert name in refused.value.message


def test_step_variables_keep_the_allocation_and_drop_the_rest():
    env = {"SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_ACCOUNT": "other", "SLURM_PARTITION": "big", "SLURM_CONF": "/x",
           "SLURM_WORKING_CLUSTER": "c:1.2.3.4:1:1", "SLURM_SPANK_X": "y",
           "SLURM_PMIX_TMPDIR": "/x", "SLURM_JOB_ID": "99", "SLURM_UMASK": "0077",
           "SLURM_JOB_CPUS_PER_NODE": "2(x2)", "SLURM_STDOUTMODE": "out.txt",
           "SLURM_EXPORT_ENV": "NONE"}
    validated, parsed = step_variables(env, "7")
    assert validated == {"SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "2",
                         "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_UMASK": "0077",
                         "SLURM_JOB_CPUS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "7",
                         "SLURM_JOBID": "7"}
    assert parsed.last("output") == "out.txt" and parsed.last("export") == "NONE"


NAMES = st.sampled_from(sorted(set(INPUT_ENV) | set(STEP_FACTS) | {
    "SLURM_CONF", "SLURM_WORKING_CLUSTER", "SLURM_SPANK_X", "SLURM_PMIX_TMPDIR", "TMPDIR",
    "LD_PRELOAD", "SLURM_NTASKS_HET_GROUP_1", "SLURM_RLIMIT_CORE", "PATH", "LANG", "TZ",
    "LC_ALL", "SLURM_TIME_FORMAT", "HOME", "BASH_ENV"}))
VALUES = st.one_of(st.sampled_from(["", "0", "1", "yes", "no", "4", "/etc/passwd", ":/x",
                                    "../../x", "C.UTF-8", "Europe/Berlin", "a b", "n[1-2]",
                                    "2(x2)", "0077", "debug", "%t.out"]),
                   st.text(max_size=10))


@settings(max_examples=800, deadline=None, derandomize=True)
@given(env=st.dictionaries(NAMES, VALUES, max_size=8))
def test_no_accepted_step_environment_passes_a_denied_option(env):
    try:
        validated, parsed = step_variables(dict(env, SLURM_JOB_ID="5"), "5")
    except Refusal:
        return
    assert not set(validated) & DENIED_STEP
    assert set(validated) <= set(INPUT_ENV) | set(STEP_FACTS) | {"SLURM_JOB_ID", "SLURM_JOBID"}
    for name, value in validated.items():
        if name in STEP_FACTS:
            assert STEP_FACTS[name].fullmatch(value)
    for item in parsed.items:
        option = SRUN_STEP.by_long[item.name]
        assert option.denial is None, item


@settings(max_examples=800, deadline=None, derandomize=True)
@given(env=st.dictionaries(NAMES, VALUES, max_size=8))
def test_no_accepted_allocation_environment_yields_a_denied_option(env):
    try:
        parsed = parse_env(env)
    except Refusal:
        return
    for item in parsed.items:
        assert SRUN_ALLOCATION.by_long[item.name].denial is None, item


@settings(max_examples=800, deadline=None, derandomize=True)
@given(env=st.dictionaries(NAMES, VALUES, max_size=8))
def test_a_real_command_gets_only_allow_listed_variables(env):
    request_env = [(k.encode(), v.encode("utf-8", "surrogateescape")) for k, v in env.items()]
    built = environment.command_env(request_env, keep_slurm=tuple(env))
    allowed = ({"PATH"} | set(environment.OWN_IDENTITY) | set(environment.PRESENTATION)
               | set(environment.VIEW_VARIABLES))
    assert set(built) <= allowed
    assert built["PATH"] == environment.SAFE_PATH
    for name in ("LANG", "LC_ALL", "TZ"):
        if name in built and name in env:
            assert "/" not in built[name] or name == "TZ"
            assert not built[name].startswith((":", "/")) and ".." not in built[name]


SUBMITTED = {"A": "1", "B": "2", "LD_PRELOAD": "x", "PATH": "/opt/x/bin:/usr/bin",
             "BASH_FUNC_module%%": "() {  echo mod\n}", "MODULEPATH": "/m"}


@pytest.mark.parametrize("export,expected", [
    (None, SUBMITTED), ("ALL", SUBMITTED), ("NONE", {}),
    ("A", {"A": "1"}), ("A,C=3", {"A": "1", "C": "3"}), ("ALL,C=3", {**SUBMITTED, "C": "3"}),
    ("PATH,LD_PRELOAD", {"PATH": "/opt/x/bin:/usr/bin", "LD_PRELOAD": "x"}),
])
def test_the_staged_environment_follows_export_rules(export, expected):
    """Everything Slurm would hand the job (loader variables, PATH without the
    session's stubs, shell functions included: they are set only inside the
    job's sandbox), minus Slurm's own variables, what steers the sandbox and
    TMPDIR (the job gets a private one)."""
    request_env = [(b"A", b"1"), (b"B", b"2"), (b"LD_PRELOAD", b"x"), (b"SLURM_CONF", b"x"),
                   (b"AGENT_SANDBOX", b"1"), (b"HOME_ACCESS", b"write"), (b"TMPDIR", b"/t"),
                   (b"PATH", b"/run/agent-sandbox/bin:/opt/x/bin:/usr/bin"),
                   (b"BASH_FUNC_module%%", b"() {  echo mod\n}"), (b"MODULEPATH", b"/m"),
                   (b"BAD=NAME", b"x"), (b"HOME", b"/h")]
    assert environment.user_env(request_env, export, ("/run/agent-sandbox/bin",)) == expected


def test_sbatch_variables_are_options_of_sbatch():
    from chaperon.slurm.sbatch_options import INPUT_ENV as SBATCH_ENV
    for name, option in SBATCH_ENV.items():
        assert option in SBATCH.by_long, (name, option)
        assert re.fullmatch(r"S(BATCH|LURM)_[A-Z0-9_]+", name)


def test_the_step_manager_and_the_external_launcher_reach_a_step():
    """24.11: slurmctld sets SLURM_STEPMGR (the batch host) and Open MPI's
    plm_slurm_args ask for `srun --external-launcher` (or SLURM_EXTERNAL_
    LAUNCHER): both pass in step mode; a SLURM_STEPMGR that is no node name
    does not."""
    validated, parsed = step_variables({"SLURM_JOB_ID": "5", "SLURM_STEPMGR": "node-1",
                                        "SLURM_EXTERNAL_LAUNCHER": "1"}, "5", "24.11")
    assert validated["SLURM_STEPMGR"] == "node-1"
    assert "external-launcher" in [item.name for item in parsed.items]
    validated, _ = step_variables({"SLURM_JOB_ID": "5", "SLURM_STEPMGR": "/run/x sock"}, "5")
    assert "SLURM_STEPMGR" not in validated


@pytest.mark.parametrize("step", [True, False])
def test_srun_async_is_refused_with_its_reason(step):
    from chaperon.slurm import options as engine, versions
    with pytest.raises(Refusal) as refused:
        engine.parse(versions.srun("26.05")[1 if step else 0], ["--async", "hostname"])
    assert "--async is refused" in refused.value.message
    assert "step manager" in refused.value.message
