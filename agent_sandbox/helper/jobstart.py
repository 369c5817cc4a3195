"""The first step of a batch job or srun task inside its sandbox (stdlib only;
run as `python3 -IS jobstart.py SPEC`). It enters the caller's working
directory (Slurm's own working directory for the job is chaperon-owned),
restores the caller's environment (which travelled beside Slurm, so srun and
slurmstepd never read it), links the output paths the user asked for to the
staging files slurmstepd writes (so a symlink the agent planted at such a
path can never redirect slurmstepd, which runs outside the sandbox), then
execs the snapshotted job script with its arguments, or the task's command.

SPEC is a JSON file in the chaperon's staging directory (read-only here):
{"script": path, "args": [...]} (sbatch) or {"argv": [...]} (srun), with
"workdir": dir, "links": [[requested, staged]], "env": {name: value} and,
when the user gave one, "export"; "tmp_key", the job's secret part of its
private TMPDIR's name (private_tmpdir). Both link ends may hold Slurm's filename
patterns (%j %A %a %x %u %N …).

The restored environment is the one the real Slurm would give for the
submission (docs/chaperon.md, "The job's environment"): the submitted
variables fill in around what is already set here, which came from Slurm
(SLURM_*, CUDA_VISIBLE_DEVICES, PMI/PMIx) or from the sandbox itself (HOME,
AGENT_SANDBOX*), and those describe this job and this sandbox. Two are
rebuilt: PATH is the submitted one behind this sandbox's stub directory, and
TMPDIR is a private per-job directory. Loader and interpreter variables
(LD_LIBRARY_PATH, LD_PRELOAD, PYTHONPATH, BASH_ENV, BASH_FUNC_*) are among
the restored ones: this process runs with `-IS` and never puts them in its
own environment; they are handed only to the execve of the user's command.
One kind is not restored: the submitting session's egress settings
(NETWORK_MODE=allowlist, docs/network.md) — proxy variables and broker base
URLs pointing at its relay on 127.0.0.1: the job runs in JOB_NETWORK_MODE,
and where that is not allowlist no relay listens there (a job in allowlist
mode has its own, already set here).

MPI defaults (each one a default the user may still set otherwise): PMIx
clients keep their job data in their own memory (JOB_ENV: slurmstepd's
shared-memory store lies in a directory no sandbox shows, so every rank
would print an error before falling back). On landlock every task is a
sandbox of its own (LANDLOCK_JOB_ENV): cross-memory attach is denied by
design (SPEC §7), so no single-copy; Open MPI's session directory goes
into the task's private $TMPDIR (the one PMIx names, in the node's /tmp, is
not writable there; set for each task, a step's tasks inherit the batch
script's environment); and the shared-memory segments go into the job's
directory on the node, the one writable path all of the job's tasks there
share (AGENT_SANDBOX_JOB_SHM, made and granted by the launcher:
jobs/shm.py; it replaces an inherited one of ours, since a step's
tasks would inherit the batch node's, but not a directory the user chose). A launch
without that directory keeps ranks on one node on TCP (btl ^vader) instead
of failing to attach each other's segments.
"""
import json
import os
import re
import socket
import sys

# The relay of an allowlist sandbox: its proxy URLs and its broker routes.
RELAY_VALUE = re.compile(r"(?:http|socks5h)://127\.0\.0\.1:[0-9]+(?:/broker/[A-Za-z0-9_.-]+)?/?")
RELAY_NAMES = ("NO_PROXY", "no_proxy", "AGENT_SANDBOX_EGRESS")


def expand(pattern: str, env) -> str:
    """Slurm's filename patterns, as far as a batch step needs them."""
    values = {
        "j": env.get("SLURM_JOB_ID", ""), "J": env.get("SLURM_JOB_ID", ""),
        "A": env.get("SLURM_ARRAY_JOB_ID", env.get("SLURM_JOB_ID", "")),
        "a": env.get("SLURM_ARRAY_TASK_ID", "4294967294"),
        "x": env.get("SLURM_JOB_NAME", ""), "u": env.get("USER", ""),
        "N": socket.gethostname().split(".")[0], "n": "0", "t": "0", "s": "batch",
    }
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        j = i + 1
        while j < len(pattern) and pattern[j].isdigit():
            j += 1
        if j >= len(pattern):
            out.append(pattern[i:])
            break
        key, width = pattern[j], pattern[i + 1:j]
        if key == "%":
            out.append("%")
        elif key in values:
            value = values[key]
            out.append(value.zfill(int(width)) if width and value.isdigit() else value)
        else:
            out.append(pattern[i:j + 1])
        i = j + 1
    return "".join(out)


def link(requested: str, staged: str, workdir: str, env) -> None:
    target = os.path.join(workdir, expand(requested, env))
    source = expand(staged, env)
    try:
        if os.path.islink(target) or os.path.isfile(target):
            os.unlink(target)
        os.symlink(source, target)
    except OSError as exc:
        sys.stderr.write(f"agent-sandbox: job output {target} could not be linked to "
                         f"{source} — {exc.strerror}. The output is in {source}.\n")


JOB_ENV = {"PMIX_MCA_gds": "hash"}
LANDLOCK_JOB_ENV = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
SHM_ENV = "AGENT_SANDBOX_JOB_SHM"   # the job's shared-memory directory (jobs/shm.py)
SHM_PREFIX = "/dev/shm/agent-sandbox-job-"   # jobshm.directory's names


STUB_BIN = "/run/agent-sandbox/bin"   # bwrap's stubs (chaperon/wire/session.py)


def stub_dirs(current) -> list:
    """This sandbox's stub directories on its PATH (bwrap mounts them at
    STUB_BIN; the other backends use the session directory's bin/)."""
    session = current.get("AGENT_SANDBOX_CHAPERON")
    own = (STUB_BIN, session + "/bin") if session else (STUB_BIN,)
    return [d for d in current.get("PATH", "").split(":") if d in own]


TMP_KEY = re.compile(r"[0-9a-f]{32}")


def private_tmpdir(current, key: str = "") -> str:
    """A directory of this job on this node that only this job can use:
    agent-sandbox-job-<id>-<key> in the sandbox's temporary directory (/tmp,
    or the session's own $TMPDIR on landlock, which cannot make /tmp
    private), made 0700. `key` is the job's secret from the staged spec (the
    chaperon draws it for a batch job or allocation, and a step's tasks get
    the one of the job they run in), so no other sandbox can name the
    directory beforehand: an existing one is taken only under that name,
    this user's and 0700 (the job's other tasks made it, or the job was
    requeued). Without a key a fresh directory is made; anything else there —
    another user's, a symlink — is never used. The sandbox's $TMPDIR when
    none can be made."""
    import stat
    import tempfile

    base = current.get("TMPDIR") or "/tmp"
    base = base if base.startswith("/") and os.path.isdir(base) else "/tmp"
    job = current.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        return current.get("TMPDIR") or "/tmp"   # not a Slurm job: the sandbox's own
    if TMP_KEY.fullmatch(key or ""):
        path = f"{base.rstrip('/')}/agent-sandbox-job-{job}-{key}"
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            info = os.lstat(path)
            if (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
                    and stat.S_IMODE(info.st_mode) == 0o700):
                return path
        except OSError:
            pass
    try:
        return tempfile.mkdtemp(prefix=f"agent-sandbox-job-{job}.", dir=base)
    except OSError:
        return current.get("TMPDIR") or "/tmp"


# What the chaperon's real sbatch carried for its own use (chaperon/environment.py
# command_env), which a job whose --export leaves out ALL does not get from Slurm.
CARRIED = ("PATH", "LANG", "LANGUAGE", "TZ", "SLURM_TIME_FORMAT")
LOGIN_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"   # su's default


def gets_user_env(spec) -> bool:
    """sbatch --export=NONE, or a list without ALL: the real sbatch then
    also loads the user's login environment on the node (--get-user-env)."""
    export = spec.get("export")
    return "script" in spec and export is not None and "ALL" not in [
        item.upper() for item in export.split(",")]


def login_environment(current) -> dict:
    """The user's login environment, as --get-user-env loads it (`su -
    USER -c env`, whose shell runs the login files) — but made here, inside
    the job's sandbox: the real sbatch would run the login files as root's
    su outside any sandbox, so the chaperon never asks Slurm for it."""
    import pwd
    import subprocess

    entry = pwd.getpwuid(os.getuid())
    shell = entry.pw_shell or "/bin/sh"
    base = {"HOME": current.get("HOME", entry.pw_dir), "SHELL": shell, "USER": entry.pw_name,
            "LOGNAME": entry.pw_name, "PATH": LOGIN_PATH, "MAIL": f"/var/mail/{entry.pw_name}"}
    try:
        out = subprocess.run([shell, "-l", "-c", "/usr/bin/env -0; :"], env=base,
                             cwd=base["HOME"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=8).stdout
    except (OSError, subprocess.SubprocessError):
        return base
    found = dict(item.partition("=")[::2] for item in
                 out.decode("utf-8", "surrogateescape").split("\0") if "=" in item)
    for name in ("_", "PWD", "OLDPWD"):   # the shell's own, not the user's
        found.pop(name, None)
    return found or base


def job_environment(spec, current) -> dict:
    """The task's environment: the staged caller environment filling in
    around what Slurm and the sandbox set here (see the module docstring)."""
    env = dict(current)
    if gets_user_env(spec):
        for name in CARRIED:
            env.pop(name, None)
        for name, value in login_environment(current).items():
            # Over what Slurm carried, never over Slurm's own or the sandbox's.
            if not name.startswith(("SLURM_", "AGENT_SANDBOX", "SANDBOX_")) and \
                    name not in ("HOME", "USER", "LOGNAME", "PWD"):
                env[name] = value
        env["SLURM_GET_USER_ENV"] = "1"
        current = dict(current, PATH=":".join(stub_dirs(current) + [env["PATH"]]))
        env["PATH"] = current["PATH"]
    staged = spec.get("env", {})
    egress = any(RELAY_VALUE.fullmatch(v) for v in staged.values())
    for name, value in staged.items():
        if egress and (name in RELAY_NAMES or RELAY_VALUE.fullmatch(value)):
            continue            # the submitting session's relay, not this job's
        env.setdefault(name, value)
    if "PATH" in staged:
        env["PATH"] = ":".join(stub_dirs(current) + ([staged["PATH"]] if staged["PATH"] else []))
    env["TMPDIR"] = private_tmpdir(current, spec.get("tmp_key", ""))
    defaults = dict(JOB_ENV)
    if current.get("SANDBOX_BACKEND") == "landlock":
        defaults.update(LANDLOCK_JOB_ENV)
        if current.get("TMPDIR"):   # this task's own: a step inherits its job's
            env["OMPI_MCA_orte_top_session_dir"] = current["TMPDIR"] + "/ompi"
        shm = current.get(SHM_ENV)
        if shm:     # this node's, granted by the launcher; a user's own value stays
            backing = env.get("OMPI_MCA_btl_vader_backing_directory", "")
            if not backing or backing.startswith(SHM_PREFIX):   # unset, or the batch node's
                env["OMPI_MCA_btl_vader_backing_directory"] = shm
        else:       # no directory to share: TCP rather than failing to attach
            defaults["OMPI_MCA_btl"] = "^vader"
    for name, value in defaults.items():
        env.setdefault(name, value)
    # Slurm's working directory for the job is the chaperon's stage; the
    # caller submitted from here (a step: where its job was submitted from).
    env["SLURM_SUBMIT_DIR"] = spec.get("submit_dir") or spec["workdir"]
    if "export" in spec and spec["export"] is not None:
        env["SLURM_EXPORT_ENV"] = spec["export"]   # as sbatch sets it for srun inside
    return env


def main(argv) -> int:
    with open(argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    os.chdir(spec["workdir"])
    env = job_environment(spec, os.environ)
    for requested, staged in spec.get("links", []):
        link(requested, staged, spec["workdir"], env)
    if "argv" in spec:
        command = spec["argv"]
        try:
            os.execvpe(command[0], command, env)
        except OSError as exc:
            sys.stderr.write(f"agent-sandbox: {command[0]}: {exc.strerror}\n")
            return 127 if isinstance(exc, FileNotFoundError) else 126
    script = spec["script"]
    os.execve(script, [script] + spec["args"], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
