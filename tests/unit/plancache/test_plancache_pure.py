"""plancache/plans.py without a sandbox: plain-data round trip, fingerprints,
what the recorder notes and when it gives up, which cache files it trusts."""
from __future__ import annotations

import os
import subprocess

from agent_sandbox.backends.base import FdRef, Payload, Plan
from agent_sandbox.plancache import plans as plancache
from agent_sandbox.plancache.plans import CONTENT, META, TYPE, Cache, Recorder, freeze, thaw

SID, NEW = "0123456789ab", "ba9876543210"


def _thaw(value):
    return thaw(value, lambda s: s.replace(SID, NEW), lambda b: b.replace(SID.encode(),
                                                                           NEW.encode()), {})


def test_a_plan_survives_the_round_trip_with_the_session_substituted():
    plan = Plan(backend="bwrap", argv=("/usr/bin/bwrap", FdRef("marker", "--fd "), f"/x/{SID}"),
                payloads={"marker": Payload(data=f"session={SID}\n".encode())},
                env={"A": SID}, provides=("fs.hidden",), cannot=(("x", "y"),),
                spawn_ruleset={"paths": [("ro", "/")]})
    back = _thaw(freeze({"plan": plan, "set": frozenset({"a"})}))
    # A record, not the class (a hit imports none of the plan's modules),
    # with the same fields, equal to the original as a tuple.
    assert back["plan"]._fields == Plan._fields and back["plan"].argv[1] == FdRef("marker",
                                                                                  "--fd ")
    assert back["plan"].argv[1].name == "marker" and back["plan"].argv[1].prefix == "--fd "
    assert back["plan"]._replace(backend="x").backend == "x"
    assert back["plan"].argv[2] == f"/x/{NEW}" and back["plan"].env == {"A": NEW}
    assert back["plan"].payloads["marker"].data == f"session={NEW}\n".encode()
    assert back["plan"].spawn_ruleset == {"paths": [("ro", "/")]}
    assert back["set"] == frozenset({"a"})


def test_only_named_tuples_of_this_package_are_rebuilt():
    import collections

    Foreign = collections.namedtuple("Foreign", "a")
    try:
        freeze(Foreign(1))
        raise AssertionError("a foreign class was frozen")
    except plancache.Uncacheable:
        pass
    for name, fields in (("os:stat_result", ("a",)), ("agent_sandbox.x:Y", ("_bad",)),
                         ("agent_sandbox.x:Y", ("a b",)), ("agent_sandbox.x:Y", ("a", "a")),
                         ("agent_sandbox.x:Y", ())):
        try:
            _thaw((2, name, fields, (1,) * len(fields)))
            raise AssertionError(name)
        except (ValueError, AttributeError, TypeError):
            pass
    try:
        _thaw((2, "agent_sandbox.x:Y", ("a", "b"), (1,)))    # fields and items differ
        raise AssertionError("a record with a missing item")
    except ValueError:
        pass


def test_a_record_is_rebuilt_without_importing_its_module():
    import sys

    record = _thaw((2, "agent_sandbox.no_such_module:Plan", ("backend", "argv"),
                    ("bwrap", (0, ("a",)))))
    assert record.backend == "bwrap" and record.argv == ("a",)
    assert "agent_sandbox.no_such_module" not in sys.modules


def test_a_directory_only_stated_is_fingerprinted_without_its_times(tmp_path):
    meta, content = plancache.fingerprint(str(tmp_path), META), plancache.fingerprint(
        str(tmp_path), CONTENT)
    (tmp_path / "new").write_text("x")
    assert plancache.fingerprint(str(tmp_path), META) == meta
    assert plancache.fingerprint(str(tmp_path), CONTENT) != content


def test_a_file_is_fingerprinted_by_size_and_times(tmp_path):
    path = tmp_path / "f"
    path.write_text("a")
    before = plancache.fingerprint(str(path), META)
    path.write_text("b")
    os.utime(path, ns=(1, 1))
    assert plancache.fingerprint(str(path), META) != before   # ctime moved
    assert plancache.fingerprint(str(tmp_path / "missing"))[0] == 2   # ENOENT


def test_the_recorder_notes_what_a_compile_observes(tmp_path):
    (tmp_path / "f").write_text("x")
    old = os.path.getmtime(tmp_path / "f") - 10
    os.utime(tmp_path / "f", (old, old))
    with Recorder() as recorder:
        os.path.exists(tmp_path / "a")
        os.stat(tmp_path / "b", follow_symlinks=False) if os.path.lexists(tmp_path / "b") else 0
        os.access(tmp_path / "c", os.R_OK)
        with open(tmp_path / "f") as handle:
            handle.read()
        os.listdir(tmp_path)
    seen = set(recorder.seen)
    assert (str(tmp_path / "a"), TYPE) in seen and (str(tmp_path / "f"), CONTENT) in seen
    assert (str(tmp_path / "b"), TYPE) in seen and (str(tmp_path / "c"), META) in seen
    assert (str(tmp_path), CONTENT) in seen
    assert os.stat is recorder._real["stat"] and os.path.exists.__module__ == "genericpath"


def test_a_class_body_that_copies_os_open_while_recording_still_works(tmp_path):
    """Python 3.9's pathlib, imported for the first time inside a compile,
    copies os.open & co. into its accessor class: the recorder's stand-ins
    must not turn into methods there (Debian 11's launcher died with
    "open() takes at most 3 positional arguments (4 given)"; issue 30)."""
    (tmp_path / "f").write_text("x")
    with Recorder() as recorder:
        class Accessor:
            open = os.open
            stat = os.stat
        fd = Accessor().open(str(tmp_path / "f"), os.O_RDONLY, 0o666)
        os.close(fd)
        assert Accessor().stat(str(tmp_path / "f")).st_size == 1
    assert (str(tmp_path / "f"), CONTENT) in set(recorder.seen)


def test_a_file_rewritten_by_rename_is_the_same_to_type_questions_only(tmp_path):
    """os.path's type questions (and realpath) are recorded by type: an
    agent's history rewritten through a rename (new inode, size and times)
    does not make the next launch a miss through them; a stat of it does,
    and so does a change of type or of a link's target."""
    history, link = tmp_path / "history.jsonl", tmp_path / "link"
    history.write_text("a\n")
    link.symlink_to(history)
    with Recorder() as typed:
        os.path.isfile(history)
        os.path.realpath(link)
    with Recorder() as stated:
        os.stat(history)
    (tmp_path / "new").write_text("a\nb\n")
    os.replace(tmp_path / "new", history)
    assert all(plancache.fingerprint(p, k) == v for (p, k), v in typed.seen.items())
    assert any(plancache.fingerprint(p, k) != v for (p, k), v in stated.seen.items())
    link.unlink()
    link.symlink_to(tmp_path / "elsewhere")
    assert any(plancache.fingerprint(p, k) != v for (p, k), v in typed.seen.items())
    history.unlink()
    history.mkdir()
    assert plancache.fingerprint(str(history), TYPE) == ("type", 0o040000)


def test_the_recorder_gives_up_on_a_process_a_descriptor_lookup_or_a_racy_file(tmp_path):
    with Recorder() as recorder:
        subprocess.run(["true"])
    assert not recorder.cacheable and "process" in recorder.why
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with Recorder() as recorder:
            os.stat("x", dir_fd=fd) if os.path.exists(tmp_path / "x") else None
            try:
                os.open("x", os.O_RDONLY, dir_fd=fd)
            except OSError:
                pass
        assert not recorder.cacheable
    finally:
        os.close(fd)
    (tmp_path / "fresh").write_text("just written")
    with Recorder() as recorder:
        open(tmp_path / "fresh").close()
    assert not recorder.cacheable and "changed" in recorder.why


def test_paused_and_ignored_paths_are_not_noted(tmp_path):
    with Recorder(ignore=(str(tmp_path / "skip"),)) as recorder:
        os.path.exists(tmp_path / "skip" / "x")
        with recorder.pause():
            os.path.exists(tmp_path / "paused")
    assert recorder.seen == {}


def test_an_agents_session_copies_are_not_noted(tmp_path):
    # The plan cache names no agents/ module (it sits below them): the copies
    # directory is skipped because it lies in the run directory, which is.
    from agent_sandbox.agents.copy import copy_root, copies_dir

    home = str(tmp_path)
    with Recorder(ignore=Cache(("opts",), {}, home).ignore(home)) as recorder:
        os.path.exists(copies_dir(home))
        os.path.exists(os.path.join(copy_root(home, "0" * 12), "settings.json"))
    assert recorder.seen == {}


def _cache_and_recorder(tmp_path, monkeypatch):
    """A cache slot below tmp_path and a recorder that saw one settled path."""
    monkeypatch.setattr("agent_sandbox.paths.state_dir", lambda home: str(tmp_path / "state"))
    (tmp_path / "state").mkdir(mode=0o700)
    cache = Cache(("opts",), {"A": "1"}, str(tmp_path))
    old = os.path.getmtime(tmp_path) - 10
    os.utime(tmp_path, (old, old))
    with Recorder() as recorder:
        os.path.isdir(tmp_path)
    return cache, recorder


def test_a_cache_file_not_the_users_own_or_writable_by_others_is_a_miss(tmp_path, monkeypatch):
    cache, recorder = _cache_and_recorder(tmp_path, monkeypatch)
    cache.store(recorder, {"x": (SID, 1)}, SID, None)
    assert cache.load(NEW, "00000000") == {"x": (NEW, 1)}
    os.chmod(cache.path, 0o620)
    assert cache.load(NEW, "00000000") is None
    os.chmod(cache.path, 0o600)
    os.chmod(cache.directory, 0o770)
    assert cache.load(NEW, "00000000") is None
    os.chmod(cache.directory, 0o700)
    assert Cache(("other",), {"A": "1"}, str(tmp_path)).load(NEW, "0" * 8) is None
    with open(cache.path, "r+b") as handle:
        handle.write(b"\x00garbage")
    assert cache.load(NEW, "00000000") is None


def test_a_whole_second_time_is_racy_for_two_seconds():
    """A file system that keeps whole seconds gives the next change the
    same time for up to a second (FAT: two): such a file is not trusted for
    that long; a fine-grained time for RACY_NS."""
    recorder = Recorder()
    now = recorder.racy + plancache.RACY_NS
    second = now - now % 1_000_000_000
    assert recorder._racy(second) and recorder._racy(second - 1_000_000_000)
    assert not recorder._racy(second - 3_000_000_000)
    assert recorder._racy(now - 1) and not recorder._racy(now - plancache.RACY_NS - 1)


def test_a_record_frozen_again_is_stored_as_its_original():
    plan = Plan(backend="bwrap", argv=("/usr/bin/bwrap", FdRef("marker")), payloads={},
                env={}, provides=(), cannot=())
    frozen = freeze(plan)
    assert freeze(_thaw(frozen)) == frozen


def _launch(env: dict, payload_env: bool):
    from agent_sandbox.backends.base import env_payload

    policy = Plan(backend="x", argv=(), payloads={}, env=dict(env), provides=(), cannot=(),
                  spawn_ruleset=None)       # any NamedTuple with an `env`
    payloads = {"env": env_payload(env)} if payload_env else {}
    plan = Plan(backend="bwrap", argv=("/usr/bin/bwrap", "/home/u/proj"), payloads=payloads,
                env=dict(env, EXTRA="set by the plan"), provides=(), cannot=(),
                spawn_ruleset=None)
    return {"policy": policy, "plan": plan}


def test_the_environment_template_keeps_no_value_taken_from_the_environment():
    """An API key the plan keeps from the launch's environment is not in
    the stored data; a hit puts the launch's own value back exactly."""
    secret = "sk-ant-api03-0123456789abcdef"
    environ = {"ANTHROPIC_API_KEY": secret, "PATH": "/usr/bin:/bin", "HOME": "/home/u",
               "REMOVED": "never kept"}
    for payload_env in (False, True):
        launch = _launch({"ANTHROPIC_API_KEY": secret, "PATH": "/usr/bin:/bin",
                          "HOME": "/home/u", "SANDBOX_SET": "by the config"}, payload_env)
        stored, names = plancache.template(launch, environ)
        assert names == ("ANTHROPIC_API_KEY", "HOME", "PATH")
        frozen = plancache.marshal.dumps(freeze(stored))
        assert secret.encode() not in frozen and b"/usr/bin:/bin" not in frozen
        assert b"by the config" in frozen and b"set by the plan" in frozen
        back = plancache.filled(_thaw(freeze(stored)), environ)
        assert back["policy"] == launch["policy"] and back["plan"] == launch["plan"]


def test_a_hit_without_a_templated_variable_is_a_miss():
    environ = {"OPENAI_API_KEY": "sk-0123456789"}
    stored, names = plancache.template(_launch(dict(environ), True), environ)
    assert names == ("OPENAI_API_KEY",)
    try:
        plancache.filled(_thaw(freeze(stored)), {})
    except KeyError:
        pass
    else:
        raise AssertionError("a launch without the variable must not be a hit")


def test_an_env_payload_that_is_not_the_policys_environment_keeps_everything():
    """A payload whose bytes are not exactly the policy's environment cannot
    be made again from it: nothing is taken out (and the plan is exact),
    and names is None when a value came from the environment (not stored:
    tests/adversarial/test_plan_cache_store.py)."""
    environ = {"KEY": "value-1234"}
    launch = _launch(dict(environ), True)
    launch["plan"] = launch["plan"]._replace(payloads={"env": Payload(data=b"KEY=other")})
    stored, names = plancache.template(launch, environ)
    assert names is None and stored == launch
    stored, names = plancache.template(launch, {})
    assert names == () and stored == launch


def test_the_cache_keeps_at_most_max_plans_and_removes_stale_temporaries(tmp_path):
    for i in range(plancache.MAX_PLANS + 5):
        path = tmp_path / f"{i:08x}.marshal"
        path.write_bytes(b"x")
        os.utime(path, (1000 + i, 1000 + i))
    (tmp_path / "a.marshal.1.tmp").write_bytes(b"x")
    os.utime(tmp_path / "a.marshal.1.tmp", (1, 1))
    (tmp_path / "b.marshal.2.tmp").write_bytes(b"x")     # a store under way
    kept = tmp_path / "ffffffff.marshal"
    kept.write_bytes(b"new")
    os.utime(kept, (1, 1))          # the one just stored stays, whatever its time
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        plancache._evict(fd, kept.name)
    finally:
        os.close(fd)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len([n for n in left if n.endswith(".marshal")]) == plancache.MAX_PLANS
    assert "ffffffff.marshal" in left and f"{0:08x}.marshal" not in left
    assert f"{plancache.MAX_PLANS + 4:08x}.marshal" in left
    assert "a.marshal.1.tmp" not in left and "b.marshal.2.tmp" in left


def test_directories_made_under_umask_002_are_made_private_and_missed_once(tmp_path):
    """Directories another part of the launcher made group-writable (umask
    002) would make every later load a miss: the load makes them 0700 (and
    misses this once); missing ones are made 0700."""
    state = tmp_path / "state"
    old = os.umask(0o002)
    try:
        (state / "cache").mkdir(parents=True, mode=0o775)
        assert not plancache._private_dir(str(state))
        assert plancache._private_dir(str(state))
        assert plancache._private_dir(str(state / "cache" / "plans"))
    finally:
        os.umask(old)
    for path in (state, state / "cache" / "plans"):
        assert path.stat().st_mode & 0o777 == 0o700
    (state / "link").symlink_to(state)
    assert not plancache._private_dir(str(state / "link"))


def test_a_hit_marks_its_plan_used_so_the_eviction_keeps_it(tmp_path, monkeypatch):
    """The eviction removes the least recently *used* plans: a hit touches
    its file (at most once an hour), so a burst of job plans does not flush
    the interactive ones."""
    cache, recorder = _cache_and_recorder(tmp_path, monkeypatch)
    cache.store(recorder, {"x": (SID, 1)}, SID, None)
    os.utime(cache.path, (1000, 1000))
    assert cache.load(NEW, "00000000") == {"x": (NEW, 1)}
    used = os.path.getmtime(cache.path)
    assert used > 1000 + 3600
    os.utime(cache.path, (used - 60, used - 60))      # used within the hour: left alone
    assert cache.load(NEW, "00000000") is not None
    assert os.path.getmtime(cache.path) == used - 60


def test_a_long_proc_file_is_fingerprinted_whole(tmp_path):
    """/proc/self/mountinfo of a login node runs past 64 KiB: a mount that
    changes beyond the first 64 KiB changes the fingerprint too (and a long
    table is kept as a digest, not copied into every cache file)."""
    table = tmp_path / "mountinfo"
    lines = [f"{i} 1 0:{i} / /mnt/m{i} rw - nfs server:/x rw\n" for i in range(3000)]
    table.write_text("".join(lines))
    assert table.stat().st_size > 1 << 16
    before = plancache._pseudo_fingerprint(str(table))
    lines[-1] = lines[-1].replace("rw - nfs", "ro - nfs")
    table.write_text("".join(lines))
    after = plancache._pseudo_fingerprint(str(table))
    assert before != after and before[0] == "digest" and len(before[1]) == 32
    assert plancache._pseudo_fingerprint(str(table)) == after


def test_the_mount_table_is_keyed_by_the_answers_the_plan_got(tmp_path, monkeypatch):
    """A login node's mount table changes all the time (automounted homes):
    the plan's rules asked it two kinds of question (mountinfo.py), and a hit
    asks them again — a mount elsewhere is still a hit, one that answers a
    question differently is a miss. Before, the whole table was the key."""
    table = tmp_path / "mountinfo"
    row = "{0} 1 0:{0} / {1} rw - tmpfs tmpfs rw\n"
    table.write_text(row.format(1, "/") + row.format(2, "/sys") + row.format(3, "/sys/fs/cgroup"))
    cache, recorder = _cache_and_recorder(tmp_path, monkeypatch)
    kind = ("mounts", (("carries", "/sys"), ("carries", "/opt"), ("between", "/opt", "/opt/as")))
    with recorder:
        recorder.derived(str(table), kind, (True, False, False))
    assert recorder.seen[(str(table), kind)] == (True, False, False)
    cache.store(recorder, {"x": (SID, 1)}, SID, None)
    assert cache.load(NEW, "00000000") is not None
    with open(table, "a") as handle:
        handle.write(row.format(4, "/home/alice"))
    assert cache.load(NEW, "00000000") is not None
    with open(table, "a") as handle:
        handle.write(row.format(5, "/opt/apps"))
    assert cache.load(NEW, "00000000") is None
    with plancache.Paused(recorder):      # a paused recorder notes nothing
        recorder.derived(str(table), ("mounts", ()), ())
    assert (str(table), ("mounts", ())) not in recorder.seen


def test_a_hit_renews_the_tokens_random_per_launch_in_strings_and_bytes(tmp_path, monkeypatch):
    """An egress proxy's placeholder key is the session's own (agentlaunch.renewed):
    each hit gets a new one wherever the plan holds it; a token that is not
    its fixed part and hex digits is a miss."""
    cache, recorder = _cache_and_recorder(tmp_path, monkeypatch)
    token = "sk-agentsandbox" + "ab" * 20
    cache.store(recorder, {"env": {"K": token}, "data": b"k=" + token.encode()}, SID, None,
                renewed=((token, "sk-agentsandbox"),))
    first, second = cache.load(NEW, "00000000"), cache.load(NEW, "00000000")
    for hit in (first, second):
        assert hit["env"]["K"].startswith("sk-agentsandbox") and hit["env"]["K"] != token
        assert len(hit["env"]["K"]) == len(token)
        assert hit["data"] == b"k=" + hit["env"]["K"].encode()
    assert first["env"]["K"] != second["env"]["K"]
    for fixed in ("sk-other", "sk-agentsandbox" + "ab" * 19 + "a"):
        cache.store(recorder, {"x": 1}, SID, None, renewed=((token, fixed),))
        assert cache.load(NEW, "00000000") is None, fixed


def test_a_stat_in_another_thread_during_a_type_question_stays_metadata(tmp_path):
    """The type-only fingerprint applies to the thread asking os.path's
    question: another thread's os.stat meanwhile is recorded in full."""
    import threading

    (tmp_path / "f").write_text("x")
    with Recorder() as recorder:
        other = threading.Thread(target=lambda: None)
        other.start()
        other.join()
        recorder.typed[other.ident] = 1      # that thread inside os.path.isdir
        os.stat(tmp_path / "f")
        os.path.isdir(tmp_path / "g")
    assert (str(tmp_path / "f"), META) in recorder.seen
    assert (str(tmp_path / "g"), TYPE) in recorder.seen


def test_a_class_that_keeps_a_patched_call_as_its_attribute_still_calls_it(tmp_path):
    """Python 3.9's pathlib keeps `open = os.open` on its accessor class: a
    pathlib first imported while a compile records got the wrapper, which a
    Python function would bind to the instance (TypeError: open() takes at
    most 3 positional arguments) — every launch of a 3.9 install failed
    (the smoke set under 3.9, tests/integration/test_python_smoke.py)."""
    target = tmp_path / "f"
    target.write_text("x")
    with Recorder() as recorder:
        class Accessor:        # made while recording, as pathlib's was
            open = os.open
            stat = os.stat
            listdir = os.listdir
        fd = Accessor().open(str(target), os.O_RDONLY)
        os.close(fd)
        assert Accessor().stat(str(target)).st_size == 1
        assert Accessor().listdir(str(tmp_path)) == ["f"]
    assert any(str(target) == key[0] for key in recorder.seen)
