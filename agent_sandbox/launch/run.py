"""The thin shell: from a command line to a running sandbox.

Everything that decides *what* the sandbox is happens in pure code (confload →
policy → backend plan). This module does the few things that touch the
system: reads the identity and host files the plan needs, creates the
placeholder mount points for missing protected paths, turns payloads into
file descriptors, starts the backend, forwards signals to the command, and
turns the outcome into an exit code.

Exit codes: the command's own; 125 when the sandbox could not be set up (no
backend, bad config, refused policy, backend failure); 126/127 as the shell
uses them. Nothing here ever falls back to running the command unsandboxed.
"""
from __future__ import annotations

import os
import pwd
import sys

from agent_sandbox.errors import (BackendUnavailable, PolicyError, SandboxError, UsageError,
                                  mapped, say)
from agent_sandbox.launch.nesting import exec_nested, inside_sandbox
from agent_sandbox.launch.payloads import _with_note, base_payloads, check_bound_files
from agent_sandbox.launch.select import choose_backend, helper_python, landlock_abi
from agent_sandbox.launch.spawn import keep_fds_checked, run_plan, slurm_task_fds
from agent_sandbox.paths import user_config_dir


# ---------------------------------------------------------------- context
def _install_paths() -> tuple[str, ...]:
    from agent_sandbox.paths import PACKAGE_DIR

    paths = [os.path.dirname(PACKAGE_DIR)]       # site-packages or the source tree
    if sys.prefix != sys.base_prefix:
        paths.append(sys.prefix)                 # the virtual environment
    return tuple(paths)


def _launcher_paths(environ, home: str) -> tuple[str, ...]:
    """What a later launch may run before any sandbox is there: each
    `agent-sandbox` on PATH in the user's home (a pipx / uv tool link or a pip
    --user script in ~/.local/bin, shadowed or not: PATH changes), its target,
    and this interpreter. From PATH, not argv[0]: the plan cache keys on the
    environment; only below the home: a system path (/usr/local/bin, re-pointed
    by an admin's install) is never writable inside and need not key it."""
    from agent_sandbox.paths import is_within

    paths = []
    for directory in environ.get("PATH", "").split(os.pathsep):
        directory = os.path.normpath(directory) if directory.startswith("/") else ""
        entry = os.path.join(directory, "agent-sandbox")
        if directory and is_within(directory, home) \
                and os.access(entry, os.X_OK) and not os.path.isdir(entry):
            paths += [entry, os.path.realpath(entry)]
    paths.append(os.path.realpath(sys.executable))
    return tuple(dict.fromkeys(paths))


def _anchors(policy) -> tuple[str, ...]:
    """Where placeholders are walked from (launch/placeholders.py): the
    project, the home and the writable trees, as the configuration names them."""
    return ((policy.project_dir, policy.home) + tuple(policy.home_writable)
            + tuple(policy.extra_writable))


def launch_context(project_dir: str | None, environ):
    from agent_sandbox.policy.resolve import LaunchContext

    entry = pwd.getpwuid(os.getuid())
    # The user config dir is kept read-only inside only if it exists; made
    # here so that a session with a writable home cannot create it and plant
    # a config that weakens the next launch.
    try:
        os.makedirs(user_config_dir(entry.pw_dir), mode=0o700,
                    exist_ok=True)
    except OSError:
        pass   # a read-only home: nothing can be planted there either
    _caches_root(entry.pw_dir)
    install = _install_paths()
    return LaunchContext(
        uid=os.getuid(), gid=os.getgid(), user=entry.pw_name, home=entry.pw_dir,
        environ=dict(environ), cwd=os.getcwd(), project_dir=project_dir,
        install_paths=install, session_id=os.urandom(6).hex(),
        install_links=_install_links(install),
        launcher_paths=_launcher_paths(environ, entry.pw_dir))


def _caches_root(home: str) -> None:
    """The directory of the sandbox's package caches (paths.CACHES_DIR),
    made before the policy looks at it (an always-hidden path: whether it
    exists is an input of the plan), so that the first launch, which makes
    it, does not make the next one miss. By descriptor, unrecorded."""
    from agent_sandbox.launch.plancache import ACTIVE, Paused
    from agent_sandbox.paths import CACHES_DIR, NotOwnDirectory, open_own_dir

    with Paused(ACTIVE[-1] if ACTIVE else None):
        try:
            os.close(open_own_dir(home, CACHES_DIR, create=True))
        except (OSError, NotOwnDirectory):
            pass   # make_package_cache says why, if it matters


def _install_links(install: tuple[str, ...]) -> tuple:
    """The install's files with more than one link (linkcheck.py), looked
    at unrecorded: a compiled plan keys on the install already (plancache's
    context stamps it), and thousands of fingerprints would slow every hit."""
    from agent_sandbox.launch.linkcheck import install_links
    from agent_sandbox.launch.plancache import ACTIVE, Paused

    with Paused(ACTIVE[-1] if ACTIVE else None):
        return install_links(install)


def backend_plan(selection, policy, command: list[str], payloads: dict, abi: int):
    """The selected backend's plan for the policy, on a kernel with Landlock ABI `abi`."""
    from agent_sandbox.backends import BACKENDS, PlanContext

    try:
        setuid = bool(os.stat(selection.path).st_mode & 0o4000)
    except OSError:
        setuid = False
    backend = BACKENDS[selection.name]
    mounts, recorder = _host_mounts()
    failure = ""
    probe = getattr(backend, "private_mounts_probe_argv", None)
    if probe is not None and policy.private_mounts and not setuid:
        from agent_sandbox.launch.select import probe_backend

        passed, detail = probe_backend(selection.name, selection.path, policy.home,
                                       argv=probe(selection.path), kind="private-mounts")
        failure = "" if passed else detail
    context = PlanContext(program=selection.path, landlock_abi=abi, python=helper_python(policy),
                          program_setuid=setuid, host_mounts=mounts,
                          private_mounts_failure=failure)
    backend.refuse(policy, context=context)
    plan = backend.plan(policy, command, payloads, context=context)
    if recorder is not None and mounts is not None and mounts.asked:
        from agent_sandbox.mountinfo import MOUNTINFO

        recorder.derived(MOUNTINFO, ("mounts", tuple(mounts.asked)), tuple(mounts.asked.values()))
    return plan._replace(chosen_because=selection.reason)


def _host_mounts():
    """(the host's mount points for the plan, the recorder of this compile).
    The table is read unrecorded: a cached plan keys on the answers the
    plan's rules got from it (mountinfo.py), which the recorder is given."""
    from agent_sandbox.launch.plancache import ACTIVE, Paused
    from agent_sandbox.mountinfo import MountPoints, read_mount_points

    recorder = ACTIVE[-1] if ACTIVE else None
    with Paused(recorder):
        points = read_mount_points()
    return (None if points is None else MountPoints(points)), recorder


def check_required(plan, policy, settings, abi: int) -> None:
    """REQUIRE: every listed guarantee must be fully provided, else refuse,
    naming the backends that would give it."""
    from agent_sandbox.backends import would_provide

    missing = plan.missing(policy.require)
    if not missing:
        return
    reasons = dict(plan.cannot + plan.partial)
    parts, suggestion = [], None
    for guarantee in missing:
        others = [b for b in would_provide(guarantee, policy, landlock_abi=abi,
                                           allowed=settings.ALLOWED_BACKENDS)
                  if b != plan.backend]
        if others:
            suggestion = suggestion or others[0]
            alternative = f"{' or '.join(others)} would give it"
        else:
            alternative = "no allowed backend gives it with this configuration"
        parts.append(f"{guarantee}: {reasons.get(guarantee, 'not provided')} ({alternative})")
    fix = (f"Run with --backend {suggestion} (or SANDBOX_BACKEND={suggestion})"
           if suggestion else "Change the setting named above")
    raise PolicyError(f"REQUIRE=({' '.join(policy.require)}) cannot hold on the "
                      f"{plan.backend} backend — {'; '.join(parts)}. {fix}, or remove the "
                      "entry from REQUIRE.", reason="requirement_unmet")


# ---------------------------------------------------------------- payloads
class Prepared:
    """A launch up to its plan: what `run`, `--dry-run`, `explain` and the
    outside submission all start from. `cached`: loaded from the compiled
    plan cache (plancache.py). `placeholders`: policy/view.py
    placeholder_candidates, compiled with the policy; those missing at the
    launch are made then. (A plain class: typing.NamedTuple costs a cached
    launch several milliseconds of imports.)"""
    __slots__ = ("settings", "selection", "policy", "plan", "denied", "chaperon", "cached",
                 "placeholders")

    def __init__(self, settings, selection, policy, plan, denied: tuple, chaperon=None,
                 cached: bool = False, placeholders: tuple = ()):
        self.settings, self.selection, self.policy, self.plan = settings, selection, policy, plan
        self.denied, self.chaperon, self.cached = denied, chaperon, cached
        self.placeholders = placeholders

    def _replace(self, **changes) -> "Prepared":
        return Prepared(**{name: changes.pop(name, getattr(self, name))
                           for name in self.__slots__}, **changes)


# The plan cache stores plans without their command: compiled with this one
# argument in its place, which the backends put verbatim at the end of their
# argv (bwrap, landlock) or as the whole `argv` payload the helper reads
# (firejail, which limits its own argv): with_command fills either. A
# backend says whether it can (its trait command_slot).
COMMAND_SLOT = "\x01agent-sandbox: the command\x01"


def prepare(command: list[str], *, project_dir: str | None, backend: str | None, environ,
            profile=None, keep_fds=(), chaperon=None, terminal: bool = False,
            agent_copy=None, egress=None, job: bool = False,
            command_slot: bool = False) -> Prepared:
    """The one sequence resolve → (chaperon) → (egress) → payloads → plan.
    `chaperon` is a callable (settings, policy) -> ChaperonSession | None run
    after the policy is known and before the plan is built, so the plan is
    built once, with the session directory; the caller stops the session it
    returns. `egress` likewise (settings, policy, profile) -> EgressPlan |
    None: the egress proxy of NETWORK_MODE=allowlist (launch/egress.py).
    `terminal`: the session runs on a relayed pseudo-terminal. `agent_copy`:
    a callable (policy) -> policy that puts a profile's configuration on its
    guarded session copy (agentcopy.py); the caller finishes it. `job`: a
    batch job or step on a compute node (JOB_NETWORK_MODE applies).
    `command_slot`: plan COMMAND_SLOT in place of the command
    where the backend allows it (the plan cache; with_command puts the
    command in)."""
    from agent_sandbox.traits import traits

    settings, selection, policy = resolve(project_dir=project_dir, backend=backend,
                                          environ=environ, profile=profile, job=job)
    make_package_cache(policy)
    if command_slot and traits(selection.name).command_slot:
        # A profile's command is its own words, then the user's ARGS: those
        # are the slot (agentlaunch.py).
        command = [COMMAND_SLOT] if profile is None else list(profile.command) + [COMMAND_SLOT]
    policy = policy._replace(keep_fds=tuple(sorted(set(keep_fds_checked(keep_fds)
                                                     + slurm_task_fds(environ)))))
    user_args = len(command)      # a profile's: its ARGS, after its own words (below)
    if terminal:
        from agent_sandbox.launch.terminal import session_env

        policy = policy._replace(terminal=True, env=session_env(policy.env, policy.prompt))
    if profile is not None:
        from agent_sandbox.config.profiles import ALWAYS_ENABLED

        if profile.name not in settings.ENABLED_AGENTS + ALWAYS_ENABLED:
            raise PolicyError(
                f"the agent profile {profile.name} is not enabled — ENABLED_AGENTS is "
                f"({' '.join(settings.ENABLED_AGENTS)}). Add ENABLED_AGENTS+=({profile.name}) "
                "to ~/.config/agent-sandbox/sandbox.conf.", reason="profile_disabled")
        from agent_sandbox.launch import agentexe

        user_args = len(command) - len(profile.command)    # run_profile: command + ARGS
        policy, command = agentexe.resolve(policy, command, environ, profile.name)
        policy = agentexe.npm_prefix(policy, policy.home)
        if agent_copy is not None:
            policy = agent_copy(policy)
    session = chaperon(settings, policy) if chaperon else None
    if session:
        from agent_sandbox.policy.resolve import with_chaperon

        policy = with_chaperon(policy, session.directory, session.staging)
    egress_plan = egress(settings, policy, profile) if egress else None
    if egress_plan:
        from agent_sandbox.launch.egress import with_args
        from agent_sandbox.policy.resolve import with_egress

        policy = with_egress(policy, egress_plan.socket, egress_plan.port,
                             egress_plan.env_changes)
        command = with_args(command, user_args, egress_plan.args)   # Codex: -c openai_base_url
    policy, plan, denied = plan_for(settings, selection, policy, command, profile=profile,
                                    chaperon=session)
    from agent_sandbox.policy.view import placeholder_candidates

    mounted = {getattr(op, "dest", None) for op in plan.mounts}
    return Prepared(settings, selection, policy, plan, denied, session,
                    placeholders=placeholder_candidates(policy, mounted))


def resolve(*, project_dir: str | None, backend: str | None, environ, profile=None,
            job: bool = False) -> tuple:
    """(settings, backend selection, policy): the configuration resolved for
    this user, project and host, before any payload or plan. A job (`run
    --job`, what the chaperon's job wrapper starts) runs in JOB_NETWORK_MODE."""
    from agent_sandbox.config.load import load_settings
    from agent_sandbox.policy.resolve import resolve_policy

    ctx = launch_context(project_dir, environ)
    flags = {"SANDBOX_BACKEND": backend} if backend else {}
    settings = load_settings(home=ctx.home, user=ctx.user, environ=ctx.environ, flags=flags,
                             project_dir=ctx.project_dir or ctx.cwd, profile=profile)
    if job:
        origins = dict(settings.origins,
                       NETWORK_MODE=settings.origins.get("JOB_NETWORK_MODE", "default"))
        settings = settings.replace(NETWORK_MODE=settings.JOB_NETWORK_MODE, origins=origins)
    selection = choose_backend(settings, None, home=ctx.home, environ=ctx.environ)
    from agent_sandbox.launch.plancache import ACTIVE, socket_walker

    walk = socket_walker(ACTIVE[-1] if ACTIVE else None)
    return settings, selection, resolve_policy(settings, ctx, backend=selection.name,
                                               socket_walk=walk, make_store=_make_store)


def _make_store(home: str, place: str) -> None:
    """A package store of the user's that a writable tree would let a
    session make and fill for the user's next install outside, made empty
    (0700, by descriptor from the home, unrecorded) so that the plan keeps
    it read-only (policy/caches.py missing_inside_writable). Best effort: a
    place that cannot be made (a symlink in its way) is not kept read-only,
    which the compile then sees."""
    from agent_sandbox.launch.plancache import ACTIVE, Paused
    from agent_sandbox.paths import NotOwnDirectory, open_own_dir

    with Paused(ACTIVE[-1] if ACTIVE else None):
        try:
            os.close(open_own_dir(home, os.path.relpath(place, home), create=True))
        except (OSError, NotOwnDirectory):
            pass


def plan_for(settings, selection, policy, command: list[str], *, profile=None,
             chaperon=None) -> tuple:
    """(policy with the profile's note, plan, denied syscalls) for `policy`."""
    payloads = {}
    if chaperon:
        payloads["stub"] = chaperon.stub_payload()
    policy, generated = check_bound_files(settings, policy, selection.name)
    payloads.update(generated)
    if profile is not None and profile.note_path:
        # After the check: the note stands in for the user's file at its
        # path, with the text the check left (a token blanked, payloads.py).
        policy, payloads["note-0"] = _with_note(policy, profile, payloads,
                                                slurm=chaperon is not None)
    base, denied = base_payloads(policy, selection.name)
    payloads.update(base)
    abi = landlock_abi()
    plan = backend_plan(selection, policy, command, payloads, abi)
    check_required(plan, policy, settings, abi)
    return policy, plan, denied


def run_profile(name: str, args: list[str], environ=None, *, project_dir: str | None = None,
                backend: str | None = None, dry_run: bool = False, keep_fds=()) -> int:
    """`agent-sandbox [OPTIONS] NAME [ARGS]`: run an agent with its profile
    applied; OPTIONS are the launcher's (as for `run`), ARGS the agent's. The
    profile is loaded by the compile, or comes with the cached plan
    (agentlaunch.py)."""
    from agent_sandbox.launch.agentlaunch import AgentLaunch

    environ = os.environ if environ is None else environ
    agent = AgentLaunch(name, args, dry_run=dry_run)
    if inside_sandbox(environ) and not dry_run:
        entry = pwd.getpwuid(os.getuid())
        agent.load(environ, entry.pw_dir, entry.pw_name, before=False)
        return exec_nested(agent.command, environ)
    return run(list(args), environ=environ, agent=agent, project_dir=project_dir,
               backend=backend, dry_run=dry_run, keep_fds=keep_fds)


# ---------------------------------------------------------------- plan cache
def environ_home() -> str:
    return pwd.getpwuid(os.getuid()).pw_dir


def _plan_cache(options: tuple, environ, agent=None):
    """This launch's slot in the compiled plan cache (plancache.py), or None
    for the launches it does not serve: an agent in a Slurm job. Slurm jobs
    and steps have their own key (jobcache.py: per-task values substituted);
    an agent's launch is keyed by its profile's name (agentlaunch.py)."""
    from agent_sandbox.launch.plancache import is_job

    if is_job(environ):
        if agent is not None:
            return None
        from agent_sandbox.launch.jobcache import JobCache

        return JobCache(options, environ, environ_home(), keep_fds=options[2])
    from agent_sandbox.launch.plancache import Cache

    return Cache(options, environ, environ_home())


def _from_cache(cache, keep_fds, dry_run: bool, sessions: list, agent=None, copies=None):
    """The cached launch with a new session id and chaperon directory (an
    agent's session copy and the egress proxy started), or None."""
    launch = cache.load(os.urandom(6).hex(), os.urandom(4).hex())
    if launch is None:
        return None
    keep_fds_checked(keep_fds)     # each still open now
    if agent is not None:
        from agent_sandbox.launch.agentlaunch import Stale, from_cache

        try:
            from_cache(agent, launch, copies)
        except Stale:
            return None
    session = None
    if launch["chaperon"] is not None and not dry_run:
        from agent_sandbox.launch.chaperon import ChaperonSession

        session = ChaperonSession.open(launch["chaperon"])
        sessions.append(session)
    if launch.get("egress") is not None and not dry_run:
        from agent_sandbox.launch.agentlaunch import egress_filled
        from agent_sandbox.launch.egress import EgressSession

        policy = launch["policy"]
        sessions.append(EgressSession.start(egress_filled(launch["egress"], cache.environ,
                                                          policy.home), policy.session_id))
    return Prepared(None, None, launch["policy"], launch["plan"], launch["denied"], session,
                    cached=True, placeholders=launch["placeholders"])


def _compile(recorder, command, agent=None, **options) -> Prepared:
    """prepare() under the recorder; an agent's profile is loaded there too
    (its files are inputs of the plan)."""
    if recorder is None:
        return _prepare_launch(command, agent, None, options)
    with recorder:
        return _prepare_launch(command, agent, recorder, options)


def _prepare_launch(command, agent, recorder, options: dict) -> Prepared:
    if agent is not None:
        entry = pwd.getpwuid(os.getuid())
        options["profile"] = agent.load(options["environ"], entry.pw_dir, entry.pw_name,
                                        recorder)
        command = agent.command
    return prepare(command, **options)


def _store(cache, recorder, prepared: Prepared, agent, egressed: list) -> None:
    """A plan holding a descriptor this launch opened is never stored: the
    number means nothing to a later process. (A landlock job's shared-memory
    directory is granted after the store, jobshm.with_job_shm.) An agent's
    launch and an egress proxy's plan are stored with what a hit needs to
    make them again (agentlaunch.py), or not at all."""
    if any(getattr(p, "fd", None) is not None for p in prepared.plan.payloads.values()):
        return
    from agent_sandbox.launch.agentlaunch import stored

    kept = stored(agent, prepared.policy, egressed[0] if egressed else None, cache.environ)
    if kept is None:
        return
    # `fresh`: the egress proxy's placeholder keys, the session's own: new at a hit.
    extra, fresh = kept
    session = prepared.chaperon
    tag = os.path.basename(session.directory)[len("agent-sandbox-"):] if session else None
    cache.settings = prepared.settings    # a job's entry checks SANDBOX_ENV (jobcache.py)
    cache.store(recorder, {"policy": prepared.policy, "plan": prepared.plan,
                           "denied": prepared.denied, "placeholders": prepared.placeholders,
                           "chaperon": session.config if session else None, **extra},
                prepared.policy.session_id, tag, **({"renewed": fresh} if fresh else {}))


def slotted(plan) -> bool:
    """Does `plan` hold COMMAND_SLOT where with_command puts the command?"""
    return _slot_at(plan) is not None


def _slot_at(plan) -> str | None:
    """"argv" (its last argument, and nowhere else in it), "payload" (the
    last argument of the `argv` payload, firejail's `--argv`, and nowhere
    else in it nor in the argv), or None."""
    count = plan.argv.count(COMMAND_SLOT)
    if count == 1 and plan.argv[-1] == COMMAND_SLOT:
        return "argv"
    payload = plan.payloads.get("argv")
    if count or payload is None:
        return None
    words = payload.data.split(b"\0")
    if words[-1] == _SLOT_BYTES and words.count(_SLOT_BYTES) == 1:
        return "payload"
    return None


_SLOT_BYTES = os.fsencode(COMMAND_SLOT)


def with_command(prepared: Prepared, command: list[str]) -> Prepared:
    """The plan with `command` (a profile's: the user's ARGS, maybe none) in
    its COMMAND_SLOT (anything else fails closed)."""
    plan = prepared.plan
    where = _slot_at(plan)
    if where == "argv":
        plan = plan._replace(argv=plan.argv[:-1] + tuple(command))
    elif where == "payload":
        words = plan.payloads["argv"].data.split(b"\0")[:-1] + [os.fsencode(a) for a in command]
        data = b"\0".join(words)     # base.argv_payload's form
        plan = plan._replace(payloads=dict(plan.payloads,
                                           argv=plan.payloads["argv"]._replace(data=data)))
    else:
        raise SandboxError("internal error: the compiled plan has no command slot. Remove "
                           "~/.local/state/agent-sandbox/cache/plans and report this; the "
                           "command was not run.")
    return prepared._replace(plan=plan)


def _cache_line(cache, prepared: Prepared) -> str:
    if cache is None:
        return "plan:      compiled (this kind of launch does not use the plan cache)\n"
    if prepared.cached:
        return "plan:      from the compiled plan cache (inputs unchanged since it was compiled)\n"
    return "plan:      compiled now (no cached plan for these inputs)\n"


# ---------------------------------------------------------------- running
def make_package_cache(policy) -> None:
    """The sandbox's own package cache of the project (policy/caches.py),
    made by descriptor from the home (0700), unrecorded: by the compile
    before the plan looks at the path it grants (so that the launch does not
    change what the compile saw), and again by every launch."""
    cache = getattr(policy, "package_cache", None)
    if not cache:
        return
    from agent_sandbox.launch.plancache import ACTIVE, Paused
    from agent_sandbox.paths import NotOwnDirectory, open_own_dir

    with Paused(ACTIVE[-1] if ACTIVE else None):
        try:
            os.close(open_own_dir(policy.home, os.path.relpath(cache, policy.home),
                                  create=True))
        except (OSError, NotOwnDirectory) as exc:
            raise PolicyError(f"cannot make the sandbox's package cache {cache} — {exc}. "
                              "Check that your home is writable and the directory is yours.",
                              reason="package_cache_failed") from None


def _shared_files(policy, environ, job: bool) -> None:
    """At every launch, compiled or cached: the sandbox's own package cache
    made (policy/caches.py: the tools' variables name it, the plan grants
    it), and files the sandbox can write that have a name outside reported
    (linkcheck.py; not again in each job step on the nodes: the session
    that submitted it reported them)."""
    make_package_cache(policy)
    if not job:
        from agent_sandbox.launch.linkcheck import report
        from agent_sandbox.launch.plancache import is_job

        if not is_job(environ):
            report(policy, say)


def run(command: list[str], *, project_dir: str | None = None, backend: str | None = None,
        dry_run: bool = False, environ=None, agent=None, keep_fds=(),
        job_shared: bool = False, on_prepared=None, job: bool = False) -> int:
    """`job_shared`: a job's launch, run in the job's sandbox on this node
    (launch/jobjoin.py). `on_prepared(chaperon, policy)` is called once the
    plan is built (the job sandbox's holder). `job`: a batch job or step on a
    compute node (JOB_NETWORK_MODE applies). `agent`: an agent profile's
    launch (run_profile, agentlaunch.AgentLaunch); `command` is then the
    agent's ARGS."""
    environ = os.environ if environ is None else environ
    if not command and agent is None:
        raise UsageError("no command given — usage: agent-sandbox run [OPTIONS] [--] CMD "
                         "[ARGS…]")
    if inside_sandbox(environ) and not dry_run:
        return exec_nested(command, environ)
    if job_shared and not dry_run:
        from functools import partial

        from agent_sandbox.launch.jobcache import cached_resolve
        from agent_sandbox.launch.jobjoin import run_shared

        # The holder's launch runs in a forked child, beyond the CLI's edge:
        # its errors are mapped there (errors.mapped), as the edge would.
        code = run_shared(command, project_dir=project_dir, backend=backend,
                          environ=environ, keep_fds=keep_fds, launch=partial(mapped, run),
                          job=job, resolve=cached_resolve(resolve, environ_home()))
        if code is not None:
            return code
    from agent_sandbox.traits import traits

    sessions: list = []
    copies: list = []
    reaping: list = []      # landlock: the launcher is the session's subreaper (reap.py)
    survivors: list = []
    shm: list = []          # a landlock job's shared-memory directory (jobshm.py)
    orphans: list = []      # bwrap's sandbox init, reaped last (reap.py)

    def start_copy(policy):
        from agent_sandbox.launch import agentcopy

        profile = agent.profile
        spec = agentcopy.spec_for(profile, policy.home)
        if dry_run or spec is None:
            return policy
        try:
            with Paused(recorder):   # the copy is this session's own
                made, record = agentcopy.start(spec, policy, note_path=profile.note_path)
        except OSError as exc:
            raise PolicyError(f"{profile.name}: cannot make the session copy of "
                              f"{spec.real_dir} — {exc}. Check that your home is writable.",
                              reason="agent_copy_failed") from None
        copies.append(record)
        agent.copied(spec, policy, made)
        return made

    # A native terminal only when both ends are one.
    terminal = os.isatty(0) and os.isatty(1)
    if agent is not None:
        agent.recover(environ_home())
    cache = _plan_cache((project_dir, backend, tuple(keep_fds), terminal, job,
                         agent.name if agent else None), environ, agent)
    recorder, is_slotted, egressed = None, False, []
    from agent_sandbox.launch.plancache import Paused

    def start_chaperon(settings, policy):
        from agent_sandbox.launch.chaperon import ChaperonSession, wanted

        if dry_run or not wanted(settings, policy):
            return None
        with Paused(recorder):   # its directories are this session's own
            sessions.append(ChaperonSession.start(settings, policy))
        return sessions[-1]

    def start_shm(policy, plan):
        """A landlock job launch's shared-memory directory (jobshm.py),
        granted after the plan cache: the compiled and the cached plan
        alike, stored without it."""
        if dry_run or not job_shared or traits(plan.backend).joins_job_sandboxes:
            return policy, plan
        from agent_sandbox.launch import jobshm

        held = jobshm.start(command)
        if held is None:
            return policy, plan
        shm.append(held)
        return jobshm.with_job_shm(policy, plan, held)

    def start_egress(settings, policy, profile):
        from agent_sandbox.launch import egress

        if not egress.wanted(policy):
            return None
        planned = egress.plan(settings, policy, profile)
        egressed.append(planned)
        if not dry_run:
            with Paused(recorder):   # its directory and process are this session's own
                sessions.append(egress.EgressSession.start(planned, policy.session_id))
        return planned

    try:
        prepared = (_from_cache(cache, keep_fds, dry_run, sessions, agent, copies)
                    if cache else None)
        if prepared is None:
            if cache is not None and not dry_run:
                from agent_sandbox.launch.plancache import Recorder

                # (a job's cache may bring its own: jobcache.py)
                recorder = getattr(cache, "Recorder", Recorder)(
                    cache.ignore(environ_home()))
            prepared = _compile(recorder, command, agent, project_dir=project_dir,
                                backend=backend, environ=environ,
                                keep_fds=keep_fds, chaperon=start_chaperon,
                                agent_copy=start_copy, egress=start_egress, job=job,
                                terminal=not dry_run and terminal,
                                command_slot=cache is not None)
            is_slotted = slotted(prepared.plan)
            if recorder is not None and is_slotted:
                _store(cache, recorder, prepared, agent, egressed)
        if prepared.cached or is_slotted:
            prepared = with_command(prepared, command)      # an agent's: its ARGS
        if agent is not None:
            command = agent.command       # what the user ran, for titles and records
        policy, plan, session = prepared.policy, prepared.plan, prepared.chaperon
        policy, plan = start_shm(policy, plan)
        if on_prepared is not None:
            on_prepared(session, policy)
        if dry_run:
            from agent_sandbox.launch.report import dry_run_report

            lines = dry_run_report(policy, plan, prepared.denied).splitlines(True)
            at = next((i + 1 for i, line in enumerate(lines)
                       if line.startswith("backend:")), len(lines))
            lines.insert(at, _cache_line(cache, prepared))   # after the backend
            sys.stdout.write("".join(lines))
            return 0
        if not plan.argv[0].startswith("/"):
            raise BackendUnavailable(
                "bwrap is not installed (not found on PATH) — the sandbox cannot be "
                "built. Install bubblewrap (apt-get install bubblewrap) or ask your "
                "admin; the command was not run.")
        for warning in policy.warnings:
            say(f"warning: {warning}")
        _shared_files(policy, environ, job or job_shared)
        if not policy.quiet:
            from agent_sandbox.launch.report import banner

            sys.stderr.write(banner(policy, plan))
        # The session registry (`agent-sandbox status`): written before the
        # placeholders are made (a session of the same project ending now
        # must see this one and leave them), removed whatever way it ends;
        # named by the session id the chaperon's audit log and ledger carry.
        # Both steps run under the project's lock, so that concurrent
        # launches and ends of one project never race (placeholders.py).
        from agent_sandbox.launch import gitcheck, placeholders, registry

        created, record, snapshot, hold = [], None, None, None
        try:
            with placeholders.project_lock(policy.home, policy.project_dir):
                # Held by the sandbox too, while it lives (registry.py).
                hold = registry.hold(policy.home, policy.session_id, policy.project_dir)
                record = registry.register(
                    policy.home, session=policy.session_id,
                    backend=plan.backend, project=policy.project_dir,
                    # 0: on standby, started at the first Slurm call
                    chaperon_pid=(session.pid or 0) if session else None,
                    command=os.path.basename(command[0]))
                if session:
                    session.attach(record)
                placeholders.exclude(policy.project_dir, prepared.placeholders)
                try:
                    placeholders.create(prepared.placeholders, _anchors(policy), created)
                finally:   # also what was made before a refusal
                    placeholders.remember(policy.home, policy.project_dir, created)
            snapshot = gitcheck.start(policy)
            if traits(plan.backend).needs_subreaper:
                from agent_sandbox.launch import reap

                # Without a PID namespace (landlock) orphans come back to
                # us (swept below); bwrap's init outlives bwrap by the
                # teardown of its namespaces and is reaped last.
                subreaper = reap.become_subreaper()
                if not traits(plan.backend).pid_namespace:
                    reaping.append(subreaper)
            # The egress proxy starts beside the sandbox (its socket is
            # bound already); that it runs is checked once both started.
            proxies = [s for s in sessions if hasattr(s, "ready")]
            return run_plan(plan, policy.keep_fds, terminal=policy.terminal,
                            title=policy.prompt + os.path.basename(command[0]),
                            after_spawn=(lambda gone: [p.ready(gone) for p in proxies])
                            if proxies else None, orphans=orphans, hold=hold)
        finally:
            if any(reaping):
                survivors.extend(reap.sweep())
            if record is not None:   # checked while registered: recover() leaves it alone
                gitcheck.finish(policy, snapshot)
            if session:
                session.attach(None)
            with placeholders.project_lock(policy.home, policy.project_dir):
                registry.unregister(record)
                placeholders.release(policy.home, policy.project_dir, policy.session_id,
                                     created)
                registry.unhold(policy.home, policy.session_id, policy.project_dir, hold)
    finally:
        for started in sessions:   # also one whose plan was refused
            started.stop()
        for held in shm:           # after the sandbox: the last task out removes it
            held.release()
        if copies:     # after the placeholders: the guarded merge of the agent's settings
            from agent_sandbox.launch import agentcopy

            if survivors:   # a session process could still write: nothing is merged
                agentcopy.discard(copies[0], f"session processes {survivors} are still "
                                  "running and could still write")
            else:
                agentcopy.finish(copies[0])
        if orphans:    # last: its namespaces' teardown ran beside our cleanup
            from agent_sandbox.launch.reap import reap_orphan

            reap_orphan(orphans[0], wait=0.002)
