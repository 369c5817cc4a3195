"""API key brokering (issue 16 item 5): the real key is added outside.

Inside the sandbox the agent's key variable holds a placeholder and its base
URL is `http://127.0.0.1:<relay port>/broker/<name>`. Such a request reaches
the proxy in origin form (protocol.BrokerRequest). `upstream_head` (pure)
rewrites it for the broker's upstream: the path below the upstream's own
path, `Host` the upstream's, `Connection: close` (or the WebSocket upgrade
the client asked for: Codex may use one), the proxy's hop headers
dropped, and the named header — which must carry exactly the placeholder
(with its scheme, e.g. `Bearer `) — set to the real key. Nothing else is
changed, and a request on this route can go nowhere but that upstream: an
unknown broker, a missing or different key header, dot segments are refused.

`forward` (asyncio) connects to the address the proxy checked, speaks TLS to
it (system CAs, plus the test hook's CA, read once at start; the name is
verified) — or plain HTTP to an http:// gateway, which only a host
ALLOWED_HOSTS lists may be (the launcher honours no other, and the proxy
checks it against the rules alone), sends the head and the request's own body (Content-Length: the
route refuses chunked bodies) and relays the answer. Nothing the client
sends after its request reaches the upstream, except on a WebSocket the
upstream accepted with 101.
"""
from __future__ import annotations

import asyncio
import ssl

from egress.protocol import HOP_HEADERS, BrokerRequest, ProtocolError, denial, http_response
from egress.spec import Broker

BUFFER = 1 << 16
ANSWER_TIMEOUT = 300.0   # seconds for the upstream's first bytes (then 504, with the cause)


def upstream_head(broker: Broker, request: BrokerRequest) -> bytes:
    values = [v for n, v in request.headers if n.lower() == broker.header]
    if values != [broker.scheme + broker.placeholder]:
        raise ProtocolError(f"the broker route {broker.name!r} carries only requests that "
                            f"hold this session's placeholder key in {broker.header}", 403)
    default = 443 if broker.tls else 80
    authority = broker.host if broker.port == default else f"{broker.host}:{broker.port}"
    if ":" in broker.host:
        authority = f"[{broker.host}]" if broker.port == default \
            else f"[{broker.host}]:{broker.port}"
    kept = [(n, v) for n, v in request.headers
            if n.lower() not in HOP_HEADERS and n.lower() not in ("host", broker.header)]
    connection = ["Upgrade: websocket", "Connection: Upgrade"] if request.upgrade \
        else ["Connection: close"]
    lines = [f"{request.method} {broker.base_path}{request.target} {request.version}",
             f"Host: {authority}", *(f"{n}: {v}" for n, v in kept),
             f"{broker.header}: {broker.scheme}{broker.key}", *connection, "", ""]
    return "\r\n".join(lines).encode("latin-1")


def tls_context(ca_data: str | None) -> ssl.SSLContext:
    """System CAs, plus the hook's CA (PEM text read once at start, spec.py)."""
    context = ssl.create_default_context()
    if ca_data:
        context.load_verify_locations(cadata=ca_data)
    return context


def _status(head: bytes) -> bytes:
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    return parts[1] if len(parts) > 1 else b""


async def forward(loop, client, upstream_sock, broker: Broker, head: bytes, early: bytes,
                  body_length: int, context: ssl.SSLContext,
                  upgrade: bool = False) -> tuple[int, int]:
    """TLS to the upstream over the connected `upstream_sock`; (bytes out, bytes in).

    One request goes up: the head and `body_length` bytes of body, nothing
    more — the connection carries the real key, so whatever the client sends
    behind its request is dropped. A WebSocket upgrade goes raw both ways
    only once the upstream's answer says 101; any other answer ends it like
    a plain request."""
    if broker.tls:
        reader, writer = await asyncio.open_connection(sock=upstream_sock, ssl=context,
                                                       server_hostname=broker.host)
    else:   # an http:// gateway the user listed (server.py: its rules alone decide)
        reader, writer = await asyncio.open_connection(sock=upstream_sock)
    sent = [0, 0]
    switched = loop.create_future()     # upgrade: whether the upstream answered 101

    async def send(data: bytes) -> None:
        writer.write(data)
        sent[0] += len(data)
        await writer.drain()

    async def outwards():
        writer.write(head)
        remaining = body_length
        data = early[:remaining]
        while True:
            if data:
                await send(data)
                remaining -= len(data)
            if remaining == 0:
                break
            data = await loop.sock_recv(client, min(BUFFER, remaining))
            if not data:
                break
        await writer.drain()
        if not upgrade:
            return
        if await switched:
            if early[body_length:]:
                await send(early[body_length:])
            while data := await loop.sock_recv(client, BUFFER):
                await send(data)
        else:   # not upgraded: the client's further bytes go nowhere; its end ends this
            while await loop.sock_recv(client, BUFFER):
                pass
            writer.close()

    async def inwards():
        status = b""
        try:   # the upstream's first bytes: a gateway that never answers is named
            data = await asyncio.wait_for(reader.read(BUFFER), ANSWER_TIMEOUT)
        except asyncio.TimeoutError:
            await loop.sock_sendall(client, http_response(504, denial(
                f"the API upstream of broker {broker.name} ({broker.host}:{broker.port}) "
                f"accepted the connection but did not answer within {ANSWER_TIMEOUT:.0f} s")))
            return
        while data:
            if upgrade and not switched.done():
                status += data
                if b"\r\n" in status:
                    switched.set_result(_status(status) == b"101")
                elif len(status) > 4096:
                    switched.set_result(False)
            await loop.sock_sendall(client, data)
            sent[1] += len(data)
            data = await reader.read(BUFFER)

    task = asyncio.ensure_future(outwards())
    try:
        await inwards()
    finally:
        if not switched.done():
            switched.set_result(False)
        task.cancel()
        writer.close()
    return sent[0], sent[1]
