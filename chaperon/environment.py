"""Which of the caller's variables may reach a real Slurm command.

The stub sends the sandbox's environment (already scrubbed of credentials by
the launcher), but the agent controls it: it may set LD_PRELOAD, SLURM_CONF,
SBATCH_* input variables or interpreter hooks. The real Slurm commands run
outside the sandbox, and for sbatch/srun that environment also becomes the
job's, which starts outside any sandbox on the compute node until our wrapper
takes over. So everything that changes how a program loads, which Slurm
configuration is used, or which options Slurm applies is removed here; the
handlers pass options explicitly instead.
"""
from __future__ import annotations

# Names that change how programs load or how shells and interpreters start.
HOOK_NAMES = frozenset({
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH",
    "GLOBIGNORE", "BASH_XTRACEFD", "ZDOTDIR", "GCONV_PATH", "LOCPATH", "NLSPATH",
    "HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT",
    "RUBYLIB", "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS", "MALLOC_CHECK_", "TMPDIR",
})
HOOK_PREFIXES = ("LD_", "PYTHON", "BASH_FUNC_", "MALLOC_", "GLIBC_")
# Slurm's and munge's own input variables (they act as options or configuration).
SLURM_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SPANK_", "SQUEUE_", "SACCT_",
                  "SINFO_", "SCONTROL_", "MUNGE")
# What steers agent-sandbox itself (the compute-side launcher reads these).
STEERING = ("SANDBOX_BACKEND", "HOME_ACCESS", "SLURM_SCOPE", "PRIVATE_TMP", "PRIVATE_IPC",
            "FILTER_PASSWD", "NETWORK_MODE", "SANDBOX_QUIET", "SANDBOX_CONF", "AGENT_SANDBOX",
            "AGENT_SANDBOX_SESSION", "AGENT_SANDBOX_CHAPERON", "SANDBOX_PROJECT_DIR",
            "XDG_RUNTIME_DIR", "TMPDIR", "HOME")
STEERING_PREFIXES = ("SANDBOX_", "AGENT_SANDBOX")
# Identity and search path: set by the system, never by a job's --export.
IDENTITY = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL"})
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def is_hook(name: str) -> bool:
    return name in HOOK_NAMES or name.startswith(HOOK_PREFIXES)


def export_name_denied(name: str) -> bool:
    """A name an agent may not hand to a job with --export (compared in upper
    case: at least as strict as Slurm)."""
    upper = name.upper()
    return (is_hook(upper) or upper.startswith(SLURM_PREFIXES) or upper in STEERING
            or upper.startswith(STEERING_PREFIXES) or upper in IDENTITY
            or upper.startswith("XDG_") or upper in ("SLURM_CONF",))


# Slurm variables that only change how times are printed: kept, so that
# output inside matches output outside.
OUTPUT_ONLY = frozenset({"SLURM_TIME_FORMAT"})


def allowed_name(name: str) -> bool:
    """May a caller's variable reach a real Slurm command (and so a job)?"""
    if name in OUTPUT_ONLY:
        return True
    return (not is_hook(name) and not name.startswith(SLURM_PREFIXES)
            and name not in ("HOME_ACCESS", "SANDBOX_CONF", "AGENT_SANDBOX_CHAPERON")
            and name.replace("_", "a").isalnum() and not name[:1].isdigit())


def command_env(request_env, *, keep_slurm: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment for a real Slurm command started on the caller's behalf.
    `keep_slurm` names SLURM_* variables a handler validated (step mode)."""
    env = {}
    for raw_name, raw_value in request_env:
        name = raw_name.decode("utf-8", "surrogateescape")
        value = raw_value.decode("utf-8", "surrogateescape")
        if allowed_name(name) or name in keep_slurm:
            env[name] = value
    env["PATH"] = SAFE_PATH   # the real binaries are called by absolute path anyway
    return env
