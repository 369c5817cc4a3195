"""Every handler against generated command lines (issue 11, item 8): each
request ends with an exit code — a refusal, or the (fake) real command's
answer — and never with an exception, which the chaperon would report as an
internal error with a traceback's worth of detail. The real Slurm programs
are replaced by a fake that prints its argv, so the fuzz runs without a
cluster and fast; scope decisions that ask squeue get its (empty) answer."""
from __future__ import annotations

import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.handlerkit import SLURM_COMMANDS, call, context

WORDS = ["", "-", "--", ",", "-j", "--jobs", "--jobs=", "-j,", "--steps", "-s", "123",
         "123_4", "123.0", "123.batch", "999999999999", "0x1", "-u", "--user=root", "--me",
         "-o", "%all", "%i %k", "-O", "comment,jobid", "--json", "--yaml", "-h", "-l",
         "--format=", "-B", "--env-vars", "show", "job", "step", "node", "reservation",
         "hold", "release", "update", "JobId=", "JobId=1", "TimeLimit=", "TimeLimit=+1",
         "Comment=x", "Dependency=afterok:", "wait_job", "listpids", "write",
         "batch_script", "notify", "requeue", "incomplete", "state=PD", "top", "-i", "1",
         "-t", "all", "--name=", "-p", "debug", "-w", "vm", "--input=.", "--wrap", "true",
         "-R", "-N", "%u", "%U", "-r", "-a", "-M", "x", "list", "cluster", "qos",
         "StepId=1.0", "=", "==", "jobid=", "\x00", "\n", "é", "%", "%%", "-A", "--state=R",
         "--signal=KILL", "--delimiter=", "--help", "--usage", "-V", "-v", "--export=NONE",
         "-o", "/dev/null", "--output=x/y", "-e", "--hold", "--test-only", "--parsable"]
ARGS = st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=12)), max_size=7)
ENV = st.dictionaries(st.sampled_from(["SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SACCT_FORMAT",
                                       "SINFO_FORMAT", "SLURM_JOB_ID", "SLURM_STEP_ID",
                                       "SLURM_JOB_NODELIST", "PATH"]),
                      st.sampled_from(["", "%i", "%k", "%u", ",", "123", "comment", "x"]),
                      max_size=3)
FAKE = "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\"\n"
SCOPED = list(SLURM_COMMANDS)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    fake = root / "fake-slurm"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    project = root / "proj"
    project.mkdir()
    # Names the fuzz words use, as files of every kind sbatch/srun may be given.
    (project / "true").write_text("#!/bin/sh\ntrue\n")
    (project / "1").mkdir()
    (project / "x").symlink_to("/etc/passwd")
    os.mkfifo(project / "%all")
    return context(str(root / "state"), str(project),
                   {name: str(fake) for name in SLURM_COMMANDS})


def _ends_cleanly(ctx, command, args, env):
    code, out = call(ctx, command, *args, env={**env, "PATH": "/usr/bin:/bin"})
    assert isinstance(code, int) and 0 <= code <= 255, (command, args, code)
    assert b"Traceback" not in out.err and b"internal error" not in out.err
    if code == 1 and out.err.startswith(b"agent-sandbox:"):
        assert b" \xe2\x80\x94 " in out.err, out.err      # the house format


@pytest.mark.parametrize("command", SCOPED)
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=ARGS, env=ENV)
def test_every_request_ends_with_an_exit_code(ctx, command, args, env):
    _ends_cleanly(ctx, command, args, env)


@pytest.mark.parametrize("args", [
    ["wait_job"], ["listpids"], ["notify"], ["write"], ["write", "batch_script"],
    ["update"], ["update", "JobId"], ["show"], ["requeue", "incomplete"],
])
def test_scontrol_words_without_their_argument(ctx, args):
    _ends_cleanly(ctx, "scontrol", args, {})
