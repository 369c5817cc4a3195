"""sbatch: validate, stage, wrap, tag, record, submit (SPEC §9 sbatch).

1. Options from the command line, SBATCH_* variables and the script's
   #SBATCH lines go through the one allow-list parser; directives are
   removed from the body, accepted ones are re-emitted canonically on the
   command line (the real sbatch never parses a byte the agent wrote as an
   option, nor gets a variable the agent set).
2. The script comes from the file argument (opened once beneath the project,
   no symlink followed: chaperon/beneath.py), --wrap, or stdin; it is
   snapshotted into a stage directory of its own, which the sandbox sees
   read-only. Every path Slurm gets lies in the stage (or is /dev/null as
   written), and sbatch runs there, so the job's Slurm working directory is
   chaperon-owned too.
3. --output/--error point slurmstepd at stage files; the job links the
   paths the user asked for to them from inside its sandbox, so a planted
   symlink cannot redirect a write made outside the sandbox. --input is
   copied into the stage at submission for the same reason.
4. The batch script Slurm runs is our wrapper (chaperon/jobwrap.py): the job
   starts in `agent-sandbox run --project-dir P` with the same policy, and
   jobstart restores the caller's directory and environment (by --export
   rules, staged in the spec) inside the sandbox.
5. A ledger entry is reserved before submitting (a full disk refuses the job)
   and recorded after; the comment carries the session tag. A submission
   that yields no job removes its stage.
"""
from __future__ import annotations

import json
import os

from ..environment import command_env
from ..jobwrap import wrapper_script
from ..ledger import LedgerError
from ..refusal import Refusal
from ..scope import Scope
from ..slurm.directives import parse_script
from ..slurm.options import merge
from ..slurm import versions
from ..slurm.sbatch_options import parse, parse_env
from ..submit import (DEV_NULL, check_dependency, check_limits, check_writable, comment_tag,
                      copy_project_file, discard_stage, new_stage, open_project, output_pattern,
                      read_project_file, staged_env, tmp_key, working_dir, write_staged)
from .common import run_real

MAX_SCRIPT = 4 * 1024 * 1024
# Options the handler rebuilds itself; never re-emitted as the agent wrote them.
REBUILT = ("wrap", "output", "error", "input", "comment", "parsable", "export")


# Options that only print (passed through to the real command alone), and
# the ones that may accompany them.
INFO = ("help", "usage", "version", "verbose", "quiet")


def only_info(parsed) -> bool:
    """Only --help/--usage/--version (with -v/-Q), and no script or command."""
    return (not parsed.rest and all(i.name in INFO for i in parsed.items)
            and any(i.name in INFO[:3] for i in parsed.items))


def _script(project, cwd: str, parsed, request) -> tuple[bytes, list[str]]:
    wrap = parsed.last("wrap")
    if wrap is not None:
        if parsed.rest:
            raise Refusal("script_and_wrap", "a script file together with --wrap is refused",
                          "sbatch takes one or the other", "Drop the script or the --wrap")
        return f"#!/bin/sh\n{wrap}\n".encode(), []
    if parsed.rest:
        data = read_project_file(project, cwd, parsed.rest[0], "the job script", MAX_SCRIPT)
        args = list(parsed.rest[1:])
    else:
        data = request.stdin or b""
        args = []
        if not data:
            raise Refusal("no_script", "a submission without a script is refused",
                          "no script file, no --wrap and nothing on stdin",
                          "Pass a script file or --wrap='command'")
    if len(data) > MAX_SCRIPT:
        raise Refusal("script_too_large", "the job script is refused",
                      "it is larger than 4 MiB", "Keep the script small; put data in files")
    return data, args


def job_name(merged) -> list[str]:
    """The name the real sbatch would give: Slurm would otherwise name every
    job after our wrapper."""
    if merged.has("job-name"):
        return []                      # re-emitted as given (-J, #SBATCH, SBATCH_JOB_NAME)
    if merged.has("wrap"):
        return ["--job-name=wrap"]
    if merged.rest:
        return [f"--job-name={os.path.basename(merged.rest[0]) or 'sbatch'}"]
    return ["--job-name=sbatch"]       # the script came on stdin


def _stage(ctx, project, cwd: str, merged, body: bytes, args: list[str], stage: str,
           env: dict[str, str]) -> tuple:
    """Write the snapshot, the staged input, the jobstart spec (with the
    user's environment) and the wrapper into `stage`; return the options that
    point Slurm at them. Every path Slurm gets lies in `stage`, or is
    /dev/null as the caller wrote it."""
    script = write_staged(stage, "script", body, 0o700)
    array = merged.has("array")
    requested_out = merged.last("output") or ("slurm-%A_%a.out" if array else "slurm-%j.out")
    options, links = [], []
    for name, requested, staged in (("output", requested_out, f"{stage}/%j.out"),
                                    ("error", merged.last("error"), f"{stage}/%j.err")):
        if not requested:
            continue
        target = output_pattern(project, cwd, requested, f"--{name}")
        if target != DEV_NULL:   # the job links it inside its sandbox: same rule as srun's
            check_writable(ctx, target, requested, f"--{name}")
        if target == DEV_NULL:
            options.append(f"--{name}={DEV_NULL}")
        else:
            options.append(f"--{name}={staged}")
            links.append([target, staged])
    requested_in = merged.last("input")
    if requested_in == DEV_NULL:
        options.append(f"--input={DEV_NULL}")
    elif requested_in and requested_in != "none":
        if "%" in requested_in:
            raise Refusal("input_pattern", f"--input={requested_in} is refused",
                          "the input is copied at submission, so it cannot depend on the job",
                          "Name one file")
        copy_project_file(project, cwd, requested_in, "--input", os.path.join(stage, "input"))
        options.append(f"--input={stage}/input")
    spec = write_staged(stage, "spec.json", json.dumps(
        {"script": script, "args": args, "workdir": cwd, "links": links, "env": env,
         "tmp_key": tmp_key(), **({"export": merged.last("export")} if merged.has("export") else {})}).encode())
    wrapper = write_staged(stage, "wrapper", wrapper_script(
        config=ctx.config, project_dir=ctx.project_dir, spec_path=spec,
        outputs=[(os.path.relpath(target, ctx.project_dir), staged)
                 for target, staged in links]).encode(), 0o700)
    return options, wrapper


def handle(ctx, request, out) -> int:
    stage = None
    try:
        binary = ctx.real_binary("sbatch")
        mail = bool(ctx.config.get("allow_mail"))      # SLURM_ALLOW_MAIL (admin)
        series = ctx.slurm_series()
        spec = versions.sbatch(series)
        cmdline = parse(request.args_str, allow_mail=mail, spec=spec)
        if only_info(cmdline):
            # --help, --usage, --version: Slurm's own text, nothing submitted.
            return run_real(out, [binary, *cmdline.argv()], env=command_env(request.env),
                            cwd="/")[0]
        from_env = parse_env(request.env_str, allow_mail=mail, spec=spec,
                             table=versions.input_env("sbatch", series))
        with open_project(ctx) as project:
            cwd = working_dir(ctx, request, project)
            data, args = _script(project, cwd, cmdline, request)
            directives = parse_script(data, ignore_pbs=cmdline.has("ignore-pbs")
                                      or from_env.has("ignore-pbs"), allow_mail=mail,
                                      spec=spec)
            # Slurm's order: #SBATCH lines, then SBATCH_* variables, then the command line.
            merged = merge(merge(directives.parsed, from_env), cmdline)
            check_limits(ctx, merged.last("partition"))
            for dependency in merged.values.get("dependency", []):
                check_dependency(dependency, Scope(ctx, request))
            token = os.urandom(8).hex()
            stage = new_stage(ctx, token)
            options, wrapper = _stage(ctx, project, cwd, merged, directives.body, args, stage,
                                      staged_env(ctx, request, merged.last("export")))
        try:
            ctx.ledger.reserve(token)
        except LedgerError as exc:
            raise Refusal("ledger_unwritable", "the submission is refused",
                          f"the job ledger cannot be written ({exc.strerror})",
                          "Free space in your home directory (~/.local/state) and retry")
    except BaseException:   # a Refusal included: dispatch prints it
        discard_stage(stage)
        raise

    argv = [binary, *merged.argv(skip=REBUILT), *options, *job_name(merged),
            f"--comment={comment_tag(ctx, merged.last('comment'))}", "--parsable", wrapper]
    ctx.log.event("submit", command="sbatch", token=token, script_bytes=len(data),
                  argv=argv[1:-1])
    user_parsable = merged.has("parsable")
    first = {"done": False}

    def on_stdout(chunk: bytes) -> None:
        if first["done"]:
            out.stdout(chunk)
            return
        first["done"] = True
        line, _, rest = chunk.partition(b"\n")
        job_id = line.decode(errors="replace").split(";")[0].strip()
        if not (job_id.isascii() and job_id.isdigit()):
            out.stdout(chunk)       # not a job id: nothing to record, shown as sbatch said it
            return
        try:
            ctx.ledger.record(job_id, token, kind="batch",
                              **({"array": True} if merged.has("array") else {}))
        except LedgerError as exc:
            _cancel(ctx, job_id)
            out.stderr(f"agent-sandbox: sbatch: job {job_id} was cancelled — the job ledger "
                       f"cannot be written ({exc.strerror}). Free space in your home "
                       "directory and submit again.\n".encode())
            return
        out.stdout(line + b"\n" if user_parsable else f"Submitted batch job {job_id}\n".encode())
        if rest:
            out.stdout(rest)

    try:
        # The job's Slurm working directory is the stage (chaperon-owned); the
        # compute-side launcher enters `cwd` inside the sandbox.
        code, _ = run_real(out, argv, env=command_env(request.env), cwd=stage,
                           on_stdout=on_stdout)
    finally:
        if not first["done"]:
            discard_stage(stage)    # no job came of it (refused, --test-only, failed)
    return code


def _cancel(ctx, job_id: str) -> None:
    scancel = ctx.binary("scancel")
    if scancel and job_id.isdigit():
        import subprocess

        subprocess.run([scancel, job_id], capture_output=True, timeout=30)
