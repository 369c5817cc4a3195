"""The effective configuration as one typed, frozen value: a field per
sandbox.conf key (the one list of keys, their types and defaults), and
beside the values where each came from, which keys an admin lock holds, and
the weakenings that were dropped.

Tools can follow a key from here to the argv (`settings.HOME_ACCESS` is a
typed field, not a dictionary lookup). Standard library only: a launch whose
configuration did not change builds Settings from the cache without
importing pydantic; config/model.py derives its validating pydantic model
from the fields below, so the key list exists once.
"""
from __future__ import annotations

from typing import Literal, NamedTuple

from agent_sandbox.names import BACKENDS

Backend = Literal["bwrap", "firejail", "landlock"]   # names.BACKENDS (a test checks)


class Settings(NamedTuple):
    """Every key of sandbox.conf with its type and built-in default (the
    shipped conf/sandbox.conf sets them all), then the provenance."""

    SANDBOX_BACKEND: Literal["auto", "bwrap", "firejail", "landlock"] = "auto"
    ALLOWED_BACKENDS: tuple[Backend, ...] = BACKENDS
    REQUIRE: tuple[str, ...] = ()
    # Admin only: the bwrap / firejail program to use ("" = the first on PATH
    # the user cannot write), e.g. one a site module provides.
    BWRAP_PATH: str = ""
    FIREJAIL_PATH: str = ""
    # Admin only: util-linux's unshare, which PRIVATE_MOUNTS runs bwrap under.
    UNSHARE_PATH: str = "/usr/bin/unshare"

    ALLOWED_PROJECT_PARENTS: tuple[str, ...] = ()

    HOME_ACCESS: Literal["tmpwrite", "restricted", "read", "write"] = "tmpwrite"
    HOME_READONLY: tuple[str, ...] = ()
    HOME_WRITABLE: tuple[str, ...] = ()
    HOME_SEEDED_FILES: tuple[str, ...] = ()

    BLOCKED_FILES: tuple[str, ...] = ()
    EXTRA_BLOCKED_PATHS: tuple[str, ...] = ()
    EXTRA_WRITABLE_PATHS: tuple[str, ...] = ()
    DENIED_WRITABLE_PATHS: tuple[str, ...] = ()
    PROTECTED_PATHS: tuple[str, ...] = ()

    READONLY_MOUNTS: tuple[str, ...] = ()

    PRIVATE_TMP: bool = True
    PRIVATE_IPC: bool = True
    PRIVATE_MOUNTS: bool = True     # bwrap: host mounts made after the start stay outside
    FILTER_PASSWD: bool = True
    NETWORK_MODE: Literal["open", "allowlist", "isolated"] = "open"   # names.NETWORK_MODES
    # NETWORK_MODE=allowlist (docs/network.md): the hosts the egress proxy lets
    # through, what a user may add under an admin cap, the mode of batch jobs,
    # API keys kept outside, landlock's weaker form accepted (admin only).
    ALLOWED_HOSTS: tuple[str, ...] = ()
    ALLOWED_HOSTS_USER_MAY_ADD: tuple[str, ...] = ()
    JOB_NETWORK_MODE: Literal["open", "allowlist", "isolated"] = "open"
    API_KEY_BROKERING: bool = True
    LANDLOCK_ALLOWLIST_PARTIAL: bool = False

    DEVICES: tuple[str, ...] = ()
    DEVICES_BLACKLIST: tuple[str, ...] = ()

    BLOCKED_ENV_VARS: tuple[str, ...] = ()
    BLOCKED_ENV_PATTERNS: tuple[str, ...] = ()
    ALLOWED_ENV_VARS: tuple[str, ...] = ()
    SANDBOX_ENV: tuple[str, ...] = ()
    SECRETS_IN_BOUND_FILES: Literal["blank", "skip", "off"] = "blank"

    SECCOMP: bool = True
    SECCOMP_EXTRA_DENY: tuple[str, ...] = ()

    SLURM_SCOPE: Literal["session", "project", "user", "none"] = "project"
    CHAPERON: bool = True
    CHAPERON_LOG_LEVEL: Literal["debug", "info", "warning", "error"] = "info"
    CHAPERON_LOG_RETAIN_DAYS: int = 7
    SLURM_ALLOWED_PARTITIONS: tuple[str, ...] = ()
    SLURM_MAX_JOBS: int = 0
    SLURM_ALLOW_MAIL: bool = False
    JOB_ALLOW_WEAKER_BACKEND: bool = False
    # Admin only: on a Slurm host, agent profiles and SANDBOX_BACKEND=auto may
    # run on a backend without slurm.boundary (launch/run.py implied_require).
    SLURM_BOUNDARY_OPTIONAL: bool = False
    SLURM_CONF_PATH: str = ""       # admin only: the site's slurm.conf ("" = Slurm's default)
    # Admin only: accounts besides root and the user that may own the site's
    # Slurm configuration (a site whose /etc/slurm belongs to SlurmUser).
    SLURM_CONF_OWNERS: tuple[str, ...] = ()

    ENABLED_AGENTS: tuple[str, ...] = ()
    SANDBOX_QUIET: bool = False
    # Interactive sessions: the prompt prefix and terminal-title tag ("" for none).
    SANDBOX_PROMPT: str = "[sandbox] "

    # Provenance (not configuration keys).
    origins: dict = {}         # key -> file:line | default | env | flag (never mutated)
    files: tuple = ()          # the files that were read
    locks: dict = {}           # key -> admin file:line holding it (never mutated)
    warnings: tuple = ()       # weakenings dropped, with the lock that held

    @classmethod
    def of(cls, values: dict, origins: dict, files=(), locks: dict | None = None,
           warnings=()) -> "Settings":
        return cls(**values, origins=origins, files=tuple(files), locks=locks or {},
                   warnings=tuple(warnings))

    @property
    def values(self) -> dict:
        """key -> value for every configuration key."""
        return {name: getattr(self, name) for name in KEYS}

    def replace(self, **changes) -> "Settings":
        return self._replace(**changes)


PROVENANCE = ("origins", "files", "locks", "warnings")
KEYS = tuple(name for name in Settings._fields if name not in PROVENANCE)
