"""The thin shell: from a command line to a running sandbox.

Everything that decides *what* the sandbox is happens in pure code (confload →
policy → backend plan). This module makes a launch's template — the plan,
compiled under the plan cache's recorder (it starts nothing) or taken from
the cache — and run() drives the lifecycle (launch/lifecycle.py): the
session's services opened around the template in declared order, each
undone on one stack when the launch ends; the sandbox spawned; its outcome
turned into an exit code.

Exit codes: the command's own; 125 when the sandbox could not be set up (no
backend, bad config, refused policy, backend failure); 126/127 as the shell
uses them. Nothing here ever falls back to running the command unsandboxed.
"""
from __future__ import annotations

import os
import pwd
import sys

from agent_sandbox.errors import (BackendUnavailable, PolicyError, SandboxError, UsageError,
                                  mapped)
from agent_sandbox.process.nesting import exec_nested, inside_sandbox
from agent_sandbox.launch.payloads import _with_note, base_payloads, check_bound_files
from agent_sandbox.process.select import choose_backend, helper_python, landlock_abi
from agent_sandbox.process.spawn import keep_fds_checked, kept_fds
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
    from agent_sandbox.plancache.plans import ACTIVE, Paused
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
    from agent_sandbox.services.linkcheck import install_links
    from agent_sandbox.plancache.plans import ACTIVE, Paused

    with Paused(ACTIVE[-1] if ACTIVE else None):
        return install_links(install)


def backend_plan(selection, policy, command: list[str], payloads: dict, abi: int, *,
                 keep_fds=(), terminal: bool = False, python: str | None = None):
    """The selected backend's plan for the policy, on a kernel with Landlock ABI `abi`;
    `keep_fds` and `terminal`, this launch's facts (PlanContext); `python`,
    the helper's interpreter (None: helper_python of the policy)."""
    from agent_sandbox.backends import BACKENDS, PlanContext

    try:
        setuid = bool(os.stat(selection.path).st_mode & 0o4000)
    except OSError:
        setuid = False
    backend = BACKENDS[selection.name]
    mounts, recorder = _host_mounts()
    failure = fix = ""
    via = "unshare"
    python = helper_python(policy) if python is None else python
    if hasattr(backend, "private_mounts_probe_argv") and policy.private_mounts and not setuid:
        from agent_sandbox.process.select import private_mounts_way

        via, failure, fix = private_mounts_way(selection.name, selection.path, policy.home,
                                               policy.unshare, python)
    context = PlanContext(program=selection.path, landlock_abi=abi, python=python,
                          program_setuid=setuid, host_mounts=mounts,
                          private_mounts_failure=failure, private_mounts_fix=fix,
                          private_mounts_via=via or "unshare",
                          keep_fds=tuple(keep_fds), terminal=terminal,
                          features=getattr(selection, "features", None))
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
    from agent_sandbox.plancache.plans import ACTIVE, Paused
    from agent_sandbox.mountinfo import MountPoints, read_mount_points

    recorder = ACTIVE[-1] if ACTIVE else None
    with Paused(recorder):
        points = read_mount_points()
    return (None if points is None else MountPoints(points)), recorder


def implied_require(settings, policy, *, agent: bool, job: bool = False) -> tuple[str, ...]:
    """What a launch requires beyond REQUIRE (SPEC §5a): on a host with Slurm
    (real Slurm commands found: policy.slurm_binaries), an agent profile and
    SANDBOX_BACKEND=auto require slurm.boundary — a backend without it
    (landlock: the munge socket is reachable, so the real srun runs an
    unsandboxed job) would be a full escape, never picked silently. An explicit
    --backend for a plain `run` is the user's choice (the report says no).
    The admin lifts it with SLURM_BOUNDARY_OPTIONAL=true; a batch job's own
    launch, with JOB_ALLOW_WEAKER_BACKEND=true (already the admin's word)."""
    if not policy.slurm_binaries or settings.SLURM_BOUNDARY_OPTIONAL:
        return ()
    if job and settings.JOB_ALLOW_WEAKER_BACKEND:
        return ()
    if agent or settings.SANDBOX_BACKEND == "auto":
        return ("slurm.boundary",)
    return ()


def _boundary_refusal(plan, policy, settings, abi: int, *, agent: bool) -> PolicyError:
    from agent_sandbox.backends import would_provide

    why = dict(plan.cannot + plan.partial).get("slurm.boundary", "not provided")
    who = "an agent profile" if agent else "SANDBOX_BACKEND=auto"
    givers = [b for b in would_provide("slurm.boundary", policy, landlock_abi=abi,
                                       allowed=settings.ALLOWED_BACKENDS) if b != plan.backend]
    chosen = f" ({plan.chosen_because})" if plan.chosen_because else ""
    fix = (f"Make {' or '.join(givers)} work here (`agent-sandbox doctor` says what it "
           f"lacks)" if givers else "No allowed backend gives it here")
    plain = "" if agent else (f", or choose --backend {plan.backend} explicitly for a plain "
                              "`run` to accept the gap")
    return PolicyError(
        f"the {plan.backend} backend{chosen} cannot keep Slurm's boundary on this Slurm host, "
        f"and {who} requires it — slurm.boundary: {why}; the real srun would run an "
        f"unsandboxed job. {fix}{plain}; the site admin may accept it with "
        "SLURM_BOUNDARY_OPTIONAL=true.", reason="requirement_unmet")


def check_required(plan, policy, settings, abi: int, *, agent: bool = False,
                   job: bool = False) -> None:
    """REQUIRE: every listed guarantee must be fully provided, else refuse,
    naming the backends that would give it; then what the launch implies
    (implied_require: slurm.boundary on a Slurm host)."""
    from agent_sandbox.backends import would_provide

    missing = plan.missing(policy.require)
    if not missing:
        if plan.missing(implied_require(settings, policy, agent=agent, job=job)):
            raise _boundary_refusal(plan, policy, settings, abi, agent=agent)
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
    """A launch's template: its plan and what the lifecycle opens around it
    (launch/lifecycle.py) — what `run`, `--dry-run`, `explain` and the
    outside submission all start from; compiled, or from the plan cache
    (`cached`, plancache/plans.py). `chaperon`: the chaperon's session
    configuration (chaperon.session_config), or None. `egress`: the egress
    proxy's plan (egress.EgressPlan, its keys real), or None.
    `placeholders`: policy/view.py placeholder_candidates, compiled with the
    policy; those missing at the launch are made then. (A plain class:
    typing.NamedTuple costs a cached launch several milliseconds of imports.)"""
    __slots__ = ("settings", "selection", "policy", "plan", "denied", "chaperon", "cached",
                 "placeholders", "egress")

    def __init__(self, settings, selection, policy, plan, denied: tuple, chaperon=None,
                 cached: bool = False, placeholders: tuple = (), egress=None):
        self.settings, self.selection, self.policy, self.plan = settings, selection, policy, plan
        self.denied, self.chaperon, self.cached = denied, chaperon, cached
        self.placeholders, self.egress = placeholders, egress

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
            profile=None, keep_fds=(), terminal: bool = False, job: bool = False,
            chaperon=None, egress=None, agent_copy=None,
            command_slot: bool = False) -> Prepared:
    """The one sequence resolve → payloads → plan: the template of a launch
    (launch/lifecycle.py), which starts nothing. The session services the
    plan provides for are planned here and opened by the lifecycle:
    `chaperon`, (settings, policy) -> the chaperon's session configuration
    or None (plan_chaperon); `egress`, (settings, policy, profile) -> the
    egress proxy's EgressPlan or None (plan_egress: NETWORK_MODE=allowlist,
    services/egress.py). `terminal`: the session runs
    on a relayed pseudo-terminal. `agent_copy`: (policy) -> policy, puts a
    profile's configuration on its guarded session copy (lifecycle.AgentCopy;
    the plan grants what the copy holds). `job`: a batch job or step on a
    compute node (JOB_NETWORK_MODE applies). `command_slot`: plan
    COMMAND_SLOT in place of the command where the backend allows it (the
    plan cache; with_command puts the command in)."""
    from agent_sandbox.traits import traits

    settings, selection, policy = resolve(project_dir=project_dir, backend=backend,
                                          environ=environ, profile=profile, job=job)
    from agent_sandbox.launch.lifecycle import make_package_cache

    make_package_cache(policy)
    if command_slot and traits(selection.name).command_slot:
        # A profile's command is its own words, then the user's ARGS: those
        # are the slot (agents/launch.py).
        command = [COMMAND_SLOT] if profile is None else list(profile.command) + [COMMAND_SLOT]
    kept = kept_fds(keep_fds, environ)       # launch facts: the plan's context, not the policy
    user_args = len(command)      # a profile's: its ARGS, after its own words (below)
    if terminal:
        from agent_sandbox.process.terminal import session_env

        policy = policy._replace(env=session_env(policy.env, policy.prompt))
    if profile is not None:
        from agent_sandbox.config.profiles import ALWAYS_ENABLED

        if profile.name not in settings.ENABLED_AGENTS + ALWAYS_ENABLED:
            raise PolicyError(
                f"the agent profile {profile.name} is not enabled — ENABLED_AGENTS is "
                f"({' '.join(settings.ENABLED_AGENTS)}). Add ENABLED_AGENTS+=({profile.name}) "
                "to ~/.config/agent-sandbox/sandbox.conf.", reason="profile_disabled")
        from agent_sandbox.agents import exe as agentexe

        user_args = len(command) - len(profile.command)    # run_profile: command + ARGS
        policy, command = agentexe.resolve(policy, command, environ, profile.name)
        policy = agentexe.npm_prefix(policy, policy.home)
        if agent_copy is not None:
            policy = agent_copy(policy)
    chaperon = chaperon(settings, policy) if chaperon else None
    if chaperon:
        from agent_sandbox.policy.resolve import with_chaperon

        policy = with_chaperon(policy, chaperon["session_dir"], chaperon["staging_dir"])
    egress_plan = egress(settings, policy, profile) if egress else None
    if egress_plan:
        from agent_sandbox.services.egress import with_args
        from agent_sandbox.policy.resolve import with_egress

        policy = with_egress(policy, egress_plan.socket, egress_plan.port,
                             egress_plan.env_changes, no_proxy=egress_plan.no_proxy,
                             notes=egress_plan.notes)
        command = with_args(command, user_args, egress_plan.args)   # Codex: -c openai_base_url
    # The helper's interpreter for the policy as it now stands (the grants
    # the services add count): the helper's, the stubs' and a job's.
    python = helper_python(policy)
    if chaperon:
        from agent_sandbox.backends.helperpython import shebang_line

        shebang_line(python)         # refused here, at the compile, not at the first call
        chaperon = dict(chaperon, python=python)
    policy, plan, denied = plan_for(settings, selection, policy, command, profile=profile,
                                    chaperon=chaperon is not None, keep_fds=kept,
                                    terminal=terminal, job=job, python=python)
    from agent_sandbox.policy.view import placeholder_candidates

    mounted = {getattr(op, "dest", None) for op in plan.mounts}
    return Prepared(settings, selection, policy, plan, denied, chaperon,
                    placeholders=placeholder_candidates(policy, mounted), egress=egress_plan)


def plan_chaperon(settings, policy) -> dict | None:
    """The chaperon's session as the plan names it (chaperon.session_config,
    unrecorded: its directories are this session's own), or None."""
    from agent_sandbox.services import chaperon
    from agent_sandbox.plancache.plans import ACTIVE, Paused

    if not chaperon.wanted(settings, policy):
        return None
    with Paused(ACTIVE[-1] if ACTIVE else None):
        return chaperon.session_config(settings, policy)


def plan_egress(settings, policy, profile):
    """The egress proxy's plan when NETWORK_MODE=allowlist, or None."""
    from agent_sandbox.services import egress

    return egress.plan(settings, policy, profile) if egress.wanted(policy) else None


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
    from agent_sandbox.plancache.plans import ACTIVE, socket_walker

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
    from agent_sandbox.plancache.plans import ACTIVE, Paused
    from agent_sandbox.paths import NotOwnDirectory, open_own_dir

    with Paused(ACTIVE[-1] if ACTIVE else None):
        try:
            os.close(open_own_dir(home, os.path.relpath(place, home), create=True))
        except (OSError, NotOwnDirectory):
            pass


def plan_for(settings, selection, policy, command: list[str], *, profile=None,
             chaperon: bool = False, keep_fds=(), terminal: bool = False,
             job: bool = False, python: str | None = None) -> tuple:
    """(policy with the profile's note, plan, denied syscalls) for `policy`;
    `chaperon`: the Slurm stubs are in it (their script, a payload);
    `keep_fds`, `terminal`: the launch's facts (backends.PlanContext);
    `python`: the helper's interpreter (helper_python of this policy; None:
    chosen here)."""
    if python is None:
        python = helper_python(policy)
    payloads = {}
    if chaperon:
        from agent_sandbox.backends.base import Payload
        from agent_sandbox.services.chaperon import ChaperonSession

        payloads["stub"] = Payload(data=ChaperonSession.stub_script(python))
    policy, generated = check_bound_files(settings, policy, selection.name)
    payloads.update(generated)
    if profile is not None and profile.note_path:
        # After the check: the note stands in for the user's file at its
        # path, with the text the check left (a token blanked, payloads.py).
        policy, payloads["note-0"] = _with_note(policy, profile, payloads,
                                                slurm=chaperon)
    from agent_sandbox.backends import BACKENDS

    # A program without its own refusal of nested user namespaces (an older
    # bwrap or firejail): the seccomp filter refuses them (policy/seccomp.py).
    needs = getattr(BACKENDS[selection.name], "needs_userns_filter", None)
    base, denied = base_payloads(policy, selection.name, no_user_namespaces=bool(
        needs and needs(getattr(selection, "features", None))))
    payloads.update(base)
    abi = landlock_abi()
    plan = backend_plan(selection, policy, command, payloads, abi, keep_fds=keep_fds,
                        terminal=terminal, python=python)
    check_required(plan, policy, settings, abi, agent=profile is not None, job=job)
    return policy, plan, denied


def run_profile(name: str, args: list[str], environ=None, *, project_dir: str | None = None,
                backend: str | None = None, dry_run: bool = False, keep_fds=(),
                allocation: str | None = None) -> int:
    """`agent-sandbox [OPTIONS] NAME [ARGS]`: run an agent with its profile
    applied; OPTIONS are the launcher's (as for `run`), ARGS the agent's. The
    profile is loaded by the compile, or comes with the cached plan
    (agents/launch.py)."""
    from agent_sandbox.agents.launch import AgentLaunch

    environ = os.environ if environ is None else environ
    agent = AgentLaunch(name, args, dry_run=dry_run)
    if inside_sandbox(environ) and not dry_run:
        entry = pwd.getpwuid(os.getuid())
        agent.load(environ, entry.pw_dir, entry.pw_name, before=False)
        return exec_nested(agent.command, environ)
    return run(list(args), environ=environ, agent=agent, project_dir=project_dir,
               backend=backend, dry_run=dry_run, keep_fds=keep_fds, allocation=allocation)


# ---------------------------------------------------------------- plan cache
def environ_home() -> str:
    return pwd.getpwuid(os.getuid()).pw_dir


def _plan_cache(options: tuple, environ, agent=None):
    """This launch's slot in the compiled plan cache (plancache/plans.py), or None
    for the launches it does not serve: an agent in a Slurm job. Slurm jobs
    and steps have their own key (plancache/jobs.py: per-task values substituted);
    an agent's launch is keyed by its profile's name (agents/launch.py)."""
    from agent_sandbox.plancache.plans import is_job

    if is_job(environ):
        if agent is not None:
            return None
        from agent_sandbox.plancache.jobs import JobCache

        return JobCache(options, environ, environ_home(), keep_fds=options[2])
    from agent_sandbox.plancache.plans import Cache

    return Cache(options, environ, environ_home())


def _from_cache(cache, keep_fds, dry_run: bool, stack=None, launch=None):
    """The cached template with a new session id and chaperon directory, or
    None (a miss; also an agent's session copy that would now differ). An
    agent's launch (`launch.agent`) has its session copy made again here
    (lifecycle.AgentCopy), its undo on `stack`; nothing else is started."""
    loaded = cache.load(os.urandom(6).hex(), os.urandom(4).hex())
    if loaded is None:
        return None
    keep_fds_checked(keep_fds)     # each still open now
    agent = launch.agent if launch is not None else None
    if agent is not None:
        from agent_sandbox.agents.launch import Stale
        from agent_sandbox.launch.lifecycle import AGENT_COPY

        try:
            AGENT_COPY.again(stack, launch, loaded)
        except Stale:
            return None
    egress = loaded.get("egress")
    if egress is not None:
        from agent_sandbox.agents.launch import egress_filled

        egress = egress_filled(egress, cache.environ, loaded["policy"].home)
    return Prepared(None, None, loaded["policy"], loaded["plan"], loaded["denied"],
                    loaded["chaperon"], cached=True, placeholders=loaded["placeholders"],
                    egress=egress)


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


def _store(cache, recorder, prepared: Prepared, agent) -> None:
    """A plan holding a descriptor this launch opened is never stored: the
    number means nothing to a later process. (A landlock job's shared-memory
    directory is granted after the store, lifecycle.JobShm.) An agent's
    launch and an egress proxy's plan are stored with what a hit needs to
    make them again (agents/launch.py), or not at all."""
    if any(p.fd is not None for p in prepared.plan.payloads.values()):
        return
    from agent_sandbox.agents.launch import stored

    kept = stored(agent, prepared.policy, prepared.egress, cache.environ)
    if kept is None:
        return
    # `fresh`: the egress proxy's placeholder keys, the session's own: new at a hit.
    extra, fresh = kept
    chaperon = prepared.chaperon
    tag = (os.path.basename(chaperon["session_dir"])[len("agent-sandbox-"):]
           if chaperon else None)
    cache.settings = prepared.settings    # a job's entry checks SANDBOX_ENV (plancache/jobs.py)
    cache.store(recorder, {"policy": prepared.policy, "plan": prepared.plan,
                           "denied": prepared.denied, "placeholders": prepared.placeholders,
                           "chaperon": chaperon, **extra},
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
    return f"plan:      compiled now ({cache.missed})\n"


# ---------------------------------------------------------------- running
def run(command: list[str], *, project_dir: str | None = None, backend: str | None = None,
        dry_run: bool = False, environ=None, agent=None, keep_fds=(),
        job_shared: bool = False, on_prepared=None, job: bool = False,
        allocation: str | None = None) -> int:
    """One launch (launch/lifecycle.py): its template, compiled or cached;
    the services opened around it, each undone when the launch ends; the
    sandbox spawned. `job_shared`: a job's launch, run in the job's sandbox
    on this node (jobs/join.py). `on_prepared(chaperon, policy)` is
    called once the session's services are open (the job sandbox's holder).
    `job`: a batch job or step on a compute node (JOB_NETWORK_MODE applies).
    `agent`: an agent profile's launch (run_profile, agentlaunch.AgentLaunch);
    `command` is then the agent's ARGS. `allocation`: the user's Slurm job
    to adopt (--allocation; else the launcher's own SLURM_JOB_ID,
    lifecycle.Chaperon.adopt); the sandbox sees it as its SLURM_JOB_ID."""
    environ = os.environ if environ is None else environ
    if allocation:
        environ = {**environ, "SLURM_JOB_ID": allocation, "SLURM_JOBID": allocation}
    if not command and agent is None:
        raise UsageError("no command given — usage: agent-sandbox run [OPTIONS] [--] CMD "
                         "[ARGS…]")
    if inside_sandbox(environ) and not dry_run:
        return exec_nested(command, environ)
    if job_shared and not dry_run:
        code = _run_shared(command, project_dir, backend, environ, keep_fds, job)
        if code is not None:
            return code
    from agent_sandbox.launch.lifecycle import (SERVICES, Launch, Undo, open_services,
                                                reap_orphan, spawn)

    # A native terminal only when both ends are one.
    launch = Launch(command, environ, dry_run=dry_run, job=job, job_shared=job_shared,
                    keep_fds=keep_fds, terminal=os.isatty(0) and os.isatty(1), agent=agent,
                    on_prepared=on_prepared, allocation=allocation)
    with Undo() as stack:
        stack.callback(reap_orphan, launch)     # last: bwrap's init, beside the undo
        cache, prepared = _template(stack, launch, project_dir, backend)
        launch.take(prepared)
        if dry_run:
            return _dry_run(cache, prepared)
        if not prepared.plan.argv[0].startswith("/"):
            raise BackendUnavailable(
                "bwrap is not installed (not found on PATH) — the sandbox cannot be "
                "built. Install bubblewrap (apt-get install bubblewrap) or ask your "
                "admin; the command was not run.")
        open_services(stack, launch, SERVICES)
        return spawn(launch)


def _run_shared(command, project_dir, backend, environ, keep_fds, job: bool):
    """A job's launch in the job's sandbox on this node, or None."""
    from functools import partial

    from agent_sandbox.plancache.jobs import cached_resolve
    from agent_sandbox.jobs.join import run_shared

    # The holder's launch runs in a forked child, beyond the CLI's edge:
    # its errors are mapped there (errors.mapped), as the edge would.
    return run_shared(command, project_dir=project_dir, backend=backend,
                      environ=environ, keep_fds=keep_fds, launch=partial(mapped, run),
                      job=job, resolve=cached_resolve(resolve, environ_home()))


def _template(stack, launch, project_dir, backend) -> tuple:
    """(the plan cache's slot or None, the launch's template): the cached
    one, else compiled — under the cache's recorder, and stored — with the
    command put in its slot."""
    from agent_sandbox.launch.lifecycle import AGENT_COPY

    agent, dry_run = launch.agent, launch.dry_run
    if AGENT_COPY.wanted(launch):
        AGENT_COPY.sweep(launch)
    cache = _plan_cache((project_dir, backend, launch.keep_fds, launch.terminal, launch.job,
                         agent.name if agent else None), launch.environ, agent)
    prepared = _from_cache(cache, launch.keep_fds, dry_run, stack, launch) if cache else None
    is_slotted = False
    if prepared is None:
        recorder = None
        if cache is not None and not dry_run:
            from agent_sandbox.plancache.plans import Recorder

            # (a job's cache may bring its own: plancache/jobs.py)
            recorder = getattr(cache, "Recorder", Recorder)(cache.ignore(environ_home()))
        prepared = _compile(
            recorder, launch.command, agent, project_dir=project_dir, backend=backend,
            environ=launch.environ, keep_fds=launch.keep_fds, job=launch.job,
            terminal=not dry_run and launch.terminal, command_slot=cache is not None,
            chaperon=None if dry_run else plan_chaperon, egress=plan_egress,
            agent_copy=lambda policy: AGENT_COPY.made(stack, launch, policy))
        is_slotted = slotted(prepared.plan)
        if recorder is not None and is_slotted:
            _store(cache, recorder, prepared, agent)
    if prepared.cached or is_slotted:
        prepared = with_command(prepared, launch.command)      # an agent's: its ARGS
    return cache, prepared


def _dry_run(cache, prepared: Prepared) -> int:
    from agent_sandbox.launch.report import dry_run_report

    lines = dry_run_report(prepared.policy, prepared.plan, prepared.denied).splitlines(True)
    at = next((i + 1 for i, line in enumerate(lines)
               if line.startswith("backend:")), len(lines))
    lines.insert(at, _cache_line(cache, prepared))   # after the backend
    sys.stdout.write("".join(lines))
    return 0
