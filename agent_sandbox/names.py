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
               "logs", "sbatch", "srun")

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
