"""egress/protocol.py: CONNECT, absolute-form HTTP, the broker route, SOCKS5
and the replies; egress/broker.upstream_head. Hypothesis: random and
mutated bytes never crash a parser (only ProtocolError), a Host header that
names another host than the target is always refused, a rewritten head
never carries a second request, and no parsed request reaches an allowed
decision for a host outside the rules."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egress import protocol
from egress.broker import upstream_head
from egress.hosts import address, decide, parse_entry
from egress.protocol import (BrokerRequest, Connect, Forward, ProtocolError, SocksConnect,
                             parse_http, parse_socks_greeting, parse_socks_request)
from egress.spec import Broker


# --------------------------------------------------------------------- HTTP
def test_connect_with_its_host_header():
    data = b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\nEXTRA"
    event, consumed = parse_http(data)
    assert event == Connect("pypi.org", 443)
    assert data[consumed:] == b"EXTRA"


@pytest.mark.parametrize("target,host,port", [
    ("PyPI.org.:443", "pypi.org", 443), ("[::1]:8443", "::1", 8443),
    ("127.0.0.2:80", "127.0.0.2", 80)])
def test_connect_targets(target, host, port):
    assert parse_http(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())[0] == Connect(host, port)


def test_an_incomplete_head_needs_more():
    assert parse_http(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: py") is None


@pytest.mark.parametrize("data,status", [
    (b"CONNECT pypi.org HTTP/1.1\r\n\r\n", 400),                        # no port
    (b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: evil.org:443\r\n\r\n", 400),
    (b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:444\r\n\r\n", 400),
    (b"CONNECT user@pypi.org:443 HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT pypi.org:443 HTTP/2.0\r\n\r\n", 400),
    (b"CONNECT  pypi.org:443 HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT pypi.org:443 HTTP/1.1\nHost: x\r\n\r\n", 400),           # bare LF
    (b"CONNECT pypi.org:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400),
    (b"CONNECT pypi.org:443 HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400),      # obs-fold
    (b"GET http://pypi.org/ HTTP/1.1\r\nHost: evil.org\r\n\r\n", 400),
    (b"GET http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\nHost: pypi.org\r\n\r\n", 400),
    (b"GET http://pypi.org/ HTTP/1.1\r\nHost: pypi.org:8080\r\n\r\n", 400),
    (b"GET http://evil.org@pypi.org/ HTTP/1.1\r\n\r\n", 400),
    (b"GET https://pypi.org/ HTTP/1.1\r\n\r\n", 400),
    (b"GET /simple/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", 400),
    (b"GET http://pypi.org/#x HTTP/1.1\r\n\r\n", 400),
    (b"POST http://pypi.org/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked"
     b"\r\n\r\n", 400),
    (b"POST http://pypi.org/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"POST http://pypi.org/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400),
    (b"POST http://pypi.org/ HTTP/1.1\r\nContent-Length: -3\r\n\r\n", 400),
    (b"GET /broker/../x HTTP/1.1\r\n\r\n", 404),
    (b"GET /broker/anthropic/../../etc HTTP/1.1\r\n\r\n", 400),
    (b"GET /broker/anthropic/%2e%2e/x HTTP/1.1\r\n\r\n", 400),
    (b"GET http://pypi.org/ HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n", 431),
])
def test_bad_requests_are_refused(data, status):
    with pytest.raises(ProtocolError) as info:
        parse_http(data)
    assert info.value.status == status


def test_a_head_that_never_ends_is_refused_at_the_limit():
    with pytest.raises(ProtocolError):
        parse_http(b"GET http://pypi.org/ HTTP/1.1\r\nX: " + b"a" * protocol.MAX_HEAD)


def test_plain_http_is_rewritten_to_origin_form():
    data = (b"POST http://pypi.org:8080/a?b=1 HTTP/1.1\r\nHost: PyPI.org:8080\r\n"
            b"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n"
            b"Connection: keep-alive\r\nContent-Length: 5\r\nX-Y: z\r\n\r\nhello")
    event, consumed = parse_http(data)
    assert isinstance(event, Forward)
    assert (event.host, event.port, event.body_length) == ("pypi.org", 8080, 5)
    assert event.head == (b"POST /a?b=1 HTTP/1.1\r\nHost: pypi.org:8080\r\n"
                          b"Content-Length: 5\r\nX-Y: z\r\nConnection: close\r\n\r\n")
    assert data[consumed:] == b"hello"


@pytest.mark.parametrize("target,path", [("http://pypi.org", "/"), ("http://pypi.org?x", "/?x")])
def test_an_empty_path_is_slash(target, path):
    event, _ = parse_http(f"GET {target} HTTP/1.1\r\n\r\n".encode())
    assert event.head.startswith(f"GET {path} HTTP/1.1\r\n".encode())
    assert event.body_length == 0


@pytest.mark.parametrize("target", ["http://a.org/", "/broker/anthropic/v1/messages",
                                    "http://127.0.0.1:3128/broker/anthropic/v1/messages"])
def test_chunked_bodies_are_refused_411(target):
    """Forwarding a chunked body "until EOF" carries whatever the client
    pipelines behind it: a second request to the upstream (on the broker
    route: on the connection that holds the real key). Content-Length only."""
    with pytest.raises(ProtocolError) as info:
        parse_http(f"POST {target} HTTP/1.1\r\nx-api-key: P\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n".encode())
    assert info.value.status == 411


@pytest.mark.parametrize("method", ["TRACE", "TRACK", "CONNECTX", "PROPFIND", "DEBUG", "get"])
@pytest.mark.parametrize("target", ["/broker/anthropic/v1/messages",
                                    "http://127.0.0.1:3128/broker/anthropic/v1/messages"])
def test_the_broker_route_carries_api_methods_only(method, target):
    """TRACE gets the real key added and an echoing upstream reflects it."""
    with pytest.raises(ProtocolError) as info:
        parse_http(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n"
                   "x-api-key: P\r\n\r\n".encode())
    assert info.value.status == 405


@pytest.mark.parametrize("method", sorted(protocol.BROKER_METHODS))
def test_the_broker_route_api_methods(method):
    event, _ = parse_http(f"{method} /broker/anthropic/v1/x HTTP/1.1\r\n\r\n".encode())
    assert isinstance(event, BrokerRequest) and event.method == method


@pytest.mark.parametrize("path", ["/..%2f..%2fadmin", "/..%2F", "/..;/admin", "/.%2e;x/a",
                                  "/%252e%252e/admin", "/%2e%2e%2fadmin", "/a/..%5c..%5cb",
                                  "/a%2Fb", "/a%5Cb", "/a;b", "/a%3Bb", "/a\\b", "/%2E%2E/x",
                                  "/./x", "/.", "/x/..", "/%2e/x", "/.%2E/x"])
def test_the_broker_route_refuses_every_spelling_of_a_dot_segment(path):
    """nginx decodes %2F before resolving '..', Tomcat and Spring read '..;'
    as '..', a proxy in front decodes once more: the key must only reach
    paths below the broker's base path."""
    for target in (f"/broker/anthropic{path}", f"http://127.0.0.1:1/broker/anthropic{path}"):
        with pytest.raises(ProtocolError) as info:
            parse_http(f"GET {target} HTTP/1.1\r\nx-api-key: P\r\n\r\n".encode())
        assert info.value.status == 400


def test_the_broker_route_query_may_hold_what_the_path_may_not():
    event, _ = parse_http(b"GET /broker/anthropic/v1/x?next=a%2Fb;c&d=%25 HTTP/1.1\r\n\r\n")
    assert event.target == "/v1/x?next=a%2Fb;c&d=%25"


def test_the_broker_route():
    data = (b"POST /broker/anthropic/v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:3128"
            b"\r\nx-api-key: PLACE\r\nContent-Length: 2\r\n\r\n{}")
    event, consumed = parse_http(data)
    assert isinstance(event, BrokerRequest)
    assert (event.name, event.method, event.target, event.body_length) == (
        "anthropic", "POST", "/v1/messages?beta=true", 2)


@pytest.mark.parametrize("authority", ["127.0.0.1:3128", "localhost:3128", "[::1]:3128"])
def test_the_broker_route_asked_through_the_proxy(authority):
    # A client whose proxy agent ignores NO_PROXY asks the proxy for the relay.
    data = (f"POST http://{authority}/broker/gemini/v1beta/models HTTP/1.1\r\n"
            f"Host: {authority}\r\nx-goog-api-key: P\r\nContent-Length: 0\r\n\r\n").encode()
    event, _ = parse_http(data)
    assert isinstance(event, BrokerRequest)
    assert (event.name, event.target, event.upgrade) == ("gemini", "/v1beta/models", None)


def test_elsewhere_the_broker_path_is_an_ordinary_url():
    event, _ = parse_http(b"GET http://pypi.org/broker/anthropic/x HTTP/1.1\r\n\r\n")
    assert isinstance(event, Forward) and event.host == "pypi.org"


def test_a_websocket_upgrade_on_the_broker_route():
    data = (b"GET /broker/openai/responses HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n"
            b"Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Key: abc\r\nAuthorization: Bearer sk-PLACE\r\n\r\n")
    event, _ = parse_http(data)
    assert (event.upgrade, event.body_length) == ("websocket", 0)     # bounded: no body
    broker = BROKER._replace(name="openai", header="authorization", scheme="Bearer ",
                             placeholder="sk-PLACE")
    head = upstream_head(broker, event)
    assert head == (b"GET /v1/responses HTTP/1.1\r\nHost: api.test\r\nSec-WebSocket-Key: abc"
                    b"\r\nauthorization: Bearer REAL\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\n\r\n")
    with pytest.raises(ProtocolError):
        parse_http(data.replace(b"Upgrade: websocket", b"Upgrade: h2c"))


def test_replies():
    response = protocol.http_response(403, protocol.denial("x:443 is not in ALLOWED_HOSTS"))
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"Content-Length: %d" % len(body) in head
    assert body == b"agent-sandbox: network: x:443 is not in ALLOWED_HOSTS\n"
    assert protocol.socks_reply(2) == b"\x05\x02\x00\x01\x00\x00\x00\x00\x00\x00"


# --------------------------------------------------------------------- broker
BROKER = Broker("anthropic", "api.test", 443, "/v1", "x-api-key", "", "sk-ant-PLACE", "REAL")


def _broker_request(headers):
    return BrokerRequest("anthropic", "POST", "/messages", "HTTP/1.1", headers, 0)


def test_the_broker_puts_the_real_key_into_the_named_header_only():
    head = upstream_head(BROKER, _broker_request(
        [("Host", "127.0.0.1:3128"), ("X-Api-Key", "sk-ant-PLACE"),
         ("X-Echo", "sk-ant-PLACE"), ("Connection", "keep-alive")]))
    assert head == (b"POST /v1/messages HTTP/1.1\r\nHost: api.test\r\n"
                    b"X-Echo: sk-ant-PLACE\r\nx-api-key: REAL\r\nConnection: close\r\n\r\n")


@pytest.mark.parametrize("headers", [[], [("x-api-key", "sk-ant-OTHER")],
                                     [("x-api-key", "sk-ant-PLACE"), ("x-api-key", "x")],
                                     [("authorization", "Bearer sk-ant-PLACE")]])
def test_the_broker_refuses_requests_without_exactly_the_placeholder(headers):
    with pytest.raises(ProtocolError) as info:
        upstream_head(BROKER, _broker_request(headers))
    assert info.value.status == 403


def test_a_bearer_broker():
    broker = BROKER._replace(header="authorization", scheme="Bearer ", port=8443)
    head = upstream_head(broker, _broker_request([("Authorization", "Bearer sk-ant-PLACE")]))
    assert b"\r\nauthorization: Bearer REAL\r\n" in head
    assert b"\r\nHost: api.test:8443\r\n" in head


# -------------------------------------------------------------------- SOCKS5
def test_socks_greeting():
    assert parse_socks_greeting(b"\x05") is None
    assert parse_socks_greeting(b"\x05\x02\x02") is None
    assert parse_socks_greeting(b"\x05\x02\x02\x00") == (True, 4)
    assert parse_socks_greeting(b"\x05\x01\x02") == (False, 3)
    with pytest.raises(ProtocolError):
        parse_socks_greeting(b"\x04\x01\x00")


@pytest.mark.parametrize("frame,host,port", [
    (b"\x05\x01\x00\x03\x08pypi.org\x01\xbb", "pypi.org", 443),
    (b"\x05\x01\x00\x03\x09PyPI.org.\x00\x50", "pypi.org", 80),
    (b"\x05\x01\x00\x01\x7f\x00\x00\x02\x00\x50", "127.0.0.2", 80),
    (b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x01\xbb", "::1", 443),
])
def test_socks_requests(frame, host, port):
    assert parse_socks_request(frame) == (SocksConnect(host, port), len(frame))
    assert parse_socks_request(frame[:-1]) is None


@pytest.mark.parametrize("frame,code", [
    (b"\x05\x02\x00\x03\x08pypi.org\x01\xbb", protocol.SOCKS_BAD_COMMAND),     # BIND
    (b"\x05\x03\x00\x01\x01\x02\x03\x04\x00\x35", protocol.SOCKS_BAD_COMMAND),  # UDP
    (b"\x05\x01\x00\x05\x00\x00", protocol.SOCKS_BAD_ADDRESS),
    (b"\x05\x01\x00\x03\x00\x00\x00", protocol.SOCKS_BAD_ADDRESS),
    (b"\x05\x01\x00\x01\x01\x02\x03\x04\x00\x00", protocol.SOCKS_BAD_ADDRESS),
    (b"\x05\x01\x01\x01\x01\x02\x03\x04\x00\x50", protocol.SOCKS_FAILURE),
])
def test_bad_socks_requests(frame, code):
    with pytest.raises(ProtocolError) as info:
        parse_socks_request(frame)
    assert info.value.socks == code


# ------------------------------------------------------------------- fuzzing
RULES = [parse_entry("pypi.org", "a"), parse_entry("*.githubusercontent.com", "b"),
         parse_entry("127.0.0.2/32", "c")]


def _resolve(host: str) -> list[str]:
    """A resolver under the attacker's control: every name is internal."""
    return ["10.0.0.1"] if host != "pypi.org" else ["151.101.0.223"]


def _allowed(host: str, port: int) -> bool:
    return decide(RULES, host, port, _resolve(host)).allowed


def _host_ok(host: str, port: int) -> bool:
    """The oracle: only pypi.org and 127.0.0.2 (in any mapped form), ports 80/443."""
    value = address(host)
    return port in (80, 443) and (host == "pypi.org" or str(value) == "127.0.0.2")


AUTHORITIES = st.one_of(
    st.sampled_from(["pypi.org", "PyPI.org.", "pypi.org:443", "pypi.org:80", "evil.org",
                     "127.0.0.2", "127.0.0.1", "[::1]", "[::ffff:127.0.0.2]", "127.1",
                     "2130706433", "0x7f.1", "pypi.org@evil.org", "evil.org#@pypi.org",
                     "pypi.org.evil.org", "x.githubusercontent.com", "[::ffff:10.0.0.1]:443",
                     "169.254.169.254", "pypi.org:0443", "pypi.org:+443", "[]", ":443"]),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=30))
HEADER_VALUES = st.one_of(AUTHORITIES, st.text(max_size=20))


def _mutate(data: bytes, cuts) -> bytes:
    out = bytearray(data)
    for position, value in cuts:
        if out:
            out[position % len(out)] = value
    return bytes(out)


@settings(max_examples=2000, deadline=None)
@given(st.sampled_from(["CONNECT", "GET", "POST"]), AUTHORITIES, st.booleans(),
       st.lists(HEADER_VALUES, max_size=2), st.lists(st.tuples(st.integers(0, 500),
                                                               st.integers(0, 255)), max_size=3))
def test_fuzz_http_requests_never_crash_nor_bypass(method, authority, absolute, hosts, cuts):
    target = authority if method == "CONNECT" else (
        f"http://{authority}/p" if absolute else f"/broker/{authority}/x")
    lines = [f"{method} {target} HTTP/1.1"] + [f"Host: {h}" for h in hosts]
    data = _mutate(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "replace"), cuts)
    try:
        parsed = parse_http(data)
    except ProtocolError:
        return
    if parsed is None:
        return
    event, consumed = parsed
    assert 0 < consumed <= len(data)
    if isinstance(event, (Connect, Forward)):
        if _allowed(event.host, event.port):
            assert _host_ok(event.host, event.port), (data, event)
        head_hosts = [line.split(b":", 1)[1].strip()
                      for line in data[:consumed].split(b"\r\n")[1:]
                      if line.lower().startswith(b"host:")]
        if head_hosts:     # the Host header names the same host and port
            assert len(head_hosts) == 1
            assert protocol.parse_authority(head_hosts[0].decode(), event.port) == \
                (event.host, event.port)
    if isinstance(event, (Forward, BrokerRequest)):
        assert isinstance(event.body_length, int)       # never "until the end"
    if isinstance(event, BrokerRequest):
        assert event.method in protocol.BROKER_METHODS
    if isinstance(event, Forward):
        assert event.head.endswith(b"\r\n\r\n")
        assert event.head.count(b"\r\n\r\n") == 1
        assert event.head.lower().count(b"\r\nhost: ") == 1
        assert b"proxy-" not in event.head.lower()


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_raise_protocol_errors(data):
    for parse in (parse_http, parse_socks_greeting, parse_socks_request):
        try:
            parse(data)
        except ProtocolError:
            pass


SOCKS_HOSTS = st.one_of(AUTHORITIES.map(lambda a: a.encode("utf-8", "replace")),
                        st.binary(min_size=1, max_size=40))


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from([1, 3, 4]), SOCKS_HOSTS, st.integers(0, 65535),
       st.lists(st.tuples(st.integers(0, 80), st.integers(0, 255)), max_size=3))
def test_fuzz_socks_frames_never_crash_nor_bypass(kind, host, port, cuts):
    if kind == 1:
        raw = (host * 4)[:4].ljust(4, b"\0")
    elif kind == 4:
        raw = (host * 16)[:16].ljust(16, b"\0")
    else:
        raw = bytes([min(len(host), 255)]) + host[:255]
    frame = _mutate(b"\x05\x01\x00" + bytes([kind]) + raw + port.to_bytes(2, "big"), cuts)
    try:
        parsed = parse_socks_request(frame)
    except ProtocolError as exc:
        assert protocol.socks_reply(exc.socks)[1] in (1, 7, 8)
        return
    if parsed is None:
        return
    event, consumed = parsed
    assert consumed == len(frame) if not cuts else 0 < consumed <= len(frame)
    if _allowed(event.host, event.port):
        assert _host_ok(event.host, event.port), (frame, event)
