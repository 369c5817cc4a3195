"""The compiled plan cache (plancache/plans.py, issue 19): a launch after
any input changed equals a fresh compile, a cached plan equals the one a
fresh compile gives, and a cache file that is not the user's own (or that
others can write) is never used."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.waiting import wrote

HIT = "plan:      from the compiled plan cache"
MISS = "plan:      compiled now"
# Without Slurm's proxy a dry run and a launch compile the same plan, so the
# cached plan (stored by a launch) and a dry run's fresh compile compare.
BASE = "CHAPERON=false\n"


def plans(user):
    return user.home / ".local/state/agent-sandbox/cache/plans"


def dry_run(user, project, *options, env=None, cwd=None):
    """(the report with session ids masked, where the plan came from)."""
    result = user.run([INSTALLED, "run", "--dry-run", *options, "--", "true"],
                      cwd=cwd or project, env=user.env(**(env or {})))
    assert result.returncode == 0, result.stderr
    [source] = [line for line in result.stdout.splitlines() if line.startswith("plan:      ")]
    text = result.stdout.replace(source + "\n", "")
    return re.sub(r"[0-9a-f]{12}", "<id>", text), source


def launch(user, project, *options, env=None, cwd=None):
    """A real launch: compiles and stores the plan on a miss."""
    result = user.run([INSTALLED, "run", *options, "--", "true"], cwd=cwd or project,
                      env=user.env(**(env or {})))
    assert result.returncode == 0, result.stderr


def fresh(user, project, *options, env=None, cwd=None):
    """A compile with every stored plan removed."""
    shutil.rmtree(plans(user), ignore_errors=True)
    report, source = dry_run(user, project, *options, env=env, cwd=cwd)
    assert source.startswith(MISS)
    return report


WHY_MISSED = {
    "a bound file's secret": "/.bashrc changed since the cached plan was compiled)",
    "user config": "/.config/agent-sandbox",   # (the directory or the file, whichever was read first)
    "environment": "(no cached plan for these inputs)",
    "project": "(no cached plan for these inputs)",
    "working directory": "(no cached plan for these inputs)",
    "the backend flag": "(no cached plan for these inputs)",
}


def test_every_input_changed_in_turn_gives_a_fresh_compile(user, project, admin):
    other = project.parent / (project.name + "-other")
    shutil.rmtree(other, ignore_errors=True)
    other.mkdir()
    os.chown(other, user.uid, user.gid)
    sub = project / "sub"
    sub.mkdir()
    os.chown(sub, user.uid, user.gid)
    token = "export GITHUB_TOKEN=ghp_" + "a" * 36 + "\n"
    user.set_config(BASE)
    cloud = user.home / ".aws-plancache-test"
    bashrc = (user.home / ".bashrc").read_text()     # the session fixture's: put back after
    # (what changes, the change, the launch's options, environment, working directory)
    changes = [
        # First, while the bound files are scanned (the next step turns the
        # scan off: then their content decides nothing, and a hit is right).
        ("a bound file's secret", lambda: user.write(".bashrc", token), (), None, None),
        ("user config", lambda: user.set_config(BASE + "SECRETS_IN_BOUND_FILES=off\n"), (), None, None),
        ("admin config", lambda: admin("PRIVATE_TMP=false\n"), (), None, None),
        ("environment", lambda: None, (), {"SECRETS_IN_BOUND_FILES": "skip"}, None),
        ("project", lambda: None, ("--project-dir", str(other)), None, None),
        ("working directory", lambda: None, (), None, sub),
        ("a new protected path", lambda: (project / ".envrc").write_text("x\n"), (), None, None),
        ("a new hidden path configured", lambda: user.set_config(
            BASE + f"EXTRA_BLOCKED_PATHS+=({cloud})\n"), (), None, None),
        ("the hidden path appears", lambda: cloud.mkdir(), (), None, None),
        ("the backend flag", lambda: None, ("--backend", "landlock"), None, None),
    ]
    try:
        for name, change, options, env, cwd in changes:
            launch(user, project)   # a launch that had to probe the backend stores
            launch(user, project)   # nothing (it started a process): the next one does
            assert dry_run(user, project)[1].startswith(HIT), name
            change()
            wrote()     # (.envrc is written by the test itself)
            report, source = dry_run(user, project, *options, env=env, cwd=cwd)
            assert source.startswith(MISS), name
            # The plan line says why: the input that changed, or a context
            # (options, environment) no plan was stored for.
            assert WHY_MISSED.get(name, " changed since the cached plan was compiled)") in source, (
                name, source)
            assert report == fresh(user, project, *options, env=env, cwd=cwd), name
            # The next launch stores the new plan, which equals a fresh compile.
            launch(user, project, *options, env=env, cwd=cwd)
            launch(user, project, *options, env=env, cwd=cwd)
            cached, source = dry_run(user, project, *options, env=env, cwd=cwd)
            assert source.startswith(HIT), name
            assert cached == report, name
            if name == "the hidden path appears":
                assert str(cloud) in report, name
    finally:
        user.set_config("")
        shutil.rmtree(cloud, ignore_errors=True)
        user.write(".bashrc", bashrc)    # later tests expect the fixture's (order-independent)
        shutil.rmtree(other, ignore_errors=True)


def test_a_cached_plan_runs_with_its_own_session(user, project):
    """Each launch from the cache gets a new session id (marker, environment)
    and the command it was given, not the one of the launch that compiled it."""
    user.sandbox("true", cwd=project)
    user.set_config("")
    user.sandbox("true", cwd=project)
    script = "cat /run/agent-sandbox/session 2>/dev/null || env | grep SESSION"
    first = user.sandbox("/bin/sh", "-c", script, cwd=project)
    second = user.sandbox("/bin/sh", "-c", "echo other; " + script, cwd=project)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    ids = [set(re.findall(r"[0-9a-f]{12}", r.stdout)) for r in (first, second)]
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    assert second.stdout.startswith("other\n")
    result = user.run([INSTALLED, "run", "--dry-run", "--", "true"], cwd=project)
    assert HIT in result.stdout


def test_a_foreign_or_writable_cache_file_is_ignored(user, project, other_user):
    user.set_config(BASE)
    shutil.rmtree(plans(user), ignore_errors=True)
    launch(user, project)
    launch(user, project)
    assert dry_run(user, project)[1].startswith(HIT)
    [entry] = [p for p in plans(user).iterdir() if p.suffix == ".marshal"]
    entry.chmod(0o622)                                     # writable by others
    assert dry_run(user, project)[1].startswith(MISS)
    entry.chmod(0o600)
    assert dry_run(user, project)[1].startswith(HIT)
    os.chown(entry, other_user.pw_uid, other_user.pw_gid)   # written by another user
    assert dry_run(user, project)[1].startswith(MISS)
    os.chown(entry, user.uid, user.gid)
    plans(user).chmod(0o777)                               # a directory others can write
    assert dry_run(user, project)[1].startswith(MISS)
    plans(user).chmod(0o700)
    entry.write_bytes(b"\x00garbage")                       # corrupt: a miss, not an error
    assert dry_run(user, project)[1].startswith(MISS)
    launch(user, project)
    assert dry_run(user, project)[1].startswith(HIT)


def test_the_cache_is_invisible_inside_the_sandbox(user, project):
    user.set_config("")
    launch(user, project)
    result = user.sandbox("/bin/sh", "-c", f"ls {plans(user)} || echo hidden", cwd=project)
    assert result.stdout.strip().endswith("hidden"), result.stdout


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "firejail"])
def test_a_launch_from_the_cache_reaches_its_own_chaperon(user, project, backend):
    """Everything naming the session's chaperon directory — the environment,
    the stubs' place, the Landlock rules (marshalled bytes) — names the new
    one: a Slurm call from a cached plan is answered by this session's
    chaperon (its audit log), never by whatever else is on PATH."""
    user.set_config("")
    env = user.env(SANDBOX_BACKEND=backend)
    script = "echo $AGENT_SANDBOX_SESSION; sinfo -h >/dev/null; echo rc=$?"
    for _ in range(2):
        assert user.sandbox("true", cwd=project, env=env).returncode == 0
    assert HIT in user.run([INSTALLED, "run", "--dry-run", "--", "true"], cwd=project,
                           env=env).stdout
    result = user.sandbox("/bin/sh", "-c", script, cwd=project, env=env)
    session, rc = result.stdout.split()
    assert rc == "rc=0", result.stderr
    logs = user.home / ".local/state/agent-sandbox/chaperon"
    requests = [line for path in logs.glob("*.log") for line in path.read_text().splitlines()
                if f'"session": "{session}"' in line and '"event": "request"' in line]
    assert requests, f"no request of session {session} in the chaperon's audit log"


def test_under_umask_002_the_cache_hits(user, project):
    """Many sites give users umask 002: the state directory (made by the
    session registry before any plan) came out group-writable, which the
    cache never trusts — every launch compiled again."""
    user.set_config(BASE)
    state = user.home / ".local/state/agent-sandbox"
    shutil.rmtree(state / "cache", ignore_errors=True)
    state.chmod(0o775)
    (user.home / ".local/state").chmod(0o775)
    try:
        for _ in range(2):
            result = user.run([INSTALLED, "run", "--", "true"], cwd=project, umask=0o002)
            assert result.returncode == 0, result.stderr
        result = user.run([INSTALLED, "run", "--dry-run", "--", "true"], cwd=project,
                          umask=0o002)
        assert HIT in result.stdout, result.stdout
        assert state.stat().st_mode & 0o777 == 0o700
    finally:            # later tests (and other installs' caches) see the usual modes
        (user.home / ".local/state").chmod(0o755)
        state.chmod(0o700)


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "firejail"])
def test_a_cached_plan_equals_a_fresh_compile_and_runs_the_command_given(user, project,
                                                                         backend):
    """Each backend's plan has its command slot (firejail: the `argv`
    payload the helper reads): a hit's report equals a fresh compile's, and
    it runs exactly the arguments of this launch."""
    user.set_config(BASE)
    options = ("--backend", backend)
    report = fresh(user, project, *options)
    for _ in range(2):
        launch(user, project, *options)
    cached, source = dry_run(user, project, *options)
    assert source.startswith(HIT) and cached == report
    args = ["printf", "[%s]\\n", "a b", "", "--", "$HOME", "\u00e9"]
    result = user.sandbox(*args, options=options, cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[a b]\n[]\n[--]\n[$HOME]\n[\u00e9]\n", result.stdout
    assert user.sandbox("sh", "-c", "exit 7", options=options, cwd=project).returncode == 7


def _mounted(path: Path):
    """A tmpfs on `path` in the host's mount table for the `with` block."""
    class Mounted:
        def __enter__(self):
            path.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(path)],
                           check=True)

        def __exit__(self, *exc):
            subprocess.run(["umount", str(path)], check=True)
            path.rmdir()
    return Mounted()


def test_a_mount_elsewhere_keeps_the_plan_one_the_plan_asked_about_does_not(user, project):
    """A login node's mount table changes all the time (a home automounted
    for whoever logs in, expiring when idle): the bwrap plan's mount rules
    asked the table a few questions (policy/mountcost.py), and only a mount
    that answers one of them differently makes the next launch compile.
    Before, the whole table keyed the plan: every automount was a miss."""
    user.set_config(BASE)
    options = ("--backend", "bwrap")
    assert not any(line.split()[4].startswith("/opt/") for line in open("/proc/self/mountinfo")), \
        "this test needs a host without mounts below /opt (it mounts one there)"
    fresh(user, project, *options)
    launch(user, project, *options)
    report, source = dry_run(user, project, *options)
    assert source.startswith(HIT), source
    with _mounted(Path(f"/mnt/as-plancache-{os.getpid()}")):
        report_elsewhere, source = dry_run(user, project, *options)
        assert source.startswith(HIT), source
        assert report_elsewhere == report
    with _mounted(Path(f"/opt/as-plancache-{os.getpid()}")):
        changed, source = dry_run(user, project, *options)
        # /opt now carries a mount: its bind goes after the others.
        assert source.startswith(MISS), source
        assert changed != report and changed == fresh(user, project, *options)
