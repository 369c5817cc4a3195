"""What sbatch and srun share: checks on the caller's working directory and
paths, the environment a job gets, the comment tag, and the ledger steps
around a submission. One place, so both handlers refuse the same things.
"""
from __future__ import annotations

import os
from urllib.parse import quote

from .environment import command_env
from .jobwrap import STEERING
from .options import OptionRefused
from .scope import ref_base

TAG_PREFIX = "chaperon:"
TAG_END = ":END"


class Refusal(Exception):
    """A refusal: reason code, what was refused ("… is refused"), why, and how
    to do it instead. The handler prints it in the house format."""

    def __init__(self, reason: str, what: str, why: str, fix: str):
        super().__init__(what)
        self.reason, self.what, self.why, self.fix = reason, what, why, fix


def from_option(refused: OptionRefused) -> Refusal:
    return Refusal(refused.reason, refused.what, refused.why, refused.instead)


def preflight(ctx, request, command: str) -> str:
    """The real binary of `command`, once the request is one it can receive."""
    binary = ctx.binary(command)
    if binary is None:
        raise Refusal("not_installed", f"{command} is refused", "it is not installed here",
                      "Ask your site admin")
    if request.has_nul:
        raise Refusal("nul_byte", "an argument with a NUL byte is refused",
                      "no program can receive it", "Remove it")
    return binary


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def working_dir(ctx, request) -> str:
    """The caller's working directory, symlinks resolved, inside the project."""
    cwd = os.path.realpath(request.cwd_str)
    if not within(cwd, ctx.project_dir):
        raise Refusal("cwd_outside_project", f"the working directory {request.cwd_str} is refused",
                      f"it is outside the project {ctx.project_dir}",
                      "cd into the project directory and submit from there")
    return cwd


def project_file(ctx, cwd: str, name: str, what: str) -> str:
    """A file the caller names, resolved (symlinks followed) inside the project."""
    path = os.path.realpath(os.path.join(cwd, name))
    if not within(path, ctx.project_dir):
        raise Refusal("path_outside_project", f"{what} {name} is refused",
                      f"it resolves to {path}, outside the project {ctx.project_dir}",
                      "Keep it inside the project directory")
    return path


def output_pattern(ctx, cwd: str, pattern: str, what: str) -> str:
    """An --output/--error request: the directory it names must resolve inside
    the project (the file itself is a link the job makes inside the sandbox)."""
    if "\n" in pattern or not pattern or pattern == "none":
        raise Refusal("bad_output_path", f"{what} {pattern!r} is refused",
                      "it is not a file name the sandbox can stage",
                      "Name a file inside the project, e.g. logs/%j.out")
    full = os.path.normpath(os.path.join(cwd, pattern))
    parent = os.path.realpath(os.path.dirname(full))
    if not within(parent, ctx.project_dir) or "%" in os.path.dirname(pattern):
        raise Refusal("path_outside_project", f"{what} {pattern} is refused",
                      f"its directory resolves to {parent}, outside the project "
                      f"{ctx.project_dir} (or holds a % pattern)",
                      "Write job output inside the project directory")
    return full


def job_env(ctx, request, *, keep_slurm: tuple[str, ...] = ()) -> dict[str, str]:
    """The submission environment: the caller's, without loader hooks, Slurm
    input variables or anything that steers the compute-side sandbox; then
    the values that steered this session, so the job gets the same policy."""
    env = command_env(request.env, keep_slurm=keep_slurm)
    for name in STEERING:
        env.pop(name, None)
    env["SANDBOX_QUIET"] = "1"   # the job's output is the user's, not our banner
    for key, value in ctx.config.get("overrides", {}).items():
        env[key] = " ".join(value) if isinstance(value, list) else (
            ("true" if value else "false") if isinstance(value, bool) else str(value))
    return env


def comment_tag(ctx, user_comment: str | None) -> str:
    tag = f"{TAG_PREFIX}sid={ctx.session_id},proj={ctx.ledger.project}"
    if user_comment:
        # bytes: an argument that is not UTF-8 arrives with surrogate escapes
        tag += f",user={quote(user_comment.encode('utf-8', 'surrogateescape'), safe='')}"
    return tag + TAG_END


def check_limits(ctx, partition: str | None) -> None:
    allowed = ctx.config.get("allowed_partitions") or []
    if allowed:
        wanted = (partition or "").split(",") if partition else []
        if not wanted or any(p not in allowed for p in wanted):
            raise Refusal("partition_not_allowed",
                          f"partition {partition or '(default)'} is refused",
                          f"the site allows only ({' '.join(allowed)}) from a sandbox",
                          f"Pass --partition={allowed[0]}")
    limit = int(ctx.config.get("max_jobs") or 0)
    if limit and len(ctx.ledger.jobs("session")) >= limit:
        raise Refusal("too_many_jobs", "another job is refused",
                      f"this session already submitted {limit} jobs (SLURM_MAX_JOBS)",
                      "Wait for jobs to finish in a new session, or ask your site admin")


DEPENDENCY_TYPES = ("after", "afterany", "afterburstbuffer", "aftercorr", "afternotok",
                    "afterok", "expand", "singleton")


def check_dependency(value: str, scope) -> str:
    """A dependency expression (sbatch/srun --dependency, scontrol update
    Dependency=) whose job ids are all in `scope`; refused otherwise."""
    def ids(part: str) -> str:
        kind, _, rest = part.partition(":")
        if kind.lower() not in DEPENDENCY_TYPES:
            raise Refusal("bad_dependency", f"the dependency {value!r} is refused",
                          f"{kind!r} is not a dependency type",
                          "Use afterok:ID, afterany:ID, afternotok:ID, after:ID or singleton")
        if not rest:
            return part
        jobs = []
        for item in rest.split(":"):
            ref, plus, delay = item.partition("+")
            if ref_base(ref) is None:
                raise Refusal("bad_dependency", f"the dependency {value!r} is refused",
                              f"{item!r} is not a job id", "Give job ids: afterok:123:124")
            jobs.append((ref, plus + delay))
        refs = [j for j, _ in jobs]
        outside = [r for r, ok in zip(refs, scope.in_scope(refs)) if not ok]
        if outside:
            raise Refusal("job_out_of_scope", f"a dependency on job {outside[0]} is refused",
                          "it is not a job this sandbox can see (Slurm would keep the "
                          "dependency unfulfilled forever)",
                          "Depend on jobs submitted from this sandbox's scope")
        return part
    separator = "?" if "?" in value else ","
    return separator.join(ids(p) for p in value.split(separator) if p)
