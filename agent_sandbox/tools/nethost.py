"""`agent-sandbox explain --host HOST[:PORT]`: would the egress proxy let a
connection to HOST through, and which rule decides (docs/network.md)?

The answer comes from the same rules the proxy gets (config/network.rules:
every ALLOWED_HOSTS entry with the file:line that added it) and the same
decision (egress.hosts): first the name against the entries, then — only for
a name that matched, as the proxy does — every address it resolves to must be
public or inside a listed range. Resolution here uses this host's resolver
(the proxy also has the admin's test hook, docs/network.md). Pure but for
`resolve`, which the caller may replace.
"""
from __future__ import annotations

import json
import socket


def split_target(text: str) -> tuple[str, int | None]:
    """(host, port or None) of `host`, `host:port`, `[v6]`, `[v6]:port` or a bare v6."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port) if port else None


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return list(dict.fromkeys(info[4][0] for info in infos))


def explain_host(target: str, settings, *, as_json: bool = False, resolver=resolve) -> str:
    from egress.hosts import address, decide, match, parse_entry

    from agent_sandbox.config.network import rules

    host, port = split_target(target)
    ports = (port,) if port else (443, 80)
    parsed = [parse_entry(r["entry"], r["origin"]) for r in rules(settings)]
    mode = settings.NETWORK_MODE
    origin = settings.origins.get("NETWORK_MODE", "default")
    results = []
    for number in ports:
        first = match(parsed, host, number)
        addresses = []
        if first.allowed and address(host) is None:
            addresses = resolver(host, number)
        decision = decide(parsed, host, number, addresses) if first.allowed else first
        results.append({"host": host, "port": number, "allowed": decision.allowed,
                        "rule": decision.rule, "reason": decision.reason,
                        "addresses": addresses})
    if as_json:
        return json.dumps({"network_mode": mode, "network_mode_origin": origin,
                           "results": results}, indent=2) + "\n"
    if mode == "open":
        head = (f"NETWORK_MODE=open ({origin}): every host is reachable in this "
                "configuration; in allowlist mode:")
    elif mode == "isolated":
        head = (f"NETWORK_MODE=isolated ({origin}): no host is reachable in this "
                "configuration; in allowlist mode:")
    else:
        head = f"NETWORK_MODE=allowlist ({origin}):"
    lines = [head]
    for item in results:
        where = f"[{item['host']}]:{item['port']}" if ":" in item["host"] else \
            f"{item['host']}:{item['port']}"
        verdict = "allowed" if item["allowed"] else "refused"
        lines.append(f"{where}: {verdict} — {item['reason']}"
                     + (f" (rule: {item['rule']})" if item["rule"] and item["rule"] not in
                        item["reason"] else ""))
    return "\n".join(lines) + "\n"
