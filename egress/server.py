"""The egress proxy's server: asyncio for the talking, threads for the bytes.

Strategy. One asyncio loop accepts on the session's Unix socket (the relay in
the sandbox connects there once per TCP connection) and, per connection,
reads until egress/protocol.py has a whole request, then:
1. asks egress/hosts.match whether an entry names the host and port — a name
   nothing allows is never resolved (a lookup would leak it through DNS);
2. resolves the name ITSELF (the test/site hook first, then /etc/hosts,
   then getaddrinfo of the absolute name `name.`, so no resolv.conf search
   domain applies; an address given by the client is used only as a numeric
   host, checked like any other), and asks egress/hosts.decide about every
   address;
3. connects to exactly the addresses it checked, in order (no second
   lookup, so DNS rebinding between check and connect is impossible);
4. answers (200 / SOCKS success, or 403 / SOCKS "not allowed" with the
   denial text), then hands both sockets to two threads that move the bytes
   with splice(2) (netrelay.join: the relay inside uses the same code);
5. writes one audit record when the connection ends.
Requests on the broker route go to egress/broker.py instead of step 4.

Resources, since an agent may open connections without end: at most
MAX_RELAYED connections admitted at once (counted from the decision on, so
requests still resolving and broker requests count), at most MAX_PENDING
held otherwise (waiting for their head, or refused and lingering; beyond,
new ones are closed at once), and a failed accept()
(EMFILE...) only pauses the accept loop.

Audit records go to the session's network log, one JSON object per line,
one write(2) per line on an O_APPEND descriptor, in the conventions of
chaperon/audit.py (`time` as `%Y-%m-%dT%H:%M:%S%z`, `session`, `event`),
so `agent-sandbox logs` reads them with the chaperon's.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time

from egress import protocol
from egress.hosts import Rule, address, decide, etc_hosts, host_name, match
from egress.protocol import BrokerRequest, Connect, ProtocolError
from egress.spec import Hook, Spec

HEAD_TIMEOUT = 30.0
MAX_RELAYED = 1024     # connections admitted at once (resolving, connecting, moving bytes)
MAX_PENDING = 512      # held, not admitted: no head yet, or refused and lingering
ACCEPT_BACKOFF = 0.05  # seconds to wait after a failed accept() (EMFILE, ENFILE, ENOBUFS)
RESOLVE_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
READ_SIZE = 65536
HOSTS_FILE = "/etc/hosts"
LINGER = 10.0          # seconds a refused client may go on sending before the close


def _relay():
    """netrelay (the jail-side relay, stdlib only): its pump is ours too."""
    from agent_sandbox.paths import helper_module

    return helper_module("netrelay")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(1 << 20)
    except OSError:
        return ""


class Proxy:
    def __init__(self, spec: Spec, hook: Hook | None, audit_fd: int):
        self.spec = spec
        self.hook = hook
        self.audit_fd = audit_fd
        self.relay = _relay()
        self.tasks: set[asyncio.Task] = set()
        self.relayed = 0        # admitted by _open, released when the connection ends
        self.pending = 0        # accepted, not admitted (see MAX_PENDING)
        self._tls = None
        self.hosts_file = HOSTS_FILE

    # ---------------------------------------------------------------- audit
    def audit(self, record: dict) -> None:
        kept = {k: v for k, v in record.items() if not k.startswith("_")}
        line = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "event": "network",
                           "session": self.spec.session, **kept}, ensure_ascii=False)
        try:
            os.write(self.audit_fd, (line + "\n").encode("utf-8", "surrogateescape"))
        except OSError:
            pass    # a full disk must not stop the traffic it would only describe

    # --------------------------------------------------------------- accept
    async def serve(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(listener)
            except OSError:     # out of descriptors or buffers: wait, never stop accepting
                await asyncio.sleep(ACCEPT_BACKOFF)
                continue
            if self.pending >= MAX_PENDING:
                client.close()  # a flood of silent connections: refused before a byte
                continue
            self.pending += 1   # here, not in the task: a burst is accepted before it runs
            task = asyncio.ensure_future(self.handle(client))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def handle(self, client: socket.socket) -> None:
        started = time.monotonic()
        record = {"client": None, "host": None, "port": None, "addresses": [],
                  "decision": "refused", "rule": None, "reason": "",
                  "bytes_out": 0, "bytes_in": 0}
        record["_pending"] = True       # counted by serve()
        try:
            try:
                await self._handle(client, record)
            except asyncio.TimeoutError:
                record["reason"] = record["reason"] or \
                    f"the request did not arrive within {HEAD_TIMEOUT:.0f} s"
            except OSError as exc:
                record["reason"] = record["reason"] or f"connection failed: {exc}"
            except Exception as exc:     # noqa: BLE001 - a bug closes this connection only
                # The type alone: an exception's text may quote the head (a key).
                record["reason"] = f"internal error: {type(exc).__name__}"
            self._release(record)
            if record["client"] is not None:
                record["duration_ms"] = round((time.monotonic() - started) * 1000, 3)
                self.audit(record)
            if client.fileno() >= 0 and not client.getblocking():
                await self._linger(client)      # still ours: not handed to the pump
        finally:
            self._settle(record)
            client.close()

    async def _linger(self, client: socket.socket) -> None:
        """Half close, then read and drop what the client still sends (the
        body of a refused request, say) until it closes, for LINGER seconds
        at most: closing with unread bytes would reset the connection, and
        the reset can destroy the answer before the client has read it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LINGER
        try:
            client.shutdown(socket.SHUT_WR)
            while await asyncio.wait_for(loop.sock_recv(client, READ_SIZE),
                                         max(0.0, deadline - loop.time())):
                pass
        except (OSError, asyncio.TimeoutError):
            pass

    # Per-connection counters ride in the record under "_" keys (not audited).
    def _settle(self, record) -> None:
        """Admitted, or closed: no longer pending (a refused connection
        stays pending while it lingers: it still holds a descriptor)."""
        if record.pop("_pending", False):
            self.pending -= 1

    def _release(self, record) -> None:
        """The connection admitted by _open has ended."""
        if record.pop("_admitted", False):
            self.relayed -= 1

    async def _handle(self, client, record) -> None:
        loop = asyncio.get_running_loop()
        first = await asyncio.wait_for(loop.sock_recv(client, READ_SIZE), HEAD_TIMEOUT)
        if not first:
            return
        if first[0] == protocol.SOCKS_VERSION:
            await self._socks(client, first, record)
        else:
            await self._http(client, first, record)

    async def _read_until(self, client, buffer: bytes, parse):
        """Read until `parse` has a whole message: (event, consumed, buffer)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HEAD_TIMEOUT
        while (parsed := parse(buffer)) is None:
            data = await asyncio.wait_for(loop.sock_recv(client, READ_SIZE),
                                          max(0.0, deadline - loop.time()))
            if not data:
                raise ProtocolError("the request ended early")
            buffer += data
        return parsed[0], parsed[1], buffer

    # ----------------------------------------------------------------- HTTP
    async def _http(self, client, buffer, record) -> None:
        loop = asyncio.get_running_loop()
        record["client"] = "http"
        try:
            event, consumed, buffer = await self._read_until(client, buffer,
                                                             protocol.parse_http)
        except ProtocolError as exc:
            record["reason"] = f"bad request: {exc}"
            await loop.sock_sendall(client, protocol.http_response(
                exc.status, protocol.denial(record["reason"])))
            return
        early = buffer[consumed:]
        if isinstance(event, BrokerRequest):
            record["client"] = "broker"
            await self._broker(client, event, early, record)
            return
        record["client"] = "connect" if isinstance(event, Connect) else "http"
        upstream = await self._open(event.host, event.port, record)
        if upstream is None:
            status = 403 if record["decision"] == "refused" else 502
            await loop.sock_sendall(client, protocol.http_response(
                status, protocol.denial(record["reason"])))
            return
        limit, head = None, b""
        if isinstance(event, Connect):
            await loop.sock_sendall(client, protocol.CONNECT_OK)
        else:   # one request: its Content-Length body, nothing behind it
            early = early[:event.body_length]
            limit = event.body_length - len(early)
            head = event.head
        await self._splice(client, upstream, head + early, limit, record)

    # --------------------------------------------------------------- SOCKS5
    async def _socks(self, client, buffer, record) -> None:
        loop = asyncio.get_running_loop()
        record["client"] = "socks5"
        try:
            no_auth, consumed, buffer = await self._read_until(
                client, buffer, protocol.parse_socks_greeting)
            if not no_auth:
                record["reason"] = "bad request: the SOCKS5 client offers no method " \
                    "without authentication"
                await loop.sock_sendall(client, protocol.SOCKS_NO_METHOD)
                return
            await loop.sock_sendall(client, protocol.SOCKS_NO_AUTH)
            event, used, buffer = await self._read_until(client, buffer[consumed:],
                                                         protocol.parse_socks_request)
        except ProtocolError as exc:
            record["reason"] = f"bad request: {exc}"
            await loop.sock_sendall(client, protocol.socks_reply(exc.socks))
            return
        upstream = await self._open(event.host, event.port, record)
        if upstream is None:
            code = protocol.SOCKS_NOT_ALLOWED if record["decision"] == "refused" \
                else protocol.SOCKS_HOST_UNREACHABLE
            await loop.sock_sendall(client, protocol.socks_reply(code))
            return
        await loop.sock_sendall(client, protocol.socks_reply(protocol.SOCKS_OK))
        await self._splice(client, upstream, buffer[used:], None, record)

    # ------------------------------------------------- decide, resolve, open
    async def _open(self, host: str, port: int, record, rules=None) -> socket.socket | None:
        """Decide, resolve, connect; None when refused or unreachable
        (record["decision"] says which, record["reason"] why)."""
        rules = self.spec.rules if rules is None else rules
        record["host"], record["port"] = host, port
        self._settle(record)
        # A hard cap, counted at admission (before resolving: a flood of
        # requests still waiting for DNS counts too), broker requests included.
        if self.relayed >= MAX_RELAYED:
            record["reason"] = f"{host}:{port} refused: {MAX_RELAYED} connections are open " \
                "already; close some"
            return None
        self.relayed += 1
        record["_admitted"] = True
        first = match(rules, host, port)
        if not first.allowed:
            record.update(rule=first.rule, reason=first.reason)
            return None
        numeric = address(host)
        addresses = [str(numeric)] if numeric is not None else await self._resolve(host, port)
        decision = decide(rules, host, port, addresses)
        record.update(addresses=addresses, rule=decision.rule, reason=decision.reason)
        if not decision.allowed:
            return None
        record["decision"] = "allowed"
        return await self._connect(addresses, port, record)

    async def _resolve(self, host: str, port: int) -> list[str]:
        name = host_name(host)
        if self.hook is not None and name in self.hook.hosts:
            return list(self.hook.hosts[name])
        loop = asyncio.get_running_loop()
        if self.hosts_file:
            found = etc_hosts(_read(self.hosts_file), name)
            if found:
                return found
        try:
            # Absolute ("name."): resolv.conf `search` domains never apply, so
            # an allowed name that does not exist is not retried inside a
            # cluster's internal zone. glibc skips /etc/hosts for an absolute
            # name: read above.
            infos = await asyncio.wait_for(loop.getaddrinfo(
                name + ".", port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP),
                RESOLVE_TIMEOUT)
        except (OSError, asyncio.TimeoutError):
            return []
        found = []
        for family, _, _, _, sockaddr in infos:
            if family in (socket.AF_INET, socket.AF_INET6) and sockaddr[0] not in found:
                found.append(sockaddr[0])
        return found

    async def _connect(self, addresses, port, record) -> socket.socket | None:
        loop = asyncio.get_running_loop()
        failure = None
        for text in addresses:
            value = address(text)
            family = socket.AF_INET if value.version == 4 else socket.AF_INET6
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, (str(value), port)),
                                       CONNECT_TIMEOUT)
            except (OSError, asyncio.TimeoutError) as exc:
                sock.close()
                failure = f"{value}: {exc or 'timed out'}"
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        record["reason"] += f"; but the connection failed ({failure})"
        return None

    # ---------------------------------------------------------------- bytes
    async def _splice(self, client, upstream, early: bytes, limit, record) -> None:
        loop = asyncio.get_running_loop()
        if early:
            await loop.sock_sendall(upstream, early)
        client.setblocking(True)
        upstream.setblocking(True)
        done = loop.create_future()

        def run():
            try:
                result = self.relay.join(client, upstream, len(early), limit)
            except BaseException as exc:    # noqa: BLE001 - handed to the loop
                loop.call_soon_threadsafe(done.set_exception, exc)
            else:
                loop.call_soon_threadsafe(done.set_result, result)

        threading.Thread(target=run, daemon=True).start()
        record["bytes_out"], record["bytes_in"] = await done

    # --------------------------------------------------------------- broker
    async def _broker(self, client, request: BrokerRequest, early, record) -> None:
        from egress import broker as brokering     # ssl: only when a key is brokered

        loop = asyncio.get_running_loop()
        broker = self.spec.brokers.get(request.name)
        if broker is None:
            record["reason"] = f"no API key broker named {request.name!r} in this session"
            await loop.sock_sendall(client, protocol.http_response(
                404, protocol.denial(record["reason"])))
            return
        try:
            head = brokering.upstream_head(broker, request)
        except ProtocolError as exc:
            record.update(host=broker.host, port=broker.port, reason=str(exc))
            await loop.sock_sendall(client, protocol.http_response(
                exc.status, protocol.denial(str(exc))))
            return
        # The launcher chose the upstream: its name needs no entry, but its
        # addresses are checked like any other (an internal one must be listed).
        # An http:// gateway (the key unencrypted) must be listed itself.
        own = Rule("name", broker.host, None, frozenset({broker.port}),
                   f"broker {broker.name}", "API_KEY_BROKERING")
        upstream = await self._open(broker.host, broker.port, record,
                                    rules=(own, *self.spec.rules) if broker.tls
                                    else self.spec.rules)
        if upstream is None:
            # The agent chose no destination here (the launcher did): whatever
            # stopped it is a failure of the upstream, never a denial to act on.
            record["reason"] = (f"the API upstream of broker {broker.name} "
                                f"({broker.host}:{broker.port}) cannot be used — "
                                f"{record['reason']}")
            await loop.sock_sendall(client, protocol.http_response(
                502, protocol.denial(record["reason"])))
            return
        try:
            if self._tls is None:
                self._tls = brokering.tls_context(self.hook.ca_data if self.hook else None)
            record["bytes_out"], record["bytes_in"] = await brokering.forward(
                loop, client, upstream, broker, head, early, request.body_length, self._tls,
                upgrade=request.upgrade is not None)
        except OSError as exc:      # ssl.SSLError is an OSError
            record["reason"] += f"; but TLS to the upstream failed ({exc})"
            upstream.close()
            await loop.sock_sendall(client, protocol.http_response(
                502, protocol.denial(record["reason"])))
