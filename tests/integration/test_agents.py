"""Real agents inside as outside (issue 17), with the real CLIs installed from
npm by scripts/test.sh (tests/integration/agent-versions.txt) and a mock
model API on loopback (agentmock.py), as an unprivileged user:

- Claude Code's Bash tool, Codex's and Gemini CLI's shell tools run inside,
  with the user's settings (or flags, environment) asking for their own
  sandbox: the tool result the mock receives shows the credentials hidden,
  nothing reaches the home;
- their own sandboxes are switched off by flags/env, never by editing files;
- choices persist (`codex login --with-api-key`), MCP servers added inside
  are dropped and reported; direct writes to the settings copy are merged
  back under the allow-list, never live during the session, also after a
  SIGKILLed launcher and with two sessions at once (stand-in agents);
- the executable that runs is the one the user's PATH names outside.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.agentmock import FINAL, MockAPI
from tests.support.agents import agent_env, run_agent, standin_env

# Agents on landlock on this Slurm host: the admin's word (issue 31).
pytestmark = pytest.mark.usefixtures("slurm_boundary_optional")

# ---------------------------------------------------------------- real CLIs, mock API
@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_claude_bash_tool_runs_inside_with_its_own_sandbox_off(user, project, home, clis,
                                                               backend):
    # The user's settings ask for Claude Code's own sandbox: it cannot nest in
    # ours (bwrap: "Creating new namespace failed"); the profile switches it
    # off on the command line and never edits the file.
    settings = user.write(".claude/settings.json", '{"sandbox": {"enabled": true}}\n')
    os.chown(home / ".claude", user.uid, user.gid)
    key = (home / ".ssh/id_rsa").read_text()
    with MockAPI() as api:
        result = run_agent(user, project, ["claude", "-p", "run the probe", "--allowedTools",
                                           "Bash"],
                           agent_env(user, clis, ANTHROPIC_BASE_URL=api.url,
                                     ANTHROPIC_API_KEY="sk-ant-mock", SANDBOX_BACKEND=backend))
        results = api.tool_results()
        bodies = [body for _, body in api.requests]
    assert result.returncode == 0, result.stderr
    assert FINAL in result.stdout
    assert len(results) == 1, (results, result.stderr)
    # Landlock cannot hide a path, it denies it.
    denied = "Permission denied" if backend == "landlock" else "No such file or directory"
    assert f"id_rsa: {denied}" in results[0] and "done-running" in results[0]
    assert "namespace" not in results[0]
    assert key not in json.dumps(bodies)
    assert not (home / "planted").exists()
    assert settings.read_text() == '{"sandbox": {"enabled": true}}\n'      # never edited
    system = json.dumps([b.get("system") for b in bodies])
    assert "You are running inside agent-sandbox" in system                # told
    # Its transcript lands in this project's entry of projects/, the only one
    # granted (AGENT_CONFIG_PER_PROJECT: the encoding is Claude Code's own).
    entry = "".join(c if c.isalnum() else "-" for c in str(project))
    assert [p.name for p in (home / ".claude/projects").iterdir()] == [entry]
    assert list((home / ".claude/projects" / entry).glob("*.jsonl")), result.stderr


def test_claude_through_a_listed_http_gateway_gets_the_real_key_added_outside(user, project,
                                                                             clis):
    """Issue 36 item 2: the user's http gateway on loopback (the mock API),
    listed in ALLOWED_HOSTS, receives Claude Code's requests through the
    broker, the real key added outside; inside, Claude had a placeholder."""
    real = "sk-ant-api03-GATEWAYREAL-" + "7" * 40
    with MockAPI() as api:
        port = api.url.rsplit(":", 1)[1]
        user.set_config(f"ALLOWED_HOSTS+=(127.0.0.1:{port})\n")
        env = agent_env(user, clis, ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY=real)
        env["NETWORK_MODE"] = "allowlist"
        try:
            result = run_agent(user, project, ["claude", "-p", "say hello"], env)
        finally:
            user.set_config("")
        headers = list(api.headers)
    assert result.returncode == 0, result.stderr
    assert FINAL in result.stdout
    assert headers and all(h.get("x-api-key") == real for h in headers), headers
    assert "is not used" not in result.stderr


def test_codex_exec_shell_tool_runs_inside_with_its_own_sandbox_off(user, project, home, clis):
    config = user.write(".codex/config.toml",
                        '# mine\nsandbox_mode = "workspace-write"\napproval_policy = "on-request"\n')
    os.chown(home / ".codex", user.uid, user.gid)
    before = config.read_text()
    with MockAPI() as api:
        result = run_agent(
            user, project,
            ["codex", "exec", "-m", "gpt-5", "--skip-git-repo-check",
             "-c", "model_provider=mock", "-c", "model_providers.mock.name=mock",
             "-c", f"model_providers.mock.base_url={api.url}/v1",
             "-c", "model_providers.mock.env_key=OPENAI_API_KEY",
             "-c", "model_providers.mock.supports_websockets=false", "run the probe"],
            agent_env(user, clis, OPENAI_API_KEY="sk-mock"))
        results = api.tool_results()
        sent = json.dumps([body for _, body in api.requests])
    assert result.returncode == 0, result.stderr
    assert "sandbox: danger-full-access" in result.stderr
    assert "You are running inside agent-sandbox" in sent and "danger-full-access" in sent  # told
    assert len(results) == 1, (results, result.stderr)
    assert "id_rsa: No such file or directory" in results[0] and "done-running" in results[0]
    assert not (home / "planted").exists()
    assert config.read_text() == before                                     # never edited


def test_gemini_shell_tool_runs_inside_with_its_own_sandbox_off(user, project, home, clis):
    # The user chose API-key auth and trusts the project (outside, before);
    # asks for Gemini's own sandbox by flag, environment and settings.
    user.write(".gemini/settings.json", json.dumps(
        {"security": {"auth": {"selectedType": "gemini-api-key"}},
         "tools": {"sandbox": True}}))
    user.write(".gemini/trustedFolders.json", json.dumps({str(project): "TRUST_FOLDER"}))
    with MockAPI() as api:
        result = run_agent(user, project,
                           ["gemini", "--sandbox", "-m", "gemini-2.5-flash", "-p", "run the probe",
                            "--yolo"],
                           agent_env(user, clis, GEMINI_API_KEY="mock-key", GEMINI_SANDBOX="true",
                                     GOOGLE_GEMINI_BASE_URL=api.url))
        results = api.tool_results()
    assert result.returncode == 0, result.stderr
    assert FINAL in result.stdout
    assert len(results) == 1, (results, result.stderr)
    assert "id_rsa: No such file or directory" in results[0] and "done-running" in results[0]
    assert not (home / "planted").exists()
    # Its chat lands in this project's registry entry (AGENT_CONFIG_PER_PROJECT),
    # registered by the launcher as Gemini would (the registry is read-only inside).
    slug = json.loads((home / ".gemini/projects.json").read_text())["projects"][str(project)]
    assert [p.name for p in (home / ".gemini/tmp").iterdir()] == [slug]
    assert (home / ".gemini/tmp" / slug / ".project_root").read_text() == str(project)
    assert list((home / ".gemini/tmp" / slug).rglob("*.json*")), result.stderr
    assert "projects.json" not in result.stderr     # the registry it rewrites: dropped quietly


def test_gemini_own_sandbox_stays_off_whatever_the_user_asks(user, project, home, clis):
    # Outside, GEMINI_SANDBOX=true with --sandbox would start docker/podman
    # (and fail here); inside, GEMINI_SANDBOX=false wins and Gemini goes on
    # to ask for its authentication.
    result = run_agent(user, project, ["gemini", "--sandbox", "-p", "hi"],
                       agent_env(user, clis, GEMINI_SANDBOX="true"), timeout=60)
    assert "failed to determine command for sandbox" not in result.stderr
    assert "Auth method" in result.stderr, result.stderr


# ---------------------------------------------------------------- persistence, real CLIs
def test_codex_login_with_api_key_persists(user, project, home, clis):
    # A login made inside persists for later sandboxed sessions (the
    # sandbox's login store), never written to the real auth.json until the
    # user adopts it outside (issue 27: a swapped login must not reach the
    # user's unsandboxed runs).
    env = agent_env(user, clis)
    result = run_agent(user, project, ["codex", "login", "--with-api-key"], env,
                       input="sk-kept-123\n")
    assert result.returncode == 0, result.stderr
    assert not (home / ".codex/auth.json").exists()
    assert "config adopt-login codex" in result.stderr
    again = run_agent(user, project, ["codex", "login", "status"], env)
    assert again.returncode == 0 and "API key" in again.stderr + again.stdout
    assert not list((home / ".local/state/agent-sandbox-run/agents").iterdir())     # copy removed
    adopt = run_agent(user, project, ["config", "adopt-login", "codex"], env)
    assert adopt.returncode == 0, adopt.stderr
    assert json.loads((home / ".codex/auth.json").read_text())["OPENAI_API_KEY"] == "sk-kept-123"


def test_mcp_servers_added_inside_are_dropped_and_reported(user, project, home, clis):
    env = agent_env(user, clis)
    user.write(".codex/config.toml", '# mine\nmodel = "gpt-5"\n')
    os.chown(home / ".codex", user.uid, user.gid)
    runs = {
        "claude": ["claude", "mcp", "add", "-s", "user", "evil", "--", "sh", "-c", "touch ~/planted"],
        "gemini": ["gemini", "mcp", "add", "-s", "user", "evil", "sh", "-c", "touch ~/planted"],
        "codex": ["codex", "mcp", "add", "evil", "--", "sh", "-c", "touch ~/planted"],
    }
    for name, argv in runs.items():
        result = run_agent(user, project, argv, env)
        assert result.returncode == 0, (name, result.stderr)
        assert f"{name}: dropped the session's changes to" in result.stderr, (name, result.stderr)
        assert "mcp" in result.stderr.lower()
    claude = json.loads((home / ".claude.json").read_text()) if (home / ".claude.json").exists() else {}
    assert "mcpServers" not in claude
    gemini = home / ".gemini/settings.json"
    assert not gemini.exists() or "evil" not in gemini.read_text()
    assert (home / ".codex/config.toml").read_text() == '# mine\nmodel = "gpt-5"\n'
    assert not (home / "planted").exists()


# ---------------------------------------------------------------- persistence, stand-ins
# A stand-in `claude` writes its settings copy the way Claude Code does: a
# choice (a model, a rule that runs nothing, a deny rule), grants (a Bash
# allow rule, trust) and what would run outside (a hook, a status line, an
# MCP server). It then says so and waits until the test releases it.
WRITER = """#!/bin/sh
for tag; do :; done
dir="$CLAUDE_CONFIG_DIR"
cat > "$dir/settings.json.new" <<EOF
{"permissions": {"allow": ["Read(./$tag/**)", "Bash(make-$tag)"], "deny": ["Bash(rm-$tag)"]},
 "model": "model-$tag",
 "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "touch ~/planted"}]}]},
 "statusLine": {"type": "command", "command": "touch ~/planted"}}
EOF
mv "$dir/settings.json.new" "$dir/settings.json"
printf '{"projects": {"%s": {"hasTrustDialogAccepted": true, "mcpServers": {"x": {"command": "sh"}}}}, "mcpServers": {"y": {"command": "sh"}}}' "$PWD" > "$dir/.claude.json"
touch "$PWD/written-$tag"
while [ ! -e "$PWD/release-$tag" ]; do sleep 0.05; done
echo finished
"""


@pytest.fixture
def writer(user, home):
    user.write("tools/bin/claude", WRITER, 0o755)
    user.write(".claude/settings.json", '{"theme": "mine", "model": "base"}\n', 0o600)
    os.chown(home / ".claude", user.uid, user.gid)
    return home


def start(user, project, argv, env):
    return subprocess.Popen([INSTALLED, *argv], user=user.uid, group=user.gid, extra_groups=[],
                            env=env, cwd=str(project), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(path: Path, process, what: str) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"{what} ended early: {process.communicate()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} never wrote {path.name}")
        time.sleep(0.05)


def settings_of(home: Path) -> dict:
    return json.loads((home / ".claude/settings.json").read_text())


def test_direct_writes_are_merged_under_the_allow_list_and_never_live(user, project, writer):
    home = writer
    process = start(user, project, ["claude", "A"], standin_env(user))
    wait_for(project / "written-A", process, "the session")
    # During the session: nothing the agent wrote is live outside.
    assert settings_of(home) == {"theme": "mine", "model": "base"}
    assert not (home / ".claude.json").exists() or "planted" not in (home / ".claude.json").read_text()
    (project / "release-A").touch()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert settings_of(home) == {"theme": "mine", "model": "model-A",
                                 "permissions": {"allow": ["Read(./A/**)"],
                                                 "deny": ["Bash(rm-A)"]}}
    # Trust is a grant (a trusted folder's .mcp.json runs): never merged back.
    assert not (home / ".claude.json").exists()
    # theme: the stand-in wrote its file without it; a deletion outside the
    # allow-list is dropped like any change; Bash(make-A) grants execution.
    assert ("dropped the session's changes to ~/.claude/settings.json: theme, "
            "permissions.allow, hooks, statusLine") in err
    assert "hasTrustDialogAccepted" in err
    assert "mcpServers" in err and not (home / "planted").exists()


def test_two_concurrent_sessions_each_keep_their_own_choices(user, project, writer):
    home = writer
    first = start(user, project, ["claude", "A"], standin_env(user))
    wait_for(project / "written-A", first, "session A")
    second = start(user, project, ["claude", "B"], standin_env(user))
    wait_for(project / "written-B", second, "session B")
    (project / "release-A").touch()
    assert first.wait(timeout=60) == 0
    # Between the two ends: A's choices are in, B's still only in its copy.
    assert settings_of(home)["model"] == "model-A"
    (home / ".claude/settings.json").write_text(
        json.dumps(dict(settings_of(home), theme="changed-by-user")))
    (project / "release-B").touch()
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    final = settings_of(home)
    # B changed model and added rules (from the same base as A): the session
    # ending last wins on the model, rules are added to the user's lists as
    # they are now; the user's edit meanwhile stays.
    assert final == {"theme": "changed-by-user", "model": "model-B",
                     "permissions": {"allow": ["Read(./A/**)", "Read(./B/**)"],
                                     "deny": ["Bash(rm-A)", "Bash(rm-B)"]}}
    assert "hooks" in err and not (home / "planted").exists()


LOCAL_WRITER = """#!/bin/sh
for tag; do :; done
printf '{"permissions": {"allow": ["Read(./**)"]}, "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "touch ~/planted"}]}]}}' > .claude/settings.local.json || echo local-settings-refused
touch "written-$tag"
while [ ! -e "release-$tag" ]; do sleep 0.05; done
"""


def test_allow_in_this_project_persists_through_a_bound_copy(user, project, home):
    # Claude Code saves "allow … in this project" in the project's
    # .claude/settings.local.json (by a rename beside it, or in place when
    # that fails on a mount point): a read-only placeholder lost it.
    user.write("tools/bin/claude", LOCAL_WRITER, 0o755)
    local = project / ".claude/settings.local.json"
    process = start(user, project, ["claude", "L"], standin_env(user))
    wait_for(project / "written-L", process, "the session")
    assert not local.exists() or json.loads(local.read_text()) == {}      # nothing live
    (project / "release-L").touch()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "local-settings-refused" not in out
    assert json.loads(local.read_text()) == {"permissions": {"allow": ["Read(./**)"]}}
    assert "dropped the session's changes to" in err and "hooks" in err


@pytest.mark.parametrize("later", [["status"], ["bash", "-c", "true"]], ids=["status", "launch"])
def test_a_sigkilled_launcher_copy_is_merged_under_the_guard_later(user, project, writer, later):
    home = writer
    process = start(user, project, ["claude", "K"], standin_env(user))
    wait_for(project / "written-K", process, "the session")
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    (project / "release-K").touch()     # the sandbox dies with its launcher anyway
    assert settings_of(home) == {"theme": "mine", "model": "base"}      # nothing applied
    records = list((home / ".local/state/agent-sandbox/agents").glob("*.json"))
    assert len(records) == 1
    status = user.run([INSTALLED, *later], cwd=project, env=standin_env(user))
    assert status.returncode == 0, status.stderr
    assert "left by a launcher that was killed" in status.stderr
    assert "hooks, statusLine" in status.stderr
    assert settings_of(home) == {"theme": "mine", "model": "model-K",
                                 "permissions": {"allow": ["Read(./K/**)"],
                                                 "deny": ["Bash(rm-K)"]}}
    assert not list((home / ".local/state/agent-sandbox/agents").glob("*.json"))
    assert not list((home / ".local/state/agent-sandbox-run/agents").iterdir())


CODEX_WRITER = """#!/bin/sh
cat > "$CODEX_HOME/config.toml" <<EOF
# mine
model = "gpt-5"  # favourite
notify = ["sh", "-c", "touch ~/planted"]

[projects."$PWD"]
trust_level = "trusted"

[projects."$PWD/old"]
trust_level = "untrusted"

[mcp_servers.evil]
command = "sh"
EOF
"""


def test_codex_config_keeps_model_and_revocations_and_the_users_comments(user, project, home):
    # The stand-in rewrites config.toml whole, without the user's own MCP
    # server: that deletion is not merged either. Trusting a project is a
    # grant (its .codex/config.toml is loaded): dropped; "untrusted" is kept.
    import tomllib

    user.write("tools/bin/codex", CODEX_WRITER, 0o755)
    config = user.write(".codex/config.toml",
                        '# mine\nmodel = "o3"  # favourite\n\n[mcp_servers.own]\ncommand = "mine"\n',
                        0o600)
    result = run_agent(user, project, ["codex"], standin_env(user))
    assert result.returncode == 0, result.stderr
    text = config.read_text()
    assert text.startswith('# mine\nmodel = "gpt-5"  # favourite\n'), text
    assert tomllib.loads(text) == {"model": "gpt-5",
                                   "mcp_servers": {"own": {"command": "mine"}},
                                   "projects": {f"{project}/old": {"trust_level": "untrusted"}}}
    assert "notify" in result.stderr and "mcp_servers" in result.stderr
    assert f'projects["{project}"].trust_level' in result.stderr


GEMINI_WRITER = """#!/bin/sh
d="$GEMINI_CLI_HOME/.gemini"
printf '{"security": {"auth": {"selectedType": "gemini-api-key"}}, "mcpServers": {"x": {"command": "sh"}}, "tools": {"discoveryCommand": "touch ~/planted"}}' > "$d/settings.json"
printf '{"%s": "TRUST_FOLDER", "/": "TRUST_PARENT", "%s/old": "DO_NOT_TRUST"}' "$PWD" "$PWD" > "$d/trustedFolders.json"
env | grep -E '^(GEMINI_SANDBOX|SANDBOX)='
"""


def test_gemini_keeps_auth_and_revocations_drops_commands_and_grants(user, project, home):
    user.write("tools/bin/gemini", GEMINI_WRITER, 0o755)
    result = run_agent(user, project, ["gemini"], standin_env(user, GEMINI_SANDBOX="docker"))
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["GEMINI_SANDBOX=false", "SANDBOX=agent-sandbox"]
    settings = json.loads((home / ".gemini/settings.json").read_text())
    assert settings == {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    trusted = json.loads((home / ".gemini/trustedFolders.json").read_text())
    assert trusted == {f"{project}/old": "DO_NOT_TRUST"}       # trusting is a grant: dropped
    assert "mcpServers, tools" in result.stderr and not (home / "planted").exists()


# ---------------------------------------------------------------- the same executable
NODE_AGENT = """#!/usr/bin/env mynode
console.log("agent=" + require("path").resolve(__filename));
console.log("dep=" + require("dep"));
"""


def test_an_agent_under_tools_bin_runs_inside_with_its_runtime(user, project, home):
    # ~/tools/bin/codex -> ../lib/node_modules/fake/bin/codex.js, a
    # `#!/usr/bin/env mynode` script whose runtime is ~/rt/bin/mynode: none
    # of it is visible in the tmpfs home, and another `codex` in ~/.local/bin
    # (visible inside) must never run in its place.
    package = home / "tools/lib/node_modules/fake"
    user.write("tools/lib/node_modules/fake/bin/codex.js", NODE_AGENT, 0o755)
    user.write("tools/lib/node_modules/dep/index.js", 'module.exports = "loaded";\n')
    user.write("rt/bin/mynode", '#!/bin/sh\nexec /usr/bin/node "$@"\n', 0o755)
    (home / "tools/bin").mkdir(parents=True, exist_ok=True)
    (home / "tools/bin/codex").symlink_to("../lib/node_modules/fake/bin/codex.js")
    other = user.write(".local/bin/codex", "#!/bin/sh\necho WRONG-CODEX\n", 0o755)
    try:
        for path in (home / "tools", home / "tools/bin"):
            os.chown(path, user.uid, user.gid)
        env = user.env(PATH=f"{home}/tools/bin:{home}/.local/bin:{home}/rt/bin:/usr/bin:/bin",
                       NETWORK_MODE="open", SANDBOX_QUIET="1")
        result = run_agent(user, project, ["codex", "--version"], env)
    finally:
        other.unlink()
    assert result.returncode == 0, result.stderr
    assert "WRONG-CODEX" not in result.stdout
    assert f"agent={package}/bin/codex.js" in result.stdout
    assert "dep=loaded" in result.stdout


def test_an_agent_whose_install_would_be_the_home_is_refused_naming_the_setting(user, project,
                                                                                home):
    user.write("codex", "#!/bin/sh\necho ran\n", 0o755)
    try:
        result = run_agent(user, project, ["codex"],
                           user.env(PATH=f"{home}:/usr/bin:/bin", SANDBOX_QUIET="1"))
    finally:
        (home / "codex").unlink()
    assert result.returncode == 125
    assert f"{home}/codex" in result.stderr and "HOME_READONLY" in result.stderr
    assert "ran" not in result.stdout


def test_npmrc_prefix_works_inside_its_tokens_stay_hidden(user, project, home):
    user.write(".npmrc", "prefix=${HOME}/npm-global\n"
                         "//registry.npmjs.org/:_authToken=npm_SECRETTOKEN123\n", 0o600)
    user.write("npm-global/bin/hello", "#!/bin/sh\necho hello-from-prefix\n", 0o755)
    result = run_agent(user, project,
                       ["bash", "-c", "npm config get prefix; hello; cat ~/.npmrc; env"],
                       user.env(PATH=f"{home}/npm-global/bin:/usr/bin:/bin", SANDBOX_QUIET="1"))
    assert result.stdout.splitlines()[0] == f"{home}/npm-global", result.stderr
    assert "hello-from-prefix" in result.stdout
    assert "SECRETTOKEN" not in result.stdout + result.stderr


COPY_PROBE = """#!/bin/sh
echo "dir=$CLAUDE_CONFIG_DIR"
if [ -e "$HOME/.claude/extra.md" ]; then
    cat "$HOME/.claude/extra.md"
    if (echo more >> "$HOME/.claude/extra.md") 2>/dev/null; then echo extra-writable
    else echo extra-read-only; fi
else echo no-extra; fi
for last; do :; done
echo "last=$last"
"""


def plan_line(user, project, env) -> str:
    result = run_agent(user, project, ["--dry-run", "claude"], env)
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("plan:"))


CACHE_HIT = "plan:      from the compiled plan cache"


def assert_cache_hit(user, project, env, launch) -> None:
    """The next launch comes from the plan cache. A system file another
    process changed meanwhile (/etc/passwd by a useradd, the mount table)
    makes a miss that is right: `launch` once more stores a plan for the new
    inputs, which must then hit; a miss for any input of the test's own
    (its home, its project) or a plan never stored fails at once."""
    line = plan_line(user, project, env)
    if line.startswith(CACHE_HIT):
        return
    changed = line.partition("compiled now (")[2].partition(" changed since")[0]
    assert changed.startswith("/") and not changed.startswith(
        (str(user.home) + "/", str(project) + "/")), line
    launch()
    line = plan_line(user, project, env)
    assert line.startswith(CACHE_HIT), line


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_a_cached_agent_launch_makes_its_own_session_copy(user, project, home, backend):
    """Issue 19: an agent's launch comes from the plan cache (its profile,
    resolved executable and session copy included), and each session still
    gets a copy of its own, gone at its end; an entry that appears in the
    agent's configuration directory is seen in the next launch, read-only,
    as a fresh compile shows it."""
    user.write("tools/bin/claude", COPY_PROBE, 0o755)
    user.write(".claude/settings.json", '{"model": "base"}\n', 0o600)
    env = standin_env(user, SANDBOX_BACKEND=backend)
    # The first launch makes the profile's AGENT_STATE entries, too new for
    # its compile to be stored (the plan cache's racy window).
    assert run_agent(user, project, ["claude"], env).returncode == 0
    outputs = []
    for attempt in range(3):
        if attempt:
            assert_cache_hit(user, project, env,
                             lambda: run_agent(user, project, ["claude", "again"], env))
        result = run_agent(user, project, ["claude", "a b", "", "--x"], env)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout.splitlines())
        assert outputs[-1][1:] == ["no-extra", "last=--x"], outputs[-1]
    copies = [lines[0].removeprefix("dir=") for lines in outputs]
    assert len(set(copies)) == 3, copies
    assert all(c.startswith(f"{home}/.local/state/agent-sandbox-run/agents/")
               for c in copies), copies
    assert not any(Path(c).exists() for c in copies)
    user.write(".claude/extra.md", "hello\n", 0o600)
    result = run_agent(user, project, ["claude", "z"], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == ["hello", "extra-read-only", "last=z"]
    assert (home / ".claude/extra.md").read_text() == "hello\n"


HISTORY_WRITER = """#!/bin/sh
for last; do :; done
echo "$last" >> "$CLAUDE_CONFIG_DIR/history.jsonl"
"""


def test_an_agent_that_keeps_its_history_still_hits_the_cache(user, project, home):
    """An agent writes its history (an AGENT_CONFIG_KEEP entry, moved back at
    the end): the next launch still comes from the plan cache — the compile
    asked only the entry's type (plancache TYPE), which a rewrite keeps."""
    user.write("tools/bin/claude", HISTORY_WRITER, 0o755)
    env = standin_env(user)
    for turn in ("one", "two", "three"):
        result = run_agent(user, project, ["claude", turn], env)
        assert result.returncode == 0, result.stderr
    assert (home / ".claude/history.jsonl").read_text() == "one\ntwo\nthree\n"
    assert plan_line(user, project, env).startswith(CACHE_HIT)


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_with_a_read_only_home_an_agent_without_a_memory_file_still_gets_its_note(
        user, project, home, backend):
    """HOME_ACCESS=read shows ~/.claude read-only from the host: bwrap could
    not make the note's mount point where the user keeps no CLAUDE.md
    ("Can't create file … Read-only file system", the launch refused). The
    missing note gets a placeholder like a protected path; it is gone after."""
    user.write("tools/bin/claude", "#!/bin/sh\ncat \"$CLAUDE_CONFIG_DIR/CLAUDE.md\"; true\n",
               0o755)
    user.write(".claude/settings.json", "{}\n", 0o600)
    os.chown(home / ".claude", user.uid, user.gid)
    assert not (home / ".claude/CLAUDE.md").exists()
    result = run_agent(user, project, ["--backend", backend, "claude"],
                       standin_env(user, HOME_ACCESS="read"))
    assert result.returncode == 0, result.stderr
    if backend == "bwrap":          # the one backend that binds the note (a payload)
        assert "You are running inside agent-sandbox" in result.stdout, result.stdout
    else:                           # nothing made in the user's home for them
        assert "No such file" in result.stderr, result.stderr
    assert not (home / ".claude/CLAUDE.md").exists()
