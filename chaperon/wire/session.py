"""The chaperon session directory: names and limits both sides agree on.

Layout of a session directory (created by the launcher, mode 0700, outside
the sandbox, bound into it at SANDBOX_DIR by bwrap, seen at its own path by
the other backends):

    req        the announcement FIFO (0600): one short line per request
    conn/      per-request FIFO pairs made by the stubs: NAME.req, NAME.resp
    bin/       the stub under every Slurm name (firejail, landlock; bwrap mounts
               its own copy at STUB_BIN)

Why two levels: a FIFO shared by concurrent writers interleaves any write
larger than PIPE_BUF, and a writer that stalls mid-frame would hold everyone
else up. So a stub writes its whole CHAPERON/1 request frame into its own
FIFO and only announces it on the shared one with a line far below PIPE_BUF
(atomic). A stalled, flooding or hostile client then ties up only its own
handler thread, never another client's answer.

Imports nothing: the stubs import this on every Slurm call.
"""

SANDBOX_DIR = "/run/agent-sandbox/chaperon"   # where bwrap shows the session dir
STUB_BIN = "/run/agent-sandbox/bin"           # bwrap's stubs, first on PATH inside
ANNOUNCE_FIFO = "req"
CONN_DIR = "conn"
BIN_DIR = "bin"   # stubs on disk in the session dir, for backends that cannot mount
ENV_SESSION_DIR = "AGENT_SANDBOX_CHAPERON"
# Exit codes of the proxy's own answers (a real command's answer is its own
# status, 128+N for a signal: handlers/common.py exit_status).
EXIT_REFUSED = 1    # a refusal, by the chaperon or by the stub itself (SPEC §9)
EXIT_INTERNAL = 1   # the proxy failed (a handler bug, no chaperon, a broken reply)
EXIT_NOT_FOUND = 127   # a real Slurm command missing on this host, as the shell says it
# "\n" first: whatever garbage a hostile writer left without a newline, the
# announcement still starts a line of its own.
ANNOUNCE_PREFIX = b"\nCHAPERON/1 CONNECT "
MAX_ANNOUNCE = 128
NAME_CHARS = frozenset("0123456789abcdef")
NAME_LENGTH = 32
# Proxied commands and refused ones: every name exists inside (SPEC §9 Stubs).
STUB_COMMANDS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sacct", "sacctmgr",
                 "sinfo", "sstat", "sprio", "sshare", "sdiag", "salloc", "sattach", "sbcast",
                 "scrontab", "scrun", "strigger", "sreport")
SILENCE_TIMEOUT = 30.0     # the stub gives up after this long without a byte
HEARTBEAT_INTERVAL = 5.0   # the chaperon sends ALIVE at least this often


def visible_paths(fixed_mount_points: bool, session_dir: str) -> tuple[str, str]:
    """(session dir, stub directory) as the sandbox sees them: at fixed
    places where the backend can mount a host path elsewhere (its trait
    fixed_mount_points: bwrap), else the host paths (firejail, landlock)."""
    if fixed_mount_points:
        return SANDBOX_DIR, STUB_BIN
    return session_dir, session_dir + "/" + BIN_DIR


def valid_name(name: str) -> bool:
    return len(name) == NAME_LENGTH and set(name) <= NAME_CHARS


def announcement(name: str) -> bytes:
    return ANNOUNCE_PREFIX + name.encode() + b"\n"


def parse_announcement(line: bytes) -> "str | None":
    """The connection name in one announcement line (without its newline), or
    None for anything else — garbage is ignored, never an error."""
    prefix = ANNOUNCE_PREFIX[1:]
    if not line.startswith(prefix) or len(line) > MAX_ANNOUNCE:
        return None
    name = line[len(prefix):].decode("ascii", "replace")
    return name if valid_name(name) else None
