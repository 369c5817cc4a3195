"""ALLOWED_HOSTS: entries → rules, and (rules, host, port, addresses) → decision.

Pure. Strategy: a host passes in two steps, and both must say yes.
1. The NAME (or the numeric address the client asked for) matches an entry:
   an exact name (`pypi.org`), a suffix pattern (`*.githubusercontent.com`:
   subdomains only, never the bare domain), or, for a numeric host, an
   address or CIDR range entry (`127.0.0.2/32`, `[fd00::]/8`). Ports are 443
   and 80 unless the entry names one (`host:8443`). `match` answers this
   step alone, before anything is resolved, so a name that matches nothing is
   never looked up (a DNS query is itself a channel out).
2. EVERY ADDRESS the proxy resolved for it (and will connect to) is public,
   or inside a range an entry lists explicitly. Loopback, private (RFC 1918,
   ULA), link-local (169.254.169.254), CGNAT, multicast, unspecified and
   reserved addresses are refused otherwise, so neither DNS rebinding nor a
   numeric IP reaches the cluster's internal services. An address range entry
   only permits addresses (on its ports: `10.5.0.0/16:443` admits a name
   resolving there on 443 only); a name still needs its own entry.

Numeric hosts are canonical or refused: `127.1`, `2130706433`, `0x7f.1` (what
inet_aton would turn into an address) are not names and not canonical
addresses, so they never match anything. IPv4-mapped IPv6 (`::ffff:10.0.0.1`),
NAT64 (64:ff9b::/96) and 6to4 addresses are judged by the IPv4 address they
reach.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from typing import NamedTuple, Union

DEFAULT_PORTS = frozenset({443, 80})
HOW_TO_ADD = "Add it to ALLOWED_HOSTS in ~/.config/agent-sandbox/sandbox.conf"
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_BRACKET_TAIL = re.compile(r"(/[0-9]{1,3})?(?::([^:]*))?")

Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]   # not `|`: Python 3.9


class Rule(NamedTuple):
    kind: str                 # "name" | "suffix" | "range"
    name: str                 # the host name, or the suffix with its leading dot
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    ports: frozenset[int]
    text: str                 # the entry as written
    origin: str               # file:line or profile name

    @property
    def label(self) -> str:
        return f"{self.text} ({self.origin})"


class Decision(NamedTuple):
    allowed: bool
    rule: str | None          # the entry that decided, with its origin
    reason: str               # one line a person can act on


# ------------------------------------------------------------------- syntax
def host_name(text: str) -> str | None:
    """`text` as a canonical host name (lower case, no trailing dot), or None
    when it is not one: bad characters, empty or long labels, a numeric last
    label, or any spelling inet_aton would read as an IPv4 address."""
    name = text.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > 253 or not name.isascii():
        return None
    labels = name.split(".")
    for label in labels:
        if not 0 < len(label) <= 63 or not set(label) <= _LABEL_CHARS:
            return None
        if label.startswith("-") or label.endswith("-"):
            return None
    if labels[-1].isdigit():
        return None
    try:
        socket.inet_aton(name)   # 0x7f000001, 017700000001: the resolver's numbers
        return None
    except OSError:
        return name


def address(text: str) -> Address | None:
    """A canonical numeric host (`10.0.0.1`, `::1`, `[::1]`) as an address,
    IPv4-mapped forms reduced to IPv4; None for anything else (zone ids,
    short or octal IPv4 spellings are not canonical)."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:
        return None
    try:
        value = ipaddress.ip_address(text)
    except ValueError:
        return None
    return value.ipv4_mapped or value if value.version == 6 else value


def _port(text: str, entry: str) -> frozenset[int]:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return frozenset({int(text)})


def parse_entry(text: str, origin: str) -> Rule:
    """One ALLOWED_HOSTS entry as a Rule; ValueError saying why it is not one."""
    entry = text.strip()
    if not entry:
        raise ValueError("an empty entry")
    ports = DEFAULT_PORTS
    if entry.startswith("["):                     # [v6], [v6]/len, [v6]:port, [v6]/len:port
        close = entry.find("]")
        if close < 0:
            raise ValueError(f"{entry!r}: a '[' without its ']'")
        host, rest = entry[1:close], entry[close + 1:]
        tail = _BRACKET_TAIL.fullmatch(rest)
        if tail is None:
            raise ValueError(f"{entry!r}: after ']' only '/LENGTH' and ':PORT' may follow")
        length, port = tail.group(1) or "", tail.group(2)
        if port is not None:
            ports = _port(port, entry)
        return _range(host + length, entry, ports, origin)
    if entry.count(":") >= 2:                     # a bare IPv6 address or range: no port
        return _range(entry, entry, ports, origin)
    host, colon, port = entry.partition(":")
    if colon:
        ports = _port(port, entry)
    if "/" in host or address(host) is not None:
        return _range(host, entry, ports, origin)
    pattern = host.startswith("*.")
    name = host_name(host[2:] if pattern else host)
    if name is None:
        raise ValueError(f"{entry!r} is not a host name, a '*.suffix' pattern, an address "
                         "or a CIDR range (numeric addresses in dotted form: 127.0.0.1)")
    if pattern:
        return Rule("suffix", "." + name, None, ports, entry, origin)
    return Rule("name", name, None, ports, entry, origin)


def _range(text: str, entry: str, ports: frozenset[int], origin: str) -> Rule:
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"{entry!r} is not an address or CIDR range: {exc}") from None
    if "/" not in text and address(text) is None:
        raise ValueError(f"{entry!r} is not a canonical address")
    if network.version == 6 and network.prefixlen >= 96 and \
            network.network_address.ipv4_mapped is not None:
        network = ipaddress.ip_network(
            f"{network.network_address.ipv4_mapped}/{network.prefixlen - 96}")
    return Rule("range", "", network, ports, entry, origin)


# ------------------------------------------------------------ address kinds
def address_kind(value: Address) -> str | None:
    """None for a public address, else what it is ('loopback', 'private', …)."""
    if value.version == 6:
        if value.ipv4_mapped is not None:
            return address_kind(value.ipv4_mapped)
        if value in _NAT64:
            return address_kind(ipaddress.IPv4Address(int(value) & 0xFFFFFFFF))
        if value.sixtofour is not None:
            kind = address_kind(value.sixtofour)
            if kind:
                return kind
    if value.is_unspecified:
        return "unspecified"
    if value.is_loopback:
        return "loopback"
    if value.is_link_local:
        return "link-local (cloud metadata)" if str(value) == "169.254.169.254" \
            else "link-local"
    if value.is_multicast:
        return "multicast"
    if value.version == 4 and value in _CGNAT:
        return "CGNAT"
    if value.version == 6 and value.is_site_local:
        return "site-local"
    if value.is_private:
        return "private" if value.version == 4 and _rfc1918(value) or \
            value.version == 6 and value in ipaddress.ip_network("fc00::/7") else "reserved"
    if not value.is_global or value.is_reserved:
        return "reserved"
    return None


def _rfc1918(value: ipaddress.IPv4Address) -> bool:
    return any(value in ipaddress.ip_network(n)
               for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


# ------------------------------------------------------------------ decide
def _where(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}"


def _printable(host: str) -> str:
    text = host[:80]
    return text if text.isprintable() and text.isascii() and " " not in text \
        else repr(text)


def match(rules, host: str, port: int) -> Decision:
    """Step 1: does an entry name this host and port? Nothing is resolved."""
    numeric = address(host)
    if numeric is not None:
        where = _where(str(numeric), port)
        for rule in rules:
            if rule.kind == "range" and numeric.version == rule.network.version \
                    and numeric in rule.network and port in rule.ports:
                return Decision(True, rule.label, f"{where} is inside {rule.label}")
        return Decision(False, None, f"{where} is not in ALLOWED_HOSTS — a numeric address "
                        f"passes only inside an address or CIDR entry. {HOW_TO_ADD} "
                        "(e.g. the address itself)")
    name = host_name(host)
    if name is None:
        return Decision(False, None, f"{_printable(host)}:{port} is not a valid host name "
                        "(a numeric address is accepted in canonical form only: 127.0.0.1, ::1)")
    where = _where(name, port)
    other_port = None
    for rule in _name_rules(rules, name):
        if port in rule.ports:
            return Decision(True, rule.label, f"{where} is allowed by {rule.label}")
        other_port = other_port or rule
    if other_port is not None:
        return Decision(False, other_port.label,
                        f"{where} is not in ALLOWED_HOSTS — {other_port.label} allows the "
                        f"host on port {', '.join(map(str, sorted(other_port.ports)))} only. "
                        f"{HOW_TO_ADD} as {name}:{port}")
    return Decision(False, None, f"{where} is not in ALLOWED_HOSTS — no entry matches it. "
                    f"{HOW_TO_ADD}")


def _name_rules(rules, name: str):
    """Exact entries first, then the longest suffix: the most specific decides."""
    exact = [r for r in rules if r.kind == "name" and r.name == name]
    suffixes = sorted((r for r in rules if r.kind == "suffix" and name.endswith(r.name)),
                      key=lambda r: -len(r.name))
    return exact + suffixes


def decide(rules, host: str, port: int, addresses: list[str]) -> Decision:
    """Both steps: the host matches an entry, and every address it resolved
    to (the ones the proxy will connect to) is public or inside a listed range."""
    first = match(rules, host, port)
    if not first.allowed:
        return first
    numeric = address(host)
    if numeric is not None:
        return first            # its own range entry named it
    where = _where(host_name(host), port)
    if not addresses:
        return Decision(False, first.rule, f"{where} did not resolve to any address")
    for text in addresses:
        value = address(text)
        if value is None:
            return Decision(False, first.rule, f"{where} resolved to {_printable(text)}, "
                            "which is not an address")
        kind = address_kind(value)
        if kind is None:
            continue
        ranges = [r for r in rules if r.kind == "range"
                  and value.version == r.network.version and value in r.network]
        if any(port in r.ports for r in ranges):    # the range's port counts too
            continue
        if ranges:
            return Decision(False, first.rule,
                            f"{where} resolves to {value}, a {kind} address, and "
                            f"{ranges[0].label} lists it for port "
                            f"{', '.join(map(str, sorted(ranges[0].ports)))} only. Add "
                            f"{value}/{value.max_prefixlen}:{port} (or its range) to "
                            "ALLOWED_HOSTS in ~/.config/agent-sandbox/sandbox.conf")
        return Decision(False, first.rule,
                        f"{where} resolves to {value}, a {kind} address — names that "
                        "resolve to internal addresses pass only when the address range "
                        f"is listed too. Add {value}/{value.max_prefixlen} (or its range) "
                        "to ALLOWED_HOSTS in ~/.config/agent-sandbox/sandbox.conf")
    return first


def etc_hosts(text: str, name: str) -> list[str]:
    """The canonical addresses /etc/hosts (`text`) gives the canonical `name`,
    in file order. The proxy resolves names as absolute names, which glibc
    does not look up in /etc/hosts, so it reads the file itself."""
    found = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2 or address(fields[0]) is None:
            continue
        if any(host_name(alias) == name for alias in fields[1:]):
            value = str(address(fields[0]))
            if value not in found:
                found.append(value)
    return found
