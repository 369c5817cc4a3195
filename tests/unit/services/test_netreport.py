"""The end-of-session network refusals (services/netreport.py): one line per
destination with its count and the line to paste, telemetry apart."""
from __future__ import annotations

from agent_sandbox.services import netreport


def refused(host, port=443, reason=None, session="s1"):
    return {"event": "network", "decision": "refused", "host": host, "port": port,
            "session": session,
            "reason": reason or f"{host}:{port} is not in ALLOWED_HOSTS — no entry matches it."}


def test_one_line_per_destination_most_frequent_first_with_the_line_to_paste():
    records = [refused("a.test"), refused("b.test", 8080), refused("b.test", 8080),
               refused("statsig.anthropic.com"), refused("x.sentry.io"),
               {"event": "network", "decision": "allowed", "host": "pypi.org", "port": 443},
               refused("10.0.0.1", 22, reason="10.0.0.1:22 resolves to a private address")]
    lines = netreport.session_lines(records, "s1abcdefabcdef")
    assert lines[0] == ("network: refused b.test:8080 (2×) — to allow it, add "
                        "`ALLOWED_HOSTS+=(b.test:8080)` to ~/.config/agent-sandbox/sandbox.conf")
    assert "refused a.test:443 — to allow it, add `ALLOWED_HOSTS+=(a.test)`" in lines[1]
    assert lines[2] == "network: refused 10.0.0.1:22 — 10.0.0.1:22 resolves to a private address"
    assert lines[3].startswith("network: 2 connection(s) of the agent's background telemetry")
    assert lines[4] == "details: agent-sandbox logs --denials --session s1abcdefabcd"


def test_nothing_refused_says_nothing_and_many_are_counted():
    assert netreport.session_lines([], "s") == []
    many = [refused(f"h{i}.test") for i in range(netreport.MAX_LINES + 3)]
    lines = netreport.session_lines(many, "s")
    assert "… and 3 more refused destination(s)" in lines[netreport.MAX_LINES]


def test_an_odd_host_gets_no_line_to_paste():
    assert netreport.paste_line(refused("a b")) == ""
    assert netreport.paste_line(refused("::1", 8000)) == "ALLOWED_HOSTS+=([::1]:8000)"


def test_the_report_reads_only_its_own_sessions_records(tmp_path):
    import json

    log = tmp_path / "net.log"
    log.write_text("".join(json.dumps(r) + "\n" for r in (
        refused("mine.test"), refused("theirs.test", session="s2"))) + '{"torn')
    lines = netreport.session_report(str(log), "s1")
    assert any("mine.test" in l for l in lines) and not any("theirs" in l for l in lines)
    assert netreport.session_report(str(tmp_path / "none"), "s1") == []
