"""Admin floors: which way is "stricter" for every security-relevant key.

An admin value is a floor. When a later layer (user file, conf.d, environment,
flag) assigns a key the admin set, `enforce` compares the two by the key's
rule below and keeps only what is at least as strict; what it drops is
reported as one warning naming the key, the value, where it came from and the
admin file:line that holds it. Pure: raw values in, (value, warnings) out.

Rules:
  ORDER        a scalar with a strictness order (strictest first)
  BOOL_TRUE    true is stricter (PRIVATE_TMP…); BOOL_FALSE: false is stricter
  KEEP         a list whose entries restrict (more blocked, more hidden): later
               layers may add entries, never remove an admin entry
  NARROW       a list whose entries permit (allowed parents, backends,
               partitions): later layers may only narrow it
  LIMIT        a number where lower is stricter and 0 means unlimited
  AT_LEAST     a number where higher is stricter (log retention)
  ADMIN_ONLY   a switch only the admin file turns on; other layers may turn it off
  CAP          ALLOWED_HOSTS: later layers may remove entries, add only what an
               admin ALLOWED_HOSTS_USER_MAY_ADD pattern covers (config/network.py)
Keys not listed are not locked: their admin value is a default users may change.
"""
from __future__ import annotations

from agent_sandbox.names import NETWORK_MODES

ORDER = {
    "HOME_ACCESS": ("restricted", "tmpwrite", "read", "write"),
    "SLURM_SCOPE": ("session", "project", "user", "none"),
    "NETWORK_MODE": NETWORK_MODES,
    "JOB_NETWORK_MODE": NETWORK_MODES,
    "CHAPERON_LOG_LEVEL": ("debug", "info", "warning", "error"),
    # boundfiles.MODES: a file not bound at all < only its secret lines blanked < unchecked
    "SECRETS_IN_BOUND_FILES": ("skip", "blank", "off"),
}
BOOL_TRUE = ("PRIVATE_TMP", "PRIVATE_IPC", "PRIVATE_MOUNTS", "FILTER_PASSWD", "SECCOMP", "API_KEY_BROKERING")
BOOL_FALSE = ("CHAPERON",)
KEEP = ("BLOCKED_FILES", "EXTRA_BLOCKED_PATHS", "DENIED_WRITABLE_PATHS", "PROTECTED_PATHS",
        "DEVICES_BLACKLIST", "BLOCKED_ENV_VARS", "BLOCKED_ENV_PATTERNS",
        "SECCOMP_EXTRA_DENY", "REQUIRE")
NARROW = ("ALLOWED_PROJECT_PARENTS", "ALLOWED_BACKENDS", "SLURM_ALLOWED_PARTITIONS")
LIMIT = ("SLURM_MAX_JOBS",)
AT_LEAST = ("CHAPERON_LOG_RETAIN_DAYS",)
# Switches only the admin file (or the shipped files) may turn on; any other
# layer may only turn them off. The choice is the site's.
ADMIN_ONLY = ("SLURM_ALLOW_MAIL", "JOB_ALLOW_WEAKER_BACKEND", "LANDLOCK_ALLOWLIST_PARTIAL",
              "SLURM_BOUNDARY_OPTIONAL")
# Values only the admin file (or the shipped files) may set at all: which Slurm
# the chaperon talks to is the site's (a user picks another cluster through the
# SLURM_CONF of their own shell, outside any sandbox).
ADMIN_VALUES = ("SLURM_CONF_PATH", "BWRAP_PATH", "FIREJAIL_PATH", "UNSHARE_PATH")
CAP = ("ALLOWED_HOSTS",)
# Lists only the admin file (or the shipped files) sets; any other layer's
# assignment is ignored with a warning.
ADMIN_LISTS = ("ALLOWED_HOSTS_USER_MAY_ADD", "SLURM_CONF_OWNERS")
LOCKABLE = tuple(ORDER) + BOOL_TRUE + BOOL_FALSE + KEEP + NARROW + LIMIT + AT_LEAST + CAP

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _as_list(value) -> tuple:
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(value)


def as_bool(value):
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    return None   # not a boolean: validation will name it


def _as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _shown(value) -> str:
    return f"({' '.join(value)})" if isinstance(value, tuple) else str(value)


def _within(path: str, parent: str) -> bool:
    path, parent = path.rstrip("/") or "/", parent.rstrip("/") or "/"
    return path == parent or path.startswith(parent + "/") or parent == "/"


def enforce(key: str, admin, candidate, *, admin_origin: str, origin: str):
    """Return (value to use, warning or None) for `candidate` assigned to a key
    the admin set to `admin`."""
    def dropped(what: str, kept) -> tuple:
        return kept, (f"{key}: {what} from {origin} ignored — the site admin's "
                      f"{key}={_shown(admin)} ({admin_origin}) is a floor")

    if key in ORDER:
        order = ORDER[key]
        if candidate in order and admin in order and order.index(candidate) > order.index(admin):
            return dropped(f"{candidate} (weaker)", admin)
        return candidate, None
    if key in BOOL_TRUE or key in BOOL_FALSE:
        strict = key in BOOL_TRUE
        if as_bool(admin) is strict and as_bool(candidate) is (not strict):
            return dropped(f"{key}={candidate}", admin)
        return candidate, None
    if key in KEEP:
        wanted = _as_list(candidate)
        missing = tuple(e for e in _as_list(admin) if e not in wanted)
        if missing:
            return dropped(f"removing {_shown(missing)}", wanted + missing)
        return candidate, None
    if key in NARROW:
        allowed = _as_list(admin)
        if not allowed and key == "SLURM_ALLOWED_PARTITIONS":
            return candidate, None          # the admin allows any partition
        wanted = _as_list(candidate)
        if key == "ALLOWED_PROJECT_PARENTS":
            kept = tuple(e for e in wanted if any(_within(e, a) for a in allowed))
        else:
            kept = tuple(e for e in wanted if e in allowed)
        extra = tuple(e for e in wanted if e not in kept)
        if extra or (wanted == () and allowed):
            return dropped(f"widening by {_shown(extra) or '()'}", kept or allowed)
        return candidate, None
    if key in LIMIT:
        limit, wanted = _as_int(admin), _as_int(candidate)
        if limit and wanted is not None and (wanted == 0 or wanted > limit):
            return dropped(f"{key}={candidate}", admin)
        return candidate, None
    if key in AT_LEAST:
        floor, wanted = _as_int(admin), _as_int(candidate)
        if floor is not None and wanted is not None and wanted < floor:
            return dropped(f"{key}={candidate}", admin)
        return candidate, None
    return candidate, None


def drop_allowed_blocked(allowed, admin_blocked, *, admin_origin: str, origin: str):
    """ALLOWED_ENV_VARS survives patterns by design, but never an exact name
    the admin blocks."""
    wanted = _as_list(allowed)
    clash = tuple(n for n in wanted if n in _as_list(admin_blocked))
    if not clash:
        return allowed, None
    kept = tuple(n for n in wanted if n not in clash)
    return kept, (f"ALLOWED_ENV_VARS: {_shown(clash)} from {origin} ignored — the site "
                  f"admin blocks it in BLOCKED_ENV_VARS ({admin_origin})")
