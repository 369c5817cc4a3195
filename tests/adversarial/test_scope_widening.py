"""Scope never widens by omission (issue 11, item 5), from inside a real
sandbox against the real Slurm: an empty, bare or malformed job list means
the scope or nothing — never every job of the user — in every scoped
command; and a scope too long for one `--jobs=` argument lists exactly what
one real call with that list would (selection.IdColumn), checked in-process
as the test user against the real squeue."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.install import PREFIX
from tests.support.clusters import as_other, outside, state

pytestmark = pytest.mark.usefixtures("slurm_cluster")

EMPTY_LISTS = [["-j", ""], ["--jobs="], ["-j"], ["-j", ","], ["--jobs=,,"], ["-s"],
               ["--steps="], ["-s", ""]]


def test_empty_and_malformed_job_lists_never_list_every_job(user, project, sessions, jobs,
                                                           other_user):
    session = sessions(project)
    own = session.submit("--job-name=own")
    hidden = outside(user, "sbatch", "--parsable", "--hold", "--job-name=hidden", "--wrap",
                     "true").stdout.strip()
    foreign = as_other(other_user, "sbatch", "--parsable", "--hold", "--job-name=hidden",
                       "--wrap", "true").stdout.strip()
    jobs += [own, hidden, foreign]
    assert hidden.isdigit() and foreign.isdigit()

    for words in EMPTY_LISTS:
        listed = session.run("squeue", "-h", "-o", "%i", *words)
        assert hidden not in listed.stdout.split() and foreign not in listed.stdout.split(), (
            words, listed)
        if words[0] in ("-j", "--jobs=", "--jobs=,,"):
            assert listed.stdout.split() == [own], (words, listed)
    # Only out-of-scope ids: "does not exist", never everything.
    assert session.run("squeue", "-h", "-j", hidden).stdout == ""
    for argv in (["sprio", "-j", ""], ["sprio", "-j", ","], ["sprio", "-h", "-j"],
                 ["sstat", "-j", ""], ["sstat", "-j", ","],
                 ["scontrol", "show", "job", ""], ["scontrol", "show", "job", ","],
                 ["scontrol", "-o", "show", "job"]):
        result = session.run(*argv)
        assert hidden not in result.stdout and foreign not in result.stdout, (argv, result)

    # Control: nothing outside the scope is touched by an empty list.
    for argv in (["scancel", ""], ["scancel", ","], ["scancel", "--name=hidden"],
                 ["scancel", "--me", "--state=PD", "--name=hidden"],
                 ["scontrol", "hold", ""], ["scontrol", "release", ","],
                 ["scontrol", "requeue", "incomplete"], ["scontrol", "update", "JobId=",
                                                          "TimeLimit=1"]):
        session.run(*argv)
        assert "PENDING" in state(hidden) and "PENDING" in state(foreign), argv
    assert session.run("scontrol", "requeue", "incomplete").returncode == 1


# ------------------------------------------------------------------- the wide path
DRIVER = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
from handlerkit import SLURM_COMMANDS, call, context
from chaperon import selection
spec = json.loads(sys.argv[2])
ctx = context(spec["state"], spec["project"], spec["binaries"])
for job in spec["ledger"]:
    ctx.ledger.record(job, "t", kind="batch")
answers = []
for argv in spec["calls"]:
    pair = []
    for limit in (selection.JOBS_ARG_MAX, 8):
        selection.JOBS_ARG_MAX = limit
        code, out = call(ctx, "squeue", *argv, env={"PATH": "/usr/bin:/bin",
                                                     **spec["env"].get(" ".join(argv), {})})
        pair.append([code, out.out.decode("utf-8", "replace"), out.err.decode("utf-8", "replace")])
    selection.JOBS_ARG_MAX = 120 * 1024
    answers.append(pair)
print(json.dumps(answers))
'''
CALLS = [[], ["-h"], ["-l"], ["--start"], ["-t", "all"], ["-o", "%i %k|%10k"],
         ["-O", "jobid,comment:12,name"], ["-O", "comment,jobid"], ["-s"], ["-a"],
         ["--json"], ["-j", ""], ["--sort=-i"], ["-r"], ["-o", "%.7i %j"]]


def test_a_scope_too_long_for_one_argument_lists_what_one_call_would(user, project, jobs):
    """Same answer from the one-argument path and the wide path (forced by
    lowering selection.JOBS_ARG_MAX in-process), for every format shape."""
    names = ["in-a", "out-b", "in-c"]
    ids = [outside(user, "sbatch", "--parsable", "--hold", f"--job-name={n}",
                   f"--comment=note {n}", "--wrap", "true").stdout.strip() for n in names]
    array = outside(user, "sbatch", "--parsable", "--hold", "--array=1-3", "--wrap",
                    "true").stdout.strip()
    jobs += [*ids, array]
    assert all(i.isdigit() for i in ids + [array])
    kit = project / "kit"
    kit.mkdir()
    shutil.copy(Path(__file__).parent.parent / "support" / "handlerkit.py", kit / "handlerkit.py")
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(kit)], check=True)
    forgotten = [str(n) for n in range(1, 150)]       # ids Slurm no longer knows
    spec = {"state": str(kit / "state"), "project": str(project),
            "binaries": {c: shutil.which(c) for c in ("squeue", "sinfo")},
            "ledger": forgotten + [ids[0], ids[2], array], "calls": CALLS,
            "env": {}}
    result = user.run([f"{PREFIX}/venv/bin/python", "-c", DRIVER, str(kit), json.dumps(spec)],
                      cwd=project, timeout=120)
    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout)
    for argv, (narrow, wide) in zip(CALLS, answers):
        if argv == ["--json"]:
            narrow[1] = json.dumps({k: v for k, v in json.loads(narrow[1]).items()
                                    if k != "meta"})
            wide[1] = json.dumps({k: v for k, v in json.loads(wide[1]).items() if k != "meta"})
        if argv == ["-l"]:            # its first line is the time
            narrow[1] = narrow[1].split("\n", 1)[1]
            wide[1] = wide[1].split("\n", 1)[1]
        assert narrow == wide, (argv, narrow, wide)
        assert ids[1] not in narrow[1], (argv, narrow)
    plain = answers[0][0][1]
    assert ids[0] in plain and ids[2] in plain and array in plain and ids[1] not in plain


def test_the_id_column_rule():
    from chaperon.selection import ID_END, ID_START, IdColumn

    column = IdColumn({"10", "12"}, steps=False)
    assert column.line(ID_START + b"JOBID" + ID_END + b"  JOBID NAME") == b"  JOBID NAME"
    assert column.line(ID_START + b"10" + ID_END + b"     10 a") == b"     10 a"
    assert column.line(ID_START + b"11" + ID_END + b"     11 b") is None
    assert column.line(ID_START + b"12_4" + ID_END + b"   12_4 c") == b"   12_4 c"
    assert column.line(ID_START + b"12+1" + ID_END + b"   12+1 c") == b"   12+1 c"
    assert column.line(b"Tue Nov 24 06:41:02 2026") == b"Tue Nov 24 06:41:02 2026"
    assert column.line(b"13" + ID_END + b"13 x") is None                      # -O: no start
    assert column.short("%i") == "\x03%i\x04%i"
    assert column.long("jobid") == "JobArrayID:0\x04,jobid"
