"""The network side of the tools: `logs --network` (the egress proxy's
records, their number time, refusals among --denials, agent-controlled text
escaped), `explain --host` (which rule decides, names resolved only after
they match) and doctor's agent logins (names and paths, never a secret)."""
from __future__ import annotations

import json

import pytest

from agent_sandbox.config.network import HOST_ORIGINS
from agent_sandbox.config.settings import Settings
from agent_sandbox.tools import logins, logs, nethost

ALLOWED = {"time": 1795511370.5, "event": "network", "session": "abc123", "client": "connect",
           "host": "pypi.org", "port": 443, "addresses": ["151.101.0.223"],
           "decision": "allowed", "rule": "pypi.org (conf/sandbox.conf:105)",
           "reason": "ok", "bytes_out": 812, "bytes_in": 53000, "duration_ms": 41.5}
REFUSED = dict(ALLOWED, time=1795511371.0, host="evil\x1b[2J.example", decision="refused",
               rule=None, bytes_out=0, bytes_in=0,
               reason="evil.example:443 is not in ALLOWED_HOSTS — no entry matches it")
CHAPERON = {"time": "2026-11-24T09:00:00+0000", "event": "refusal", "session": "abc123",
            "command": "sbatch", "reason": "denied_option", "detail": "--uid"}


def entries():
    data = "\n".join(json.dumps(r) for r in (CHAPERON, ALLOWED, REFUSED)).encode()
    return logs.parse_lines(data)


def test_network_keeps_only_the_proxys_records_ordered_by_their_number_time():
    chosen = logs.select(entries(), network=True)
    assert [e.record["decision"] for e in chosen] == ["allowed", "refused"]
    assert chosen[0].when == 1795511370.5


def test_denials_include_refused_connections():
    assert [e.record["event"] for e in logs.select(entries(), denials=True)] == \
        ["refusal", "network"]
    assert len(logs.select(entries(), denials=True, network=True)) == 1


def test_a_connection_line_says_host_rule_bytes_and_reasons_escaped():
    allowed, refused = (logs.format_entry(e) for e in logs.select(entries(), network=True))
    assert "connect" in allowed
    assert "allowed pypi.org:443 by pypi.org (conf/sandbox.conf:105) — 812 B out, " \
           "53000 B in, 41.5 ms" in allowed
    assert "\x1b" not in refused and "\\x1b[2J" in refused
    assert "refused evil\\x1b[2J.example:443 — evil.example:443 is not in ALLOWED_HOSTS" in refused


def settings(mode="allowlist", hosts=("pypi.org", "*.githubusercontent.com", "10.1.0.0/16",
                                      "git.site.org")):
    return Settings(NETWORK_MODE=mode, ALLOWED_HOSTS=hosts,
                    origins={"NETWORK_MODE": "/u.conf:1", "ALLOWED_HOSTS": "/d.conf:9",
                             HOST_ORIGINS: {"pypi.org": "/d.conf:8"}})


def test_explain_host_names_the_rule_and_its_file():
    asked = []

    def resolver(host, port):
        asked.append(host)
        return ["151.101.0.223"]

    text = nethost.explain_host("pypi.org:443", settings(), resolver=resolver)
    assert text.splitlines()[0] == "NETWORK_MODE=allowlist (/u.conf:1):"
    assert "pypi.org:443: allowed" in text and "pypi.org (/d.conf:8)" in text
    assert asked == ["pypi.org"]


def test_explain_host_never_resolves_a_name_no_entry_matches():
    def resolver(host, port):
        raise AssertionError("resolved")

    text = nethost.explain_host("evil.example", settings(), resolver=resolver)
    assert "evil.example:443: refused" in text and "evil.example:80: refused" in text
    assert "Add it to ALLOWED_HOSTS" in text


def test_explain_host_refuses_a_listed_name_resolving_inside_the_cluster():
    text = nethost.explain_host("git.site.org", settings(), resolver=lambda h, p: ["10.2.0.5"])
    assert "git.site.org:443: refused" in text and "10.2.0.5" in text
    text = nethost.explain_host("git.site.org", settings(), resolver=lambda h, p: ["10.1.0.5"])
    assert "git.site.org:443: allowed" in text


@pytest.mark.parametrize("target,refused", [("169.254.169.254:80", True), ("10.1.2.3", False),
                                            ("[::1]:443", True), ("127.0.0.1", True)])
def test_explain_host_numeric_addresses(target, refused):
    data = json.loads(nethost.explain_host(target, settings(), as_json=True,
                                           resolver=lambda h, p: []))
    assert all(r["allowed"] is not refused for r in data["results"])


def test_explain_host_says_what_open_and_isolated_mean():
    assert "every host is reachable" in nethost.explain_host(
        "pypi.org", settings("open"), resolver=lambda h, p: ["151.101.0.223"])
    assert "no host is reachable" in nethost.explain_host(
        "pypi.org", settings("isolated"), resolver=lambda h, p: ["151.101.0.223"])


@pytest.mark.parametrize("bad", ["pypi.org:0", "pypi.org:http", "[::1]:99999"])
def test_a_bad_port_is_a_usage_error(bad):
    with pytest.raises(ValueError):
        nethost.split_target(bad)


def test_doctor_names_logins_never_secrets(tmp_path):
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex/auth.json").write_text('{"token": "SECRET-TOKEN"}')
    item = logins.logins_item(str(tmp_path), {"ANTHROPIC_API_KEY": "sk-ant-SECRET"},
                              {"claude": ("ANTHROPIC_API_KEY",)})
    assert item.status == "GAPS"
    assert "claude: API key ANTHROPIC_API_KEY (brokered in allowlist mode" in item.summary
    assert f"codex: OAuth login file {tmp_path}/.codex/auth.json" in item.summary
    assert "aider: API key ANTHROPIC_API_KEY (enters the sandbox)" in item.summary
    assert "SECRET" not in item.summary + item.fix + json.dumps(item.data)


def test_doctor_logins_without_any():
    assert logins.logins_item("/nonexistent", {}, {}).status == "GO"


def test_config_show_origin_names_every_hosts_entry():
    from agent_sandbox.tools.explain import config_show

    text = config_show(settings(), origin=True, as_json=False)
    assert "#   pypi.org from /d.conf:8\n#   *.githubusercontent.com from /d.conf:9" in text
    data = json.loads(config_show(settings(), origin=True, as_json=True))
    assert data["ALLOWED_HOSTS"]["entries"][0] == {"entry": "pypi.org", "origin": "/d.conf:8"}


def test_explain_knows_what_brokering_does_to_a_key_and_a_base_url():
    from agent_sandbox.tools.explain import brokering_note

    listed = settings(hosts=("127.0.0.1:4000",))
    key = brokering_note("ANTHROPIC_API_KEY", listed, {})
    assert "placeholder" in key and "never enters the sandbox" in key
    used = brokering_note("ANTHROPIC_BASE_URL", listed,
                          {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000"})
    assert "go on to http://127.0.0.1:4000" in used and "not used" not in used
    ignored = brokering_note("ANTHROPIC_BASE_URL", settings(),
                             {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000"})
    assert "is not used" in ignored and "ALLOWED_HOSTS+=(127.0.0.1:4000)" in ignored
    assert brokering_note("ANTHROPIC_BASE_URL", settings(mode="open"), {}) == ""
    assert brokering_note("PATH", listed, {}) == ""
