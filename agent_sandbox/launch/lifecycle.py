"""One launch's lifecycle: template → services → spawn, undone on one stack.

Strategy. run.py's run() is four steps, the same for a compiled and for a
cached plan:

1. **The template** (run.py `_template`): the compile — under the plan
   cache's recorder, it starts nothing: the chaperon's directory, the egress
   proxy's socket and keys, the session id are values in it that the cache
   renews at a hit (plancache/plans.py Cache.load) — or the cached template, with
   this session's values. After it the miss and the hit are one path.
2. **The services** (SERVICES, in declared order): each one `wanted(launch)`
   first sweeps what a killed earlier session left behind (`sweep(launch)`),
   then opens (`open(stack, launch)`), pushing its own undo onto the one undo
   stack of the launch (Undo: contextlib.ExitStack's semantics) the moment
   it holds something to undo. Leaving the stack — the command's exit, a
   refusal, an exception raised by a later service — undoes exactly what was
   opened, in reverse order; the exception goes on to the edge
   (errors.mapped: 125). A service is a small class, testable alone with a
   stack and a Launch.
3. **The spawn** (`spawn`): the backend started with the plan; AT_SPAWN is
   the declared step after the backend's spawn (spawn.run_plan's
   after_spawn, given a descriptor that turns readable when the backend has
   exited), where what must attach to the sandbox's first process goes:
   today the egress proxy's readiness, checked while the sandbox starts; a
   step the command's exec must wait for also needs the helper to wait for
   it (the landlock supervisor and the resource scope of later issues).
4. The command's exit code, after the stack is unwound.

The agent's guarded session copy (AGENT_COPY) is the one service opened
while the template is made — by the compile, whose plan grants what the copy
holds, or by a hit, which makes it again and compares (agents/launch.py) — and
it pushes its undo onto the same stack.

`Launch` holds the facts of one launch (its options, descriptors, the
services' live handles): never cached; the plan cache stores the template.
"""
from __future__ import annotations

import os


class Undo:
    """The one undo stack of a launch, with contextlib.ExitStack's semantics
    for what a launch uses of it (`callback`; `with`): the last pushed runs
    first, every one runs, an exception raised by one replaces the one in
    flight (chained to it) and the rest still run. Not contextlib itself:
    its imports (collections, functools) cost a cached launch ~4 ms."""
    __slots__ = ("_pushed",)

    def __init__(self):
        self._pushed: list = []

    def callback(self, function, *args, **kwargs):
        self._pushed.append((function, args, kwargs))
        return function

    def __enter__(self) -> "Undo":
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        pending = value
        while self._pushed:
            function, args, kwargs = self._pushed.pop()
            try:
                function(*args, **kwargs)
            except BaseException as exc:    # the rest is still undone
                if pending is not None and exc.__context__ is None:
                    exc.__context__ = pending
                pending = exc
        if pending is not value:
            raise pending
        return False


class Launch:
    """The facts of one launch, never cached: what the caller asked, the
    template's policy and plan (a service may extend them: jobshm), and what
    the services opened (read by later ones and by their undo)."""
    __slots__ = ("command", "environ", "dry_run", "job", "job_shared", "keep_fds",
                 "terminal", "agent", "on_prepared", "prepared", "policy", "plan",
                 "chaperon", "egress", "job_shm", "copies", "hold", "record", "snapshot",
                 "reaping", "survivors", "orphans", "allocation", "adopted", "home_fd")

    def __init__(self, command, environ, *, dry_run: bool = False, job: bool = False,
                 job_shared: bool = False, keep_fds=(), terminal: bool = False,
                 agent=None, on_prepared=None, allocation: str | None = None):
        self.command, self.environ, self.dry_run = command, environ, dry_run
        self.allocation = allocation   # --allocation: the user's job to adopt
        self.adopted = None            # the allocation adopted (Chaperon.adopt)
        self.job, self.job_shared, self.keep_fds = job, job_shared, tuple(keep_fds)
        self.terminal, self.agent, self.on_prepared = terminal, agent, on_prepared
        self.prepared = self.policy = self.plan = None
        self.chaperon = None      # ChaperonSession (chaperon.py)
        self.egress = None        # EgressSession (egress.py)
        self.job_shm = None       # JobShm (jobs/shm.py)
        self.copies: list = []    # the agent's session copy record (agents/copy.py)
        self.hold = self.record = self.snapshot = None
        self.reaping = False      # the launcher is the session's subreaper (reap.py)
        self.survivors: list = []
        self.orphans: list = []   # bwrap's sandbox init, reaped last (reap.py)
        self.home_fd = None       # the sandbox's tmpfs home, held (homewrites.py)

    def take(self, prepared) -> None:
        """The template this launch runs."""
        self.prepared, self.policy, self.plan = prepared, prepared.policy, prepared.plan
        if self.agent is not None:
            self.command = self.agent.command   # what the user ran, for titles and records


class Service:
    """One part of a session opened around the sandbox. `wanted`: does this
    launch need it; `sweep`: remove what a killed earlier session left
    (called before `open`, only when wanted); `open`: start it, pushing the
    undo of whatever it made onto `stack` before anything later can fail."""
    name = ""

    def wanted(self, launch: Launch) -> bool:
        return True

    def sweep(self, launch: Launch) -> None:
        pass

    def open(self, stack, launch: Launch) -> None:
        raise NotImplementedError


def open_services(stack, launch: Launch, services) -> None:
    """Each wanted service of `services`, in their order."""
    for service in services:
        if service.wanted(launch):
            service.sweep(launch)
            service.open(stack, launch)


# ---------------------------------------------------------------- the services
class AgentCopy(Service):
    """An agent profile's guarded session copy of its configuration
    (agents/copy.py): made while the template is made (`made` by the compile,
    `again` by a hit); finished — its settings merged back under the guard —
    once the session is over, or discarded while a session process could
    still write (reap.py survivors)."""
    name = "agent copy"

    def wanted(self, launch: Launch) -> bool:
        return launch.agent is not None

    def sweep(self, launch: Launch) -> None:
        """The copies of killed launchers merged under the guard — before the
        plan cache is asked, as a compile would see their result."""
        import pwd

        launch.agent.recover(pwd.getpwuid(os.getuid()).pw_dir)

    def made(self, stack, launch: Launch, policy):
        """The compile's step (run.prepare's `agent_copy`): the policy with
        the copy in place of the agent's configuration."""
        from agent_sandbox.errors import PolicyError
        from agent_sandbox.agents import copy as agentcopy
        from agent_sandbox.plancache.plans import ACTIVE, Paused

        agent = launch.agent
        profile = agent.profile
        spec = agentcopy.spec_for(profile, policy.home)
        if launch.dry_run or spec is None:
            return policy
        try:
            with Paused(ACTIVE[-1] if ACTIVE else None):   # the copy is this session's own
                made, record = agentcopy.start(spec, policy, note_path=profile.note_path)
        except OSError as exc:
            raise PolicyError(f"{profile.name}: cannot make the session copy of "
                              f"{spec.real_dir} — {exc}. Check that your home is writable.",
                              reason="agent_copy_failed") from None
        self._held(stack, launch, record)
        agent.copied(spec, policy, made)
        return made

    def again(self, stack, launch: Launch, cached: dict) -> None:
        """A hit's step: the copy made again from what the cache stored;
        agentlaunch.Stale when it would differ (the caller compiles)."""
        from agent_sandbox.agents.launch import from_cache

        made: list = []
        from_cache(launch.agent, cached, made)
        if made:
            self._held(stack, launch, made[0])

    def _held(self, stack, launch: Launch, record: str) -> None:
        launch.copies.append(record)
        stack.callback(self.close, launch)

    @staticmethod
    def close(launch: Launch) -> None:
        from agent_sandbox.agents import copy as agentcopy

        if launch.survivors:   # a session process could still write: nothing is merged
            agentcopy.discard(launch.copies[0], f"session processes {launch.survivors} are "
                              "still running and could still write")
        else:
            agentcopy.finish(launch.copies[0])


class AgentKeys(Service):
    """The launcher's own placeholder keys (API key brokering) approved in
    the agent's session copy (AGENT_KEY_APPROVAL, agents/copy.py
    approve_keys): once the template holds this session's placeholders —
    new at every launch, compiled or cached."""
    name = "agent keys"

    def wanted(self, launch: Launch) -> bool:
        return (launch.agent is not None and bool(launch.copies)
                and bool(getattr(launch.agent.profile, "key_approval", ()))
                and launch.prepared.egress is not None)

    def open(self, stack, launch: Launch) -> None:
        from agent_sandbox.agents import copy as agentcopy
        from agent_sandbox.services.egress import BROKERS

        placeholders = []
        for name, broker in launch.prepared.egress.brokers.items():
            known = BROKERS.get(name)
            if known is not None and launch.policy.env.get(known.key_var) \
                    == broker.get("placeholder"):
                placeholders.append(broker["placeholder"])
        try:
            agentcopy.approve_keys(launch.copies[0], launch.agent.profile.key_approval,
                                   placeholders)
        except (OSError, ValueError):
            pass        # the agent asks, as it would without this


class Chaperon(Service):
    """The Slurm proxy's session (chaperon.py): its directory and
    announcement FIFO made as the template names them; the process starts at
    the first Slurm call."""
    name = "chaperon"

    def wanted(self, launch: Launch) -> bool:
        return launch.prepared.chaperon is not None

    def sweep(self, launch: Launch) -> None:
        from agent_sandbox.services.chaperon import session_parent, unprepared

        try:
            session_parent(launch.policy.home)
        except OSError as exc:
            raise unprepared(exc, launch.prepared.chaperon["session_dir"]) from None

    def open(self, stack, launch: Launch) -> None:
        from agent_sandbox.services.chaperon import ChaperonSession

        launch.chaperon = ChaperonSession.open(launch.prepared.chaperon)
        stack.callback(launch.chaperon.stop)
        self.adopt(launch)

    @staticmethod
    def adopt(launch: Launch) -> None:
        """The user's own allocation (services/chaperon.py allocation_wanted),
        checked with Slurm and recorded in the ledger as this session's: a
        named one (--allocation) that cannot be adopted refuses the launch,
        one found in the environment is only a warning."""
        from agent_sandbox.errors import PolicyError, say
        from agent_sandbox.services import chaperon as service

        wanted = service.allocation_wanted(launch.environ, launch.allocation,
                                           job=launch.job or launch.job_shared)
        if wanted is None:
            return
        job, explicit = wanted
        config = launch.prepared.chaperon
        why = service.check_allocation(job, config)
        if why is None:
            try:
                service.adopt_allocation(config, job)
            except OSError as exc:
                why = f"the job ledger cannot be written ({exc.strerror or exc})"
        if why is None:
            launch.adopted = job
            if not launch.policy.quiet:
                say(f"Slurm allocation {job} adopted: srun inside runs its steps there, "
                    "each sandboxed (agent-sandbox status shows it)")
        elif explicit:
            raise PolicyError(f"--allocation {job} is refused — {why}. Name a running "
                              "allocation of yours (squeue --me), or leave --allocation "
                              "out; the command was not run.", reason="allocation_refused")
        else:
            say(f"warning: Slurm job {job} (SLURM_JOB_ID) is not adopted — {why}; srun "
                "inside cannot use it. Start the sandbox inside a running allocation of "
                "yours (salloc, then agent-sandbox …), or name one with --allocation JOBID.")


class Egress(Service):
    """The egress proxy of NETWORK_MODE=allowlist (egress.py): its socket
    bound here, the proxy started beside the sandbox (AT_SPAWN checks that
    it runs)."""
    name = "egress"

    def wanted(self, launch: Launch) -> bool:
        return launch.prepared.egress is not None

    def sweep(self, launch: Launch) -> None:
        from agent_sandbox.services import egress

        egress.sweep(os.path.dirname(launch.prepared.egress.directory))

    def open(self, stack, launch: Launch) -> None:
        from agent_sandbox.services.egress import EgressSession

        launch.egress = EgressSession.start(launch.prepared.egress, launch.policy.session_id)
        stack.callback(self.report, launch)      # after the stop: the log is complete
        stack.callback(launch.egress.stop)

    @staticmethod
    def report(launch: Launch) -> None:
        """One line per destination the proxy refused this session (count,
        the line to paste), telemetry counted apart (netreport.py); not in
        a job (its output is the user's) nor when quiet."""
        if launch.policy.quiet or launch.job or launch.job_shared:
            return
        from agent_sandbox.errors import say
        from agent_sandbox.services.netreport import session_report

        for line in session_report(launch.prepared.egress.audit, launch.policy.session_id):
            say(line)


class JobShm(Service):
    """A landlock job launch's shared-memory directory (jobs/shm.py), granted
    after the template: the compiled and the cached plan alike, stored
    without it. Released after the sandbox: the last task out removes it."""
    name = "job shm"

    def wanted(self, launch: Launch) -> bool:
        from agent_sandbox.traits import traits

        return launch.job_shared and not traits(launch.plan.backend).joins_job_sandboxes

    def open(self, stack, launch: Launch) -> None:
        from agent_sandbox.jobs import shm as jobshm

        held = jobshm.start(launch.command)
        if held is None:
            return
        launch.job_shm = held
        stack.callback(held.release)
        launch.policy, launch.plan = jobshm.with_job_shm(launch.policy, launch.plan, held)


class Holder(Service):
    """The job sandbox's holder (jobs/join.py) is told the session's
    directories once they are there (run's `on_prepared`)."""
    name = "job holder"

    def wanted(self, launch: Launch) -> bool:
        return launch.on_prepared is not None

    def open(self, stack, launch: Launch) -> None:
        launch.on_prepared(launch.chaperon, launch.policy)


class Announce(Service):
    """The policy's warnings, the files every launch makes or reports
    (shared_files), the banner. Nothing to undo."""
    name = "announce"

    def open(self, stack, launch: Launch) -> None:
        import sys

        from agent_sandbox.errors import say

        policy = launch.policy
        for warning in policy.warnings:
            say(f"warning: {warning}")
        shared_files(policy, launch.environ, launch.job or launch.job_shared)
        if not policy.quiet:
            from agent_sandbox.launch.report import banner

            sys.stderr.write(banner(policy, launch.plan))


def make_package_cache(policy) -> None:
    """The sandbox's own package cache of the project (policy/caches.py),
    made by descriptor from the home (0700), unrecorded: by the compile
    before the plan looks at the path it grants (so that the launch does not
    change what the compile saw), and again by every launch."""
    cache = policy.package_cache
    if not cache:
        return
    from agent_sandbox.plancache.plans import ACTIVE, Paused
    from agent_sandbox.paths import NotOwnDirectory, open_own_dir

    with Paused(ACTIVE[-1] if ACTIVE else None):
        try:
            os.close(open_own_dir(policy.home, os.path.relpath(cache, policy.home),
                                  create=True))
        except (OSError, NotOwnDirectory) as exc:
            from agent_sandbox.errors import PolicyError

            raise PolicyError(f"cannot make the sandbox's package cache {cache} — {exc}. "
                              "Check that your home is writable and the directory is yours.",
                              reason="package_cache_failed") from None


def shared_files(policy, environ, job: bool) -> None:
    """At every launch, compiled or cached: the sandbox's own package cache
    made (policy/caches.py: the tools' variables name it, the plan grants
    it), and files the sandbox can write that have a name outside reported
    (linkcheck.py; not again in each job step on the nodes: the session
    that submitted it reported them)."""
    make_package_cache(policy)
    if not job:
        from agent_sandbox.errors import say
        from agent_sandbox.services.linkcheck import report
        from agent_sandbox.plancache.plans import is_job

        if not is_job(environ):
            report(policy, say)


class Registry(Service):
    """The session registry (`agent-sandbox status`, registry.py) and the
    project's read-only placeholders (placeholders.py), under the project's
    lock, so that concurrent launches and ends of one project never race.
    Registered before the placeholders are made (a session of the same
    project ending now must see this one and leave them), named by the
    session id the chaperon's audit log and ledger carry; the git check's
    report runs while still registered (gitcheck.recover leaves it alone)."""
    name = "registry"

    def open(self, stack, launch: Launch) -> None:
        from agent_sandbox.services import placeholders, registry

        policy, created = launch.policy, []
        stack.callback(self._close, launch, created)   # also what a refusal left
        if launch.chaperon:
            stack.callback(launch.chaperon.attach, None)
        with placeholders.project_lock(policy.home, policy.project_dir):
            # Held by the sandbox too, while it lives (registry.py).
            launch.hold = registry.hold(policy.home, policy.session_id, policy.project_dir)
            launch.record = registry.register(
                policy.home, session=policy.session_id,
                backend=launch.plan.backend, project=policy.project_dir,
                # 0: on standby, started at the first Slurm call
                chaperon_pid=(launch.chaperon.pid or 0) if launch.chaperon else None,
                command=os.path.basename(launch.command[0]), allocation=launch.adopted)
            stack.callback(self._git_finish, launch)
            if launch.chaperon:
                launch.chaperon.attach(launch.record)
            candidates = launch.prepared.placeholders
            placeholders.exclude(policy.project_dir, candidates)
            try:
                placeholders.create(candidates, anchors(policy), created)
            finally:   # also what was made before a refusal
                placeholders.remember(policy.home, policy.project_dir, created)

    @staticmethod
    def _git_finish(launch: Launch) -> None:
        from agent_sandbox.services import gitcheck

        gitcheck.finish(launch.policy, launch.snapshot)

    @staticmethod
    def _close(launch: Launch, created: list) -> None:
        from agent_sandbox.services import placeholders, registry

        policy = launch.policy
        with placeholders.project_lock(policy.home, policy.project_dir):
            registry.unregister(launch.record)
            placeholders.release(policy.home, policy.project_dir, policy.session_id, created)
            registry.unhold(policy.home, policy.session_id, policy.project_dir, launch.hold)


def anchors(policy) -> tuple[str, ...]:
    """Where placeholders are walked from (placeholders.py): the project,
    the home and the writable trees, as the configuration names them."""
    return ((policy.project_dir, policy.home) + tuple(policy.home_writable)
            + tuple(policy.extra_writable))


class GitCheck(Service):
    """The snapshot of the project's git configuration (gitcheck.py),
    compared at the end (Registry's undo reports it, while registered)."""
    name = "git check"

    def open(self, stack, launch: Launch) -> None:
        from agent_sandbox.services import gitcheck

        launch.snapshot = gitcheck.start(launch.policy)


class Subreaper(Service):
    """Without a PID namespace (landlock) the session's orphans come back
    to the launcher, its subreaper, and are swept at the end (reap.py);
    bwrap's init outlives bwrap by its namespaces' teardown and is reaped
    last (run's first undo)."""
    name = "subreaper"

    def wanted(self, launch: Launch) -> bool:
        from agent_sandbox.traits import traits

        return traits(launch.plan.backend).needs_subreaper

    def open(self, stack, launch: Launch) -> None:
        from agent_sandbox.process import reap
        from agent_sandbox.traits import traits

        subreaper = reap.become_subreaper()
        if subreaper and not traits(launch.plan.backend).pid_namespace:
            launch.reaping = True
            stack.callback(self._sweep, launch)

    @staticmethod
    def _sweep(launch: Launch) -> None:
        from agent_sandbox.process import reap

        launch.survivors.extend(reap.sweep())


class HomeWrites(Service):
    """Files written to the tmpfs home (HOME_ACCESS=tmpwrite), which vanish
    with the session, named at exit (services/homewrites.py); the home is
    opened while the sandbox starts (AT_SPAWN: home_watch)."""
    name = "home writes"

    def wanted(self, launch: Launch) -> bool:
        from agent_sandbox.services.homewrites import watchable

        return not launch.job and not launch.job_shared and watchable(launch.plan,
                                                                        launch.policy)

    def open(self, stack, launch: Launch) -> None:
        launch.home_fd = -1       # asked for: home_watch opens it
        stack.callback(self._report, launch)

    @staticmethod
    def _report(launch: Launch) -> None:
        fd, launch.home_fd = launch.home_fd, None
        if fd is None or fd < 0:
            return
        try:
            from agent_sandbox.services.homewrites import made_paths, report_line, vanishing

            policy = launch.policy
            paths = vanishing(fd, policy.home, made_paths(launch.plan, policy.home))
            if paths and not policy.quiet:
                from agent_sandbox.errors import say
                from agent_sandbox.logfiles import clean

                # The names are the session's: escaped, so that none prints
                # a line or a terminal escape of its choosing.
                say(clean(report_line(paths, policy.home, policy.project_dir)))
        except OSError:
            pass
        finally:
            os.close(fd)


def home_watch(launch: Launch):
    """The sandbox's tmpfs home opened from outside while it starts, held
    until the report at exit (HomeWrites)."""
    if launch.home_fd != -1:
        return None

    def step(gone) -> None:
        from agent_sandbox.services.homewrites import open_home

        launch.home_fd = open_home(gone, launch.policy.home)
    return step


def reap_orphan(launch: Launch) -> None:
    """Bwrap's sandbox init, last: its namespaces' teardown ran beside the
    rest of the undo."""
    if launch.orphans:
        from agent_sandbox.process.reap import reap_orphan as reap

        reap(launch.orphans[0], wait=0.002)


AGENT_COPY = AgentCopy()
# The services in the order they open (and the reverse of their undo).
SERVICES = (Chaperon(), Egress(), AgentKeys(), JobShm(), Holder(), Announce(), Registry(),
            GitCheck(), HomeWrites(), Subreaper())


# ---------------------------------------------------------------- the spawn
def egress_ready(launch: Launch):
    """The egress proxy's `ready`, read while the sandbox starts."""
    return launch.egress.ready if launch.egress is not None else None


# Between the backend's spawn and the command's exec: each gets the launch
# and returns a callable(gone) or None (spawn.run_plan's after_spawn; `gone`
# becomes readable once the backend has exited).
AT_SPAWN = (egress_ready, home_watch)


def spawn(launch: Launch, hooks=AT_SPAWN) -> int:
    """The sandbox started with the launch's plan; the command's exit code."""
    from agent_sandbox.process.spawn import kept_fds, run_plan

    policy, plan = launch.policy, launch.plan
    steps = [step for step in (hook(launch) for hook in hooks) if step is not None]
    # The launch's facts, which its plan was made (or cached) for: the cache
    # is keyed by them (run._template), the Policy holds none.
    return run_plan(plan, kept_fds(launch.keep_fds, launch.environ), terminal=launch.terminal,
                    title=policy.prompt + os.path.basename(launch.command[0]),
                    after_spawn=(lambda gone: [step(gone) for step in steps])
                    if steps else None, orphans=launch.orphans, hold=launch.hold)
