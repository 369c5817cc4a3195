"""srun in allocation mode (from the login node: a new job) and step mode
(inside a job: a step of its allocation), SPEC §9 srun.

Either way every task is started as `agent-sandbox run --project-dir P --
python3 -IS jobstart.py SPEC` on the compute node: a step never runs outside
the sandbox. SPEC, in a stage directory of this call (removed when srun
ends), holds the command, the caller's directory and the caller's
environment by --export rules; srun runs in the stage and gets only the
allow-listed environment (environment.command_env), the session's overrides
for the compute-side launcher, and — in step mode — the caller's Slurm
variables that srun's input table and the step allow-list accept
(step_variables).

-o/-e/-i (and SLURM_STD*MODE) would make srun or slurmstepd open a path
outside the sandbox, where a symlink the agent planted could redirect it.
So they never reach the real srun: the chaperon opens the file itself,
once, beneath the project without following a symlink, and writes the
step's output to it, or feeds it as input. Per-task patterns (%t…) are
therefore refused; /dev/null passes.
"""
from __future__ import annotations

import errno
import json
import os

from ..beneath import Unusable
from ..environment import command_env
from ..jobwrap import launch_argv
from ..ledger import LedgerError
from ..refusal import Refusal
from ..scope import AllocationWatcher, Scope, known_job
from ..slurm.options import merge
from ..slurm import versions
from ..slurm.srun_options import (STEP_FACTS, allocation_only, allowed_in_step, parse,
                                  parse_env)
from ..submit import (DEV_NULL, check_dependency, check_limits, check_writable, comment_tag,
                      discard_stage, launcher_env, new_stage, open_project, staged_env, working_dir,
                      tmp_key, write_staged)
from .common import run_real
from .sbatch import only_info

REBUILT = ("output", "error", "input", "export")


def _open_stream(ctx, project, cwd: str, name: str, *, write: bool, append: bool = False) -> int:
    """-o/-e/-i: opened once by the chaperon beneath the project, no symlink
    followed (a literal /dev/null is the one path outside)."""
    if "%" in name:
        raise Refusal("per_task_pattern", f"the srun file {name} is refused",
                      "the chaperon writes srun's files itself, one file per step",
                      "Name a plain file, or use sbatch --output for patterns")
    if name == DEV_NULL:
        return os.open(DEV_NULL, (os.O_WRONLY if write else os.O_RDONLY) | os.O_CLOEXEC)
    try:
        rel = project.rel(cwd, name)
        if write:
            check_writable(ctx, os.path.join(project.path, rel), name, "the srun file")
        return project.write_regular(rel, append=append) if write else project.open_regular(rel)
    except Unusable as exc:
        outside = exc.errno == errno.EXDEV
        raise Refusal("path_outside_project" if outside else "path_unusable",
                      f"the srun file {name} is refused", exc.why,
                      "Keep it inside the project directory" if outside else
                      "Name a regular file inside the project (symlinks are not followed)"
                      ) from None


def step_variables(env_in: dict[str, str], job: str, series: str = versions.BASE
                   ) -> tuple[dict[str, str], object]:
    """Inside a job: the caller's Slurm variables that may reach the real srun.
    srun's input variables are validated by the step allow-list (a refusal
    names the variable) and passed on unchanged, so srun tells them from
    command-line options as it always does — except those the handler
    rebuilds (files, --export), which it reads from the returned Parsed. Then
    the allocation facts of STEP_FACTS with their value checks, and the job
    id the ledger vouched for. Nothing else (STEP_DROPPED says why for the
    names Slurm is known to read)."""
    # Scheduling variables of a new allocation (SLURM_ACCOUNT, SLURM_PARTITION,
    # … often set in a login profile) mean nothing to a step: srun ignores
    # them inside a job, so they are left out rather than refused.
    specs, table = versions.srun(series), versions.input_env("srun", series)
    env_in = {n: v for n, v in env_in.items()
              if n not in table or not allocation_only(table[n], specs[1])}
    parsed = parse_env(env_in, step=True, specs=specs, table=table)
    # A variable whose option is denied never passes, even when its value
    # leaves the option off (srun's reading of flag values is not ours).
    validated = {name: env_in[name] for name, option in table.items()
                 if name in env_in and option not in REBUILT
                 and allowed_in_step(option, specs[1])}
    for name, check in STEP_FACTS.items():
        value = env_in.get(name)
        if value is not None and check.fullmatch(value):
            validated[name] = value
    validated["SLURM_JOB_ID"] = validated["SLURM_JOBID"] = job
    return validated, parsed


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
    stage = None
    try:
        binary = ctx.real_binary("srun")
        mail = bool(ctx.config.get("allow_mail"))      # SLURM_ALLOW_MAIL (admin)
        series = ctx.slurm_series()
        specs = versions.srun(series)
        parsed = parse(request.args_str, step=step, allow_mail=mail, specs=specs)
        if only_info(parsed):
            # --help, --usage, --version: Slurm's own text, nothing started.
            return run_real(out, [binary, *parsed.argv()], env=command_env(request.env),
                            cwd="/")[0]
        job = env_in.get("SLURM_JOB_ID") or env_in.get("SLURM_JOBID", "")
        if step:
            if not (job.isascii() and job.isdigit()) or not known_job(ctx, request, job, "project"):
                raise Refusal("job_out_of_scope", f"a step in job {job} is refused",
                              "that job was neither submitted from a sandbox of this project "
                              "nor adopted by this session",
                              f"To use an allocation of yours, start the sandbox inside it "
                              f"(salloc …, then agent-sandbox … there) or name it outside: "
                              f"agent-sandbox run --allocation {job} … (docs/chaperon.md, "
                              f"\"Interactive work on compute nodes\")")
            validated, from_env = step_variables(env_in, job, series)
            given = merge(from_env, parsed)   # for the options the handler rebuilds
        else:
            validated, from_env = {}, parse_env(env_in, allow_mail=mail, specs=specs,
                                                table=versions.input_env("srun", series))
            # Slurm's order: input variables, then the command line.
            parsed = given = merge(from_env, parsed)
        if not parsed.rest:
            raise Refusal("no_command", "srun without a command is refused",
                          "there is nothing to run", "Give the command: srun [options] CMD")
        if not step:
            check_limits(ctx, parsed.last("partition"))
            for dependency in parsed.values.get("dependency", []):
                check_dependency(dependency, Scope(ctx, request))
        streams = {}
        stdin = b""
        with open_project(ctx) as project:
            cwd = working_dir(ctx, request, project)
            append = (given.last("open-mode") or "")[:1] == "a"
            for name in ("output", "error"):
                target = given.last(name)
                if target and target != "none":
                    streams[name] = _open_stream(ctx, project, cwd, target, write=True,
                                                 append=append)
                    fds.append(streams[name])
            source = given.last("input")
            if source and source != "none":
                fd = _open_stream(ctx, project, cwd, source, write=False)
                fds.append(fd)
                with os.fdopen(os.dup(fd), "rb") as handle:
                    stdin = handle.read(4 * 1024 * 1024)
        export = given.last("export")
        env = staged_env(ctx, request, export)
        if step:   # the allocation's own variables fill in inside (never override)
            env.update({n: v for n, v in env_in.items() if n.startswith("SLURM_")
                        and n not in env})
        token = os.urandom(8).hex()
        stage = new_stage(ctx, token)
        submit_dir = env_in.get("SLURM_SUBMIT_DIR") if step else None
        spec = write_staged(stage, "spec.json", json.dumps(
            {"argv": list(parsed.rest), "workdir": cwd, "env": env,
             "tmp_key": tmp_key(env_in, job) if step else tmp_key(), **({"submit_dir": submit_dir} if submit_dir else {})}).encode())
    except BaseException:   # a Refusal included: dispatch prints it
        for fd in fds:
            os.close(fd)
        discard_stage(stage)
        raise

    task = launch_argv(ctx.config, ctx.project_dir, ctx.config["jobstart"], spec)
    tagged: list[str] = []
    watcher = None
    try:
        if not step:
            # An allocation is a job: tagged like sbatch's, and recorded in the
            # ledger as soon as Slurm has it (srun prints no job id to read).
            try:
                ctx.ledger.reserve(token)
            except LedgerError as exc:
                raise Refusal("ledger_unwritable", "the allocation is refused",
                              f"the job ledger cannot be written ({exc.strerror})",
                              "Free space in your home directory (~/.local/state) and retry"
                              ) from None
            tag = comment_tag(ctx, parsed.last("comment"))
            tagged = [f"--comment={tag}"]
            watcher = AllocationWatcher(ctx, request, tag, token)
        argv = [binary, *parsed.argv(skip=REBUILT + ("comment",)), *tagged,
                *job_name(given), *task]
        ctx.log.event("step" if step else "allocation", command="srun", argv=argv[1:])
        if watcher:
            watcher.start()
        target = FileOut(out, streams.get("output"), streams.get("error", streams.get("output")))
        # srun runs in the stage (chaperon-owned): its working directory is
        # where slurmstepd starts the tasks; jobstart enters `cwd` inside.
        code, _ = run_real(target if streams else out, argv,
                           env=command_env(request.env, validated={**validated,
                                                                   **launcher_env(ctx)}),
                           cwd=stage, stdin=stdin)
    finally:
        if watcher:
            watcher.stop()
        for fd in fds:
            os.close(fd)
        discard_stage(stage)   # srun has ended: its tasks have too
    return code


def job_name(given) -> list[str]:
    """The name Slurm would give the job or step without the chaperon: the
    command's file name (srun's default), not that of the wrapper the real
    srun runs (`python`); none when the user named it (-J, SLURM_JOB_NAME)."""
    if given.has("job-name") or not given.rest:
        return []
    return [f"--job-name={os.path.basename(given.rest[0]) or 'srun'}"]
