"""The inputs that decide a compiled plan (issue 19, "a cached plan must
never be weaker than a fresh one"): the derived caches, the installed code,
the backend probes, conf.d, every input changed in turn, edits within the
file system's timestamp granularity. Each test is one attack on an input
that decides the plan; it fails on the code the attack worked against. (The
programs run from PATH are test_path_lookup.py's.)

The derived caches (cache/config-*.marshal, seccomp.marshal,
boundfiles.marshal, probe-*.marshal) decide a compile as much as a plan
file does — the whole configuration, the seccomp program, the "no secret in
the bound files" verdict — and the plan recorder ignores them, so a compile
that used a planted one is then stored as the user's own trusted plan. They
must obey the plan file's rule: a file owned by another user, or that others
can write, is never used.
"""
from __future__ import annotations

import contextlib
import json
import marshal
import os
import shutil

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.install import INSTALLED, PREFIX
from tests.support.launcher import SECRET_ENV
from tests.support.procs import processes_of

HIT = "plan:      from the compiled plan cache"
MISS = "plan:      compiled now"
BASE = "CHAPERON=false\n"
# struct sock_filter {BPF_RET|BPF_K, 0, 0, SECCOMP_RET_ALLOW}: a program that denies nothing.
ALLOW_ALL = b"\x06\x00\x00\x00\x00\x00\xff\x7f"


def _cache(user):
    return user.home / ".local/state/agent-sandbox/cache"


@pytest.fixture
def clean_cache(user):
    """cache/ emptied before and after: a planted or poisoned file must not
    outlive its test (on code that trusts it, it would weaken the next ones)."""
    shutil.rmtree(_cache(user), ignore_errors=True)
    yield _cache(user)
    shutil.rmtree(_cache(user), ignore_errors=True)


def _launch(user, project, *options, env=None):
    result = user.run([INSTALLED, "run", *options, "--", "true"], cwd=project,
                      env=env or user.env())
    assert result.returncode == 0, result.stderr


def _dry_run(user, project, *options, env=None) -> str:
    result = user.run([INSTALLED, "run", "--dry-run", *options, "--", "true"], cwd=project,
                      env=env or user.env())
    assert result.returncode == 0, result.stderr
    return result.stdout


def _plant(path, data: bytes, how: str, user, other_user) -> None:
    """Replace `path` with `data`: a file another user wrote (`foreign`), or
    the user's own that everyone can write (`writable`)."""
    path.unlink(missing_ok=True)
    path.write_bytes(data)
    if how == "foreign":
        os.chown(path, other_user.pw_uid, other_user.pw_gid)
        path.chmod(0o644)
    else:
        os.chown(path, user.uid, user.gid)
        path.chmod(0o666)


@pytest.mark.parametrize("how", ["foreign", "writable"])
def test_a_configuration_cache_written_by_another_user_is_not_used(user, project, other_user,
                                                                   clean_cache, how):
    """Another user who can write the cache file (or a world-writable one)
    replaces the validated configuration: SECCOMP=false, HOME_ACCESS=write.
    The next compile must validate the configuration again (and the plan
    cache must not store the weaker plan as the user's own)."""
    user.set_config(BASE)
    _launch(user, project)
    _launch(user, project)
    assert HIT in _dry_run(user, project)
    [config] = _cache(user).glob("config-*.marshal")
    inputs, result = marshal.loads(config.read_bytes())
    values = dict(result[0], SECCOMP=False, HOME_ACCESS="write")
    _plant(config, marshal.dumps((inputs, (values,) + tuple(result[1:]))), how, user,
           other_user)
    shutil.rmtree(_cache(user) / "plans")
    report = _dry_run(user, project)
    assert MISS in report
    assert "SECCOMP=false" not in report and "(write)" not in report, report
    assert "yes     seccomp" in report, report


@pytest.mark.parametrize("how", ["foreign", "writable"])
def test_a_seccomp_program_written_by_another_user_is_not_loaded(user, project, probes,
                                                                 other_user, clean_cache, how):
    """The cached BPF program replaced by one that allows everything: the
    syscalls the policy denies must still answer EPERM."""
    user.set_config(BASE)
    _launch(user, project)
    program = _cache(user) / "seccomp.marshal"
    inputs, data = marshal.loads(program.read_bytes())
    assert isinstance(data, bytes) and len(data) > 8
    _plant(program, marshal.dumps((inputs, ALLOW_ALL)), how, user, other_user)
    shutil.rmtree(_cache(user) / "plans", ignore_errors=True)
    result = user.sandbox("/usr/bin/python3", probes / "syscalls.py", cwd=project)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {k: v for k, v in report["native"].items() if v != 1} == {}, report["native"]


@pytest.mark.parametrize("how", ["foreign", "writable"])
def test_a_bound_file_verdict_written_by_another_user_is_not_trusted(user, project,
                                                                     other_user, clean_cache,
                                                                     how):
    """A "clean" verdict planted for a ~/.bashrc that exports a token: the
    token must still be blanked inside."""
    token = "ghp_" + "b" * 36
    user.set_config(BASE + "HOME_ACCESS=read\n")
    bashrc = user.write(".bashrc", "# the user's bashrc\n")
    time.sleep(0.2)     # older than a tick: its clean verdict is kept
    try:
        _launch(user, project)
        verdict = _cache(user) / "boundfiles.marshal"
        inputs, answer = marshal.loads(verdict.read_bytes())
        assert answer == "clean"
        bashrc.write_text(f"export GITHUB_TOKEN={token}\n")
        stat = os.stat(bashrc, follow_symlinks=False)
        key = (stat.st_dev, stat.st_ino, stat.st_mode, stat.st_size, stat.st_mtime_ns,
               stat.st_ctime_ns)
        files = tuple((path, source, key if path == str(bashrc) else old)
                      for path, source, old in inputs[-1])
        assert any(path == str(bashrc) for path, _, _ in files), inputs
        _plant(verdict, marshal.dumps((inputs[:-1] + (files,), "clean")), how, user, other_user)
        shutil.rmtree(_cache(user) / "plans", ignore_errors=True)
        result = user.sandbox("cat", str(bashrc), cwd=project)
        assert token not in result.stdout, "the planted verdict let the token in"
    finally:
        user.write(".bashrc", "# test user's bashrc\n")


# A module of the installed package updated in place (a site's security fix,
# a `git pull` in a source-tree install): the session marker gains a line.
UPDATE = b"""

_marker_before_update = marker_payload


def marker_payload(policy):
    from agent_sandbox.backends.base import Payload

    return Payload(data=_marker_before_update(policy).data + b"updated=yes\\n")
"""


def _installed(relative: str) -> Path:
    result = subprocess.run([f"{PREFIX}/venv/bin/python", "-I", "-c",
                             "import agent_sandbox, os; print(os.path.dirname(agent_sandbox.__file__))"],
                            cwd="/", capture_output=True, text=True, check=True)
    return Path(result.stdout.strip()) / relative


def test_an_update_of_the_installed_code_is_in_force_at_the_next_launch(user, project):
    """The plan is a function of the code that compiled it, but the install
    stamp covers only __init__.py, plancache/plans.py and resolve.py: an update of
    any other module (backends, view, payloads, seccomp, envfilter…) left
    every cached plan in force, the old code's."""
    user.set_config(BASE)
    _launch(user, project)
    _launch(user, project)
    assert HIT in _dry_run(user, project)
    module = _installed("launch/payloads.py")
    original, before = module.read_bytes(), module.stat()
    try:
        module.write_bytes(original + UPDATE)
        result = user.sandbox("cat", "/run/agent-sandbox/session", cwd=project)
        assert result.returncode == 0, result.stderr
        assert "updated=yes" in result.stdout, "the cached plan of the old code ran"
    finally:
        module.write_bytes(original)
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))


def _processes_of(uid: int) -> int:
    """The user's processes as RLIMIT_NPROC counts them (zombies too), once
    none but zombies is left: a chaperon or proxy of an earlier test still
    ending (they are stopped without waiting) would make the count one too
    high by the time the launch runs."""
    import time

    deadline = time.monotonic() + 20
    while True:
        states = [fields.get("State", "")[:1] for fields in processes_of(uid)]
        if all(state == "Z" for state in states) or time.monotonic() > deadline:
            return len(states)
        time.sleep(0.05)


def test_a_backend_probe_that_failed_for_lack_of_resources_is_not_remembered(user, project,
                                                                            clean_cache):
    """One launch made while the user's processes are at their limit (an
    agent in another session forking up to RLIMIT_NPROC, a job's cgroup):
    bwrap cannot make its namespaces (EAGAIN), auto falls back to a weaker
    backend — and the failed probe was cached until the next reboot, so
    every later launch (and the plans the cache stores from them) ran on
    landlock although bwrap works again."""
    user.set_config(BASE)
    # The count holds zombies, which this machine's init reaps when it gets
    # to them: one reaped between the count and the launch leaves bwrap the
    # room the limit was to take away. Counted again until the squeeze holds.
    for _ in range(5):
        shutil.rmtree(clean_cache, ignore_errors=True)
        limit = _processes_of(user.uid) + 2     # the launcher and one child, not bwrap's own
        squeezed = user.run(["prlimit", f"--nproc={limit}", INSTALLED, "run", "--dry-run",
                             "--", "true"], cwd=project)
        # (landlock, where auto lands, is refused on this Slurm host: the
        # refusal names auto's reason too — issue 31)
        if "bwrap probe failed" in squeezed.stdout + squeezed.stderr:
            break
    assert "bwrap probe failed" in squeezed.stdout + squeezed.stderr, \
        squeezed.stdout + squeezed.stderr
    report = _dry_run(user, project)
    assert "backend:   bwrap" in report, report.splitlines()[1]



def test_a_credential_the_sandbox_removes_is_not_written_to_disk(user, project):
    """GH_TOKEN, AWS_SECRET_ACCESS_KEY, VAULT_TOKEN: the environment filter
    keeps them out of the sandbox and agent-sandbox held them in memory only.
    The plan cache's key holds the caller's whole environment, values
    included, so every launch with a distinct environment leaves a file in
    the state directory with the credentials, never removed (home snapshots,
    backups, a token revoked long ago). Comparing a digest of the
    environment decides the same."""
    user.set_config(BASE)
    shutil.rmtree(_cache(user), ignore_errors=True)
    _launch(user, project)
    _launch(user, project)
    assert HIT in _dry_run(user, project)
    state = user.home / ".local/state"
    found = [(name, str(path)) for path in state.rglob("*") if path.is_file()
             for name in ("GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "VAULT_TOKEN")
             if SECRET_ENV[name].encode() in path.read_bytes()]
    assert found == []



@pytest.mark.parametrize("how", ["relative", "symlink"])
def test_a_conf_d_file_applies_to_the_project_it_matches_not_to_the_same_spelling(
        user, project, how):
    """conf.d's PROJECT_MATCH is decided on the project's real path, but the
    validated configuration was cached under the --project-dir string: a
    launch with `--project-dir .` (or through a symlink retargeted since) in
    another project got the matched project's settings — here a trusted
    project's HOME_ACCESS=read, the home readable in an untrusted one."""
    trusted, other = project / "trusted", project / "other"
    for path in (trusted, other):
        path.mkdir()
        os.chown(path, user.uid, user.gid)
    confd = user.home / ".config/agent-sandbox/conf.d"
    shutil.rmtree(confd, ignore_errors=True)
    user.set_config(BASE)
    user.write(".config/agent-sandbox/conf.d/trusted.conf",
               f"PROJECT_MATCH=({trusted})\nHOME_ACCESS=read\n")
    link = project / "current"
    try:
        if how == "relative":
            spelling, first, second = ".", trusted, other
        else:
            link.symlink_to(trusted)
            spelling, first, second = str(link), project, project
        report = user.run([INSTALLED, "run", "--dry-run", "--project-dir", spelling, "--",
                           "true"], cwd=first).stdout
        assert "(read)" in report.split("home:", 1)[1].splitlines()[0], report
        if how == "symlink":
            link.unlink()
            link.symlink_to(other)
        report = user.run([INSTALLED, "run", "--dry-run", "--project-dir", spelling, "--",
                           "true"], cwd=second).stdout
        assert f"project:   {other} " in report, report
        assert "(tmpwrite)" in report.split("home:", 1)[1].splitlines()[0], report
    finally:
        link.unlink(missing_ok=True)
        shutil.rmtree(confd, ignore_errors=True)


# ---------------------------------------------------------------- full-plan equivalence
# Run as the user with the installed interpreter: the plan the cache would
# give this launch (None on a miss) and a fresh compile's (no cache of any
# kind), each with its session id masked, compared as a whole — argv, every
# payload's bytes, the environment's values, the policy — not the --dry-run
# text, which prints neither payloads nor variable values.
ORACLE = '''
import json, os, sys
from agent_sandbox.launch import run as launch
from agent_sandbox.plancache.plans import Cache, freeze, thaw

NEW = "c0ffeec0ffee"

def canonical(value, session):
    return freeze(thaw(freeze(value), lambda s: s.replace(session, "<session>"),
                       lambda b: b.replace(session.encode(), b"<session>"), {}))

def differences(a, b, where=""):
    if type(a) is not type(b) or not isinstance(a, tuple) or len(a) != len(b):
        return [] if a == b else [f"{where}: {a!r:.300} != {b!r:.300}"]
    return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}/{i}")]

cache = Cache((None, None, (), False, False, None), os.environ, launch.environ_home())
loaded = cache.load(NEW, "0badf00d")
# Fresh means fresh: no derived cache either (configuration, seccomp program,
# bound-file verdict, probe), whose staleness the plan would inherit.
import agent_sandbox.config.load as confload
confload.load_cache = lambda path, inputs: None
confload.store_cache = lambda path, inputs, result: None
prepared = launch.prepare(["true"], project_dir=None, backend=None, environ=os.environ,
                          command_slot=True)
fresh = {"policy": prepared.policy, "plan": prepared.plan, "denied": prepared.denied,
         "placeholders": prepared.placeholders, "chaperon": None}
print(json.dumps({"hit": loaded is not None, "differences": [] if loaded is None else
                  differences(canonical(loaded, NEW),
                              canonical(fresh, prepared.policy.session_id))}))
'''


def _oracle(user, project) -> dict:
    script = user.project / "plan-oracle.py"
    if not script.exists():
        script.write_text(ORACLE)
        script.chmod(0o644)
    result = user.run([f"{PREFIX}/venv/bin/python", str(script)], cwd=project)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_each_input_changed_in_turn_gives_exactly_the_fresh_plan(user, project, admin):
    """The inputs test_plancache's equivalence test does not change, each in
    turn, compared on the whole plan: after each change the cache either
    misses or gives exactly what a fresh compile gives."""
    azure = user.home / ".azure"
    confd = user.home / ".config/agent-sandbox/conf.d"
    shutil.rmtree(azure, ignore_errors=True)
    shutil.rmtree(confd, ignore_errors=True)
    user.set_config(BASE + "PRIVATE_TMP=false\n")
    dotgit = project / ".git"

    def own(*paths):
        for path in paths:
            os.chown(path, user.uid, user.gid)

    def git_repository():
        (dotgit / "hooks").mkdir(parents=True)
        (dotgit / "config").write_text("[core]\n\tbare = false\n")
        (dotgit / "HEAD").write_text("ref: refs/heads/main\n")
        own(dotgit, dotgit / "hooks", dotgit / "config", dotgit / "HEAD")

    def submodule():
        module = dotgit / "modules" / "lib"
        module.mkdir(parents=True)
        (module / "HEAD").write_text("ref: refs/heads/main\n")
        own(module.parent, module, module / "HEAD")

    def conf_d():
        confd.mkdir()
        (confd / "review.conf").write_text(f"PROJECT_MATCH=({project})\nHOME_ACCESS=restricted\n")
        own(confd, confd / "review.conf")

    changes = [
        ("an admin floor is added", lambda: admin("PRIVATE_TMP=true\n")),
        ("a conf.d file matches the project", conf_d),
        ("a credential directory appears", lambda: (azure.mkdir(), own(azure))),
        ("the project becomes a git repository", git_repository),
        ("a submodule's gitdir appears", submodule),
        ("the seeded ~/.gitconfig changes (same size)",
         lambda: user.write(".gitconfig", "[user]\n\tname = Evil User\n")),
    ]
    try:
        for name, change in changes:
            _launch(user, project)
            _launch(user, project)
            assert _oracle(user, project) == {"hit": True, "differences": []}, name
            change()
            after = _oracle(user, project)
            assert after["differences"] == [], (name, after["differences"])
    finally:
        shutil.rmtree(azure, ignore_errors=True)
        shutil.rmtree(confd, ignore_errors=True)
        user.write(".gitconfig", "[user]\n\tname = Test User\n")
        (user.project / "plan-oracle.py").unlink(missing_ok=True)


# ---------------------------------------------------------------- coarse timestamps
@contextlib.contextmanager
def _coarse_mount(user, scratch, target):
    """`target` on a file system whose times have whole seconds (ext4 with
    128-byte inodes, as ext3, Lustre and some NFS servers give): a loop
    mount, owned by the user, for one test."""
    image = scratch / "coarse.img"
    with open(image, "wb") as handle:
        handle.truncate(16 << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "128", str(image)],
                          capture_output=True, text=True)
    assert made.returncode == 0, f"mkfs.ext4 (e2fsprogs) is needed: {made.stderr}"
    target.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(target)],
                             capture_output=True, text=True)
    assert mounted.returncode == 0, f"a loop mount is needed: {mounted.stderr}"
    try:
        os.chown(target, user.uid, user.gid)
        target.chmod(0o755)
        shutil.rmtree(target / "lost+found", ignore_errors=True)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.fixture
def coarse_config_dir(user, tmp_path):
    """~/.config/agent-sandbox on a whole-second file system."""
    with _coarse_mount(user, tmp_path, user.home / ".config/agent-sandbox") as target:
        yield target


def _within_one_second(steps, same) -> None:
    """Run `steps` (returning a value) at the start of a second until
    `same(value)` says they all happened within it (the file system's tick);
    a machine too slow for that fails the test, never passes it."""
    for _attempt in range(8):
        time.sleep(1.02 - time.time() % 1)
        if same(steps()):
            return
    pytest.fail("could not compile and edit within one second (machine too slow)")


def test_a_same_size_edit_in_the_same_second_as_the_compile_is_seen(user, project,
                                                                   coarse_config_dir):
    """RACY_NS (100 ms) is one clock tick of a local file system, but where
    times have whole seconds a file written at S.9 carries the time S.0: a
    compile at S.95 trusted it, stored its plan, and an edit of the same size
    later in that second (written in place) left every fingerprint equal —
    the cache kept hiding the old directory and showed the new one."""
    data_a, data_b = user.home / "data-a", user.home / "data-b"
    for directory in (data_a, data_b):
        shutil.rmtree(directory, ignore_errors=True)
        user.write(f"{directory.name}/secret", f"secret of {directory.name}\n", 0o600)
    config = coarse_config_dir / "sandbox.conf"

    def write_config(hidden) -> None:
        with open(config, "w") as handle:      # in place: the same inode
            handle.write(f"{BASE}HOME_ACCESS=read\nEXTRA_BLOCKED_PATHS+=({hidden})\n")
        os.chown(config, user.uid, user.gid)

    def compile_and_edit():
        write_config(data_a)
        before = os.stat(config)
        time.sleep(0.15)        # older than RACY_NS for the compile
        _launch(user, project)  # compiles (and stores, on the old code): data-a hidden
        write_config(data_b)    # same size, same second
        return before, os.stat(config)

    try:
        write_config(data_b)
        _launch(user, project)      # the probe and the derived caches are in place
        _within_one_second(compile_and_edit, lambda stats: len({
            (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for st in stats}) == 1)
        result = user.sandbox("cat", str(data_b / "secret"), cwd=project)
        assert "secret of data-b" not in result.stdout, "the cached plan of the old config ran"
    finally:
        shutil.rmtree(data_a, ignore_errors=True)
        shutil.rmtree(data_b, ignore_errors=True)


def test_a_bound_file_verdict_is_not_kept_for_a_same_size_edit_in_its_second(user, project,
                                                                           tmp_path,
                                                                           clean_cache):
    """The bound-file verdict cache ("no secret in any of them", by stat) had
    no racy rule at all: on a whole-second file system a file checked clean
    and then given a token of the same size within that second kept its
    verdict, and every later launch — fresh compile or not — bound it as it
    is."""
    token = "ghp_" + "c" * 36
    secret_line = f"export GH_TOKEN={token}\n"
    clean_line = "#" * (len(secret_line) - 1) + "\n"
    with _coarse_mount(user, tmp_path, user.home / "coarse") as coarse:
        rc = coarse / "rc"
        user.set_config(BASE + "HOME_READONLY+=(coarse/rc)\n")

        def write(text) -> None:
            with open(rc, "w") as handle:      # in place: the same inode
                handle.write(text)
            os.chown(rc, user.uid, user.gid)

        def check_and_edit():
            write(clean_line)
            before = os.stat(rc)
            time.sleep(0.15)
            _launch(user, project)              # reads rc: clean
            write(secret_line)                  # same size, same second
            return before, os.stat(rc)

        write(clean_line)
        _launch(user, project)                  # the probe and the other caches
        _within_one_second(check_and_edit, lambda stats: len({
            (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for st in stats}) == 1)
        result = user.sandbox("cat", str(rc), cwd=project)
        assert token not in result.stdout, "the kept 'clean' verdict let the token in"
