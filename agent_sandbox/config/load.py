"""Reading the configuration layers and merging them into one Settings object.

Layers, later wins (SPEC §4): the shipped defaults, the admin file, the user
file, then environment overrides for a fixed list of keys, then CLI flags.
Every layer is parsed by confsyntax (never executed); `KEY+=(…)` appends to
what the earlier layers set. The merged raw values are validated by the
pydantic model in confmodel.

Validation imports pydantic, which costs more than the whole rest of a launch,
so the validated result is cached in the user's hidden state directory
together with every input it was computed from (file contents, overrides,
$HOME, $USER, version); it is used only when all inputs are equal, so a
changed byte anywhere means a fresh validation. The cache lives
under ~/.local/state/agent-sandbox/, which is hidden inside every sandbox, so
an agent cannot plant a weaker configuration for the next launch.
"""
from __future__ import annotations

import marshal
import os
import stat

from agent_sandbox.config.settings import Settings
from agent_sandbox.paths import (ADMIN_CONFIG, defaults_path, state_dir,  # noqa: F401
                                 user_config_dir)
from agent_sandbox import __version__
from agent_sandbox.config.syntax import ConfigSyntaxError, parse_config
from agent_sandbox.errors import ConfigError

# Keys only an agent profile (conf/agents/<name>.conf) may set, beside the
# ordinary ones (profiles.py reads them; the layer merge must know them).
PROFILE_KEYS = frozenset({"AGENT_COMMAND", "AGENT_INSTALL_HINT", "AGENT_NOTE_PATH",
                          "AGENT_STATE", "AGENT_CONFIG_DIR", "AGENT_SETTINGS",
                          "AGENT_SETTINGS_KEEP", "AGENT_PROJECT_SETTINGS", "AGENT_BROKERS",
                          "AGENT_CONFIG_KEEP", "AGENT_CONFIG_SCRATCH",
                          "AGENT_CONFIG_PER_PROJECT", "AGENT_LOGINS", "AGENT_TRUST",
                          "AGENT_KEY_APPROVAL", "AGENT_SETTINGS_QUIET"})
# Keys the environment may override (SPEC §4 layer 5).
ENV_OVERRIDES = ("SANDBOX_BACKEND", "HOME_ACCESS", "SLURM_SCOPE", "PRIVATE_TMP",
                 "PRIVATE_IPC", "FILTER_PASSWD", "NETWORK_MODE", "SANDBOX_QUIET",
                 "PRIVATE_MOUNTS")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path} — {exc}. Fix the file's permissions "
                          "or encoding (UTF-8).") from None


def _read_admin(path: str) -> str | None:
    """The admin file must be root-owned and writable by root only, in a
    directory with the same property; anything else refuses the launch."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot open the admin config {path} — {exc}. Ask your "
                          "site admin to fix it (it must be a root-owned regular file).") from None
    with os.fdopen(fd, encoding="utf-8") as handle:
        for checked, info in ((path, os.fstat(handle.fileno())),
                              (os.path.dirname(path), os.stat(os.path.dirname(path)))):
            if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise ConfigError(
                    f"the admin config {checked} is not owned by root or is writable by "
                    "others — a user could weaken the site policy. Ask your site admin to "
                    f"run: chown root:root {checked} && chmod go-w {checked}",
                    reason="unsafe_admin_config")
        return handle.read()


def check_user_tree(config_dir: str, uid: int | None = None, home: str | None = None) -> None:
    """The user's configuration tree decides how every sandbox of the user
    runs (HOME_ACCESS, NETWORK_MODE, profiles in agents/): it is trusted only
    when no one else can change it, as the admin file must be root's alone.
    Every entry (the directory, sandbox.conf, conf.d/, agents/, anything in
    them) must be the user's (or root's) and writable by neither group nor
    others; a symbolic link is judged by what it leads to. Otherwise the
    launch is refused, naming the path and the command that fixes it. The
    walk is by name with os.lstat/os.scandir, so the plan cache's recorder
    fingerprints each entry's mode and owner: a chmod after a compile makes
    the next launch compile, and refuse, again. The directories above it
    (up to the home, or to / for a tree outside it) are held to the same
    rule, a sticky one excepted: whoever can write ~/.config can move the
    tree aside or put another in its place (a Landlock session can chmod
    it)."""
    uid = os.getuid() if uid is None else uid
    _check_parents(config_dir, uid, home)
    stack = [config_dir]
    listed: set[tuple[int, int]] = set()    # a linked directory loop is walked once
    while stack:
        path = stack.pop()
        try:
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                info = os.stat(path)
        except OSError:
            continue            # missing (or a dangling link): nothing is read from it
        if info.st_uid not in (uid, 0):
            raise ConfigError(
                f"refusing the user configuration {path} — it is owned by uid {info.st_uid}, "
                "not you, so another user decides how your sandboxes run. Remove it (or "
                f"move it aside) and write your own: mv {path} {path}.foreign",
                reason="unsafe_user_config")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigError(
                f"refusing the user configuration {path} — it is writable by "
                f"{'others' if info.st_mode & stat.S_IWOTH else 'its group'} (mode "
                f"{stat.S_IMODE(info.st_mode):04o}), so another user could weaken your "
                f"sandboxes (HOME_ACCESS=write, NETWORK_MODE=open). Check it, then run: "
                f"chmod go-w {path}", reason="unsafe_user_config")
        if stat.S_ISDIR(info.st_mode) and (info.st_dev, info.st_ino) not in listed:
            listed.add((info.st_dev, info.st_ino))
            try:
                with os.scandir(path) as entries:
                    stack += [os.path.join(path, e.name) for e in entries]
            except OSError:
                continue


def _check_parents(config_dir: str, uid: int, home: str | None) -> None:
    """check_user_tree's rule for the directories that hold the tree."""
    from agent_sandbox.paths import is_within

    config_dir = os.path.normpath(os.path.abspath(config_dir))
    stop = os.path.normpath(home) if home and is_within(config_dir, home) else None
    parent = os.path.dirname(config_dir)
    while parent != stop:
        try:
            info = os.lstat(parent)
            if stat.S_ISLNK(info.st_mode):
                info = os.stat(parent)
        except OSError:
            info = None
        if info is not None and not info.st_mode & stat.S_ISVTX and (
                info.st_uid not in (uid, 0) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            who = (f"owned by uid {info.st_uid}" if info.st_uid not in (uid, 0) else
                   f"writable by {'others' if info.st_mode & stat.S_IWOTH else 'its group'} "
                   f"(mode {stat.S_IMODE(info.st_mode):04o})")
            raise ConfigError(
                f"refusing the user configuration {config_dir} — the directory holding it, "
                f"{parent}, is {who}, so another user could move your configuration aside "
                f"or put theirs in its place. Check it, then run: chmod go-w {parent}",
                reason="unsafe_user_config")
        if parent == "/":
            break
        parent = os.path.dirname(parent)


def gather_layers(*, home: str, user: str, admin_path: str = ADMIN_CONFIG,
                  profile=None) -> list[tuple[str, str, str]]:
    """(kind, path, text) of every config file that may apply, in layer order;
    kind is default, profile, admin, user or conf.d (applied only on
    PROJECT_MATCH). A profile layer comes right after the defaults, so admin
    floors and the user's own settings apply on top of it."""
    defaults = defaults_path()
    text = _read(defaults)
    if text is None:
        raise ConfigError(f"the shipped defaults {defaults} are missing — the installation "
                          "is broken. Reinstall agent-sandbox.")
    layers = [("default", defaults, text)]
    if profile is not None:
        layers.append(("profile", profile.path, profile.text))
    admin = _read_admin(admin_path)
    if admin is not None:
        layers.append(("admin", admin_path, admin))
    config_dir = user_config_dir(home)
    check_user_tree(config_dir, home=home)
    user_text = _read(os.path.join(config_dir, "sandbox.conf"))
    if user_text is not None:
        layers.append(("user", os.path.join(config_dir, "sandbox.conf"), user_text))
    conf_d = os.path.join(config_dir, "conf.d")
    try:
        names = sorted(n for n in os.listdir(conf_d) if n.endswith(".conf"))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(conf_d, name)
        layer_text = _read(path)
        if layer_text is not None:
            layers.append(("conf.d", path, layer_text))
    return layers


def known_keys(home: str, user: str) -> frozenset[str]:
    """Every configuration key: the shipped defaults assign each one."""
    path = defaults_path()
    text = _read(path) or ""
    return frozenset(a.key for a in parse_config(text, file=path,
                                                 variables={"HOME": home, "USER": user}))


class Merged:
    """The result of merging layers, before validation."""

    def __init__(self):
        self.raw: dict = {}
        self.origins: dict[str, str] = {}
        self.locks: dict[str, str] = {}      # key → admin file:line holding it
        self.admin: dict = {}                # key → the admin's value
        self.warnings: list[str] = []
        self.files: list[str] = []           # the files that applied, in order

    def assign(self, kind: str, key: str, value, origin: str) -> None:
        from agent_sandbox.config import locks, network   # merging: only on a cache miss

        if (key in locks.ADMIN_ONLY and kind not in ("default", "profile", "admin")
                and locks.as_bool(value) is not False):
            self.warnings.append(f"{key}={value} from {origin} ignored — only the site admin "
                                 f"can turn it on (in {ADMIN_CONFIG})")
            return
        if key in locks.ADMIN_VALUES and kind not in ("default", "profile", "admin"):
            self.warnings.append(f"{key}={value} from {origin} ignored — only the site admin "
                                 f"sets it (in {ADMIN_CONFIG})" + (
                                     "; export SLURM_CONF outside the sandbox to use another "
                                     "cluster" if key == "SLURM_CONF_PATH" else ""))
            return
        if key in locks.ADMIN_LISTS and kind not in ("default", "admin"):
            self.warnings.append(f"{key} from {origin} ignored — only the site admin sets it "
                                 f"(in {ADMIN_CONFIG})")
            return
        if key in network.HOST_KEYS:
            value = self._hosts(kind, key, value, origin)
        if kind == "admin":
            self.admin[key] = value
            if key in locks.LOCKABLE or key == "BLOCKED_ENV_VARS":
                self.locks[key] = origin
        elif key in self.locks and key not in locks.CAP:
            value, warning = locks.enforce(key, self.admin[key], value,
                                           admin_origin=self.locks[key], origin=origin)
            if warning:
                self.warnings.append(warning)
                if key not in locks.KEEP and key not in locks.NARROW:
                    return   # a dropped scalar: the earlier (at least as strict) value stays
        if key == "ALLOWED_ENV_VARS" and kind != "admin" and "BLOCKED_ENV_VARS" in self.locks:
            value, warning = locks.drop_allowed_blocked(
                value, self.admin["BLOCKED_ENV_VARS"],
                admin_origin=self.locks["BLOCKED_ENV_VARS"], origin=origin)
            if warning:
                self.warnings.append(warning)
        self.raw[key] = value
        self.origins[key] = origin

    def _hosts(self, kind: str, key: str, value, origin: str) -> tuple:
        """ALLOWED_HOSTS*: the new entries validated with their file:line, the
        admin cap applied, the origin of every entry kept (config/network.py)."""
        from agent_sandbox.config import network

        previous = network.as_list(self.raw.get(key, ()))
        value = network.as_list(value)
        network.check(key, [e for e in value if e not in previous], origin)
        if key == "ALLOWED_HOSTS" and kind != "admin" and key in self.locks:
            value, warning = network.cap(self.admin[key],
                                         self.admin.get("ALLOWED_HOSTS_USER_MAY_ADD", ()),
                                         value, admin_origin=self.locks[key], origin=origin)
            if warning:
                self.warnings.append(warning)
        if key == "ALLOWED_HOSTS":
            known = self.origins.get(network.HOST_ORIGINS) or {}
            self.origins[network.HOST_ORIGINS] = {e: known.get(e, origin) for e in value}
        return value

    def remove_hosts(self, kind: str, entries, origin: str) -> None:
        """The bash original's NETWORK_BLOCKLIST (config/legacy.py): a listed
        host is taken out of ALLOWED_HOSTS (what is not listed is refused anyway)."""
        from agent_sandbox.config import network

        current = network.as_list(self.raw.get("ALLOWED_HOSTS", ()))
        blocked = {e.lower() for e in network.as_list(entries)}
        kept = tuple(e for e in current if e.lower() not in blocked)
        if kept != current:
            self.assign(kind, "ALLOWED_HOSTS", kept, origin)


def _project_matches(patterns, project_dir: str | None) -> bool:
    if not project_dir:
        return False
    from fnmatch import fnmatchcase

    candidates = {os.path.normpath(project_dir), os.path.realpath(project_dir)}
    return any(fnmatchcase(c, os.path.normpath(p)) for c in candidates for p in patterns)


def merge(layers: list[tuple[str, str, str]], *, home: str, user: str,
          overrides: list[tuple[str, str, str]], project_dir: str | None = None) -> Merged:
    """Parse and merge layers; `overrides` are (origin, key, value) applied last
    (environment, then flags). Admin values act as floors (locks.py)."""
    from agent_sandbox.config.legacy import LEGACY, REMOVE_HOSTS, LegacyValueError, translate

    variables = {"HOME": home, "USER": user}
    known = None   # the shipped defaults assign every key, so they are the key list
    merged = Merged()
    warned_legacy: set[str] = set()
    for kind, path, text in layers:
        if kind == "conf.d":
            keys = known | {"PROJECT_MATCH"} | LEGACY.keys()
        elif kind == "profile":
            keys = known | PROFILE_KEYS
        elif kind == "default":
            keys = known
        else:   # admin, user: a file of the bash original loads (config/legacy.py)
            keys = known | LEGACY.keys()
        try:
            assignments = parse_config(text, file=path, variables=variables, known_keys=keys)
        except ConfigSyntaxError as exc:
            raise ConfigError(f"{exc}", reason="bad_config_syntax") from None
        if known is None:
            known = frozenset(a.key for a in assignments)
        if kind == "conf.d":
            patterns = [p for a in assignments if a.key == "PROJECT_MATCH"
                        for p in (a.value if isinstance(a.value, tuple) else (a.value,))]
            if not patterns:
                merged.warnings.append(f"{path}: no PROJECT_MATCH=(…) — this conf.d file "
                                       "applies to no project and was ignored")
                continue
            if not _project_matches(patterns, project_dir):
                continue
        merged.files.append(path)
        for item in assignments:
            if item.key == "PROJECT_MATCH" or item.key.startswith("AGENT_"):
                continue   # conf.d and profile keys, not sandbox settings
            if item.key in LEGACY:
                try:
                    ours, warning = translate(item.key, item.value)
                except LegacyValueError as exc:
                    raise ConfigError(f"{path}:{item.line}: {exc} — the value is not "
                                      "valid. Fix or remove it (`agent-sandbox config "
                                      "migrate` shows the file in current terms).",
                                      reason="bad_config") from None
                if item.key not in warned_legacy:
                    warned_legacy.add(item.key)
                    merged.warnings.append(f"{path}:{item.line}: {warning}")
                for key, value in ours:
                    if key == REMOVE_HOSTS:
                        merged.remove_hosts(kind, value, f"{path}:{item.line}")
                    else:
                        merged.assign(kind, key, value, f"{path}:{item.line}")
                continue
            value = item.value
            if item.append:
                previous = merged.raw.get(item.key, ())
                if isinstance(previous, str):
                    previous = (previous,) if previous else ()
                value = tuple(previous) + tuple(value)
            merged.assign(kind, item.key, value, f"{path}:{item.line}")
    for origin, key, value in overrides:
        merged.assign(origin, key, value, origin)
    return merged


def env_overrides(environ: dict[str, str]) -> list[tuple[str, str, str]]:
    return [("env", key, environ[key]) for key in ENV_OVERRIDES if key in environ]


def load_settings(*, home: str, user: str, environ: dict[str, str],
                  flags: dict[str, str] | None = None, admin_path: str = ADMIN_CONFIG,
                  project_dir: str | None = None, cache: bool = True,
                  profile=None) -> Settings:
    layers = gather_layers(home=home, user=user, admin_path=admin_path, profile=profile)
    overrides = env_overrides(environ) + [("flag", k, v) for k, v in (flags or {}).items()]
    # The project as spelt and as it really is: PROJECT_MATCH decides on both
    # (`--project-dir .`, a symlink retargeted since, are the same string).
    real = os.path.realpath(project_dir) if project_dir else None
    inputs = (__version__, home, user, tuple(layers), tuple(overrides), project_dir, real)
    # One cache file per install and profile: two installs of the same
    # version (a site's old and new one, a benchmark's baseline), or a user
    # alternating `agent-sandbox claude` and `agent-sandbox run`, would
    # otherwise evict each other's entry on every launch and pay pydantic's
    # import (~100 ms) each time.
    from zlib import crc32

    install = f"{crc32(defaults_path().encode()):08x}"
    kind = f"-{crc32(profile.name.encode()):08x}" if profile is not None else ""
    cache_file = os.path.join(state_dir(home), "cache", f"config-{install}{kind}.marshal")
    if cache:
        cached = load_cache(cache_file, inputs)
        if cached is not None:
            return Settings.of(*cached)
    merged = merge(layers, home=home, user=user, overrides=overrides, project_dir=project_dir)
    from agent_sandbox.config.model import validate  # pydantic: only on a cache miss

    values = validate(merged.raw, merged.origins)
    result = (values, merged.origins, tuple(merged.files), merged.locks,
              tuple(merged.warnings))
    if cache:
        store_cache(cache_file, inputs, result)
    return Settings.of(*result)


def load_cache(path: str, inputs):
    """The cached result for exactly these inputs, else None. marshal is the
    fastest reader Python has. These caches decide a launch as much as a plan
    file does (the configuration, the seccomp program, the bound-file
    verdict, the backend probe), so the plan cache's rule applies: only a
    regular file of this user's that no one else can write, in a directory
    with the same property — then no one else can have put it there (a
    directory swapped in above must be the user's own and hold the user's
    files too). Anything else — foreign, writable by others, a symlink,
    corrupt — is a miss, never an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not (_own(os.fstat(handle.fileno()), stat.S_ISREG)
                    and _own(os.lstat(os.path.dirname(path)), stat.S_ISDIR)):
                return None
            stored_inputs, result = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return result if stored_inputs == inputs else None


def _own(info, kind) -> bool:
    """This user's, of the right kind, and writable by no one else."""
    return (kind(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def store_cache(path: str, inputs, result) -> None:
    """Best effort: a launch never fails because the cache cannot be written."""
    try:
        directory = os.path.dirname(path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077:
            # Made as a parent under umask 002 (the plan cache's makedirs):
            # private, or load_cache would never trust what is stored here.
            os.chmod(directory, 0o700)
        temp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as handle:
            marshal.dump((inputs, result), handle)
        os.replace(temp, path)
    except (OSError, ValueError):
        pass
