"""egress/hosts.py: the entry syntax, the address kinds, the two-step
decision; hypothesis over host spellings and addresses (no numeric spelling
and no address outside the rules is ever allowed)."""
from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egress.hosts import (DEFAULT_PORTS, address, address_kind, decide, etc_hosts, host_name,
                          match, parse_entry)

RULES = [parse_entry(e, f"test.conf:{i}") for i, e in enumerate(
    ["pypi.org", "*.githubusercontent.com", "mirror.site:8443", "127.0.0.2/32",
     "[fd00:1::]/32", "10.20.0.0/16:5432"], 1)]
PUBLIC = ["151.101.0.223"]


# ------------------------------------------------------------------ entries
@pytest.mark.parametrize("text,kind,name,ports", [
    ("pypi.org", "name", "pypi.org", DEFAULT_PORTS),
    ("PyPI.org.", "name", "pypi.org", DEFAULT_PORTS),
    ("*.githubusercontent.com", "suffix", ".githubusercontent.com", DEFAULT_PORTS),
    ("host:8443", "name", "host", {8443}),
    ("*.npmjs.org:8080", "suffix", ".npmjs.org", {8080}),
])
def test_name_entries(text, kind, name, ports):
    rule = parse_entry(text, "f:1")
    assert (rule.kind, rule.name, set(rule.ports)) == (kind, name, set(ports))
    assert rule.label == f"{text} (f:1)"


@pytest.mark.parametrize("text,network,ports", [
    ("127.0.0.2/32", "127.0.0.2/32", DEFAULT_PORTS),
    ("10.0.0.0/8", "10.0.0.0/8", DEFAULT_PORTS),
    ("1.2.3.4", "1.2.3.4/32", DEFAULT_PORTS),
    ("1.2.3.4:22", "1.2.3.4/32", {22}),
    ("[fd00::]/8", "fd00::/8", DEFAULT_PORTS),
    ("fd00::/8", "fd00::/8", DEFAULT_PORTS),
    ("[::1]:8080", "::1/128", {8080}),
    ("[fd00::]/8:5432", "fd00::/8", {5432}),
    ("::ffff:10.0.0.0/104", "10.0.0.0/8", DEFAULT_PORTS),   # mapped: the IPv4 range
])
def test_range_entries(text, network, ports):
    rule = parse_entry(text, "f:1")
    assert rule.kind == "range"
    assert rule.network == ipaddress.ip_network(network)
    assert set(rule.ports) == set(ports)


@pytest.mark.parametrize("text", [
    "", " ", "*", "*.", "**.a.com", "a..b", "-a.com", "a-.com", "a b", "a/b", "é.com",
    "127.1", "0x7f.1", "2130706433", "0x7f000001", "017700000001", "1.2.3.4.5",
    "10.0.0.1/8", "10.0.0.0/33", "host:0", "host:65536", "host:x", "host:", "[::1",
    "[::1]x", "fe80::1%eth0", "http://pypi.org", "pypi.org/simple", "a" * 64 + ".com",
])
def test_bad_entries_say_why(text):
    with pytest.raises(ValueError) as info:
        parse_entry(text, "f:1")
    assert str(info.value)


# ---------------------------------------------------------------- addresses
@pytest.mark.parametrize("text,kind", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"),
    ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("fd00::1", "private"),
    ("169.254.169.254", "link-local (cloud metadata)"), ("fe80::1", "link-local"),
    ("100.64.0.1", "CGNAT"), ("224.0.0.251", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("::ffff:10.0.0.1", "private"),
    ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::a00:1", "private"),
    ("2002:a00:1::1", "private"), ("240.0.0.1", "reserved"), ("192.0.2.1", "reserved"),
    ("8.8.8.8", None), ("2606:4700::1111", None),
])
def test_address_kinds(text, kind):
    assert address_kind(ipaddress.ip_address(text)) == kind


@pytest.mark.parametrize("text", ["127.1", "2130706433", "0x7f.1", "0177.0.0.1", "[::1",
                                  "fe80::1%eth0", "localhost", ""])
def test_non_canonical_numbers_are_not_addresses(text):
    assert address(text) is None


def test_mapped_addresses_are_their_ipv4():
    assert address("::ffff:10.0.0.1") == ipaddress.IPv4Address("10.0.0.1")
    assert address("[::ffff:127.0.0.2]") == ipaddress.IPv4Address("127.0.0.2")


# ----------------------------------------------------------------- decisions
def test_an_exact_name_on_a_default_port_with_a_public_address():
    decision = decide(RULES, "pypi.org", 443, PUBLIC)
    assert decision.allowed and decision.rule == "pypi.org (test.conf:1)"


def test_a_suffix_matches_subdomains_only():
    assert decide(RULES, "raw.githubusercontent.com", 443, PUBLIC).allowed
    assert decide(RULES, "a.b.githubusercontent.com", 80, PUBLIC).allowed
    bare = decide(RULES, "githubusercontent.com", 443, PUBLIC)
    assert not bare.allowed and "no entry matches" in bare.reason
    assert not decide(RULES, "evilgithubusercontent.com", 443, PUBLIC).allowed


def test_ports_default_to_443_and_80():
    refused = decide(RULES, "pypi.org", 22, PUBLIC)
    assert not refused.allowed and "pypi.org:22" in refused.reason
    assert decide(RULES, "mirror.site", 8443, PUBLIC).allowed
    assert not decide(RULES, "mirror.site", 443, PUBLIC).allowed


def test_the_denial_names_the_host_and_the_fix():
    decision = decide(RULES, "evil.example", 443, [])
    assert not decision.allowed and decision.rule is None
    assert decision.reason == ("evil.example:443 is not in ALLOWED_HOSTS — no entry matches "
                               "it. Add it to ALLOWED_HOSTS in "
                               "~/.config/agent-sandbox/sandbox.conf")


@pytest.mark.parametrize("resolved", [["127.0.0.1"], ["10.1.1.1"], ["169.254.169.254"],
                                      ["151.101.0.223", "192.168.0.1"], ["::ffff:10.0.0.1"],
                                      ["100.64.0.1"], ["0.0.0.0"], ["::"], ["fe80::1"], []])
def test_a_listed_name_resolving_to_an_internal_address_is_refused(resolved):
    decision = decide(RULES, "pypi.org", 443, resolved)
    assert not decision.allowed
    assert decision.rule == "pypi.org (test.conf:1)"


def test_an_internal_address_passes_inside_a_listed_range():
    assert decide(RULES, "pypi.org", 443, ["127.0.0.2"]).allowed
    assert decide(RULES, "pypi.org", 443, ["fd00:1::5"]).allowed
    assert decide(RULES, "pypi.org", 443, ["::ffff:127.0.0.2"]).allowed
    assert "10.1.2.3/32" in decide(RULES, "pypi.org", 443, ["10.1.2.3"]).reason


@pytest.mark.parametrize("host,port,allowed", [
    ("127.0.0.2", 443, True), ("127.0.0.2", 22, False), ("127.0.0.1", 443, False),
    ("::ffff:127.0.0.2", 443, True), ("10.20.1.1", 5432, True), ("10.20.1.1", 443, False),
    ("169.254.169.254", 80, False), ("8.8.8.8", 443, False), ("fd00:1::1", 443, True),
    ("127.1", 443, False), ("2130706433", 443, False), ("0x7f.1", 443, False),
    ("0x7f000001", 443, False), ("", 443, False), ("a b", 443, False),
    ("0.0.0.0", 443, False), ("[::]", 443, False), ("::", 80, False),
])
def test_numeric_hosts_need_a_range_entry(host, port, allowed):
    assert decide(RULES, host, port, []).allowed is allowed


def test_match_alone_never_needs_addresses():
    assert match(RULES, "pypi.org", 443).allowed
    assert not match(RULES, "other.org", 443).allowed


def test_the_most_specific_name_decides():
    rules = [parse_entry("*.example.com:8080", "a"), parse_entry("*.x.example.com", "b"),
             parse_entry("api.x.example.com:9000", "c")]
    assert match(rules, "api.x.example.com", 9000).rule == "api.x.example.com:9000 (c)"
    assert match(rules, "w.x.example.com", 443).rule == "*.x.example.com (b)"
    assert match(rules, "w.x.example.com", 8080).rule == "*.example.com:8080 (a)"


# ------------------------------------------------------------------- fuzzing
ALLOWED_NAMES = {"pypi.org", "mirror.site"}


def _inside_the_rules(host: str, port: int) -> bool:
    name = host_name(host)
    value = address(host)
    if value is not None:
        return any(r.kind == "range" and value in r.network and port in r.ports
                   for r in RULES if r.network.version == value.version)
    if name is None:
        return False
    return name in ALLOWED_NAMES or name.endswith(".githubusercontent.com")


HOST_PARTS = st.sampled_from(["pypi", "org", "githubusercontent", "com", "mirror", "site",
                              "127", "0", "1", "2", "0x7f", "010", "ffff", "", "*", "-",
                              "_", "%", "@", ":", "[", "]", "\x00", "é", "PyPI", " "])
HOSTS = st.one_of(
    st.lists(HOST_PARTS, max_size=6).map(".".join),
    st.lists(HOST_PARTS, max_size=6).map("".join),
    st.text(max_size=40),
    st.ip_addresses().map(str),
    st.integers(0, 2**32 - 1).map(str),
)
ADDRESSES = st.lists(st.one_of(st.ip_addresses().map(str),
                               st.sampled_from(PUBLIC + ["127.0.0.2", "fd00:1::9"])),
                     max_size=3)


@settings(max_examples=3000, deadline=None)
@given(HOSTS, st.integers(0, 70000), ADDRESSES)
def test_fuzz_nothing_outside_the_rules_is_allowed(host, port, addresses):
    decision = decide(RULES, host, port, addresses)
    if decision.allowed:
        assert _inside_the_rules(host, port), (host, port)
        if address(host) is None:
            assert addresses
            for text in addresses:
                value = address(text)
                assert address_kind(value) is None or any(
                    r.kind == "range" and r.network.version == value.version
                    and value in r.network for r in RULES), text
    assert "\n" not in decision.reason


def _spellings(value: int) -> list[str]:
    """What inet_aton accepts for one IPv4 address besides the dotted quad."""
    a, b, c, d = value.to_bytes(4, "big")
    return [str(value), hex(value), "0" + oct(value)[2:], f"{a}.{(b << 16) | (c << 8) | d}",
            f"{a}.{b}.{(c << 8) | d}", f"{hex(a)}.{b}.{c}.{d}", f"0{a:o}.{b}.{c}.{d}"]


@settings(max_examples=1000, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_fuzz_numeric_spellings_are_never_names_nor_addresses(value):
    rules = RULES + [parse_entry("0.0.0.0/0", "everything")]
    for spelling in _spellings(value):
        if spelling == str(ipaddress.IPv4Address(value)):
            continue
        # What the system resolver makes of it is an address: we refuse it outright.
        assert socket.inet_aton(spelling) == value.to_bytes(4, "big")
        assert host_name(spelling) is None and address(spelling) is None, spelling
        assert not decide(rules, spelling, 443, [str(ipaddress.IPv4Address(value))]).allowed


PRIVATE_V4 = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4")]


@settings(max_examples=2000, deadline=None)
@given(st.ip_addresses(v=4))
def test_fuzz_internal_ipv4_is_never_public_in_any_spelling(value):
    internal = any(value in n for n in PRIVATE_V4)
    for form in (value, ipaddress.IPv6Address(f"::ffff:{value}"),
                 ipaddress.IPv6Address((0x64ff9b << 96) | int(value)),
                 ipaddress.IPv6Address((0x2002 << 112) | (int(value) << 80))):
        if internal:
            assert address_kind(form) is not None, form
    if internal:
        assert not decide(RULES[:3], "pypi.org", 443, [f"::ffff:{value}"]).allowed


def test_a_range_entry_admits_a_name_on_its_own_ports_only():
    """`10.5.0.0/16:443` lists the internal range for 443: a name resolving
    into it must not pass on port 80 because the name's entry has default ports."""
    rules = [parse_entry("*.corp.example", "a:1"), parse_entry("10.5.0.0/16:443", "a:2")]
    refused = decide(rules, "git.corp.example", 80, ["10.5.0.7"])
    assert not refused.allowed
    assert "lists it for port 443 only" in refused.reason and "10.5.0.7/32:80" in refused.reason
    assert decide(rules, "git.corp.example", 443, ["10.5.0.7"]).allowed
    rules.append(parse_entry("10.5.0.0/24", "a:3"))         # default ports 80, 443
    assert decide(rules, "git.corp.example", 80, ["10.5.0.7"]).allowed


def test_etc_hosts_lookup():
    text = ("127.0.0.1 localhost\n# 10.0.0.9 commented.test\n10.0.0.1 Git.Corp.Example git "
            "# tail\n::1 localhost ip6-localhost\n10.0.0.1 git.corp.example\n"
            "bogus line\n127.1 short.test\n::ffff:10.0.0.2 mapped.test\n")
    assert etc_hosts(text, "git.corp.example") == ["10.0.0.1"]
    assert etc_hosts(text, "git") == ["10.0.0.1"]
    assert etc_hosts(text, "localhost") == ["127.0.0.1", "::1"]
    assert etc_hosts(text, "commented.test") == []
    assert etc_hosts(text, "short.test") == []          # not a canonical address
    assert etc_hosts(text, "mapped.test") == ["10.0.0.2"]
    assert etc_hosts(text, "line") == []
