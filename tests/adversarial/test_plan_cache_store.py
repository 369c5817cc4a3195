"""The compiled plan cache's store (issue 19, "a cached plan must never be
weaker than a fresh one"): the private directories made at the load, the
environment template, eviction in a state directory another user may swap.
Each test is one attack and fails on the code it was found against.
"""
from __future__ import annotations

import os
import stat

HIT = "plan:      from the compiled plan cache"


def test_making_a_directory_private_does_not_follow_a_symbolic_link(tmp_path, monkeypatch):
    """_private_dir looked at the directory with lstat, then chmod-ed it BY
    NAME, which follows a symbolic link: another user who can rename in its
    parent (a group-writable ~/.local/state or state directory, umask 002)
    swaps the directory for a link between the two calls, and the launcher
    sets mode 0700 on any file or directory of the user's it names — a
    group's shared project made private, a data file made executable. The
    chmod must apply to the directory that was checked (its descriptor,
    opened with O_NOFOLLOW), or not at all."""
    from agent_sandbox.plancache import plans as plancache

    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o775)                     # made by another part under umask 002
    victim = tmp_path / "shared-project"
    victim.mkdir()
    victim.chmod(0o2775)
    real_lstat = os.lstat

    def swapping_lstat(path, *args, **kwargs):
        result = real_lstat(path, *args, **kwargs)
        if os.fspath(path) == str(state):  # the attacker's rename, right after the check
            os.rename(state, tmp_path / "moved")
            os.symlink(victim, state)
        return result

    monkeypatch.setattr(plancache.os, "lstat", swapping_lstat)
    assert not plancache._private_dir(str(state))
    monkeypatch.setattr(plancache.os, "lstat", real_lstat)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o2775


def test_a_plan_whose_environment_cannot_be_templated_is_not_stored(tmp_path):
    """template() takes the values the plan keeps from the launch's
    environment (an agent's API key) out of the stored plan; but when the
    `env` payload is not exactly the policy's environment it gave up and
    returned the launch unchanged, and store() wrote it — the key in clear
    in ~/.local/state, for every distinct environment, never removed. No
    backend builds such a payload today, but one that adds a variable to
    it, or a caller (profile caching) that changes the policy's
    environment after the plan, would silently write every kept secret to
    disk. Such a plan must not be stored (compiled at every launch)."""
    from agent_sandbox.backends.base import Payload, Plan, env_payload
    from agent_sandbox.plancache import plans as plancache

    secret = "sk-ant-api03-review2-0123456789"
    environ = {"ANTHROPIC_API_KEY": secret, "PATH": "/usr/bin:/bin"}
    policy = Plan(backend="x", argv=(), payloads={}, env=dict(environ), provides=(),
                  cannot=(), spawn_ruleset=None)       # any NamedTuple with an `env`
    payload = env_payload(dict(environ, EXTRA="added by the backend"))
    plan = Plan(backend="firejail", argv=("/usr/bin/firejail",),
                payloads={"env": Payload(data=payload.data)}, env={"PATH": "/usr/bin:/bin"},
                provides=(), cannot=(), spawn_ruleset=None)
    cache = plancache.Cache(("/proj", None, (), False, False), environ, str(tmp_path))
    recorder = plancache.Recorder()
    cache.store(recorder, {"policy": policy, "plan": plan}, "0123456789ab", None)
    written = [path for path in tmp_path.rglob("*") if path.is_file()
               and secret.encode() in path.read_bytes()]
    assert written == []


def test_a_swapped_state_directory_cannot_redirect_the_store_or_the_eviction(tmp_path,
                                                                             monkeypatch):
    """This round dropped the check of ~/.local/state, which umask 002
    leaves group-writable, and added the eviction. Store checked the state,
    cache and plans directories by name, then wrote, renamed and evicted by
    name: another user of the group renames ~/.local/state/agent-sandbox
    away right after the checks and puts a link in its place, and the
    launcher writes its plan into, and evicts from, the `cache/plans` the
    link leads to — any directory of the user's (a link at the attacker's
    own cache/plans): every *.tmp file older than a minute there deleted,
    the oldest *.marshal beyond 64 too. (The swap is done here right when
    the temporary file is opened, the moment a racing attacker aims for.)
    The store must work on the directory it checked (descriptors)."""
    from agent_sandbox.backends.base import Plan
    from agent_sandbox.plancache import plans as plancache
    from agent_sandbox.paths import state_dir

    home = tmp_path / "home"
    state = os.fspath(state_dir(str(home)))
    os.makedirs(os.path.join(state, "cache", "plans"), mode=0o700)
    victim = tmp_path / "work"                   # a directory of the user's, with old temporaries
    victim.mkdir()
    for name in ("draft.tmp", "results.marshal"):
        (victim / name).write_text("the user's\n")
        os.utime(victim / name, (1000, 1000))
    attacker = tmp_path / "attacker"
    (attacker / "cache").mkdir(parents=True)
    (attacker / "cache" / "plans").symlink_to(victim)

    real_open = os.open

    def swapping_open(path, *args, **kwargs):
        if os.fspath(path).endswith(".tmp") and not os.path.islink(state):
            os.rename(state, state + ".real")
            os.symlink(attacker, state)
        return real_open(path, *args, **kwargs)

    policy = Plan(backend="x", argv=(), payloads={}, env={"A": "b"}, provides=(), cannot=(),
                  spawn_ruleset=None)
    cache = plancache.Cache(("/proj", None, (), False, False), {}, str(home))
    monkeypatch.setattr(plancache.os, "open", swapping_open)
    cache.store(plancache.Recorder(), {"policy": policy}, "0123456789ab", None)
    monkeypatch.setattr(plancache.os, "open", real_open)
    assert sorted(p.name for p in victim.iterdir()) == ["draft.tmp", "results.marshal"]
