"""What a client of the egress proxy says, parsed without I/O; the replies.

Sans-IO in the style of h11: each parser takes the bytes received so far and
returns `(event, consumed)` when it has a whole message, None when it needs
more, and raises ProtocolError (with the HTTP status or SOCKS code to answer)
when the bytes cannot be a valid message. The server (egress/server.py) owns
the sockets. One connection carries one of:

- HTTP `CONNECT host:port` (authority form, the port required) → `Connect`;
- a plain HTTP request in absolute form (`GET http://host/path`) → `Forward`,
  whose head is rewritten to origin form with `Connection: close` and the
  proxy's own headers removed, and whose body is bounded (Content-Length) so
  nothing after the first request reaches the upstream; a chunked body is
  refused (411: its end is known only by parsing the chunks, and forwarding
  "until EOF" would carry whatever the client pipelines behind it);
- a request in origin form under `/broker/<name>/` → `BrokerRequest`
  (egress/broker.py), anything else in origin form is refused; the same
  path asked in absolute form of the relay's own address
  (`http://127.0.0.1:<port>/broker/...`, from a client that sends its base
  URL through HTTP_PROXY) is the same BrokerRequest. That route carries
  the real key, so it is narrower still: only the methods an API client
  uses (GET POST PUT PATCH DELETE HEAD OPTIONS; TRACE would echo the key
  back), no chunked body (411), a path without encoded slashes,
  backslashes, `%25`, `;` or dot segments however spelled, and a WebSocket
  upgrade whose head and Content-Length body alone are forwarded until the
  upstream answers 101 (egress/broker.py);
- SOCKS5 (first byte 0x05): a greeting offering "no authentication", then a
  CONNECT for a domain name, an IPv4 or an IPv6 address → `SocksConnect`.

Strictness is the defence: a head is CRLF-separated lines of visible ASCII,
one Host header that must name the same host and port as the request target,
no obs-fold, no userinfo (`user@host`), no fragment, not both Content-Length
and Transfer-Encoding. Host names are only split out here; whether one is a
valid name or a canonical address is decided in egress/hosts.py.
"""
from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import unquote

MAX_HEAD = 16384
DENIAL_PREFIX = "agent-sandbox: network: "
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HOST_CHARS = re.compile(r"[A-Za-z0-9._\-]+\.?|\[[0-9A-Fa-f:.]+\]")
_BROKER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# Headers that belong to the hop between client and proxy, never forwarded.
RELAY_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
HOP_HEADERS = frozenset({"connection", "proxy-connection", "keep-alive", "proxy-authorization",
                         "proxy-authenticate", "te", "trailer", "upgrade"})


class ProtocolError(Exception):
    """The client sent something that is not a valid request: answered with
    `status` (HTTP) or `socks` (SOCKS5 reply code) and the message."""

    def __init__(self, message: str, status: int = 400, socks: int = 1):
        super().__init__(message)
        self.status = status
        self.socks = socks


class Connect(NamedTuple):
    host: str
    port: int


class Forward(NamedTuple):
    host: str
    port: int
    head: bytes                 # rewritten: origin form, Connection: close
    body_length: int            # bytes of body to forward (chunked bodies are refused)


class BrokerRequest(NamedTuple):
    name: str
    method: str
    target: str                 # the path after /broker/<name>, with its query
    version: str
    headers: list[tuple[str, str]]
    body_length: int            # bytes of body (the request's own, also for an upgrade)
    upgrade: str | None = None  # "websocket" when the client asks to upgrade


class SocksConnect(NamedTuple):
    host: str
    port: int


# --------------------------------------------------------------------- HTTP
def parse_authority(text: str, default_port: int | None) -> tuple[str, int]:
    """`host[:port]` or `[v6][:port]` → (host lower case, port); brackets removed."""
    if text.startswith("["):
        close = text.find("]")
        host, rest = text[:close + 1], text[close + 1:]
        if close < 0 or (rest and not rest.startswith(":")):
            raise ProtocolError(f"bad authority {text[:100]!r}")
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text = text.partition(":")
        port_text = port_text if colon else None
    if not _HOST_CHARS.fullmatch(host):
        raise ProtocolError(f"bad host in {text[:100]!r}")
    if port_text is None:
        if default_port is None:
            raise ProtocolError(f"{text[:100]!r} has no port")
        port = default_port
    elif port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 \
            and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ProtocolError(f"bad port in {text[:100]!r}")
    host = host.lower()
    if host.startswith("["):
        host = host[1:-1]
    elif host.endswith("."):
        host = host[:-1]
    return host, port


def _head(buffer: bytes) -> tuple[list[str], int] | None:
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > MAX_HEAD:
            raise ProtocolError("request head too large", 431)
        return None
    if end + 4 > MAX_HEAD:
        raise ProtocolError("request head too large", 431)
    raw = buffer[:end]
    if b"\n" in raw.replace(b"\r\n", b"") or b"\r" in raw.replace(b"\r\n", b""):
        raise ProtocolError("bare CR or LF in the request head")
    if any(b < 0x20 and b not in (0x09, 0x0D, 0x0A) or b >= 0x7F for b in raw):
        raise ProtocolError("control or non-ASCII bytes in the request head")
    return raw.decode("ascii").split("\r\n"), end + 4


def _headers(lines: list[str]) -> list[tuple[str, str]]:
    headers = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            raise ProtocolError("folded header lines are not accepted")
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name.encode()):
            raise ProtocolError(f"bad header line {line[:100]!r}")
        headers.append((name, value.strip(" \t")))
    return headers


def _one(headers, name: str) -> str | None:
    values = [v for n, v in headers if n.lower() == name]
    if len(values) > 1 and len(set(values)) > 1:
        raise ProtocolError(f"conflicting {name} headers")
    if len(values) > 1 and name == "host":
        raise ProtocolError("more than one Host header")
    return values[0] if values else None


def _body_length(headers) -> int | None:
    length = _one(headers, "content-length")
    encoding = _one(headers, "transfer-encoding")
    if encoding is not None:
        if length is not None:
            raise ProtocolError("both Content-Length and Transfer-Encoding")
        if encoding.lower() != "chunked":
            raise ProtocolError(f"Transfer-Encoding {encoding[:40]!r} is not supported", 501)
        return None
    if length is None:
        return 0
    if not length.isdigit() or len(length) > 15:
        raise ProtocolError("bad Content-Length")
    return int(length)


def _same_host(header: str | None, host: str, port: int, default_port: int | None) -> None:
    """The Host header, when present, names the request target's host and port."""
    if header is None:
        return
    try:
        header_host, header_port = parse_authority(header, default_port or port)
    except ProtocolError:
        raise ProtocolError(f"bad Host header {header[:100]!r}") from None
    if header_host != host or header_port != port:
        raise ProtocolError(f"the Host header {header[:100]!r} does not name the requested "
                            f"host {host}:{port}")


def parse_http(buffer: bytes):
    """(Connect | Forward | BrokerRequest, bytes consumed) or None (need more)."""
    head = _head(buffer)
    if head is None:
        return None
    lines, consumed = head
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or \
            not _TOKEN.fullmatch(parts[0].encode()):
        raise ProtocolError(f"bad request line {lines[0][:100]!r}")
    method, target, version = parts
    headers = _headers(lines[1:])
    host_header = _one(headers, "host")
    if method == "CONNECT":
        host, port = parse_authority(target, None)
        _same_host(host_header, host, port, None)
        return Connect(host, port), consumed
    body = _body_length(headers)
    if target.startswith("/broker/"):
        return _broker(method, target, version, headers, body), consumed
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        if target.startswith("/"):
            raise ProtocolError("this is a proxy: send the full URL (http://host/path) or "
                                "CONNECT host:port")
        raise ProtocolError(f"only http:// URLs are forwarded (https goes through CONNECT), "
                            f"not {target[:100]!r}")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    path = rest[len(authority):] or "/"
    if "@" in authority:
        raise ProtocolError("user information in the URL is not accepted")
    if path.startswith("?"):
        path = "/" + path
    if "#" in path:
        raise ProtocolError("a fragment in the request target")
    host, port = parse_authority(authority, 80)
    _same_host(host_header, host, port, 80)
    if host in RELAY_HOSTS and path.startswith("/broker/"):
        # The relay's own address, asked through the proxy: a client whose
        # proxy agent ignores NO_PROXY still reaches the broker.
        return _broker(method, path, version, headers, body), consumed
    if body is None:
        raise ProtocolError("a chunked request body is not forwarded: send it with "
                            "Content-Length", 411)
    kept = [(n, v) for n, v in headers if n.lower() not in HOP_HEADERS and n.lower() != "host"]
    out = [f"{method} {path} {version}", f"Host: {authority}",
           *(f"{n}: {v}" for n, v in kept), "Connection: close", "", ""]
    return Forward(host, port, "\r\n".join(out).encode("ascii"), body), consumed


BROKER_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
# In a broker path (before '?'): '%2f' and '%5c' (encoded '/' and '\'), '%25' (double
# encoding), ';' path parameters (Tomcat and Spring read '..;' as '..') and
# backslashes — each a way some server behind the upstream reads a dot segment.
_BAD_IN_PATH = ("%2f", "%5c", "%25", "%3b", ";", "\\")


def _broker(method, target, version, headers, body) -> BrokerRequest:
    if method not in BROKER_METHODS:
        raise ProtocolError(f"the method {method[:20]!r} is not carried on the broker route "
                            f"(only {' '.join(sorted(BROKER_METHODS))})", 405)
    if body is None:
        raise ProtocolError("a chunked request body is not carried on the broker route: "
                            "send it with Content-Length", 411)
    name, _, rest = target[len("/broker/"):].partition("/")
    if not _BROKER_NAME.fullmatch(name):
        raise ProtocolError(f"no broker named {name[:64]!r}", 404)
    rest = "/" + rest
    _check_path(rest)
    upgrade = _one(headers, "upgrade")
    connection = (_one(headers, "connection") or "").lower()
    if upgrade is None or "upgrade" not in connection.replace(" ", "").split(","):
        upgrade = None
    elif upgrade.lower() != "websocket":
        raise ProtocolError(f"Upgrade {upgrade[:40]!r} is not supported", 501)
    # A WebSocket goes raw both ways only once the upstream answers 101 (broker.py).
    return BrokerRequest(name, method, rest, version, headers, body, upgrade)


def _check_path(path: str) -> None:
    raw = path.split("?", 1)[0]
    if any(bad in raw.lower() for bad in _BAD_IN_PATH):
        raise ProtocolError("encoded slashes, '%25', ';' and backslashes are not accepted "
                            "in a path on the broker route")
    for segment in raw.split("/"):
        if unquote(segment) in (".", ".."):
            raise ProtocolError("dot segments are not accepted on the broker route")
    if "#" in path:
        raise ProtocolError("a fragment in the request target")


def http_response(status: int, text: str) -> bytes:
    """A complete HTTP/1.1 response with a text/plain body; the connection closes."""
    reasons = {400: "Bad Request", 403: "Forbidden", 404: "Not Found",
               405: "Method Not Allowed", 411: "Length Required", 431: "Request Header Fields Too Large", 501: "Not Implemented",
               502: "Bad Gateway", 504: "Gateway Timeout"}
    body = (text.rstrip("\n") + "\n").encode("utf-8", "replace")
    return (f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def denial(reason: str) -> str:
    """The text a refused client reads (issue 16 item 4)."""
    return DENIAL_PREFIX + reason


CONNECT_OK = b"HTTP/1.1 200 Connection established\r\n\r\n"


# ------------------------------------------------------------------- SOCKS5
SOCKS_VERSION = 5
SOCKS_NO_AUTH = b"\x05\x00"
SOCKS_NO_METHOD = b"\x05\xff"
SOCKS_OK, SOCKS_FAILURE, SOCKS_NOT_ALLOWED = 0, 1, 2
SOCKS_HOST_UNREACHABLE, SOCKS_REFUSED = 4, 5
SOCKS_BAD_COMMAND, SOCKS_BAD_ADDRESS = 7, 8


def parse_socks_greeting(buffer: bytes) -> tuple[bool, int] | None:
    """(whether 'no authentication' is offered, bytes consumed) or None."""
    if len(buffer) < 2:
        return None
    if buffer[0] != SOCKS_VERSION or buffer[1] == 0:
        raise ProtocolError("not a SOCKS5 greeting")
    end = 2 + buffer[1]
    if len(buffer) < end:
        return None
    return 0 in buffer[2:end], end


def parse_socks_request(buffer: bytes) -> tuple[SocksConnect, int] | None:
    """(SocksConnect, bytes consumed) or None; ProtocolError carries the reply code."""
    if len(buffer) < 5:
        return None
    version, command, reserved, kind = buffer[:4]
    if version != SOCKS_VERSION or reserved != 0:
        raise ProtocolError("not a SOCKS5 request")
    if kind == 1:
        end = 4 + 4
    elif kind == 4:
        end = 4 + 16
    elif kind == 3:
        if buffer[4] == 0:
            raise ProtocolError("an empty domain name", socks=SOCKS_BAD_ADDRESS)
        end = 5 + buffer[4]
    else:
        raise ProtocolError(f"address type {kind} is not supported", socks=SOCKS_BAD_ADDRESS)
    if len(buffer) < end + 2:
        return None
    if command != 1:
        raise ProtocolError("only CONNECT is supported", socks=SOCKS_BAD_COMMAND)
    raw = buffer[4:end]
    if kind == 1:
        host = ".".join(str(b) for b in raw)
    elif kind == 4:
        import ipaddress

        host = str(ipaddress.IPv6Address(bytes(raw)))
    else:
        host = raw[1:].decode("latin-1").lower()
        if host.endswith(".") and not host.startswith("["):
            host = host[:-1]
    port = int.from_bytes(buffer[end:end + 2], "big")
    if port == 0:
        raise ProtocolError("port 0", socks=SOCKS_BAD_ADDRESS)
    return SocksConnect(host, port), end + 2


def socks_reply(code: int) -> bytes:
    return bytes([SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])
