"""An agent profile's launch (`agent-sandbox claude …`), compiled or cached.

A profile launch is compiled like any other (run.prepare with the profile),
and the compiled plan cache (plancache/plans.py) serves it too. Three of its parts
are made fresh for every session, so what the cache stores beside the plan
is what makes them again:

- the profile itself: loaded by the compile, under its recorder (an edit to
  the profile, or a new file that would take its place, is a miss); a hit
  takes the stored one, for the steps before the launch (AGENT_STATE
  entries, copies a killed launcher left) and the command's words;
- the agent's guarded configuration copy (agents/copy.py): the policy fields
  agentcopy.start reads, and those it writes as they were before and after
  it. A hit builds the session's copy again from the fields before and
  compares what it gives with what the compile got; any difference (the
  configuration directory gained an entry, a settings file became a
  symlink…) is a miss: that copy is removed and the launch compiled.
  The copy's own files are the session's: made with the recorder paused;
- the egress proxy's plan (services/egress.py) without the real API keys and the
  base URLs the user set: they are the launch environment's own values (its digest is in the key; a plan
  whose keys are not is not stored), put back at a hit; the audit log's
  name and the keys' placeholders (random per session, wherever the plan
  holds them: the environment, the proxy's spec) are made anew. A proxy whose relay port is chosen per launch
  (landlock's free port) is not stored.

Only what a hit needs is imported on its path.
"""
from __future__ import annotations

import os

from agent_sandbox.errors import NOT_FOUND, SandboxError

# agentcopy.start reads these policy fields (they must be the compiled
# policy's own) and writes these (kept as they were before and after it).
COPY_READS = ("home", "session_id", "protected", "hidden", "backend", "project_dir",
              "workdir")
COPY_WRITES = ("extra_writable", "session_files", "home_writable", "home_readonly")
KEY_FROM_ENVIRON = "\x00the key from the environment"   # no real key holds NUL
URL_FROM_ENVIRON = "\x00the base URL from the environment"


class AgentMissing(SandboxError):
    exit_code = NOT_FOUND


class AgentLaunch:
    """`agent-sandbox NAME ARGS`: the profile (loaded by the compile, or the
    cached one), the user's ARGS, and what the cache stores of the copy."""

    def __init__(self, name: str, args: list[str], *, dry_run: bool):
        self.name, self.args, self.dry_run = name, list(args), dry_run
        self.profile = None
        self.copy = None        # the session copy's inputs and outputs (copied())

    @property
    def command(self) -> list[str]:
        """The agent's command as the user would type it (titles, records)."""
        return list(self.profile.command) + self.args

    # ------------------------------------------------------------ compile
    def load(self, environ, home: str, user: str, recorder=None, *, before: bool = True):
        """The profile, and the steps before a launch (`before`): on a miss,
        under the compile's recorder (the profile's files are inputs; the
        steps write the user's files and are not)."""
        from agent_sandbox.config.load import known_keys
        from agent_sandbox.config.profiles import load

        profile = load(self.name, home=home, user=user, known_keys=known_keys(home, user))
        self.profile = profile
        if self.dry_run:
            return profile
        import shutil

        command = self.command
        if shutil.which(command[0], path=environ.get("PATH")) is None:
            raise AgentMissing(f"{self.name}: {command[0]} is not installed (not found on "
                               f"your PATH) — {profile.install_hint or 'install it first'}.")
        if before:
            from agent_sandbox.plancache.plans import Paused

            with Paused(recorder):
                self.before(home)
        return profile

    def before(self, home: str) -> None:
        """AGENT_STATE entries made (the copies of killed launchers were
        merged before the plan cache was asked: recover())."""
        if not self.dry_run:
            create_state(self.profile.state, home)

    def recover(self, home: str) -> None:
        """The copies of killed launchers merged under the guard — first, as
        a compile would see their result, before a cached plan is checked."""
        if not self.dry_run:
            from agent_sandbox.agents import copy as agentcopy

            agentcopy.recover(home)

    def copied(self, spec, before, after) -> None:
        """The compile made the session copy: `before` → `after`."""
        variable = spec.variable
        self.copy = {"spec": spec, "note_path": self.profile.note_path,
                     "reads": {f: getattr(before, f) for f in COPY_READS},
                     "before": _writes(before, variable), "after": _writes(after, variable)}


def create_state(entries, home: str) -> None:
    """Create missing AGENT_STATE entries (trailing / = a directory) so the
    writable binds exist."""
    for entry in entries:
        path = os.path.join(home, entry.rstrip("/"))
        if os.path.lexists(path):
            continue
        try:
            if entry.endswith("/"):
                os.makedirs(path, mode=0o700, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                os.write(fd, b"{}\n" if path.endswith(".json") else b"")
                os.close(fd)
        except OSError:
            pass   # the agent then runs with that state in the throw-away home


def stored(agent, policy, egress_plan, environ) -> tuple | None:
    """(what the cache keeps beside the plan, the tokens a hit renews) for
    a launch — an agent's (`agent`) and one with an egress proxy
    (`egress_plan`) keep what makes their session parts again —, or None:
    not storable."""
    copy = agent.copy if agent is not None else None
    if copy is not None and any(getattr(policy, f) != v for f, v in copy["reads"].items()):
        return None      # the compile changed what the copy read after it: recompute
    extra = {"profile": agent.profile} if agent is not None else {}
    if copy is not None:
        extra["copy"] = copy
    if egress_plan is not None:
        extra["egress"] = egress_template(egress_plan, environ)
        if extra["egress"] is None:
            return None
    return extra, renewed(egress_plan)


def _writes(policy, variable: str) -> dict:
    fields = {f: getattr(policy, f) for f in COPY_WRITES}
    fields["env"] = policy.env.get(variable)
    return fields


# ---------------------------------------------------------------- egress
def egress_template(planned, environ):
    """The egress plan without its real keys (each is the environment's own
    value) nor the base URLs the user set (a gateway's URL can hold its
    credentials: the environment's too, as for any value the plan cache
    keeps from it), or None when it cannot be stored."""
    from agent_sandbox.services.egress import BROKERS
    from agent_sandbox.names import RELAY_PORT

    if planned.port != RELAY_PORT:
        return None          # landlock: a port chosen for this launch
    brokers = {}
    for name, broker in planned.brokers.items():
        known = BROKERS.get(name)
        if known is None or environ.get(known.key_var) != broker.get("key"):
            return None
        brokers[name] = dict(broker, key=KEY_FROM_ENVIRON)
        if broker.get("upstream") == environ.get(known.base_url_var, "").rstrip("/"):
            brokers[name]["upstream"] = URL_FROM_ENVIRON
    return planned._replace(brokers=brokers, audit="")


def renewed(planned) -> tuple:
    """(placeholder, its fixed part) of each brokered key: random per session
    (egress.placeholder), so a hit makes new ones wherever the plan holds
    them (plancache.Cache.load) — a fresh compile would."""
    if planned is None:
        return ()
    from agent_sandbox.services.egress import BROKERS, PLACEHOLDER_MARK

    return tuple((broker["placeholder"], BROKERS[name].prefix + PLACEHOLDER_MARK)
                 for name, broker in planned.brokers.items())


def egress_filled(stored, environ, home: str):
    """The stored egress plan with this launch's keys and audit log."""
    from agent_sandbox.services.egress import BROKERS, audit_path

    brokers = {}
    for name, broker in stored.brokers.items():
        known = BROKERS[name]
        brokers[name] = dict(broker, key=environ[known.key_var])
        if broker["upstream"] == URL_FROM_ENVIRON:
            brokers[name]["upstream"] = environ[known.base_url_var].rstrip("/")
    return stored._replace(brokers=brokers, audit=audit_path(home))


# ---------------------------------------------------------------- a hit
class Stale(Exception):
    """The cached launch no longer holds: compile it."""


def from_cache(agent: AgentLaunch, launch: dict, copies: list) -> dict:
    """The steps before a cached agent launch, and its session copy made
    again; Stale when the copy would differ from the compiled one (it is
    then removed)."""
    agent.profile = launch["profile"]
    agent.before(launch["policy"].home)
    copy = launch.get("copy")
    if copy is None or agent.dry_run:
        return launch
    from agent_sandbox.agents import copy as agentcopy

    policy = launch["policy"]
    before = dict(copy["before"])
    env = dict(policy.env)
    value = before.pop("env")
    if value is None:
        env.pop(copy["spec"].variable, None)
    else:
        env[copy["spec"].variable] = value
    try:
        made, record = agentcopy.start(copy["spec"], policy._replace(env=env, **before),
                                       note_path=copy["note_path"])
    except (OSError, SandboxError):
        raise Stale from None     # the compile says what is wrong
    if _writes(made, copy["spec"].variable) != copy["after"]:
        agentcopy.finish(record)  # nothing ran in it: removed, nothing merged
        raise Stale
    copies.append(record)
    return launch
