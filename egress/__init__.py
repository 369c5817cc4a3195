"""The egress proxy of NETWORK_MODE=allowlist (issue 16; docs/network.md).

hosts.py (ALLOWED_HOSTS entries and decisions) and protocol.py (HTTP CONNECT,
plain HTTP, SOCKS5: parsing and replies) are pure; spec.py reads the
launcher's spec and the root-owned test/site hook; server.py (asyncio, with
splice threads for the bytes) and broker.py (API key brokering over TLS) are
the proxy; `python3 -I -m egress SPEC` runs it. Standard library only.
"""
