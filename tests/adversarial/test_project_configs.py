"""Agents' and editors' project configuration (issue 27 §2), for real on every
backend as the unprivileged user: what Claude Code, Codex, Gemini CLI,
opencode, VS Code … load from a project directory and obey outside the
sandbox (names.PROJECT_CONFIGS).

- At the project's root, whatever profile runs (a plain `run`, or a claude
  session planting Codex's notify): refused inside on bwrap and firejail;
  on landlock (no read-only carve in the project) each is reported when the
  session ends, with the command that removes it.
- In a subdirectory (Claude Code started in `sub/` obeys
  `sub/.claude/settings.json`): reported at the end on every backend — and
  after a SIGKILLed launcher by `agent-sandbox status` or the next launch.
- opencode's plugins/ in its writable state (~/.config/opencode): refused.

On the code before the table, every root write succeeded in a `run` session
(and .codex/config.toml in a claude one), nothing was reported, and
opencode's plugins/ was writable."""
from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from tests.support.install import INSTALLED
from tests.support.homes import clear_entries
from tests.support.launcher import kill_launcher_when_ready

# Agents on landlock on this Slurm host: the admin's word (issue 31).
pytestmark = pytest.mark.usefixtures("slurm_boundary_optional")

BACKENDS = ["bwrap", "firejail", "landlock"]
HOOK = ('{"hooks": {"SessionStart": [{"hooks": [{"type": "command", '
        '"command": "touch $M/PLANTED"}]}]}}')
# name → (the file, what goes in it); each prints NAME=planted or NAME=refused.
ROOT_PLANTS = {
    "claude_settings": (".claude/settings.json", HOOK),
    "claude_skill": (".claude/skills/x/SKILL.md", "---\nallowed-tools: Bash\n---\n"),
    "mcp": (".mcp.json", '{"mcpServers": {"x": {"command": "touch $M/PLANTED"}}}'),
    "codex": (".codex/config.toml", 'notify = ["touch", "$M/PLANTED"]'),
    "gemini": (".gemini/settings.json", HOOK),
    "opencode": ("opencode.json", '{"plugin": ["file://$M/PLANTED.js"]}'),
    "opencode_plugin": (".opencode/plugins/p.js", "require('fs').writeFileSync('$M/PLANTED')"),
    "vscode": (".vscode/tasks.json", '{"tasks": [{"command": "touch $M/PLANTED"}]}'),
}


def plant_script(plants: dict) -> str:
    lines = ['try() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$n=planted"; '
             'else echo "$n=refused"; fi; }',
             'w() { mkdir -p "$(dirname "$1")" && printf "%s" "$2" > "$1"; }']
    for name, (path, content) in plants.items():
        lines.append(f"try {name} w {shlex.quote(path)} {shlex.quote(content)}")
    return "\n".join(lines) + "\n"


def outcome(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.split() if "=" in line)


def remedies(stderr: str) -> dict[str, list[str]]:
    """file → the removal command, from the end-of-session report."""
    found = {}
    for line in stderr.splitlines():
        if line.startswith("agent-sandbox: agent config:") and "remove it: " in line:
            command = shlex.split(line.split("remove it: ", 1)[1])
            found[command[-1]] = command
    return found


def planted_anywhere(project) -> list[str]:
    """Files of the project that still hold a planted marker."""
    hits = []
    for root, _, files in os.walk(project):
        for name in files:
            path = os.path.join(root, name)
            try:
                if "PLANTED" in open(path, errors="replace").read():
                    hits.append(path)
            except OSError:
                pass
    return hits


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_session_cannot_plant_agent_configuration_at_the_root(user, project, backend):
    result = user.sandbox("/bin/sh", "-c", plant_script(ROOT_PLANTS).replace("$M", "/tmp"),
                          env=user.env(SANDBOX_BACKEND=backend), cwd=project)
    assert result.returncode == 0, result.stderr
    verdicts = outcome(result.stdout)
    assert set(verdicts) == set(ROOT_PLANTS), result.stdout
    if backend == "landlock":       # detection only: each reported, with its removal
        assert set(verdicts.values()) == {"planted"}, verdicts
        found = remedies(result.stderr)
        for path, _ in ROOT_PLANTS.values():
            assert str(project / path) in found, (path, result.stderr)
        assert "touch /tmp/PLANTED" in result.stderr      # what it would run, named
        for command in found.values():
            assert command[0] == "rm", command
            assert user.run(command, cwd=project).returncode == 0, command
    else:
        assert set(verdicts.values()) == {"refused"}, (verdicts, result.stderr)
        assert "agent config:" not in result.stderr, result.stderr
    assert planted_anywhere(project) == []


CLAUDE = """#!/bin/sh
mkdir -p .codex sub/.claude
if printf 'notify = ["touch", "/tmp/PLANTED"]\\n' > .codex/config.toml 2>/dev/null; then
  echo codex=planted; else echo codex=refused; fi
printf '%s' '""" + HOOK.replace("$M", "/tmp") + """' > sub/.claude/settings.json \
  && echo nested=planted
"""


@pytest.fixture
def fake_claude(user):
    entries = (".claude", ".claude.json", "tools", ".cache/agent-sandbox")
    clear_entries(user.home, entries)
    user.write("tools/bin/claude", CLAUDE, 0o755)
    yield user.home / "tools/bin"
    clear_entries(user.home, entries)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_claude_session_cannot_plant_codex_config_and_nested_settings_are_reported(
        user, project, fake_claude, backend):
    result = user.run([INSTALLED, "--backend", backend, "claude"], cwd=project,
                      env=user.env(PATH=f"{fake_claude}:/usr/bin:/bin", NETWORK_MODE="open"))
    assert result.returncode == 0, result.stderr
    verdicts = outcome(result.stdout)
    assert verdicts["nested"] == "planted", result.stdout   # no backend can refuse it
    found = remedies(result.stderr)
    nested = str(project / "sub/.claude/settings.json")
    assert found.get(nested) == ["rm", "--", nested], result.stderr
    assert "touch /tmp/PLANTED" in result.stderr and "Claude Code" in result.stderr
    codex = str(project / ".codex/config.toml")
    if backend == "landlock":
        assert verdicts["codex"] == "planted" and codex in found, result.stderr
    else:
        assert verdicts["codex"] == "refused" and codex not in found, result.stderr
    for command in found.values():
        assert user.run(command, cwd=project).returncode == 0, command
    assert planted_anywhere(project) == []


def _killed_session(user, project, backend, name: str) -> None:
    """A session plants `name`/.claude/settings.json, then its launcher is SIGKILLed."""
    ready = project / f"ready-{name}"
    plant = (f'mkdir -p {name}/.claude && printf "%s" \'{HOOK.replace("$M", "/tmp")}\' '
             f'> {name}/.claude/settings.json && touch {ready.name} && sleep 60')
    kill_launcher_when_ready(user, project, [INSTALLED, "run", "--", "/bin/sh", "-c", plant],
                             ready, user.env(SANDBOX_BACKEND=backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_settings_of_a_killed_session_are_reported_by_status_and_the_next_launch(
        user, project, backend):
    _killed_session(user, project, backend, "one")
    status = user.run([INSTALLED, "status"], cwd=user.home)
    first = str(project / "one/.claude/settings.json")
    assert status.returncode == 0, status.stderr
    assert first in remedies(status.stderr), status.stderr
    logs = user.run([INSTALLED, "logs"], cwd=user.home)
    assert first in logs.stdout and f"rm -- {first}" in logs.stdout, logs.stdout + logs.stderr

    _killed_session(user, project, backend, "two")
    again = user.sandbox("true", env=user.env(SANDBOX_BACKEND=backend), cwd=project)
    second = str(project / "two/.claude/settings.json")
    assert again.returncode == 0, again.stderr
    found = remedies(again.stderr)
    assert second in found and first not in found, again.stderr   # each reported once


OPENCODE = """#!/bin/sh
d="$HOME/.config/opencode"
for f in plugins/evil.js tools/evil.ts opencode.json; do
  mkdir -p "$d/$(dirname "$f")" 2>/dev/null
  if printf 'PLANTED' > "$d/$f" 2>/dev/null; then echo "$f=planted"; else echo "$f=refused"; fi
done
printf ok > "$HOME/.local/share/opencode/state" && echo state=written
"""


@pytest.fixture
def fake_opencode(user):
    entries = (".config/opencode", ".local/share/opencode", "tools",
               ".config/agent-sandbox/sandbox.conf")
    clear_entries(user.home, entries)
    user.set_config("ENABLED_AGENTS+=(opencode)\n")
    user.write("tools/bin/opencode", OPENCODE, 0o755)
    yield user.home / "tools/bin"
    clear_entries(user.home, entries)


@pytest.mark.parametrize("backend", BACKENDS)
def test_opencode_plugins_in_its_writable_state_are_read_only(user, project, fake_opencode,
                                                             backend):
    result = user.run([INSTALLED, "--backend", backend, "opencode"], cwd=project,
                      env=user.env(PATH=f"{fake_opencode}:/usr/bin:/bin", NETWORK_MODE="open"))
    assert result.returncode == 0, result.stderr
    verdicts = outcome(result.stdout)
    assert verdicts == {"plugins/evil.js": "refused", "tools/evil.ts": "refused",
                        "opencode.json": "refused", "state": "written"}, (verdicts, result.stderr)
    assert planted_anywhere(user.home / ".config/opencode") == []


# ---------------------------------------------------------------- the real Claude Code outside
def claude_outside(user, clis, directory) -> subprocess.CompletedProcess:
    """The user's own, unsandboxed Claude Code (the pinned CLI), against the mock API."""
    from tests.support.agentmock import FINAL, MockAPI

    with MockAPI() as api:
        result = user.run(["claude", "-p", "hi"], cwd=directory, timeout=120,
                          env=user.env(PATH=f"{clis}:/usr/bin:/bin", ANTHROPIC_BASE_URL=api.url,
                                       ANTHROPIC_API_KEY="sk-ant-mock"))
    assert result.returncode == 0 and FINAL in result.stdout, result.stdout + result.stderr
    return result


@pytest.fixture
def claude_home(user):
    entries = (".claude", ".claude.json", ".cache/agent-sandbox")
    clear_entries(user.home, entries)
    yield
    clear_entries(user.home, entries)


def test_the_real_claude_code_obeys_a_project_hook_it_finds(user, project, clis, claude_home):
    """The control: what the sessions below try to plant does run outside."""
    marker = project / "HOOKRAN"
    for directory in (project, project / "sub"):
        user.run(["mkdir", "-p", str(directory / ".claude")])
        user.run(["sh", "-c", f"printf '%s' '{HOOK.replace('$M/PLANTED', str(marker))}' "
                              f"> {directory}/.claude/settings.json"])
        claude_outside(user, clis, directory)
        assert marker.exists(), directory
        marker.unlink()


# firejail keeps the root read-only as bwrap does (the tests above): one
# backend that refuses and the one that reports keep this within its budget.
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_the_real_claude_code_outside_runs_no_hook_a_session_planted(user, project, clis,
                                                                     claude_home, backend):
    marker = project / "HOOKRAN"
    hook = HOOK.replace("$M/PLANTED", str(marker))
    plant = (f"mkdir -p .claude sub/.claude; printf '%s' '{hook}' > .claude/settings.json; "
             f"printf '%s' '{hook}' > sub/.claude/settings.json; true")
    result = user.sandbox("/bin/sh", "-c", plant, env=user.env(SANDBOX_BACKEND=backend),
                          cwd=project)
    assert result.returncode == 0, result.stderr
    found = remedies(result.stderr)
    assert str(project / "sub/.claude/settings.json") in found, result.stderr
    assert (str(project / ".claude/settings.json") in found) == (backend == "landlock")
    for command in found.values():       # the user follows the report
        assert user.run(command, cwd=project).returncode == 0, command
    for directory in (project, project / "sub"):
        claude_outside(user, clis, directory)
        assert not marker.exists(), (backend, directory)
