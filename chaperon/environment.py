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

# Exact names removed.
REMOVED = frozenset({
    "SLURM_CONF", "BASH_ENV", "ENV", "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES",
    "RES_OPTIONS", "LOCALDOMAIN", "TMPDIR", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT",
    "RUBYLIB", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "PROMPT_COMMAND",
    "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH", "GLOBIGNORE", "MALLOC_CHECK_",
    "AGENT_SANDBOX_CHAPERON", "HOME_ACCESS", "SANDBOX_CONF",
})
# Prefixes removed: the dynamic loader, interpreters, Slurm's input variables
# (they act as options, e.g. SBATCH_EXPORT), bash exported functions.
REMOVED_PREFIXES = ("LD_", "PYTHON", "SBATCH_", "SALLOC_", "SRUN_", "SLURM_", "SQUEUE_",
                    "SACCT_", "SINFO_", "SCONTROL_", "MALLOC_", "GLIBC_", "BASH_FUNC_")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def allowed_name(name: str) -> bool:
    return (name not in REMOVED and not name.startswith(REMOVED_PREFIXES)
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
