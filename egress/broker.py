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
it (system CAs, plus the test hook's CA file; the name is verified), sends
the head and relays the body and the answer.
"""
from __future__ import annotations

import asyncio
import ssl

from egress.protocol import HOP_HEADERS, BrokerRequest, ProtocolError
from egress.spec import Broker

BUFFER = 1 << 16


def upstream_head(broker: Broker, request: BrokerRequest) -> bytes:
    values = [v for n, v in request.headers if n.lower() == broker.header]
    if values != [broker.scheme + broker.placeholder]:
        raise ProtocolError(f"the broker route {broker.name!r} carries only requests that "
                            f"hold this session's placeholder key in {broker.header}", 403)
    authority = broker.host if broker.port == 443 else f"{broker.host}:{broker.port}"
    if ":" in broker.host:
        authority = f"[{broker.host}]" if broker.port == 443 else f"[{broker.host}]:{broker.port}"
    kept = [(n, v) for n, v in request.headers
            if n.lower() not in HOP_HEADERS and n.lower() not in ("host", broker.header)]
    connection = ["Upgrade: websocket", "Connection: Upgrade"] if request.upgrade \
        else ["Connection: close"]
    lines = [f"{request.method} {broker.base_path}{request.target} {request.version}",
             f"Host: {authority}", *(f"{n}: {v}" for n, v in kept),
             f"{broker.header}: {broker.scheme}{broker.key}", *connection, "", ""]
    return "\r\n".join(lines).encode("latin-1")


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(ca_file)
    return context


async def forward(loop, client, upstream_sock, broker: Broker, head: bytes, early: bytes,
                  body_length: int | None, context: ssl.SSLContext) -> tuple[int, int]:
    """TLS to the upstream over the connected `upstream_sock`; (bytes out, bytes in)."""
    reader, writer = await asyncio.open_connection(sock=upstream_sock, ssl=context,
                                                   server_hostname=broker.host)
    sent = [0, 0]

    async def outwards():
        writer.write(head)
        remaining = body_length
        data = early if remaining is None else early[:remaining]
        while True:
            if data:
                writer.write(data)
                sent[0] += len(data)
                if remaining is not None:
                    remaining -= len(data)
                await writer.drain()
            if remaining == 0:
                break
            data = await loop.sock_recv(client, BUFFER if remaining is None
                                        else min(BUFFER, remaining))
            if not data:
                break
        await writer.drain()

    async def inwards():
        while data := await reader.read(BUFFER):
            await loop.sock_sendall(client, data)
            sent[1] += len(data)

    task = asyncio.ensure_future(outwards())
    try:
        await inwards()
    finally:
        task.cancel()
        writer.close()
    return sent[0], sent[1]
