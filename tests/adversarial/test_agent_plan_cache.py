"""Attack review of agent profile launches served by the compiled plan cache
(issue 19: "a cached plan must never be weaker than a fresh compile", and no
secret in a cache file). The agents are stand-in shell scripts under
~/tools/bin, run by an unprivileged user on the real backends. Each test is
one attack and fails on the code it was found against (95d0ea3).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.install import ADMIN_DIR, INSTALLED, PREFIX

# Agents on landlock on this Slurm host: the admin's word (issue 31).
pytestmark = pytest.mark.usefixtures("slurm_boundary_optional")

HIT = "plan:      from the compiled plan cache"


def _agent(user, project, env, *args, dry_run=False):
    argv = [INSTALLED, *(["--dry-run"] if dry_run else []), "claude", *args]
    result = user.run(argv, cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _stored(home: Path) -> bytes:
    plans = home / ".local/state/agent-sandbox/cache/plans"
    return b"".join(p.read_bytes() for p in plans.iterdir() if p.is_file())


KEY_PROBE = """#!/bin/sh
echo "key=$ANTHROPIC_API_KEY"
"""


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_cached_agent_launch_gets_a_placeholder_key_of_its_own(user, project, home,
                                                                 backend):
    """The egress proxy brokers the API key: inside, the key variable holds a
    placeholder, random per session (docs/network.md: "new every session"),
    the one value the broker route takes. A hit reused the compile's — the
    same placeholder in every cached session, and on disk in the cache file
    for as long as the plan was used —, where a fresh compile makes a new
    one. Each hit must make its own (in the environment and the proxy's
    spec alike), and none of them, nor the real key, is in a cache file."""
    user.write("tools/bin/claude", KEY_PROBE, 0o755)
    real = "sk-ant-api03-" + os.urandom(16).hex()
    env = user.env(PATH=f"{home}/tools/bin:/usr/local/bin:/usr/bin:/bin",
                   SANDBOX_BACKEND=backend, ANTHROPIC_API_KEY=real)
    _agent(user, project, env)     # makes the AGENT_STATE entries (too new to store)
    keys = []
    for attempt in range(3):
        if attempt:
            assert HIT in _agent(user, project, env, dry_run=True), attempt
        out = _agent(user, project, env).splitlines()
        assert out[0].startswith("key=sk-ant-api03-agentsandbox"), out
        keys.append(out[0].removeprefix("key="))
    assert len({len(k) for k in keys}) == 1, keys
    assert len(set(keys)) == 3, keys
    stored = _stored(home)
    assert real.encode() not in stored
    assert not any(k.encode() in stored for k in keys[1:]), "a hit's placeholder is on disk"


NOTE_PROBE = """#!/bin/sh
cat "$HOME/.claude/CLAUDE.md" 2>&1
echo "exit-of-probe"
"""


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_a_secret_in_the_agents_note_file_lands_in_no_cache_file(user, project, home, backend):
    """The profile's note is appended to the user's own ~/.claude/CLAUDE.md,
    whose text went into the note payload as read — after the bound-file
    check had found a token in that file and blanked it (bwrap), so the
    stored plan held the token in clear in a cache file (and bwrap, given
    both the blanked file and the note at that path, failed to start).
    The note stands in for the blanked file, with its text: no token in the
    cache, none inside, the user's notes and the sandbox's note both there."""
    token = "ghp_" + os.urandom(18).hex()
    user.write(".claude/CLAUDE.md", f"my notes\nexport GH_TOKEN={token}\n", 0o600)
    user.write("tools/bin/claude", NOTE_PROBE, 0o755)
    env = user.env(PATH=f"{home}/tools/bin:/usr/local/bin:/usr/bin:/bin",
                   SANDBOX_BACKEND=backend, NETWORK_MODE="open")
    for attempt in range(3):     # the first makes the AGENT_STATE entries (too new to store)
        if attempt == 2 and backend == "bwrap":
            # (elsewhere the file is skipped, hidden after the session copy
            # read the hidden paths: such a launch is not stored)
            assert HIT in _agent(user, project, env, dry_run=True)
        out = _agent(user, project, env)
        assert "exit-of-probe" in out and token not in out, out
        if backend == "bwrap":    # blanked (elsewhere the file is not bound: SPEC §6)
            assert "my notes" in out and "You are running inside agent-sandbox" in out, out
    for path in (home / ".local/state/agent-sandbox").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), f"the token is in {path}"


# ---------------------------------------------------------------- full-plan equivalence
# Run as the user with the installed interpreter: what a hit of `agent-sandbox
# claude` would run (the stored launch, its session copy made again and
# compared: agentlaunch.from_cache; None on a miss or a stale copy) and a
# fresh compile's (no derived cache either), compared as a whole — argv,
# every payload's bytes, the environment's values, the policy — with each
# one's session id and the egress placeholder keys masked.
AGENT_ORACLE = '''
import json, os, pwd, re
from agent_sandbox.agents import copy as agentcopy
from agent_sandbox.services import egress
from agent_sandbox.launch import run as launch
from agent_sandbox.agents.launch import AgentLaunch, Stale, from_cache
from agent_sandbox.plancache.plans import Cache, freeze, thaw

NEW = "c0ffeec0ffee"
KEY = re.compile(r"agentsandbox[0-9a-f]{40}")
BKEY = re.compile(KEY.pattern.encode())

def canonical(value, session):
    return freeze(thaw(freeze(value), lambda s: KEY.sub("<key>", s.replace(session, "<session>")),
                       lambda b: BKEY.sub(b"<key>", b.replace(session.encode(), b"<session>")),
                       {}))

def differences(a, b, where=""):
    if type(a) is not type(b) or not isinstance(a, tuple) or len(a) != len(b):
        return [] if a == b else [f"{where}: {a!r:.300} != {b!r:.300}"]
    return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}/{i}")]

FIELDS = ("policy", "plan", "denied", "placeholders")
records = []
cache = Cache((None, None, (), False, False, "claude"), os.environ, launch.environ_home())
loaded = cache.load(NEW, "0badf00d")
if loaded is not None:
    try:
        from_cache(AgentLaunch("claude", [], dry_run=False), loaded, records)
    except Stale:
        loaded = None
import agent_sandbox.config.load as confload
confload.load_cache = lambda path, inputs: None
confload.store_cache = lambda path, inputs, result: None
entry = pwd.getpwuid(os.getuid())
agent = AgentLaunch("claude", [], dry_run=False)
profile = agent.load(os.environ, entry.pw_dir, entry.pw_name)

def copy(policy):
    spec = agentcopy.spec_for(profile, policy.home)
    if spec is None:
        return policy
    made, record = agentcopy.start(spec, policy, note_path=profile.note_path)
    records.append(record)
    return made

prepared = launch.prepare(agent.command, project_dir=None, backend=None, environ=os.environ,
                          profile=profile, agent_copy=copy,
                          egress=lambda s, p, prof: egress.plan(s, p, prof)
                          if egress.wanted(p) else None,
                          command_slot=True)
for record in records:
    agentcopy.finish(record)
fresh = {"policy": prepared.policy, "plan": prepared.plan, "denied": prepared.denied,
         "placeholders": prepared.placeholders}
print(json.dumps({"hit": loaded is not None, "differences": [] if loaded is None else
                  differences(canonical({f: loaded[f] for f in FIELDS}, NEW),
                              canonical(fresh, prepared.policy.session_id))}))
'''


def _oracle(user, project, env) -> dict:
    script = user.project / "agent-plan-oracle.py"
    script.write_text(AGENT_ORACLE)
    script.chmod(0o644)
    result = user.run([f"{PREFIX}/venv/bin/python", str(script)], cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


SETTINGS = '{"model": "base"}\n'


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_each_agent_input_changed_in_turn_gives_exactly_the_fresh_plan(user, project, home,
                                                                       backend):
    """What an agent's launch reads besides the configuration — the
    executable on PATH and its runtime, the profile, ~/.npmrc, the agent's
    configuration directory and note, the project's agent settings — each
    changed in turn: the next launch misses, or gives exactly what a fresh
    compile gives."""
    key = "sk-ant-api03-" + "k" * 20
    env = user.env(PATH=f"{home}/tools/bin2:{home}/tools/bin:/usr/local/bin:/usr/bin:/bin",
                   SANDBOX_BACKEND=backend, ANTHROPIC_API_KEY=key,
                   NETWORK_MODE="open" if backend == "landlock" else None)
    user.set_config("CHAPERON=false\n")
    user.write("tools/bin/claude", "#!/bin/sh\necho hello\n", 0o755)
    (home / "tools/bin2").mkdir()
    os.chown(home / "tools/bin2", user.uid, user.gid)
    user.write(".claude/settings.json", SETTINGS, 0o600)
    user.write(".claude/CLAUDE.md", "my notes\n", 0o600)
    user.write("npm-global/lib/node_modules/.keep", "", 0o644)
    admin_profile = ADMIN_DIR / "agents" / "claude.conf"

    def hidden_settings():
        (home / ".claude/settings.json").unlink()
        (home / ".claude/settings.json").symlink_to(home / ".ssh/id_rsa")
        os.chown(home / ".claude/settings.json", user.uid, user.gid, follow_symlinks=False)

    def project_settings_link():
        (project / ".claude").mkdir(exist_ok=True)
        local = project / ".claude/settings.local.json"
        local.unlink(missing_ok=True)
        local.symlink_to("/etc/hostname")
        os.chown(project / ".claude", user.uid, user.gid)
        os.chown(local, user.uid, user.gid, follow_symlinks=False)

    made = [d for d in (ADMIN_DIR, admin_profile.parent) if not d.exists()]
    shipped = next(Path(PREFIX).glob(
        "venv/lib/python3*/site-packages/agent_sandbox/conf/agents/claude.conf")).read_text()

    def admin_override():
        admin_profile.parent.mkdir(parents=True, exist_ok=True)
        admin_profile.write_text(shipped + "HOME_READONLY+=(npm-global)\n")

    changes = [
        ("a claude earlier on PATH",
         lambda: user.write("tools/bin2/claude", "#!/bin/sh\necho other\n", 0o755)),
        ("the executable runs with another #!/usr/bin/env runtime",
         lambda: user.write("tools/bin2/claude", "#!/usr/bin/env python3\nprint(1)\n", 0o755)),
        ("a user profile overrides the shipped one",
         lambda: user.write(".config/agent-sandbox/agents/claude.conf",
                            shipped + "ALLOWED_HOSTS+=(example.org)\nAGENT_STATE+=(.claude/x/)\n")),
        ("~/.npmrc names a prefix", lambda: user.write(".npmrc", "prefix=~/npm-global\n")),
        ("a new entry in the configuration directory",
         lambda: user.write(".claude/rules.md", "x\n", 0o600)),
        ("a new entry the profile keeps writable",
         lambda: user.write(".claude/history.jsonl", "{}\n", 0o600)),
        ("an entry becomes a symlink",
         lambda: ((home / ".claude/rules.md").unlink(),
                  (home / ".claude/rules.md").symlink_to(home / ".bashrc"))),
        ("the guarded settings become a link to a hidden file", hidden_settings),
        ("the note file changes (same size)",
         lambda: user.write(".claude/CLAUDE.md", "my NOTES\n", 0o600)),
        ("the project's agent settings become a symlink", project_settings_link),
        ("an admin profile takes the shipped one's place", admin_override),
        # last: a file the check skips (firejail, landlock) is never stored
        ("the note file gains a token",
         lambda: user.write(".claude/CLAUDE.md", f"t=ghp_{os.urandom(18).hex()}\n", 0o600)),
    ]
    try:
        for name, change in changes:
            for _ in range(3):     # stored once nothing is too new (the racy window)
                assert user.run([INSTALLED, "claude"], cwd=project, env=env).returncode == 0
                if _oracle(user, project, env)["hit"]:
                    break
            assert _oracle(user, project, env) == {"hit": True, "differences": []}, name
            change()
            after = _oracle(user, project, env)
            assert after["differences"] == [], (name, after["differences"])
    finally:
        admin_profile.unlink(missing_ok=True)
        for directory in reversed(made):
            if directory.exists():
                directory.rmdir()
        (user.project / "agent-plan-oracle.py").unlink(missing_ok=True)


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_gateway_url_with_credentials_lands_in_no_cache_file(user, project, home, backend):
    """ANTHROPIC_BASE_URL set outside names a gateway, which becomes the
    broker's upstream; its URL can hold the gateway's credentials (a
    token in its path). The plan
    cache keeps no value of the environment (the template) — but the stored
    egress plan held the upstream in clear in the cache file."""
    user.write("tools/bin/claude", KEY_PROBE, 0o755)
    secret = os.urandom(12).hex()
    env = user.env(PATH=f"{home}/tools/bin:/usr/local/bin:/usr/bin:/bin",
                   SANDBOX_BACKEND=backend, ANTHROPIC_API_KEY="sk-ant-api03-" + "r" * 24,
                   ANTHROPIC_BASE_URL=f"https://gateway.example/t/{secret}/anthropic")
    for attempt in range(3):
        if attempt == 2:
            assert HIT in _agent(user, project, env, dry_run=True)
        assert _agent(user, project, env).startswith("key=sk-ant-api03-agentsandbox")
    for path in (home / ".local/state/agent-sandbox").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the gateway's secret is in {path}"
