"""A job launch (`run --job-shared`) on a compute node: find or start the
job's sandbox on this node and run the command inside it (the design and
its threat analysis are in jobs/share.py and docs/design.md, "Jobs: one
sandbox per node").

The sequence: resolve the policy as any launch does; outside a Slurm step,
or on landlock (nothing to join), the ordinary launch runs instead (None).
Under the per-host lock: join the holder of the job's key, or fork one and
join it. Then the join plan — the helper with the pidfd, the namespaces it
must end up in, the session's seccomp filter, the task's environment and
command — runs through the ordinary spawn (signals, exit code, 125).
"""
from __future__ import annotations

import os

from agent_sandbox.traits import traits
from agent_sandbox.errors import PolicyError


def run_shared(command: list[str], *, project_dir, backend, environ, keep_fds, resolve,
               launch, job: bool = False) -> int | None:
    """The command's exit code, or None when this launch shares nothing.
    `resolve` and `launch` are run.resolve (served from the plan cache:
    jobcache.cached_resolve) and run.run (passed in: run.py imports this
    module)."""
    import fcntl

    from agent_sandbox.jobs import share as jobshare

    step = jobshare.slurm_step()
    if step is None:
        return None
    settings, selection, policy = resolve(project_dir=project_dir, backend=backend,
                                          environ=environ, job=job)
    if not traits(selection.name).joins_job_sandboxes:
        return None
    # The submitting session, as the chaperon's wrapper set it (the holder's
    # chaperon hands it on to the job's steps: chaperon.handler_config).
    shaped = jobshare.shape(policy, environ.get(jobshare.JOB_SESSION_ENV, ""))
    keys = jobshare.key_for(*step)
    dirfd = jobshare.jobs_dir(policy.home)
    try:
        lock = os.open(jobshare.lock_name(), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                       0o600, dir_fd=dirfd)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            joined = _find(jobshare, dirfd, keys)
            if joined is None:
                holder_env = {k: v for k, v in environ.items() if k != "PMI_FD"}

                def hold(waiter, started):
                    return launch(waiter, project_dir=project_dir, backend=backend,
                                  environ=holder_env, on_prepared=started, job=job)

                jobshare.start_holder(keys[-1], step[0], dirfd, hold, close=(lock,),
                                      shaped=shaped)
                joined = jobshare.connect(dirfd, keys[-1])
            if joined is None:
                raise PolicyError("the job's sandbox on this node started but does not "
                                  "answer — the task was not run.", reason="job_join_refused")
        finally:
            os.close(lock)
    finally:
        os.close(dirfd)
    try:
        return _run_joined(joined, command, selection, policy, environ, keep_fds, shaped)
    finally:
        joined.close()


def _find(jobshare, dirfd: int, keys: list[str]):
    for key in keys:
        joined = jobshare.connect(dirfd, key)
        if joined is not None:
            return joined
    return None


def _run_joined(joined, command, selection, policy, environ, keep_fds, shaped) -> int:
    from agent_sandbox.jobs import share as jobshare
    from agent_sandbox.process.spawn import kept_fds, run_plan
    from agent_sandbox.policy.resolve import with_chaperon

    info = joined.info
    if info.get("project") != policy.project_dir or info.get("backend") != selection.name:
        raise PolicyError(
            f"the job's sandbox on this node is for {info.get('project')} on "
            f"{info.get('backend')}, this task for {policy.project_dir} on {selection.name} — "
            "a task joins only its own job's sandbox. The task was not run.",
            reason="job_join_refused")
    # Another session of the project (or the same one with other settings)
    # must not get this sandbox's view and chaperon: fail closed. A job's own
    # steps resolve the same policy in the same session, so MPI is unaffected.
    differs = jobshare.shape_differs(info.get("shape"), shaped)
    if differs:
        raise PolicyError(
            "the job's sandbox on this node was made for another session or with other "
            f"settings ({', '.join(differs)} differ) — a task joins only the sandbox of the "
            "session that submitted it, with the same settings. Submit the step from that "
            "session. The task was not run.", reason="job_join_refused")
    if info.get("chaperon"):
        policy = with_chaperon(policy, info["chaperon"], info["staging"])
    kept = kept_fds(keep_fds, environ)
    spec = jobshare.namespaces_of(joined.pidfd)
    needed = {"mnt", "pid"} | ({"user"} if traits(selection.name).user_namespace else set())
    if not needed <= spec.keys():
        raise PolicyError(f"the process handed over as the job's sandbox shares this "
                          f"process's {' and '.join(sorted(needed - spec.keys()))} namespace — "
                          "it is not a sandbox. The task was not run.",
                          reason="job_join_refused")
    plan = join_plan(policy, command, selection, spec, pid=jobshare._pid_of(joined.pidfd),
                     pidfd=joined.pidfd, keep_fds=kept)
    return run_plan(plan, kept + (joined.pidfd,))


def join_python_usable(owner: int, mode: int, uid: int) -> bool:
    """An interpreter the joining user cannot read (pure): root's, execute-only
    for others (scripts/install.sh), or the user's own with mode 0100
    (cli/userinstall.py; the install is read-only inside the sandbox, so
    no member can chmod it)."""
    return (owner == 0 and mode == 0o711) or (owner == uid and mode == 0o100)


def join_python() -> str:
    """The interpreter `firejail --join` execs the helper with: an
    execute-only copy (scripts/install.sh, cli/userinstall.py), so the
    helper is non-dumpable from its exec inside the sandbox on (a member could
    otherwise stop it and rewrite its memory before it loads seccomp). Fails
    closed without it."""
    import sys

    path = os.path.join(sys.prefix, "libexec", "python3-join")
    try:
        info = os.stat(path)
    except OSError:
        info = None
    if info is None or not join_python_usable(info.st_uid, info.st_mode & 0o7777, os.getuid()):
        raise PolicyError(
            f"a firejail job step cannot join its job's sandbox — {path} is missing or not "
            "an execute-only root-owned file (nor the user's own with mode 0100), which keeps "
            "the joining helper safe from the sandbox's processes until its seccomp filter is "
            "loaded; reinstall agent-sandbox on this node (scripts/install.sh; a venv, pipx or "
            f"uv install: {sys.executable} -m agent_sandbox.cli.userinstall), or use bwrap or "
            "landlock for jobs. The task was not run.", reason="job_join_refused")
    return path


def join_view_refusal(policy, paths, realpath=os.path.realpath) -> str | None:
    """Why `firejail --join` cannot take `paths` (the join interpreter, the
    helper's folder) from the sandbox's own view, or None (pure over
    `realpath`). firejail resolves them inside the job's mount namespace,
    after the launcher checked the real files outside: where the sandbox
    can write them, or rename a directory above them — any directory of its
    private home (the home is a tmpfs inside unless HOME_ACCESS=read shows
    the real one read-only; with write the real one is writable) — it shows
    its own files at the same path (a pipx or uv install under
    ~/.local/share; found in review), and the joining task would run them
    before it loads the session's seccomp filter. Names and real paths both."""
    from agent_sandbox.paths import is_within

    writable = (policy.project_dir, *policy.extra_writable, *policy.home_writable)
    for path in paths:
        for name in dict.fromkeys((path, realpath(path))):
            if any(is_within(name, tree) or is_within(name, realpath(tree))
                   for tree in writable):
                return f"{name} lies in a tree the sandbox can write"
            if policy.home_access != "read" and (
                    is_within(name, policy.home) or is_within(name, realpath(policy.home))):
                return (f"{name} lies in your home, whose directories the sandbox can rename "
                        f"inside (HOME_ACCESS={policy.home_access})")
    return None


def join_plan(policy, command: list[str], selection, spec: dict, *, pid: int, pidfd: int,
              keep_fds=()):
    """The Plan of a joining task (pure): the helper, started by bwrap's
    joiner directly (it setns through `pidfd`) or by `firejail --join=PID`,
    with the namespaces it must end up in, the seccomp filter, the
    environment and the command on descriptors. No Landlock domain (see
    jobshare), so the guarantees are those of the backend without scoping.
    `keep_fds`: the task's kept descriptors (spawn.kept_fds)."""
    from agent_sandbox.backends import BACKENDS
    from agent_sandbox.backends.base import Plan, argv_payload, env_payload, helper_argv
    from agent_sandbox.launch.payloads import seccomp_payload
    from agent_sandbox.process.select import helper_python

    by_setns = traits(selection.name).job_join == "setns"   # else the backend's --join
    python = helper_python(policy) if by_setns else join_python()
    if not by_setns:
        from agent_sandbox.backends.base import helper_path

        why = join_view_refusal(policy, (python, os.path.dirname(helper_path())))
        if why:
            raise PolicyError(
                f"a firejail job step cannot join its job's sandbox — {why}, and firejail "
                "--join finds the join interpreter and the helper by their path inside the "
                "sandbox, where the session could put its own files there before the task's "
                "seccomp filter is loaded. Install agent-sandbox outside your home (a site "
                "install, scripts/install.sh), or use bwrap or landlock for jobs. The task "
                "was not run.", reason="job_join_refused")
    helper = helper_argv(python=python, env=True, seccomp=policy.seccomp, status=True,
                         argv_fd=True, chdir=policy.workdir, keep_fds=keep_fds)
    join = ["--join-ns", ",".join(f"{kind}:{inode}" for kind, inode in spec.items())]
    if by_setns:
        join += ["--join", str(pidfd)]
        argv = helper[:-1] + join + ["--"]
    else:
        # No `--` before the helper: with it firejail 0.9.72 runs the command
        # through `bash -c`, a dumpable process inside the sandbox that a
        # member could rewrite before the helper starts. Without it firejail
        # execs the (absolute) interpreter path directly; --join takes what
        # follows it as the command, so nothing after it is a firejail option.
        from agent_sandbox.backends.firejail import supports

        features = getattr(selection, "features", None)
        keep = ["--keep-fd=all"] if supports(features, "--keep-fd") else []  # 0.9.68
        argv = ([selection.path, "--quiet", *keep, f"--join={pid}"]
                + helper[:-1] + join + ["--"])
    payloads = {"env": env_payload(policy.env), "argv": argv_payload(command)}
    if policy.seccomp:
        needs = getattr(BACKENDS[selection.name], "needs_userns_filter", None)
        payloads["seccomp"] = seccomp_payload(policy, policy.home, no_user_namespaces=bool(
            needs and needs(getattr(selection, "features", None))))[0]
    provides, partial, cannot = BACKENDS[selection.name].guarantees(
        policy, landlock_abi=0, keep_fds=keep_fds)
    return Plan(backend=selection.name, argv=tuple(argv), payloads=payloads,
                env=dict(policy.env), provides=provides, cannot=cannot, partial=partial,
                status_fd="status", started="helper-exec")
