"""What sbatch and srun share: the project opened once per request and the
caller's directory and files checked through it (chaperon/beneath.py), the
stage directory a submission's files live in (removed when it fails), the
environment the job gets beside Slurm, the comment tag, and the checks on
partitions, limits and dependencies. One place, so both handlers refuse the
same things in the same words.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
from urllib.parse import quote

from .beneath import Project, Unusable
from .environment import user_env
from .refusal import Refusal
from .slurm.jobids import ref_base

TAG_PREFIX = "chaperon:"
TAG_END = ":END"


DEV_NULL = "/dev/null"    # the one path outside the project Slurm may open for a job


def open_project(ctx) -> Project:
    """The project directory, opened once for this request (no symlink in
    its path); every name the caller gives is opened beneath it."""
    try:
        return Project(ctx.project_dir)
    except Unusable as exc:
        raise Refusal("project_unusable", "the submission is refused", exc.why,
                      "Start the sandbox again in the project directory") from None


def working_dir(ctx, request, project: Project) -> str:
    """The caller's working directory: a real directory beneath the project,
    reached without a symlink (checked on a descriptor). Slurm never gets
    it: the job's Slurm working directory is chaperon-owned, and the
    compute-side launcher enters this one inside the sandbox."""
    cwd = os.path.normpath(request.cwd_str)
    try:
        os.close(project.directory(project.rel("/", cwd)))
    except Unusable as exc:
        raise Refusal("cwd_outside_project", f"the working directory {request.cwd_str} is refused",
                      f"{exc.why} (the project is {ctx.project_dir})",
                      "cd into a directory of the project and submit from there") from None
    return cwd


def _unusable(what: str, name: str, exc: Unusable) -> Refusal:
    outside = exc.errno == errno.EXDEV
    return Refusal("path_outside_project" if outside else "path_unusable",
                   f"{what} {name} is refused", exc.why,
                   "Keep it inside the project directory" if outside else
                   "Name a regular file inside the project (symlinks are not followed)")


def read_project_file(project: Project, cwd: str, name: str, what: str, limit: int) -> bytes:
    """The bytes of a regular file the caller names, opened once beneath the
    project without following a symlink (at most `limit` + 1 bytes)."""
    try:
        return project.read_regular(project.rel(cwd, name), limit)
    except Unusable as exc:
        raise _unusable(what, name, exc) from None


def check_writable(ctx, full: str, name: str, what: str) -> None:
    """The chaperon writes a file for the caller (srun -o/-e) outside the
    sandbox, with the user's full rights: it may write only where the
    sandbox could. So a protected path (PROTECTED_PATHS, the repository's
    control files: read-only inside) and anything in a `.git` directory at
    any depth (git runs what a config or hook there says) are refused."""
    parts = full.split("/")
    protected = ctx.config.get("protected", ())
    if ".git" in parts or any(full == p or full.startswith(p.rstrip("/") + "/")
                              for p in protected):
        raise Refusal("protected_path", f"{what} {name} is refused",
                      "it is read-only inside the sandbox (a protected path or a git control "
                      "file), and the chaperon writes only where the sandbox may",
                      "Write the output to another file of the project")


def copy_project_file(project: Project, cwd: str, name: str, what: str, dest: str) -> None:
    """Copy a regular file the caller names (opened once beneath the project,
    no symlink followed) to the chaperon-owned `dest`."""
    try:
        source = project.open_regular(project.rel(cwd, name))
    except Unusable as exc:
        raise _unusable(what, name, exc) from None
    with open(source, "rb") as reader, open(
            os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600),
            "wb") as writer:
        shutil.copyfileobj(reader, writer, 1 << 20)


def output_pattern(project: Project, cwd: str, pattern: str, what: str) -> str:
    """An --output/--error request: its directory must be a real directory
    beneath the project (checked on a descriptor; the file itself is a link
    the job makes inside the sandbox). Returns the path to link, or
    /dev/null as given."""
    if pattern == DEV_NULL:
        return DEV_NULL
    if "\n" in pattern or not pattern or pattern == "none":
        raise Refusal("bad_output_path", f"{what} {pattern!r} is refused",
                      "it is not a file name the sandbox can stage",
                      "Name a file inside the project, e.g. logs/%j.out")
    full = os.path.normpath(os.path.join(cwd, pattern))
    if "%" in os.path.dirname(pattern):
        raise Refusal("path_outside_project", f"{what} {pattern} is refused",
                      "its directory holds a % pattern, which the sandbox cannot check "
                      "before the job runs", "Put the pattern in the file name only")
    try:
        os.close(project.directory(project.rel(cwd, os.path.dirname(full))))
    except Unusable as exc:
        raise Refusal("path_outside_project" if exc.errno == errno.EXDEV else "path_unusable",
                      f"{what} {pattern} is refused", f"its directory: {exc.why}",
                      "Write job output to an existing directory inside the project") from None
    return full


def staged_env(ctx, request, export: str | None) -> dict[str, str]:
    """The caller's environment by --export rules, to be restored inside the
    job's sandbox (never handed to Slurm). This session's stubs leave PATH:
    the job's sandbox has its own, put first by jobstart."""
    from .wire.session import visible_paths

    visible = ctx.config.get("visible_dir")
    stubs = (visible_paths(bool(ctx.config.get("fixed_mount_points")), visible)[1:]
             if visible else ())
    return user_env(request.env, export, stubs)


def launcher_env(ctx) -> dict[str, str]:
    """What the compute-side `agent-sandbox run` must see so the job gets this
    session's policy: the values that steered this session, and quiet."""
    env = {}
    for key, value in ctx.config.get("overrides", {}).items():
        env[key] = " ".join(value) if isinstance(value, list) else (
            ("true" if value else "false") if isinstance(value, bool) else str(value))
    env["SANDBOX_QUIET"] = "1"   # the job's output is the user's, not our banner
    # The session that submitted the job (the wrapper sets it for sbatch): a
    # step's tasks join only that session's sandbox (jobs/share.py shape).
    env["AGENT_SANDBOX_JOB_SESSION"] = ctx.config.get("job_session") or ""
    return env


def tmp_key(env_in: dict[str, str] | None = None, job: str = "") -> str:
    """The secret part of the job's private TMPDIR name (jobstart.py
    private_tmpdir): fresh for a batch job or an allocation; for a step, the
    one of the job it runs in, read from the caller's TMPDIR (which jobstart
    set), so a job's steps share its TMPDIR on every node as Slurm's
    job_container/tmpfs does. The caller runs inside that job: naming
    another key only changes its own job's directory."""
    if env_in and job.isdigit():
        name = os.path.basename(env_in.get("TMPDIR", ""))
        match = re.fullmatch(rf"agent-sandbox-job-{job}-([0-9a-f]{{32}})", name)
        if match:
            return match.group(1)
    return os.urandom(16).hex()


def new_stage(ctx, token: str) -> str:
    """A fresh chaperon-owned directory for one submission's files."""
    stage = os.path.join(ctx.config["staging_dir"], token)
    os.makedirs(stage, mode=0o700)
    return stage


def discard_stage(stage: str | None) -> None:
    """A submission that failed leaves nothing staged."""
    if stage:
        shutil.rmtree(stage, ignore_errors=True)


def write_staged(stage: str, name: str, data: bytes, mode: int = 0o600) -> str:
    path = os.path.join(stage, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode),
              "wb") as handle:
        handle.write(data)
    return path


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
