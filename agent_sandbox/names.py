"""The vocabulary several stages must agree on, each defined once here and
imported everywhere else: backend names (in `auto` order), guarantee names
(with the line a person reads), the variables the sandbox itself sets
inside, and the Slurm commands whose real binaries are masked.

A second list "that must stay in sync" is a bug waiting to happen (STYLE.md,
"One vocabulary, one source"); the import-time-cheap tables live here so
config, policy, backends, launch and tools all read the same ones.
"""
from __future__ import annotations

# The subcommands of the CLI (cli/app.py); any other first word names an agent
# profile. The fast path in cli/__init__.py routes on it without importing
# typer, and an unknown profile is matched against it for "did you mean".
SUBCOMMANDS = ("run", "bash", "help", "version", "config", "explain", "doctor", "status",
               "logs", "sbatch", "srun", "trust")

# Backends, in the order SANDBOX_BACKEND=auto tries them.
BACKENDS = ("bwrap", "firejail", "landlock")

# SPEC §5: guarantee → one line a person can read. fs.protected is not in
# the SPEC table: it makes visible that Landlock cannot keep PROTECTED_PATHS
# read-only inside the writable project (SPEC §8, no persistence).
GUARANTEES = {
    "fs.hidden": "hidden paths do not exist (ENOENT)",
    "fs.write_confined": "writes only to the project and declared paths",
    "fs.protected": "PROTECTED_PATHS (.git/hooks, .envrc, …) read-only inside writable paths",
    "env.scrubbed": "credential variables removed from the environment",
    "seccomp": "dangerous syscalls answer EPERM",
    "pid.isolated": "processes outside the sandbox are invisible",
    "ipc.isolated": "private SysV IPC and /dev/shm",
    "passwd.filtered": "other users cannot be enumerated",
    "slurm.boundary": "munge socket and real Slurm binaries/config unreachable",
    "abstract_unix.scoped": "abstract unix sockets outside are unreachable",
    "unix_sockets.confined": "no pathname unix socket outside the sandbox's own is "
                             "connectable (tmux, ssh-agent, D-Bus, name services)",
    "metadata.confined": "no chmod/chown/utime/xattr change outside the writable paths",
    "signals.scoped": "processes outside cannot be signalled",
    "self.protected": "install dir and user config read-only",
    "tty.safe": "no TIOCSTI/TIOCLINUX injection into your terminal",
    "fd.clean": "no inherited descriptor but stdin, stdout and stderr enters",
    "net.egress_filtered": "only ALLOWED_HOSTS reachable (egress proxy), no DNS, no raw sockets out",
}

# NETWORK_MODE values, strictest first (config/locks.py orders them so).
NETWORK_MODES = ("isolated", "allowlist", "open")
# NETWORK_MODE=allowlist (docs/network.md): inside bwrap and firejail the relay
# listens on this port of the sandbox's own loopback (an empty network
# namespace, so any fixed port is free), and the proxy's Unix socket is bound
# at EGRESS_SOCKET (bwrap; firejail and landlock see the host path).
RELAY_PORT = 3128
EGRESS_SOCKET = "/run/agent-sandbox/egress.sock"

# Variables the sandbox sets inside whatever the caller's environment says
# (policy/resolve.py sets them through forced_env; tools/explain.py names them).
FORCED_ENV = ("HOME", "USER", "LOGNAME", "AGENT_SANDBOX", "SANDBOX_BACKEND",
              "SANDBOX_PROJECT_DIR", "AGENT_SANDBOX_SESSION", "PWD")


def forced_env(*, home: str, user: str, backend: str, project: str, session: str,
               workdir: str) -> dict[str, str]:
    return dict(zip(FORCED_ENV, (home, user, user, "1", backend, project, session, workdir)))

# The stubs inside answer these names (chaperon/wire/session.py is the source the
# stubs share); sview and smap have no stub but their real binaries are
# masked too.
SLURM_GUI_COMMANDS = ("sview", "smap")


def slurm_commands() -> tuple[str, ...]:
    """Every Slurm command whose real binary is masked inside."""
    from chaperon.wire.session import STUB_COMMANDS

    return STUB_COMMANDS + SLURM_GUI_COMMANDS

# Issue 27: what agents and editors load from a project directory and obey —
# settings that name commands (hooks, MCP servers, notify, lint commands,
# tasks), code they run (plugins, custom tools, hook scripts) and prompts
# that grant tools (skills, commands, subagents). Read from each tool's own
# sources and documentation (docs/shared-channels.md §2 says where; Claude
# Code's list is the one its own sandbox denies writes to). Instruction files
# (CLAUDE.md, AGENTS.md, GEMINI.md, .claude/rules/) are not here: they are
# text the model reads, as the rest of the project is, and writing them is
# an agent's ordinary work (`/init`). A trailing / marks a directory.
# Each: (path relative to a directory, who loads it from there).
# The root entries are read-only in every session whatever profile runs
# (policy/resolve.py adds them to PROTECTED_PATHS; placeholders where
# missing); at any depth, one a session made or changed is reported when it
# ends (services/configcheck.py).
PROJECT_CONFIGS = (
    (".claude/settings.json", "Claude Code (hooks, MCP servers, statusLine, apiKeyHelper)"),
    (".claude/settings.local.json", "Claude Code (hooks, MCP servers, statusLine, apiKeyHelper)"),
    (".claude/hooks/", "Claude Code (hook scripts)"),
    (".claude/commands/", "Claude Code (slash commands: allowed-tools, !`shell`)"),
    (".claude/agents/", "Claude Code (subagents: tools, hooks, MCP servers)"),
    (".claude/skills/", "Claude Code, opencode (skills: allowed-tools, hooks, scripts)"),
    (".claude/workflows/", "Claude Code (workflows)"),
    (".claude/routines/", "Claude Code (routines)"),
    (".claude/output-styles/", "Claude Code (output styles)"),
    (".claude/launch.json", "Claude Code (launch configurations)"),
    (".claude/scheduled_tasks.json", "Claude Code (scheduled tasks)"),
    (".claude/loop.md", "Claude Code (/loop)"),
    (".mcp.json", "Claude Code (MCP servers it starts)"),
    (".codex/", "Codex (config.toml: notify, MCP servers; hooks, rules, skills)"),
    (".agents/skills/", "Codex, Gemini CLI, opencode (skills)"),
    (".agents/plugins/", "Codex (plugins)"),
    (".gemini/", "Gemini CLI (settings.json: hooks, MCP servers, tool commands; "
                 ".env, commands, extensions, skills, system.md)"),
    (".aider.conf.yml", "aider (lint-cmd, test-cmd)"),
    ("opencode.json", "opencode (MCP servers, plugins, formatter and LSP commands)"),
    ("opencode.jsonc", "opencode (MCP servers, plugins, formatter and LSP commands)"),
    (".opencode/", "opencode (plugins, tools: code it runs; agents, commands)"),
    (".vscode/", "VS Code (tasks run on folder open, settings naming programs)"),
    (".idea/", "JetBrains IDEs (run configurations, startup tasks)"),
    (".devcontainer/", "Dev Containers (initializeCommand runs on the host)"),
    (".envrc", "direnv (a shell script run on cd)"),
)
# Loaded and obeyed too, but data a project's own programs write as often as
# a person does: reported when a session made or changed one, at any depth,
# never made read-only.
PROJECT_CONFIGS_REPORTED = (
    (".env", "aider (AIDER_LINT_CMD, AIDER_TEST_CMD), Gemini CLI (its environment)"),
)
