"""srun in allocation mode (from the login node: a new job) and step mode
(inside a job: a step of its allocation), SPEC §9 srun.

Either way every task is started as `agent-sandbox run --project-dir P -- CMD`
on the compute node: a step never runs outside the sandbox. The task
environment is the submission environment of submit.job_env (no loader hooks,
no steering of the compute-side sandbox, the session's own overrides).

-o/-e/-i would make slurmstepd open a path outside the sandbox, where a
symlink the agent planted could redirect it. So they never reach the real
srun: the chaperon opens the file itself (no symlink followed, the opened
file checked to lie inside the project) and writes the step's output to it,
or feeds it as input. Per-task patterns (%t…) are therefore refused.
"""
from __future__ import annotations

import os

from ..ledger import LedgerError
from ..options import OptionRefused, merge
from ..scope import AllocationWatcher, Scope, known_job
from ..srun_options import parse, parse_env
from ..submit import (Refusal, check_dependency, check_limits, comment_tag, from_option,
                      job_env, preflight, working_dir, within)
from . import refuse, run_real

REBUILT = ("output", "error", "input")
# Slurm input variables that act as srun options: never taken from the caller.
STEP_ENV_REFUSED = ("SLURM_CONF", "SLURM_TASK_PROLOG", "SLURM_TASK_EPILOG", "SLURM_PROLOG",
                    "SLURM_EPILOG", "SLURM_CONTAINER", "SLURM_BCAST", "SLURM_WORKING_DIR",
                    "SLURM_EXPORT_ENV", "SLURM_NETWORK", "SLURM_MPI_TYPE_FILE")


def _open_in_project(ctx, cwd: str, name: str, *, write: bool) -> int:
    if "%" in name:
        raise Refusal("per_task_pattern", f"the srun file {name} is refused",
                      "the chaperon writes srun's files itself, one file per step",
                      "Name a plain file, or use sbatch --output for patterns")
    path = os.path.join(cwd, name)
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if write else os.O_RDONLY
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise Refusal("path_unusable", f"the srun file {name} is refused",
                      f"it cannot be opened ({exc.strerror}; symlinks are not followed)",
                      "Name a regular file inside the project") from None
    real = os.path.realpath(f"/proc/self/fd/{fd}")
    if not within(real, ctx.project_dir):
        os.close(fd)
        raise Refusal("path_outside_project", f"the srun file {name} is refused",
                      f"it resolves to {real}, outside the project {ctx.project_dir}",
                      "Keep it inside the project directory")
    return fd


class FileOut:
    """Sends one stream to a file the chaperon opened, the other to the client."""

    def __init__(self, out, stdout_fd: int | None, stderr_fd: int | None):
        self.out, self.stdout_fd, self.stderr_fd = out, stdout_fd, stderr_fd

    def stdout(self, data: bytes) -> None:
        os.write(self.stdout_fd, data) if self.stdout_fd is not None else self.out.stdout(data)

    def stderr(self, data: bytes) -> None:
        os.write(self.stderr_fd, data) if self.stderr_fd is not None else self.out.stderr(data)


def handle(ctx, request, out) -> int:
    env_in = request.env_str
    step = "SLURM_JOB_ID" in env_in or "SLURM_JOBID" in env_in
    fds: list[int] = []
    try:
        binary = preflight(ctx, request, "srun")
        try:
            mail = bool(ctx.config.get("allow_mail"))      # SLURM_ALLOW_MAIL (admin)
            parsed = parse(request.args_str, step=step, allow_mail=mail)
            if not step:   # Slurm's order: input variables, then the command line
                parsed = merge(parse_env(env_in, allow_mail=mail), parsed)
        except OptionRefused as refused:
            raise from_option(refused) from None
        if not parsed.rest:
            raise Refusal("no_command", "srun without a command is refused",
                          "there is nothing to run", "Give the command: srun [options] CMD")
        cwd = working_dir(ctx, request)
        keep: tuple[str, ...] = ()
        if step:
            job = env_in.get("SLURM_JOB_ID") or env_in.get("SLURM_JOBID", "")
            if not known_job(ctx, request, job, "project"):
                raise Refusal("job_out_of_scope", f"a step in job {job} is refused",
                              "that job was not submitted from a sandbox of this project",
                              "Run srun inside a job you submitted from this project")
            keep = tuple(n for n in env_in if n.startswith("SLURM_")
                         and n not in STEP_ENV_REFUSED)
        else:
            check_limits(ctx, parsed.last("partition"))
            for dependency in parsed.values.get("dependency", []):
                check_dependency(dependency, Scope(ctx, request))
        streams = {}
        for name in ("output", "error"):
            target = parsed.last(name)
            if target and target != "none":
                streams[name] = _open_in_project(ctx, cwd, target, write=True)
                fds.append(streams[name])
        stdin = b""
        source = parsed.last("input")
        if source and source != "none":
            fd = _open_in_project(ctx, cwd, source, write=False)
            fds.append(fd)
            with os.fdopen(os.dup(fd), "rb") as handle:
                stdin = handle.read(4 * 1024 * 1024)
    except Refusal as refusal:
        for fd in fds:
            os.close(fd)
        return refuse(ctx, out, "srun", refusal.reason, refusal.what, refusal.why, refusal.fix)

    launcher = ctx.config["launcher"] + ["run", "--project-dir", ctx.project_dir, "--"]
    tagged: list[str] = []
    watcher = None
    if not step:
        # An allocation is a job: tagged like sbatch's, and recorded in the
        # ledger as soon as Slurm has it (srun prints no job id to read).
        token = os.urandom(8).hex()
        try:
            ctx.ledger.reserve(token)
        except LedgerError as exc:
            for fd in fds:
                os.close(fd)
            return refuse(ctx, out, "srun", "ledger_unwritable", "the allocation is refused",
                          f"the job ledger cannot be written ({exc.strerror})",
                          "Free space in your home directory (~/.local/state) and retry")
        tag = comment_tag(ctx, parsed.last("comment"))
        tagged = [f"--comment={tag}"]
        watcher = AllocationWatcher(ctx, request, tag, token)
    argv = [binary, *parsed.argv(skip=REBUILT + ("comment",)), *tagged, *launcher, *parsed.rest]
    ctx.log.event("step" if step else "allocation", command="srun", argv=argv[1:])
    try:
        if watcher:
            watcher.start()
        target = FileOut(out, streams.get("output"), streams.get("error", streams.get("output")))
        code, _ = run_real(target if streams else out, argv,
                           env=job_env(ctx, request, keep_slurm=keep), cwd=cwd, stdin=stdin)
    finally:
        if watcher:
            watcher.stop()
        for fd in fds:
            os.close(fd)
    return code
