"""sbatch: validate, stage, wrap, tag, record, submit (SPEC §9 sbatch).

1. Options from the command line and the script's #SBATCH lines go through
   the one allow-list parser; directives are removed from the body, accepted
   ones are re-emitted canonically on the command line (the real sbatch never
   parses a byte the agent wrote as an option).
2. The script comes from the file argument (resolved inside the project),
   --wrap, or stdin; it is snapshotted into the staging directory, which the
   sandbox sees read-only.
3. --output/--error point slurmstepd at staging files; the job links the
   paths the user asked for to them from inside its sandbox, so a planted
   symlink cannot redirect a write made outside the sandbox. --input is
   copied into staging at submission for the same reason.
4. The batch script Slurm runs is our wrapper (chaperon/jobwrap.py): the job
   starts in `agent-sandbox run --project-dir P` with the same policy.
5. A ledger entry is reserved before submitting (a full disk refuses the job)
   and recorded after; the comment carries the session tag.
"""
from __future__ import annotations

import json
import os
import shutil

from ..directives import parse_script
from ..ledger import LedgerError
from ..options import OptionRefused, merge
from ..sbatch_options import parse, parse_env
from ..scope import Scope
from ..submit import (Refusal, check_dependency, check_limits, comment_tag, from_option,
                      job_env, output_pattern, preflight, project_file, working_dir)
from ..jobwrap import wrapper_script
from . import refuse, run_real

MAX_SCRIPT = 4 * 1024 * 1024
# Options the handler rebuilds itself; never re-emitted as the agent wrote them.
REBUILT = ("wrap", "output", "error", "input", "comment", "parsable")


def _script(ctx, cwd: str, parsed, request) -> tuple[bytes, list[str]]:
    wrap = parsed.last("wrap")
    if wrap is not None:
        if parsed.rest:
            raise Refusal("script_and_wrap", "a script file together with --wrap is refused",
                          "sbatch takes one or the other", "Drop the script or the --wrap")
        return f"#!/bin/sh\n{wrap}\n".encode(), []
    if parsed.rest:
        path = project_file(ctx, cwd, parsed.rest[0], "the job script")
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_SCRIPT + 1)
        except OSError as exc:
            raise Refusal("script_unreadable", f"the job script {parsed.rest[0]} is refused",
                          f"it cannot be read ({exc.strerror})", "Check the path") from None
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


def _stage(ctx, cwd: str, merged, body: bytes, args: list[str], token: str) -> tuple:
    """Write the snapshot, the jobstart spec and the wrapper; return the
    options that point Slurm at them."""
    stage = os.path.join(ctx.config["staging_dir"], token)
    os.makedirs(stage, mode=0o700)
    script = os.path.join(stage, "script")
    with open(os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), "wb") as handle:
        handle.write(body)
    array = merged.has("array")
    requested_out = merged.last("output") or ("slurm-%A_%a.out" if array else "slurm-%j.out")
    output = output_pattern(ctx, cwd, requested_out, "--output")
    options = [f"--output={stage}/%j.out"]
    links = [[output, f"{stage}/%j.out"]]
    requested_err = merged.last("error")
    if requested_err:
        links.append([output_pattern(ctx, cwd, requested_err, "--error"), f"{stage}/%j.err"])
        options.append(f"--error={stage}/%j.err")
    requested_in = merged.last("input")
    if requested_in and requested_in != "none":
        if "%" in requested_in:
            raise Refusal("input_pattern", f"--input={requested_in} is refused",
                          "the input is copied at submission, so it cannot depend on the job",
                          "Name one file")
        source = project_file(ctx, cwd, requested_in, "--input")
        shutil.copyfile(source, os.path.join(stage, "input"))
        options.append(f"--input={stage}/input")
    spec = os.path.join(stage, "spec.json")
    with open(spec, "w", encoding="utf-8") as handle:
        json.dump({"script": script, "args": args, "workdir": cwd, "links": links}, handle)
    wrapper = os.path.join(stage, "wrapper")
    with open(wrapper, "w", encoding="utf-8") as handle:
        handle.write(wrapper_script(launcher=ctx.config["launcher"],
                                    project_dir=ctx.project_dir,
                                    jobstart=ctx.config["jobstart"], spec_path=spec,
                                    overrides=ctx.config.get("overrides", {})))
    return options, wrapper


def handle(ctx, request, out) -> int:
    try:
        binary = preflight(ctx, request, "sbatch")
        try:
            mail = bool(ctx.config.get("allow_mail"))      # SLURM_ALLOW_MAIL (admin)
            cmdline = parse(request.args_str, allow_mail=mail)
            from_env = parse_env(request.env_str, allow_mail=mail)
        except OptionRefused as refused:
            raise from_option(refused) from None
        cwd = working_dir(ctx, request)
        data, args = _script(ctx, cwd, cmdline, request)
        try:
            directives = parse_script(data, ignore_pbs=cmdline.has("ignore-pbs")
                                      or from_env.has("ignore-pbs"), allow_mail=mail)
        except OptionRefused as refused:
            raise from_option(refused) from None
        # Slurm's order: #SBATCH lines, then SBATCH_* variables, then the command line.
        merged = merge(merge(directives.parsed, from_env), cmdline)
        check_limits(ctx, merged.last("partition"))
        for dependency in merged.values.get("dependency", []):
            check_dependency(dependency, Scope(ctx, request))
        token = os.urandom(8).hex()
        options, wrapper = _stage(ctx, cwd, merged, directives.body, args, token)
        try:
            ctx.ledger.reserve(token)
        except LedgerError as exc:
            raise Refusal("ledger_unwritable", "the submission is refused",
                          f"the job ledger cannot be written ({exc.strerror})",
                          "Free space in your home directory (~/.local/state) and retry")
    except Refusal as refusal:
        return refuse(ctx, out, "sbatch", refusal.reason, refusal.what, refusal.why, refusal.fix)

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

    code, _ = run_real(out, argv, env=job_env(ctx, request), cwd=cwd, on_stdout=on_stdout)
    return code


def _cancel(ctx, job_id: str) -> None:
    scancel = ctx.binary("scancel")
    if scancel and job_id.isdigit():
        import subprocess

        subprocess.run([scancel, job_id], capture_output=True, timeout=30)
