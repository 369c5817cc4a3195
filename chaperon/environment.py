"""Which of the caller's variables may reach a real Slurm command, and which
travel to the job beside Slurm.

The stub sends the sandbox's environment (already scrubbed of credentials by
the launcher), but the agent controls it: it may set LD_PRELOAD, SLURM_CONF,
SBATCH_*/SLURM_* input variables (some name files that srun or slurmstepd
open outside the sandbox), or interpreter hooks. The real Slurm commands run
outside the sandbox, and for sbatch/srun their environment also becomes the
job's, which starts outside any sandbox on the compute node until our
wrapper takes over. So:

- `command_env` BUILDS the environment of a real command from allow-lists
  (never the caller's minus a deny-list): fixed PATH, the chaperon's own
  identity, the caller's display variables with value checks, and what a
  handler validated through its own input-variable table;
- `user_env` is the caller's environment by --export rules, as the real
  Slurm would hand it to the job — PATH (without this session's stub
  directory), LD_LIBRARY_PATH and the other loader and interpreter
  variables, exported shell functions (BASH_FUNC_*), module and conda
  variables included — minus Slurm's own variables (Slurm sets those on the
  node) and what steers the sandbox. The handlers stage it in a
  chaperon-owned file and the jobstart step (agent_sandbox/helper/jobstart.py)
  restores it inside the job's sandbox, as the last step before the user's
  command: nothing outside the sandbox ever reads it (not sbatch or srun,
  not slurmstepd or a TaskProlog, not the wrapper, the launcher or jobstart
  itself).
"""
from __future__ import annotations

import os
import re

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
    case: at least as strict as Slurm): Slurm's own variables, what steers
    the sandbox, and the identity the system sets. Loader and interpreter
    variables (LD_LIBRARY_PATH=…, PYTHONPATH=…) are accepted as with the real
    Slurm: like the rest of the job's environment they travel in the staged
    spec and are set only inside the job's sandbox."""
    upper = name.upper()
    return (upper.startswith(SLURM_PREFIXES) or upper in STEERING
            or upper.startswith(STEERING_PREFIXES) or upper in IDENTITY - {"PATH"}
            or upper.startswith("XDG_") or upper in ("SLURM_CONF", "TMPDIR"))


# --- the environment of a real Slurm command: built from allow-lists ---------
#
# A real Slurm command started for the caller gets only: a fixed PATH, the
# identity the chaperon itself was started with (HOME, USER, LOGNAME: set by
# the launcher outside, never by the caller), and the caller's variables that
# only change how text is printed, each with a value check (a locale or zone
# name may otherwise be a path the C library opens). Everything else the
# agent set stays out: Slurm's input variables reach a command only through
# the handler's own table (options.input_env_table), validated like options.
# The user's environment travels beside Slurm instead (user_env, staged for
# the compute-side launcher), so nothing the agent sets is read by srun,
# sbatch or slurmstepd.

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# The chaperon's own environment, set by the launcher outside the sandbox:
# who it is, and which Slurm the site uses (SLURM_CONF, policy/resolve.py
# slurm_conf_path) — never the caller's.
OWN_IDENTITY = ("HOME", "USER", "LOGNAME", "SLURM_CONF")
_LOCALE = re.compile(r"[A-Za-z0-9_.@+\-]{0,64}")          # no '/': a name, never a path
_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]{0,40}(?:/[A-Za-z0-9_+\-]{1,40}){0,3}"
                   r"|[A-Z]{3,5}[+\-]?\d{1,2}(?:[A-Z]{3,5})?")     # Europe/Berlin, EST5EDT
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]{0,256}")
PRESENTATION = {
    "LANG": _LOCALE, "LANGUAGE": re.compile(r"[A-Za-z0-9_.@:+\-]{0,128}"),
    "LC_ALL": _LOCALE, "LC_CTYPE": _LOCALE, "LC_NUMERIC": _LOCALE, "LC_TIME": _LOCALE,
    "LC_COLLATE": _LOCALE, "LC_MESSAGES": _LOCALE,
    "TZ": _ZONE,
    "SLURM_TIME_FORMAT": _PRINTABLE,          # strftime text, or "standard"/"relative"
}
# Read-only views may also get their own display variables (sinfo's), when
# the handler names them.
VIEW_VARIABLES = {"SINFO_FORMAT": _PRINTABLE, "SINFO_SORT": _PRINTABLE,
                  "SINFO_PARTITION": re.compile(r"[A-Za-z0-9_.,\-]{0,256}")}


def decoded(request_env) -> dict[str, str]:
    return {n.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
            for n, v in request_env}


def command_env(request_env, *, keep_slurm: tuple[str, ...] = (),
                validated: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a real Slurm command started on the caller's
    behalf, built from the allow-lists above. `keep_slurm` may name display
    variables of a read-only view (VIEW_VARIABLES; anything else named there
    is ignored); `validated` holds variables a handler checked
    through its own table (srun's step variables)."""
    env = {"PATH": SAFE_PATH}
    for name in OWN_IDENTITY:
        if name in os.environ:
            env[name] = os.environ[name]
    caller = decoded(request_env)
    for name, value in caller.items():
        check = PRESENTATION.get(name) or (VIEW_VARIABLES.get(name) if name in keep_slurm
                                           else None)
        if check is not None and check.fullmatch(value):
            env[name] = value
    env.update(validated or {})
    return env


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHELL_FUNCTION = re.compile(r"BASH_FUNC_[^=\x00-\x1f/]+%%")   # bash's exported functions


def allowed_name(name: str) -> bool:
    """May a caller's variable travel to the job (restored inside the
    compute-side sandbox)? Any variable name or exported shell function, but
    not Slurm's own variables (Slurm sets those for the job), not what
    steers the sandbox, and not TMPDIR (the job gets a private one)."""
    return ((bool(_PLAIN_NAME.fullmatch(name)) or bool(_SHELL_FUNCTION.fullmatch(name)))
            and not name.startswith(SLURM_PREFIXES) and name not in STEERING
            and not name.startswith(STEERING_PREFIXES))


def without_stubs(path: str, stub_dirs) -> str:
    """PATH without the stub directory of the submitting session: the job's
    sandbox puts its own first."""
    return ":".join(d for d in path.split(":") if d not in stub_dirs)


def user_env(request_env, export: str | None, stub_dirs=()) -> dict[str, str]:
    """The caller's environment as the job should see it, by Slurm's
    --export rules: ALL (the default) every variable, NONE none, a list of
    names only those (plus Slurm's own, which Slurm sets), NAME=value items
    set. Staged beside the job and restored inside its sandbox. `stub_dirs`:
    the submitting session's stub directories, removed from PATH."""
    caller = {n: v for n, v in decoded(request_env).items() if allowed_name(n)}
    if "PATH" in caller:
        caller["PATH"] = without_stubs(caller["PATH"], stub_dirs)
    items = [i for i in (export or "ALL").split(",") if i]
    modes = {i.upper() for i in items if i.upper() in ("ALL", "NONE")}
    env = dict(caller) if "ALL" in modes or not items else {}
    for item in items:
        if item.upper() in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if not allowed_name(name):
            continue
        if eq:
            env[name] = value
        elif name in caller:
            env[name] = caller[name]
    return env
