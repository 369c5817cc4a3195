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

from . import __version__
from .confsyntax import ConfigSyntaxError, parse_config
from .errors import ConfigError

ADMIN_CONFIG = "/etc/agent-sandbox/sandbox.conf"
# Keys the environment may override (SPEC §4 layer 5).
ENV_OVERRIDES = ("SANDBOX_BACKEND", "HOME_ACCESS", "SLURM_SCOPE", "PRIVATE_TMP",
                 "PRIVATE_IPC", "FILTER_PASSWD", "NETWORK_MODE", "SANDBOX_QUIET")


def defaults_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, "conf", "sandbox.conf")
    if os.path.exists(installed):
        return installed
    return os.path.join(os.path.dirname(here), "conf", "sandbox.conf")


def user_config_dir(home: str) -> str:
    return os.path.join(home, ".config", "agent-sandbox")


def state_dir(home: str) -> str:
    return os.path.join(home, ".local", "state", "agent-sandbox")


class Settings:
    """The effective configuration: validated values plus where each came from."""

    __slots__ = ("values", "origins", "files")

    def __init__(self, values: dict, origins: dict[str, str], files: tuple[str, ...]):
        self.values = values
        self.origins = origins
        self.files = files

    def __getattr__(self, key: str):
        try:
            return self.values[key]
        except KeyError:
            raise AttributeError(key) from None

    def replace(self, **changes) -> "Settings":
        values = dict(self.values)
        values.update(changes)
        return Settings(values, self.origins, self.files)


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


def gather_layers(*, home: str, user: str, admin_path: str = ADMIN_CONFIG
                  ) -> list[tuple[str, str]]:
    """(path, text) of every config file that applies, in layer order."""
    defaults = defaults_path()
    text = _read(defaults)
    if text is None:
        raise ConfigError(f"the shipped defaults {defaults} are missing — the installation "
                          "is broken. Reinstall agent-sandbox.")
    layers = [(defaults, text)]
    admin = _read_admin(admin_path)
    if admin is not None:
        layers.append((admin_path, admin))
    user_file = os.path.join(user_config_dir(home), "sandbox.conf")
    user_text = _read(user_file)
    if user_text is not None:
        layers.append((user_file, user_text))
    return layers


def merge(layers: list[tuple[str, str]], *, home: str, user: str,
          overrides: list[tuple[str, str, str]]) -> tuple[dict, dict[str, str]]:
    """Parse and merge layers; `overrides` are (origin, key, value) applied last.
    Returns raw values and the origin ("file:line", "env", "flag") of each key."""
    variables = {"HOME": home, "USER": user}
    known = None   # the shipped defaults assign every key, so they are the key list
    raw: dict = {}
    origins: dict[str, str] = {}
    for path, text in layers:
        try:
            assignments = parse_config(text, file=path, variables=variables, known_keys=known)
            if known is None:
                known = frozenset(a.key for a in assignments)
        except ConfigSyntaxError as exc:
            raise ConfigError(f"{exc}", reason="bad_config_syntax") from None
        for item in assignments:
            value = item.value
            if item.append:
                previous = raw.get(item.key, ())
                if isinstance(previous, str):
                    previous = (previous,) if previous else ()
                value = tuple(previous) + tuple(value)
            raw[item.key] = value
            origins[item.key] = f"{path}:{item.line}"
    for origin, key, value in overrides:
        raw[key] = value
        origins[key] = origin
    return raw, origins


def env_overrides(environ: dict[str, str]) -> list[tuple[str, str, str]]:
    return [("env", key, environ[key]) for key in ENV_OVERRIDES if key in environ]


def load_settings(*, home: str, user: str, environ: dict[str, str],
                  flags: dict[str, str] | None = None, admin_path: str = ADMIN_CONFIG,
                  project_dir: str | None = None, cache: bool = True) -> Settings:
    layers = gather_layers(home=home, user=user, admin_path=admin_path)
    overrides = env_overrides(environ) + [("flag", k, v) for k, v in (flags or {}).items()]
    inputs = (__version__, home, user, tuple(layers), tuple(overrides))
    cache_file = os.path.join(state_dir(home), "cache", "config.marshal")
    files = tuple(path for path, _ in layers)
    if cache:
        cached = load_cache(cache_file, inputs)
        if cached is not None:
            return Settings(cached[0], cached[1], files)
    raw, origins = merge(layers, home=home, user=user, overrides=overrides)
    from .confmodel import validate  # pydantic: only on a cache miss

    values = validate(raw, origins)
    if cache:
        store_cache(cache_file, inputs, (values, origins))
    return Settings(values, origins, files)


def load_cache(path: str, inputs):
    """The cached result for exactly these inputs, else None. marshal is the
    fastest reader Python has; an unreadable or foreign file is a miss."""
    try:
        with open(path, "rb") as handle:
            stored_inputs, result = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return result if stored_inputs == inputs else None


def store_cache(path: str, inputs, result) -> None:
    """Best effort: a launch never fails because the cache cannot be written."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        temp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            marshal.dump((inputs, result), handle)
        os.replace(temp, path)
    except (OSError, ValueError):
        pass
