"""The compiled plan cache for batch jobs and job steps (issue 19 item 3):
the compute-side launch — a job's batch script, and every task that starts
or joins its node's sandbox — reuses the plan an equal earlier launch on
the same node compiled (plancache/plans.py; the host name, kernel and boot id are
in its context).

The difficulty: Slurm hands every job, step and task its own ids, ports,
pids and node lists in the environment, and the plan's environment is the
launch's environment scrubbed. A key of the whole environment never hits
across steps. So the key holds every variable's name, and every value but
those of PER_TASK: variables the compile never reads (verified in
policy/envfilter.py, policy/resolve.py, policy/gres.py, process/spawn.py,
config/load.py: what a compile reads of the environment is PATH, TMPDIR,
SLURM_CONF, SLURM_JOB_GPUS, SLURM_STEP_GPUS, SLURMD_NODENAME, PMI_FD, the
ENV_OVERRIDES and the presence of SLURM_JOB_ID / SLURM_STEP_ID — all keyed
by value), whose only effect on the plan is that envfilter.scrub passes
them through verbatim. A hit puts the current values in through the
environment template every cached plan has (plancache.template): the
policy's environment, the plan's (the backend's spawn environment) and the
`env` payload rebuilt from it; a compile whose template does not take every
per-task value out is not stored. AGENT_SANDBOX_JOB_SESSION (the submitting
session, set by the chaperon's wrapper) also reaches the chaperon's
configuration (`job_session`): substituted there too.

Nothing else about them may come from the cache, so a compile is stored
only if it shows exactly that: each such value is in the policy's
environment as the launch gave it (not set by SANDBOX_ENV or the
launcher), the plan's environment and `env` payload are the policy's, and
no other string or payload of the launch contains a value (one with a digit
and at least 4 characters: ids, ports, pids, paths) — a path derived from
the job id would be stale. What is derived from them is computed at every
launch outside the plan: the job's private TMPDIR (jobstart, inside), the
job and step of the holder's key (jobshare, from the process tree), the
shape a joiner must match (jobjoin, from the environment). Descriptors:
PMI_FD stays in the key, and a hit is used only if the descriptors this
launch keeps (--keep-fd, and PMI_FD when it is a socket: spawn.slurm_task_fds)
are those of the stored plan.

The chaperon starts every job and step in a fresh stage directory of its
own (chaperon/submit.new_stage, under the staging root the recorder
ignores): that working directory is keyed as "a stage of this project's
staging directory" when the stage's path appears nowhere in the launch.

Two kinds of entry: a launch's plan (run.run: the batch script, a
landlock task, the holder of a node's sandbox) and, for a task that joins
a node's sandbox, the (backend selection, policy) it resolves
(cached_resolve; the join plan itself is made at every launch from the
holder's pidfd and namespaces).
"""
from __future__ import annotations

import os

from agent_sandbox.plancache.plans import Cache, Recorder

# Slurm's per-job, per-step and per-task variables (and PMI's and PMIx's)
# that a compile passes through without reading them.
PER_TASK = frozenset({
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID",
    "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID", "SLURM_GTIDS", "SLURM_PRIO_PROCESS",
    "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT", "SLURM_STEP_RESV_PORTS",
    "SLURM_PMIXP_ABORT_AGENT_PORT", "SLURM_PMIX_MAPPING_SERV", "SLURM_JOB_NAME",
    "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME", "SLURM_SUBMIT_DIR", "SLURM_RESTART_COUNT",
    "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST", "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES", "SLURM_STEP_NUM_NODES", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_STEP_NUM_TASKS", "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0", "SLURM_CPUS_ON_NODE",
    "SLURM_DISTRIBUTION",
    "PMI_RANK", "PMI_SIZE", "PMI_JOBID",
    "PMIX_RANK", "PMIX_NAMESPACE", "PMIX_SERVER_URI", "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI21", "PMIX_SERVER_URI3", "PMIX_SERVER_URI4", "PMIX_SERVER_URI41",
    "PMIX_SERVER_TMPDIR", "PMIX_DSTORE_21_BASE_PATH", "PMIX_DSTORE_ESH_BASE_PATH",
    "AGENT_SANDBOX_JOB_SESSION",
})
# A per-task variable that also reaches the chaperon's configuration, by key.
IN_CHAPERON = {"AGENT_SANDBOX_JOB_SESSION": "job_session"}
MARK = "\x00per-task"       # a per-task value in the key (no real value holds NUL)
STAGE = "\x00a chaperon stage"


def _stage_name(name: str) -> bool:
    """16 lower-case hex digits (chaperon/paths.py's names; no `re`: this
    module is imported by every job launch)."""
    return len(name) == 16 and all(c in "0123456789abcdef" for c in name)


def per_task(environ, home: str) -> frozenset:
    """The names whose values the key leaves out. SLURM_SUBMIT_DIR only when
    it is a chaperon's stage (the chaperon runs sbatch and srun there): a
    directory submitted from by hand may be one the plan names."""
    names = PER_TASK.intersection(environ)
    if "SLURM_SUBMIT_DIR" in names and not stage_cwd(home, environ["SLURM_SUBMIT_DIR"]):
        names = names - {"SLURM_SUBMIT_DIR"}
    return names


def key_environ(environ, names) -> dict:
    """The environment as the key holds it: the values of `names` marked."""
    return {k: MARK if k in names else v for k, v in environ.items()}


def stage_cwd(home: str, cwd: str) -> str | None:
    """The key's name for `cwd` when it is a stage the chaperon made for one
    submission (<staging root>/<project hash>/<token>), else None."""
    from agent_sandbox.paths import staging_root

    parent, name = os.path.split(cwd)
    root, project = os.path.split(parent)
    if (root != staging_root(home) or not _stage_name(project)
            or not _stage_name(name)):
        return None
    return os.path.join(parent, STAGE)


class StageRecorder(Recorder):
    """A compile whose working directory the key does not hold (a stage):
    a relative path would be looked up in this stage, not in the next
    launch's — such a compile is not stored (none makes one today)."""

    def note(self, path, dir_fd=None, kind: int = 1) -> None:
        if isinstance(path, (str, bytes)) and not os.fsdecode(path).startswith("/"):
            self.give_up("a relative path")
        super().note(path, dir_fd, kind)


class JobCache(Cache):
    """A job launch's slot: `options` as run.py's plan cache takes them (the
    first is the project directory); `keep_fds`, the launch's --keep-fd.
    Slurm's PMI_FD, kept while it is a socket (spawn.slurm_task_fds), is
    part of the key beside them: the descriptors a plan keeps are launch
    facts, which select its slot and are never read back from it."""

    def __init__(self, options: tuple, environ, home: str, keep_fds=()):
        import zlib

        from agent_sandbox.process.spawn import slurm_task_fds

        self.marked = per_task(environ, home)
        super().__init__(tuple(options) + (slurm_task_fds(environ),),
                         key_environ(environ, self.marked), home)
        self.environ, self.keep_fds = environ, tuple(keep_fds)
        self.settings = None        # the compile's (run._store): SANDBOX_ENV is checked
        self.cwd = os.getcwd()
        stage = stage_cwd(home, self.cwd) if options and options[0] else None
        where = [i for i, item in enumerate(self.context) if item == self.cwd]
        self.stage = stage if stage and len(where) == 1 else None
        if self.stage:
            context = list(self.context)
            context[where[0]] = self.stage
            self.context = tuple(context)
            name = f"{zlib.crc32(repr(self.context).encode()):08x}.marshal"
            self.path = os.path.join(self.directory, name)
            self.Recorder = StageRecorder

    # ------------------------------------------------------------ a hit
    def load(self, session_id: str, chaperon_suffix: str):
        launch = super().load(session_id, chaperon_suffix)
        if launch is None:
            return None
        try:
            return self._current(launch)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def _current(self, launch: dict):
        """The stored launch (its environment filled with this launch's
        per-task values by the template, plancache.filled) with the
        submitting session in the chaperon's configuration. (Its descriptors
        are this launch's: they are in the key.)"""
        chaperon = launch.get("chaperon")
        if chaperon is not None:
            launch["chaperon"] = dict(chaperon, **{key: self.environ[name] for name, key
                                                   in IN_CHAPERON.items()
                                                   if name in self.marked})
        return launch

    # ------------------------------------------------------------ a store
    def store(self, recorder, launch: dict, session_id: str, chaperon_tag) -> None:
        names = tuple(sorted(n for n in self.marked if n in launch["policy"].env))
        checked = passed_through(launch, names, self.environ, self.settings)
        if checked is None:
            return
        hidden = [self.environ[n] for n in self.marked]
        if self.stage:
            hidden.append(self.cwd)
        ids = [session_id] + ([chaperon_tag] if chaperon_tag else [])
        if mentions(without_env(launch), hidden, ids):
            return
        super().store(recorder, launch, session_id, chaperon_tag, required=names)


def passed_through(launch: dict, names, environ, settings) -> bool | None:
    """None unless every per-task variable in `names` reaches the launch only
    verbatim, in the places a hit substitutes; else whether the plan has an
    `env` payload (made from the policy's environment)."""
    from agent_sandbox.backends.base import env_payload

    if settings is None:
        return None
    forced = {item.partition("=")[0] for item in settings.SANDBOX_ENV}
    policy, plan = launch["policy"], launch.get("plan")
    for name in names:
        if name in forced or policy.env.get(name) != environ[name]:
            return None
        if plan is not None and plan.env.get(name, environ[name]) != environ[name]:
            return None
    chaperon = launch.get("chaperon")
    for name, key in IN_CHAPERON.items():
        if chaperon is not None and name in names and chaperon.get(key) != environ[name]:
            return None
    if plan is None or "env" not in plan.payloads:
        return False
    if plan.payloads["env"] != env_payload(policy.env):
        return None
    return True


def without_env(launch: dict) -> dict:
    """The launch without the places a hit substitutes."""
    out = dict(launch)
    out["policy"] = launch["policy"]._replace(env={})
    if launch.get("plan") is not None:
        plan = launch["plan"]
        out["plan"] = plan._replace(env={}, payloads={k: v for k, v in plan.payloads.items()
                                                      if k != "env"})
    if launch.get("chaperon") is not None:
        out["chaperon"] = {k: v for k, v in launch["chaperon"].items()
                           if k not in IN_CHAPERON.values()}
    return out


def mentions(value, hidden, ids) -> bool:
    """Does a string or bytes in `value` contain one of `hidden` (those with a
    digit and 4 characters or more: shorter ones — a rank, a node count —
    would match by chance), once the session's own ids are taken out?"""
    needles = [h for h in hidden if len(h) >= 4 and any(c.isdigit() for c in h)]
    if not needles:
        return False
    encoded = [n.encode() for n in needles]
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            for one in ids:
                item = item.replace(one, "")
            if any(n in item for n in needles):
                return True
        elif isinstance(item, bytes):
            for one in ids:
                item = item.replace(one.encode(), b"")
            if any(n in item for n in encoded):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (tuple, list, frozenset, set)):
            stack.extend(item)
    return False


def cached_resolve(resolve, home: str):
    """run.resolve for a task that joins its node's sandbox (jobjoin), served
    from the cache: (None, selection, policy) on a hit — the joiner uses no
    settings — else the compile's, stored for the next task."""

    def resolved(*, project_dir, backend, environ, job=False):
        cache = JobCache((project_dir, backend, (), False, job, "join"), environ, home)
        launch = cache.load(os.urandom(6).hex(), os.urandom(4).hex())
        if launch is not None:
            return None, launch["selection"], launch["policy"]
        recorder = getattr(cache, "Recorder", Recorder)(cache.ignore(home))
        with recorder:
            settings, selection, policy = resolve(project_dir=project_dir, backend=backend,
                                                  environ=environ, job=job)
        cache.settings = settings
        cache.store(recorder, {"selection": selection, "policy": policy}, policy.session_id,
                    None)
        return settings, selection, policy

    return resolved
