"""Validation of the configuration: a pydantic model with a field per
sandbox.conf key, derived from the typed `settings.Settings` (the one list of
keys) plus the checks below.

The parser (confsyntax) yields strings and tuples of strings; the layer merge
(confload) decides which value wins; this module turns the winning raw values
into typed, checked values. Errors name the key, the value and what is allowed.

Importing pydantic costs tens of milliseconds, so this module is only imported
when the configuration changed since the last launch (confload caches the
validated result); nothing on the hot path imports it directly.
"""
from __future__ import annotations

import fnmatch
import os
import re
import typing
from typing import Any

from agent_sandbox.config.settings import KEYS, Settings
from agent_sandbox.names import GUARANTEES as GUARANTEE_NAMES
from pydantic import BaseModel, ConfigDict, ValidationError, create_model, field_validator

GUARANTEES = tuple(GUARANTEE_NAMES)
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SYSCALL = re.compile(r"^[a-z_][a-z0-9_]*$")


class _Validators(BaseModel):
    """The checks of every key; the fields come from settings.Settings."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    @field_validator("*", mode="before", check_fields=False)
    @classmethod
    def _shape(cls, value: Any, info) -> Any:
        """A list key given a scalar becomes a one-element list (as in bash);
        a scalar key given a list is an error; booleans accept true/false."""
        field = cls.model_fields[info.field_name]
        is_list = getattr(field.annotation, "__origin__", None) is tuple or str(
            field.annotation).startswith("tuple")
        if is_list:
            if isinstance(value, str):
                return () if value == "" else (value,)
            return value
        if isinstance(value, (tuple, list)):
            raise ValueError("a single value is expected here, not a list (…)")
        if field.annotation is bool and isinstance(value, str):
            lowered = value.lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError("expected true or false")
        return value

    @field_validator("REQUIRE", check_fields=False)
    @classmethod
    def _known_guarantees(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [v for v in value if v not in GUARANTEES]
        if unknown:
            raise ValueError(f"unknown guarantee {unknown[0]!r}; known: {' '.join(GUARANTEES)}")
        return value

    @field_validator("ALLOWED_PROJECT_PARENTS", "EXTRA_BLOCKED_PATHS", "EXTRA_WRITABLE_PATHS",
                     "DENIED_WRITABLE_PATHS", "READONLY_MOUNTS", check_fields=False)
    @classmethod
    def _absolute(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not an absolute path")
        return tuple(os.path.normpath(p) for p in value)

    @field_validator("HOME_READONLY", "HOME_WRITABLE", "HOME_SEEDED_FILES", "BLOCKED_FILES", check_fields=False)
    @classmethod
    def _home_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            if not entry or ".." in entry.split("/"):
                raise ValueError(f"{entry!r}: home entries are paths relative to $HOME "
                                 "(or absolute paths under it) without '..'")
        return value

    @field_validator("DEVICES", "DEVICES_BLACKLIST", check_fields=False)
    @classmethod
    def _device_globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for glob in value:
            if not glob.startswith("/dev/"):
                raise ValueError(f"{glob!r}: device globs must start with /dev/")
        return value

    @field_validator("BLOCKED_ENV_VARS", "ALLOWED_ENV_VARS", check_fields=False)
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @field_validator("BLOCKED_ENV_PATTERNS", check_fields=False)
    @classmethod
    def _env_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            body = pattern[:-2] if pattern.endswith("/i") else pattern
            if not body or "/" in body:
                raise ValueError(f"{pattern!r}: a shell glob, optionally with a /i suffix")
            fnmatch.translate(body)
        return value

    @field_validator("SANDBOX_ENV", check_fields=False)
    @classmethod
    def _assignments(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            name, sep, _ = item.partition("=")
            if not sep or not _ENV_NAME.match(name):
                raise ValueError(f"{item!r}: expected NAME=value")
        return value

    @field_validator("SECCOMP_EXTRA_DENY", check_fields=False)
    @classmethod
    def _syscall_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _SYSCALL.match(name):
                raise ValueError(f"{name!r} is not a syscall name")
        return value

    @field_validator("SLURM_CONF_PATH", "BWRAP_PATH", "FIREJAIL_PATH", "UNSHARE_PATH",
                     check_fields=False)
    @classmethod
    def _absolute_or_empty(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError(f"{value!r} is not an absolute path")
        return os.path.normpath(value) if value else value

    @field_validator("CHAPERON_LOG_RETAIN_DAYS", "SLURM_MAX_JOBS", check_fields=False)
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be 0 or more")
        return value


    @field_validator("SANDBOX_PROMPT", check_fields=False)
    @classmethod
    def _plain_prompt(cls, value: str) -> str:
        """Printable text only: it becomes part of PS1 (which bash expands:
        `$(…)`, backquotes, backslash escapes) and of a terminal title."""
        bad = [c for c in value if c in "$`\\" or not c.isprintable()]
        if bad:
            raise ValueError(f"{bad[0]!r} is not allowed here: give plain printable text "
                             "(no $, backquote, backslash or control characters)")
        if len(value) > 64:
            raise ValueError("at most 64 characters")
        return value


def _model():
    hints = typing.get_type_hints(Settings)
    fields = {name: (hints[name], Settings._field_defaults[name]) for name in KEYS}
    return create_model("SandboxConfig", __base__=_Validators, **fields)


SandboxConfig = _model()
KNOWN_KEYS = frozenset(SandboxConfig.model_fields)


def validate(raw: dict[str, Any], origins: dict[str, str]) -> dict[str, Any]:
    """Validate merged raw values; return plain Python values (tuples, bools,
    ints, strings) for every key. Raise ConfigError naming key, value, origin."""
    from agent_sandbox.errors import ConfigError

    try:
        model = SandboxConfig(**raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else "?"
        where = origins.get(key, "default")
        value = raw.get(key)
        shown = " ".join(value) if isinstance(value, tuple) else value
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{where}: {key}={shown!r} is invalid — {message}") from None
    return {key: getattr(model, key) for key in SandboxConfig.model_fields}
