"""ALLOWED_HOSTS in the configuration: validation with file:line, the origin
of every entry, and the admin cap (docs/network.md, "Configuration").

The egress proxy decides with egress.hosts (one parser for the entry syntax,
shared with the proxy, imported lazily: config loading pays for it only when
the configuration changed). This module adds what only the configuration
knows:

* which file and line each entry came from (a rule the proxy or `explain
  --host` names is "pypi.org (conf/sandbox.conf:97)"); kept in
  Settings.origins under HOST_ORIGINS, a dict entry → origin, because entries
  of one list come from several layers (`+=`);
* the admin cap. When the admin file sets ALLOWED_HOSTS, that list is the most
  any later layer (user file, conf.d, …) may allow: such a layer may remove
  entries, and may add an entry only when an admin
  ALLOWED_HOSTS_USER_MAY_ADD pattern covers it (`*.example.org` covers
  `git.example.org` and `*.lab.example.org`; `10.0.0.0/8` covers
  `10.1.2.0/24`; a pattern with `:port` covers that port only, one without
  covers entries without a port). Anything else is dropped with a warning
  naming the admin file:line. When the admin does not set ALLOWED_HOSTS, the
  list is not capped.

Pure: text in, values and warnings out.
"""
from __future__ import annotations

# Settings.origins key holding {entry: origin} for ALLOWED_HOSTS.
HOST_ORIGINS = "ALLOWED_HOSTS[]"
HOST_KEYS = ("ALLOWED_HOSTS", "ALLOWED_HOSTS_USER_MAY_ADD")


def as_list(value) -> tuple:
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(value)


def check(key: str, entries, origin: str) -> None:
    """Raise ConfigError naming `origin` (file:line) for the first entry the
    proxy's parser refuses."""
    from egress.hosts import parse_entry

    from agent_sandbox.errors import ConfigError

    for entry in as_list(entries):
        try:
            parse_entry(entry, origin)
        except ValueError as exc:
            raise ConfigError(
                f"{origin}: {key} entry {entry!r} is invalid — {exc}. Entries are a host "
                "name (pypi.org), a *.suffix pattern (*.githubusercontent.com), either with "
                "an optional :port, or an IP address or CIDR range (10.0.0.0/8, "
                "[fd00::]/8).", reason="bad_config") from None


def split(entry: str) -> tuple[str, object, int | None]:
    """(kind, value, port) of an entry's text: kind is "name", "suffix" or
    "net" (value an ip_network). ValueError for what it cannot read (the
    entry was validated by egress.hosts already; this is only for covering)."""
    import ipaddress   # only when the admin caps the list

    text = entry.strip().lower()
    port = None
    if text.startswith("["):                      # [v6], [v6]/len, [v6]:port
        address, _, rest = text[1:].partition("]")
        if rest.startswith("/"):
            return "net", ipaddress.ip_network(f"{address}{rest}", strict=False), None
        if rest.startswith(":"):
            port = int(rest[1:])
        return "net", ipaddress.ip_network(address), port
    if "/" in text:
        return "net", ipaddress.ip_network(text, strict=False), None
    if text.count(":") == 1:
        text, _, number = text.partition(":")
        port = int(number)
    try:
        return "net", ipaddress.ip_network(text), port
    except ValueError:
        pass
    if text.startswith("*."):
        return "suffix", text[2:].rstrip("."), port
    return "name", text.rstrip("."), port


def covers(pattern: str, entry: str) -> bool:
    """Does the admin's ALLOWED_HOSTS_USER_MAY_ADD `pattern` allow a user to
    add `entry`?"""
    try:
        p_kind, p_value, p_port = split(pattern)
        e_kind, e_value, e_port = split(entry)
    except ValueError:
        return False
    if p_port != e_port:
        return False
    if p_kind == "net":
        return (e_kind == "net" and e_value.version == p_value.version
                and e_value.subnet_of(p_value))
    if p_kind == "name":
        return e_kind == "name" and e_value == p_value
    # a suffix pattern: subdomains, and narrower suffix patterns
    return e_kind in ("name", "suffix") and (
        e_value.endswith("." + p_value) or (e_kind == "suffix" and e_value == p_value))


def cap(admin, may_add, candidate, *, admin_origin: str, origin: str):
    """(value to use, warning or None) for `candidate` assigned to
    ALLOWED_HOSTS after the admin capped it at `admin`."""
    allowed = as_list(admin)
    wanted = as_list(candidate)
    kept = tuple(e for e in wanted
                 if e in allowed or any(covers(p, e) for p in as_list(may_add)))
    extra = tuple(e for e in wanted if e not in kept)
    if not extra:
        return candidate, None
    patterns = as_list(may_add)
    how = (f"only entries matching ALLOWED_HOSTS_USER_MAY_ADD=({' '.join(patterns)}) may be "
           "added" if patterns else "entries may only be removed")
    return kept, (f"ALLOWED_HOSTS: adding ({' '.join(extra)}) from {origin} ignored — the site "
                  f"admin caps the list at {admin_origin}; {how}")


def rules(settings) -> list[dict]:
    """The proxy's rules (spec "rules"): every entry with the origin that put it there."""
    origins = settings.origins.get(HOST_ORIGINS) or {}
    fallback = settings.origins.get("ALLOWED_HOSTS", "default")
    return [{"entry": e, "origin": origins.get(e, fallback)} for e in settings.ALLOWED_HOSTS]
