"""The proxy's inputs: the session spec the launcher writes, and the
test/site name-resolution hook only root can write.

The spec (JSON, 0600 in the session directory, hidden inside the sandbox) is
checked whole before anything is bound: exactly the documented keys, rules
that egress/hosts.py parses, brokers with an https upstream. A bad spec is
a SpecError, which __main__ turns into exit 125 and one `agent-sandbox:` line.

The hook `<ADMIN_DIR>/egress-test-hosts.json` maps host names to addresses
without DNS and may add a CA file for TLS to the broker upstreams:
    {"hosts": {"api.test": ["127.0.0.2"]}, "ca_file": "/path/test-ca.pem"}
It is read only when it is a regular file owned by root and writable by
nobody else; the admin directory is fixed at install time (agent_sandbox/
paths.py), so no setting a user controls can point the proxy at another one.
The CA file it names passes the same checks (a CA someone else can write
would let them sign a certificate for a broker upstream, which receives the
real key): opened once at start without following a symlink, checked on its
descriptor, and its bytes kept — it is never opened again by name. A CA file
that fails them is ignored (the hosts still apply: TLS to the upstream then
fails verification, closed).
"""
from __future__ import annotations

import json
import os
import stat
from typing import NamedTuple
from urllib.parse import urlsplit

from egress.hosts import Rule, address, host_name, parse_entry

HOOK_NAME = "egress-test-hosts.json"
SPEC_KEYS = {"socket", "rules", "audit", "brokers", "session"}
BROKER_KEYS = {"upstream", "header", "scheme", "placeholder", "key"}


class SpecError(Exception):
    pass


class Broker(NamedTuple):
    name: str
    host: str
    port: int
    base_path: str          # the upstream URL's path, without a trailing slash
    header: str             # lower case
    scheme: str             # "" or "Bearer "
    placeholder: str
    key: str
    tls: bool = True        # False: an http:// gateway ALLOWED_HOSTS lists (server.py)

    def __repr__(self) -> str:      # never print the key
        return f"Broker({self.name!r}, {self.host!r}:{self.port})"


class Spec(NamedTuple):
    socket: str
    rules: tuple[Rule, ...]
    audit: str
    brokers: dict[str, Broker]
    session: str


class Hook(NamedTuple):
    hosts: dict[str, list[str]]
    ca_data: str | None     # the CA file's PEM text, read once at start


def load(path: str) -> Spec:
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(4 << 20))
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read the proxy spec {path}: {exc}") from None
    if not isinstance(data, dict) or set(data) != SPEC_KEYS:
        raise SpecError(f"the proxy spec {path} must hold exactly {sorted(SPEC_KEYS)}")
    for key in ("socket", "audit", "session"):
        if not isinstance(data[key], str) or not data[key]:
            raise SpecError(f"the proxy spec's {key!r} must be a non-empty string")
    if not os.path.isabs(data["socket"]) or not os.path.isabs(data["audit"]):
        raise SpecError("the proxy spec's socket and audit paths must be absolute")
    if not isinstance(data["rules"], list):
        raise SpecError("the proxy spec's 'rules' must be a list")
    rules = []
    for item in data["rules"]:
        if not isinstance(item, dict) or not isinstance(item.get("entry"), str) \
                or not isinstance(item.get("origin"), str):
            raise SpecError("each rule must be {'entry': str, 'origin': str}")
        try:
            rules.append(parse_entry(item["entry"], item["origin"]))
        except ValueError as exc:
            raise SpecError(f"ALLOWED_HOSTS ({item['origin']}): {exc}") from None
    if not isinstance(data["brokers"], dict):
        raise SpecError("the proxy spec's 'brokers' must be an object")
    brokers = {name: _broker(name, value) for name, value in data["brokers"].items()}
    return Spec(data["socket"], tuple(rules), data["audit"], brokers, data["session"])


def _broker(name, value) -> Broker:
    if not isinstance(value, dict) or set(value) != BROKER_KEYS or \
            not all(isinstance(v, str) for v in value.values()):
        raise SpecError(f"broker {name!r} must hold exactly {sorted(BROKER_KEYS)} (strings)")
    url = urlsplit(value["upstream"])
    host = host_name(url.hostname or "") or (url.hostname and address(url.hostname)
                                              and url.hostname)
    try:
        port = url.port or (80 if url.scheme == "http" else 443)
    except ValueError:
        port = None
    if url.scheme not in ("https", "http") or not host or port is None or url.query \
            or url.fragment or url.username or url.password:
        raise SpecError(f"broker {name!r}: the upstream must be http(s)://host[:port][/path], "
                        f"not {value['upstream']!r}")
    if not value["placeholder"] or not value["key"] or not value["header"] or \
            any(c in value[k] for k in BROKER_KEYS for c in "\r\n\0"):
        raise SpecError(f"broker {name!r}: header, placeholder and key must be set, one line each")
    return Broker(name, host, port, url.path.rstrip("/"), value["header"].lower(),
                  value["scheme"], value["placeholder"], value["key"], url.scheme == "https")


def _read_roots(path: str, limit: int) -> bytes | None:
    """The bytes of `path` if it is a regular file (not a symlink) owned by
    root and writable by nobody else; None otherwise. One open, checks on
    the descriptor: nothing can be swapped between check and read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def load_hook(admin_dir: str) -> Hook | None:
    """The test/site resolution hook, or None when it is absent or not root's."""
    raw = _read_roots(os.path.join(admin_dir, HOOK_NAME), 1 << 20)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    hosts = {}
    for name, addresses in (data.get("hosts") or {}).items():
        canonical = host_name(str(name))
        if canonical and isinstance(addresses, list):
            hosts[canonical] = [str(a) for a in addresses if address(str(a)) is not None]
    ca_file, ca_data = data.get("ca_file"), None
    if isinstance(ca_file, str) and os.path.isabs(ca_file):
        raw = _read_roots(ca_file, 1 << 20)
        ca_data = raw.decode("ascii", "replace") if raw else None
    return Hook(hosts, ca_data)
