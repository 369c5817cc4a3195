"""The egress proxy of a NETWORK_MODE=allowlist session (docs/network.md):
its plan (directory, socket, relay port, API key brokering) and its process.

`plan` decides, touching nothing but a free port on landlock: where the
proxy's Unix socket goes (a fresh directory below the always-hidden
~/.local/state/agent-sandbox-run, so no other session's socket is reachable;
only this socket is bound into the sandbox), the relay's port inside, and
which API keys are brokered. A brokered key is taken out of the sandbox's
environment and put into the proxy's spec; inside, the key variable holds a
placeholder that looks like a key to the client (same prefix, random, never
the real one) and the agent's base URL points at the relay's /broker/<name>
route, where the proxy puts the real key into the request towards the API
host — only there.

`EgressSession.start` writes the spec (0600, in the 0700 directory), starts
`python3 -I -m egress SPEC` outside the sandbox in its own process group with
a pipe on its stdin whose write end only the launcher holds (EOF = the
launcher is gone: the proxy exits; it also sets PR_SET_PDEATHSIG); `ready`
(called once the plan is built, so the proxy's start overlaps it) waits for
its `ready` line and removes the spec (the key is not left on disk) before
the sandbox starts.
`stop` closes that pipe, waits up to 2 s, kills, and removes the directory;
the next launch sweeps away the directory (and a spec) a SIGKILLed launcher
left.
"""
from __future__ import annotations

import os
import _signal as signal   # the C module: signal.py's enums cost 1 ms a launch
import sys
from collections import namedtuple

from agent_sandbox.errors import SandboxError

READY_TIMEOUT = 10.0
SOCKET_NAME = "proxy.sock"
SPEC_NAME = "spec.json"   # where versions before issue 19 wrote the spec (sweep)


# collections.namedtuple, not typing.NamedTuple; jsonlite, not json; _socket,
# not socket: a cached agent launch imports this module, and those cost it
# ~2.5, ~3.5 and ~1.4 ms.
class Broker(namedtuple("Broker", ("key_var", "header", "scheme", "upstream", "base_url_var",
                                   "prefix", "args"), defaults=((),))):
    """An API the proxy can broker: the key's variable, the header the real
    key goes into (with its scheme), the real API, the variable that sets the
    agent's base URL, the prefix a key of this API starts with, and the
    arguments that give an agent the base URL (`args`, {url} standing for the
    broker's URL, put right after the profile's command)."""
    __slots__ = ()


# Profiles name the brokers their agent can use (AGENT_BROKERS): the agent
# must take its base URL from base_url_var or from args. Claude Code:
# ANTHROPIC_BASE_URL; Gemini CLI: GOOGLE_GEMINI_BASE_URL (with
# GEMINI_API_KEY); Codex dropped OPENAI_BASE_URL for its config key
# openai_base_url, given as `-c` (OPENAI_BASE_URL set outside still names a
# gateway, the upstream; inside it points at the broker for tools that read it).
BROKERS = {
    "anthropic": Broker("ANTHROPIC_API_KEY", "x-api-key", "", "https://api.anthropic.com",
                        "ANTHROPIC_BASE_URL", "sk-ant-api03-"),
    "gemini": Broker("GEMINI_API_KEY", "x-goog-api-key", "",
                     "https://generativelanguage.googleapis.com", "GOOGLE_GEMINI_BASE_URL",
                     "AIza"),
    "openai": Broker("OPENAI_API_KEY", "authorization", "Bearer ", "https://api.openai.com/v1",
                     "OPENAI_BASE_URL", "sk-proj-", ("-c", "openai_base_url={url}")),
}


class EgressPlan(namedtuple("EgressPlan", ("directory", "socket", "port", "env_changes",
                                           "brokers", "rules", "audit", "args", "notes",
                                           "no_proxy"),
                            defaults=((), (), "localhost,127.0.0.1"))):
    """env_changes: what the sandbox's environment gets instead; brokers:
    the spec's "brokers" (they hold the real keys: never printed); args: the
    agent's own arguments a broker needs (Broker.args); notes: what the
    launch says about them (a gateway that is not used, and why); no_proxy:
    the sandbox's NO_PROXY (`proxy_bypass`)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return f"EgressPlan(socket={self.socket!r}, port={self.port})"


def wanted(policy) -> bool:
    return policy.network_mode == "allowlist" and not policy.network_isolated


PLACEHOLDER_MARK = "agentsandbox"


def placeholder(prefix: str) -> str:
    """Looks like a key of the API to the client (prefix, length, alphabet),
    and is random per session, so it can be told apart from any real key (a
    cached plan's are made anew at each hit: agentlaunch.renewed)."""
    return prefix + PLACEHOLDER_MARK + os.urandom(20).hex()


def free_port() -> int:
    """landlock: the relay listens on the host's loopback; a port free now."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _parsed_rules(rules) -> list:
    from egress.hosts import parse_entry

    parsed = []
    for item in rules:
        try:
            parsed.append(parse_entry(item["entry"], item["origin"]))
        except ValueError:
            continue     # validated with the configuration already
    return parsed


def gateway(broker: Broker, url: str, rules) -> tuple[str, str]:
    """(upstream, note) for the base URL the user set outside (`url`, e.g.
    ANTHROPIC_BASE_URL: LiteLLM, vLLM, a site's gateway, an ssh tunnel): the
    broker's upstream when it is https, or http to a host ALLOWED_HOSTS
    lists (`rules`: config.network.rules; the key then travels unencrypted,
    to a host the user listed); otherwise the API's own, and `note` says at
    launch that and why the URL is not used, with the line to add. Pure."""
    from urllib.parse import urlsplit

    url = url.strip()
    if not url:
        return broker.upstream, ""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        parts, port = None, None
    host = parts.hostname if parts else None
    if parts is None or not host or parts.query or parts.fragment or parts.username \
            or parts.password or parts.scheme not in ("https", "http"):
        return broker.upstream, (
            f"{broker.base_url_var}={url} is not used — the broker takes an https:// or "
            f"http:// URL (host[:port][/path]); the agent talks to {broker.upstream}")
    if parts.scheme == "https":
        return url.rstrip("/"), ""
    from egress.hosts import match

    port = port or 80
    decision = match(_parsed_rules(rules), host, port)
    if decision.allowed:
        return url.rstrip("/"), ""
    shown = f"[{host}]" if ":" in host else host
    return broker.upstream, (
        f"{broker.base_url_var}={url} is not used — the real key would go unencrypted "
        f"(http) to {shown}:{port}, which ALLOWED_HOSTS does not list; the agent talks to "
        f"{broker.upstream} instead. To use the gateway, add the line "
        f"`ALLOWED_HOSTS+=({shown}:{port})` to ~/.config/agent-sandbox/sandbox.conf "
        "(or use an https URL)")


LOOPBACK_NAMES = ("localhost",)


def unreachable(broker: Broker, url: str, rules) -> str:
    """Without brokering: a note when the agent's base URL names a loopback
    host ALLOWED_HOSTS does not list — inside, loopback is the sandbox's own,
    so the agent would retry a connection nothing answers (a silent hang)."""
    from urllib.parse import urlsplit
    from egress.hosts import address, match

    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ""
    if not host:
        return ""
    numeric = address(host)
    loopback = host in LOOPBACK_NAMES or (numeric is not None and numeric.is_loopback)
    if not loopback or match(_parsed_rules(rules), host, port).allowed:
        return ""
    shown = f"[{host}]" if ":" in host else host
    return (f"{broker.base_url_var}={url} names a loopback address the sandbox cannot reach "
            "(inside, loopback is the sandbox's own) — the agent's requests would fail. "
            f"Add the line `ALLOWED_HOSTS+=({shown}:{port})` to "
            "~/.config/agent-sandbox/sandbox.conf to reach it through the egress proxy")


def proxy_bypass(rules) -> str:
    """The sandbox's NO_PROXY: loopback, so that the relay's own broker URL
    is asked directly — unless ALLOWED_HOSTS lists a loopback host (a
    gateway or an ssh tunnel on the login node): inside, loopback is the
    sandbox's own, so a client that bypassed the proxy for it would reach
    nothing. Then nothing bypasses the proxy (it serves the broker route
    asked through it too). Pure."""
    import ipaddress

    for rule in _parsed_rules(rules):
        if rule.kind == "name" and rule.name in LOOPBACK_NAMES:
            return ""
        if rule.kind == "range" and rule.network.overlaps(
                ipaddress.ip_network("127.0.0.0/8" if rule.network.version == 4 else "::1/128")):
            return ""
    return "localhost,127.0.0.1"


def brokering(settings, policy, profile, port: int, rules=()) -> tuple[dict, dict, tuple,
                                                                       tuple]:
    """(environment changes, spec brokers, agent arguments, notes) for the
    keys this session brokers: API_KEY_BROKERING on, a profile that names
    the broker, the key set. Never without a network namespace of the
    sandbox's own (landlock): the relay listens on the host's loopback
    there, where any local user could reach the broker. A base URL the user
    set is the upstream when `gateway` accepts it, else a note says why not."""
    from agent_sandbox.traits import traits

    names = profile.brokers if profile is not None else ()
    if not traits(policy.backend).network_namespace:
        return {}, {}, (), ()
    if not settings.API_KEY_BROKERING:
        notes = [note for note in (unreachable(BROKERS[n], policy.env.get(
            BROKERS[n].base_url_var, ""), rules) for n in names if n in BROKERS) if note]
        return {}, {}, (), tuple(notes)
    env, brokers, args, notes = {}, {}, [], []
    for name in names:
        broker = BROKERS.get(name)
        if broker is None or not policy.env.get(broker.key_var):
            continue
        # A base URL the user set outside (a gateway) stays the upstream.
        upstream, note = gateway(broker, policy.env.get(broker.base_url_var, ""), rules)
        if note:
            notes.append(note)
        stand_in = placeholder(broker.prefix)
        brokers[name] = {"upstream": upstream.rstrip("/"), "header": broker.header,
                         "scheme": broker.scheme, "placeholder": stand_in,
                         "key": policy.env[broker.key_var]}
        url = f"http://127.0.0.1:{port}/broker/{name}"
        env[broker.key_var] = stand_in
        env[broker.base_url_var] = url
        args += [a.replace("{url}", url) for a in broker.args]
    return env, brokers, tuple(args), tuple(notes)


def with_args(command: list[str], user_args: int, args) -> list[str]:
    """The agent's command as resolved (agentexe.resolve: its interpreter
    and script in front, `node codex.js` for `codex`), then the brokers'
    arguments, then the user's `user_args` last arguments: counted from the
    end, because the resolved command is longer than the profile's."""
    if not args:
        return list(command)
    cut = len(command) - user_args
    return list(command[:cut]) + list(args) + list(command[cut:])


def audit_path(home: str) -> str:
    """The session's network audit log: beside the chaperon's logs, same
    conventions (chaperon/audit.py), so `agent-sandbox logs` reads both."""
    import time

    from agent_sandbox.paths import state_dir

    stamp = time.strftime("%Y%m%dT%H%M%S")
    return os.path.join(state_dir(home), "chaperon",
                        f"{os.uname().nodename}_{os.getpid()}_{stamp}_network.log")


def plan(settings, policy, profile=None) -> EgressPlan:
    from agent_sandbox.traits import traits
    from agent_sandbox.config.network import rules
    from agent_sandbox.services.chaperon import session_parent
    from agent_sandbox.names import RELAY_PORT

    # Named by the session id alone (random, 48 bits; mkdir fails on a
    # clash): a cached plan's directory is the new session's (plancache/plans.py).
    directory = os.path.join(session_parent(policy.home), f"egress-{policy.session_id}")
    # A fixed port on the sandbox's own loopback, else a free one of the host's.
    port = RELAY_PORT if traits(policy.backend).network_namespace else free_port()
    listed = rules(settings)
    env, brokers, args, notes = brokering(settings, policy, profile, port, listed)
    return EgressPlan(directory, os.path.join(directory, SOCKET_NAME), port, env, brokers,
                      listed, audit_path(policy.home), args, notes, proxy_bypass(listed))


class EgressSession:
    def __init__(self, planned: EgressPlan, pid: int, stdin_fd: int, stdout_fd: int | None):
        self.plan = planned
        self.pid = pid
        self._stdin = stdin_fd        # its write end: EOF tells the proxy to exit
        self._stdout = stdout_fd      # where `ready` comes, until ready() read it
        self._unused = False          # the sandbox ended before the proxy was ready

    @classmethod
    def start(cls, planned: EgressPlan, session_id: str) -> "EgressSession":
        """Bind the session's socket here (its parent swept before: `sweep`,
        by lifecycle.Egress), then start the proxy with it: the sandbox can
        start at once (a connection made before the proxy accepts waits in
        the backlog; `ready` is checked once the sandbox runs). The spec —
        the real API keys among it — goes to the proxy through a pipe, never
        through a file."""
        import _socket

        from agent_sandbox.jsonlite import dumps

        spec = dumps({"socket": planned.socket, "rules": planned.rules,
                      "audit": planned.audit, "brokers": planned.brokers,
                      "session": session_id})
        listener = None
        try:
            os.mkdir(planned.directory, 0o700)
            os.makedirs(os.path.dirname(planned.audit), mode=0o700, exist_ok=True)
            os.close(os.open(planned.audit, os.O_WRONLY | os.O_CREAT | os.O_APPEND
                             | os.O_CLOEXEC, 0o600))
            listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            old = os.umask(0o177)
            try:
                listener.bind(planned.socket)
            finally:
                os.umask(old)
            os.chmod(planned.socket, 0o600)
            listener.listen(512)
        except OSError as exc:
            if listener is not None:
                listener.close()
            _remove(planned.directory)
            raise SandboxError(
                f"cannot prepare the egress proxy — {exc.strerror or exc} at "
                f"{getattr(exc, 'filename', None) or planned.directory}. Free space or fix "
                "the permissions there, or set NETWORK_MODE=open or isolated; the command "
                "was not run.") from None
        from agent_sandbox.process.spawn import SPAWN_LOCK

        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        spec_read, spec_write = os.pipe()
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "USER", "LOGNAME")}
        argv = [sys.executable, "-I", "-m", "egress", f"/dev/fd/{spec_read}",
                "--listen-fd", str(listener.fileno())]
        try:
            with SPAWN_LOCK:     # inheritable only for this child (process/spawn.py)
                for fd in (spec_read, listener.fileno()):
                    os.set_inheritable(fd, True)
                try:
                    pid = os.posix_spawn(
                        sys.executable, argv, env, setpgroup=0,
                        setsigdef=(signal.SIGINT, signal.SIGTERM, signal.SIGPIPE),
                        file_actions=[(os.POSIX_SPAWN_DUP2, in_read, 0),
                                      (os.POSIX_SPAWN_DUP2, out_write, 1)])
                finally:
                    for fd in (spec_read, listener.fileno()):
                        os.set_inheritable(fd, False)
        except OSError as exc:
            for fd in (in_read, in_write, out_read, out_write, spec_read, spec_write):
                os.close(fd)
            listener.close()
            _remove(planned.directory)
            raise SandboxError(f"cannot start the egress proxy — {exc}. Set "
                               "NETWORK_MODE=open or isolated; the command was not run.") from None
        # Ours closed: once the proxy is gone nobody listens (ECONNREFUSED
        # inside, not a connection waiting forever).
        listener.close()
        for fd in (in_read, out_write, spec_read):
            os.close(fd)
        try:
            view = memoryview(spec)
            while view:
                view = view[os.write(spec_write, view):]
        except OSError:
            pass     # it died at once: `ready` says so
        finally:
            os.close(spec_write)
        return cls(planned, pid, in_write, out_read)

    def ready(self, gone: int | None = None) -> None:
        """Wait for the proxy's `ready`: called once the sandbox was started
        (process/spawn.py after_spawn); a proxy that did not start ends the
        session with this message. `gone`: readable once the sandbox has
        exited — then a proxy still starting is not waited for (a short
        command, `claude --version`, would pay its whole start at the exit),
        but one that already failed is still reported."""
        if self._stdout is None:
            return
        try:
            said = _read_ready(self._stdout, gone)
        finally:
            os.close(self._stdout)
            self._stdout = None
        if said is None:    # the sandbox ended before the proxy had anything to say
            self._unused = True
            return
        if said != b"ready\n":
            raise SandboxError("the egress proxy did not start (its message is above) — "
                               "NETWORK_MODE=allowlist needs it. Check `agent-sandbox config "
                               "show` (ALLOWED_HOSTS) or set NETWORK_MODE=open or isolated; "
                               "the command was stopped.", reason="egress_failed")

    def stop(self) -> None:
        """EOF on the proxy's stdin, then up to 2 s, then SIGKILL; the directory
        goes. A proxy the sandbox ended before it was ready has served no
        one: killed at once, not waited for through the rest of its start."""
        from agent_sandbox.services.chaperon import end_child

        for fd in (self._stdin, self._stdout):
            if fd is not None:
                os.close(fd)
        self._stdin = self._stdout = None
        # EOF on its stdin is the proxy's signal to go.
        end_child(self.pid, signal.SIGKILL if self._unused else None)
        _remove(self.plan.directory)


STALE_AFTER = 60.0   # seconds a directory without a socket is left alone


def sweep(parent: str) -> None:
    """Remove the directories of proxies that are gone: after a SIGKILLed
    launcher the proxy exits (stdin EOF) and removes its socket, but nobody
    removes its directory (nor the spec, when the launcher died before the
    proxy was ready). One without a socket that has not changed for a minute
    is such a leftover: a session being set up has its socket within
    READY_TIMEOUT, a running one keeps it."""
    import time

    try:
        names = [n for n in os.listdir(parent) if n.startswith("egress-")]
    except OSError:
        return
    now = time.time()
    for name in names:
        path = os.path.join(parent, name)
        try:
            if (now - os.lstat(path).st_mtime > STALE_AFTER
                    and not os.path.lexists(os.path.join(path, SOCKET_NAME))):
                _remove(path)
        except OSError:
            continue


def _read_ready(fd: int, gone: int | None = None) -> bytes | None:
    """The proxy's first line (b"" when it exits or stays silent), or None
    when `gone` became readable first with nothing from the proxy to read."""
    import select
    import time

    data = b""
    deadline = time.monotonic() + READY_TIMEOUT
    watched = [fd] if gone is None else [fd, gone]
    while b"\n" not in data:
        left = deadline - time.monotonic()
        readable = select.select(watched, [], [], left)[0] if left > 0 else []
        if not readable:
            return b""
        if fd not in readable:
            return None
        chunk = os.read(fd, 256)
        if not chunk:
            return data
        data += chunk
    return data


def _remove(directory: str) -> None:
    """The session's directory, with its socket (left by a proxy that was
    killed) and whatever else is in it (paths.remove_tree)."""
    from agent_sandbox.paths import remove_tree

    remove_tree(directory)
