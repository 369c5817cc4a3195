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
when the user gave one, "export". Both link ends may hold Slurm's filename
patterns (%j %A %a %x %u %N …).

The restored environment fills in, it never overrides: what is already set
here came from Slurm (SLURM_*, PMI/PMIx) or from the sandbox itself (PATH,
HOME, AGENT_SANDBOX*), and those describe this job and this sandbox. The one
exception: the submitting session's egress settings (NETWORK_MODE=allowlist,
docs/network.md) — proxy variables and broker base URLs pointing at its relay
on 127.0.0.1 — are not restored: the job runs in JOB_NETWORK_MODE, and where
that is not allowlist no relay listens there (a job in allowlist mode has its
own, already set here).
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


def job_environment(spec, current) -> dict:
    """The task's environment: the staged caller environment filling in
    around what Slurm and the sandbox set here (see the module docstring)."""
    env = dict(current)
    staged = spec.get("env", {})
    egress = any(RELAY_VALUE.fullmatch(v) for v in staged.values())
    for name, value in staged.items():
        if egress and (name in RELAY_NAMES or RELAY_VALUE.fullmatch(value)):
            continue            # the submitting session's relay, not this job's
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
