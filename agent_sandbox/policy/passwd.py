"""Reduced /etc/passwd, /etc/group and /etc/nsswitch.conf for FILTER_PASSWD.

Why: on a shared cluster the login node resolves accounts through LDAP/SSSD
(or NIS, winbind, ...), so ``getent passwd`` / ``getent group`` run by an
agent list every person on the machine, and group member lists say who works
with whom.  That is a directory of names an untrusted agent has no need for.
With ``FILTER_PASSWD=true`` the sandbox gets its own copies of the three
files, bound read-only over the real ones (SPEC §4):

* passwd: system accounts (uid <= SYS_UID_MAX), ``nobody`` (uid 65534) and
  the calling user, whose entry is appended from the password database when
  the local file does not have it (LDAP user).  Every other line, comments,
  blank and malformed lines (including NIS ``+``/``-`` compat entries) go.
* group: system groups (gid <= SYS_GID_MAX), ``nogroup``/``nobody``
  (gid 65534) and the user's primary and supplementary groups, LDAP ones
  appended from caller-built entries.  In every kept group the member list
  is cut down to the user alone (or emptied): members are other people.
* nsswitch.conf: ``passwd``, ``group``, ``shadow``, ``gshadow``,
  ``initgroups`` and ``netgroup`` use ``files`` only; every other line
  (hosts, networks, services, comments, ...) is kept as it is.

This only controls what glibc consults through nsswitch.conf.  It does not by
itself stop ``getent -s sss passwd`` (talks to the SSSD pipes directly), an
nscd socket (glibc asks nscd before nsswitch for single lookups) or
``ldapsearch`` over the network; the mount plan must keep those sockets out.

All functions are pure: the caller reads the files and the password database
(``pwd``/``grp``/``os.getgrouplist``) and writes the results.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

__all__ = [
    "NOBODY_ID",
    "DEFAULT_SYS_ID_MAX",
    "FILES_ONLY_DATABASES",
    "filter_passwd",
    "filter_group",
    "filter_nsswitch",
    "sys_id_max",
]

NOBODY_ID = 65534
"""uid of ``nobody`` and gid of ``nogroup`` (``nobody`` on RHEL)."""

DEFAULT_SYS_ID_MAX = 999
"""shadow-utils default: SYS_UID_MAX = UID_MIN - 1 = 999."""

FILES_ONLY_DATABASES = frozenset(
    {"passwd", "group", "shadow", "gshadow", "initgroups", "netgroup"}
)
"""nsswitch databases that may name people; rewritten to ``files``."""

_ADDED_IF_ABSENT = ("passwd", "group")

_ID_RE = re.compile(r"[0-9]+")
_NSS_LINE_RE = re.compile(r"^\s*([^\s:#]+)\s*:([ \t]*)")


def _parse_id(field: str) -> int | None:
    return int(field) if _ID_RE.fullmatch(field) else None


def _valid_name(name: str) -> bool:
    # "+name"/"-name"/"+" are NIS compat markers, not accounts.  Names with
    # spaces are left alone: SSSD/AD group names ("domain users") have them.
    return bool(name) and name[0] not in "+-" and name.strip() == name


def _content_lines(text: str) -> Iterable[str]:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield line


def _parse_passwd_line(line: str) -> tuple[str, int] | None:
    """(name, uid) of a well-formed 7-field passwd line, else None."""
    fields = line.split(":")
    if len(fields) != 7 or not _valid_name(fields[0]):
        return None
    uid, gid = _parse_id(fields[2]), _parse_id(fields[3])
    if uid is None or gid is None:
        return None
    return fields[0], uid


def _parse_group_line(line: str) -> tuple[str, str, int, list[str]] | None:
    """(name, password, gid, members) of a 4-field group line, else None."""
    fields = line.split(":")
    if len(fields) != 4 or not _valid_name(fields[0]):
        return None
    gid = _parse_id(fields[2])
    if gid is None:
        return None
    members = [m.strip() for m in fields[3].split(",") if m.strip()]
    return fields[0], fields[1], gid, members


def _join(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def filter_passwd(
    text: str,
    *,
    uid: int,
    sys_uid_max: int = DEFAULT_SYS_ID_MAX,
    user_entry: str | None = None,
) -> str:
    """Return /etc/passwd reduced to system accounts, nobody and the user.

    ``text`` is the host's /etc/passwd.  Lines kept, in file order: uid <=
    ``sys_uid_max``, uid 65534, and the user's own line (uid == ``uid``; when
    several lines carry that uid, the one named like ``user_entry``, else the
    first).  If the file has no line for ``uid``, ``user_entry``
    (``name:x:uid:gid:gecos:dir:shell`` from ``pwd.getpwuid``) is appended.
    No name appears twice: the user's line wins over a same-named line,
    otherwise the first line wins.  Comments, blank and malformed lines are
    dropped.

    Raises ValueError if ``user_entry`` is malformed or is not for ``uid``.
    """
    entry_name: str | None = None
    if user_entry is not None:
        user_entry = user_entry.rstrip("\r\n")
        parsed = _parse_passwd_line(user_entry)
        if parsed is None:
            raise ValueError(f"malformed passwd entry for the user: {user_entry!r}")
        if parsed[1] != uid:
            raise ValueError(f"user entry has uid {parsed[1]}, expected {uid}: {user_entry!r}")
        entry_name = parsed[0]

    entries = [
        (line, parsed)
        for line in _content_lines(text)
        if (parsed := _parse_passwd_line(line)) is not None
    ]

    # The user's own line in the local file, if any.
    own = [i for i, (_, (_, u)) in enumerate(entries) if u == uid]
    self_index = next((i for i in own if entries[i][1][0] == entry_name), own[0] if own else None)

    if self_index is not None:
        self_name = entries[self_index][1][0]
        appended = None
    else:
        self_name = entry_name
        appended = user_entry

    out: list[str] = []
    seen: set[str] = set()
    for i, (line, (name, line_uid)) in enumerate(entries):
        if i == self_index:
            pass
        elif line_uid == uid or name == self_name:
            continue  # only one line for the user, and nobody else under that name
        elif not (line_uid <= sys_uid_max or line_uid == NOBODY_ID):
            continue
        if name in seen:
            continue
        seen.add(name)
        out.append(line)
    if appended is not None:
        out.append(appended)
    return _join(out)


def filter_group(
    text: str,
    *,
    user: str,
    gids: Collection[int],
    sys_gid_max: int = DEFAULT_SYS_ID_MAX,
    extra_entries: Iterable[str] = (),
) -> str:
    """Return /etc/group reduced to system groups and the user's groups.

    ``text`` is the host's /etc/group.  Kept, in file order: gid <=
    ``sys_gid_max``, gid 65534 and every gid in ``gids`` (the user's primary
    and supplementary groups).  Each kept line's member list becomes
    ``user`` if the user was listed, else empty.  Gids from ``gids`` that the
    file lacks are taken from ``extra_entries`` (``name:x:gid:[members]``
    lines built by the caller from ``grp.getgrgid``), appended in the order
    given, members reduced the same way; extra entries for other gids, for
    gids already present or with a name already used are ignored.  No name
    appears twice (first wins).  Comments, blank and malformed lines are
    dropped.

    Raises ValueError if an extra entry is malformed.
    """
    wanted = frozenset(gids)

    def render(name: str, password: str, gid: int, members: list[str]) -> str:
        return f"{name}:{password}:{gid}:{user if user in members else ''}"

    out: list[str] = []
    seen_names: set[str] = set()
    seen_gids: set[int] = set()
    for line in _content_lines(text):
        parsed = _parse_group_line(line)
        if parsed is None:
            continue
        name, password, gid, members = parsed
        if not (gid <= sys_gid_max or gid == NOBODY_ID or gid in wanted):
            continue
        if name in seen_names:
            continue
        seen_names.add(name)
        seen_gids.add(gid)
        out.append(render(name, password, gid, members))

    for entry in extra_entries:
        entry = entry.rstrip("\r\n")
        parsed = _parse_group_line(entry)
        if parsed is None:
            raise ValueError(f"malformed group entry: {entry!r}")
        name, password, gid, members = parsed
        if gid not in wanted or gid in seen_gids or name in seen_names:
            continue
        seen_names.add(name)
        seen_gids.add(gid)
        out.append(render(name, password, gid, members))
    return _join(out)


def filter_nsswitch(text: str) -> str:
    """Return nsswitch.conf with the account databases set to ``files``.

    Lines for the databases in FILES_ONLY_DATABASES (matched
    case-insensitively, with or without space after the colon) keep their
    layout up to the sources, which become ``files`` — sss, ldap, systemd, nis, winbind, compat, ... and any
    ``[STATUS=action]`` or trailing comment go.  All other lines, comments
    and blank lines are kept unchanged.  ``passwd: files`` and
    ``group: files`` are appended when absent.
    """
    out: list[str] = []
    present: set[str] = set()
    for line in text.splitlines():
        match = _NSS_LINE_RE.match(line)
        if match is not None and match.group(1).lower() in FILES_ONLY_DATABASES:
            db = match.group(1)
            present.add(db.lower())
            # keep the line's own layout up to the sources ("passwd:  ")
            out.append(match.group(0) + ("" if match.group(2) else " ") + "files")
        else:
            out.append(line)
    out.extend(f"{db}: files" for db in _ADDED_IF_ABSENT if db not in present)
    return _join(out)


def _parse_login_defs_number(value: str) -> int | None:
    # shadow-utils reads numbers with strtol(..., 0): 0x hex, leading-0 octal.
    value = value.strip('"')
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", value):
        return int(value[2:], 16)
    if re.fullmatch(r"0[0-7]+", value):
        return int(value[1:], 8)
    if _ID_RE.fullmatch(value):
        return int(value)
    return None


def sys_id_max(login_defs_text: str) -> tuple[int, int]:
    """(SYS_UID_MAX, SYS_GID_MAX) from /etc/login.defs text.

    Each is the SYS_*_MAX setting if valid, else the *_MIN setting minus one,
    else 999 (shadow-utils' own defaults).  The last valid setting of a key
    wins; comments and unparsable values are ignored.
    """
    settings: dict[str, int] = {}
    for line in _content_lines(login_defs_text):
        parts = line.split()
        if len(parts) < 2:
            continue
        number = _parse_login_defs_number(parts[1])
        if number is not None:
            settings[parts[0]] = number

    def resolve(kind: str) -> int:
        if f"SYS_{kind}_MAX" in settings:
            return settings[f"SYS_{kind}_MAX"]
        if settings.get(f"{kind}_MIN", 0) > 0:
            return settings[f"{kind}_MIN"] - 1
        return DEFAULT_SYS_ID_MAX

    return resolve("UID"), resolve("GID")
