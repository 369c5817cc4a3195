"""jobstart.py restores the submitting session's environment, but not its
egress relay settings (docs/network.md, Jobs): a job in JOB_NETWORK_MODE=open
must not send its traffic to a relay that does not exist there."""
from __future__ import annotations

from agent_sandbox.paths import helper_module

jobstart = helper_module("jobstart")

SESSION = {"HTTPS_PROXY": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
           "ALL_PROXY": "socks5h://127.0.0.1:3128", "NO_PROXY": "localhost,127.0.0.1",
           "AGENT_SANDBOX_EGRESS": "/run/agent-sandbox/egress.sock",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:3128/broker/anthropic",
           "ANTHROPIC_API_KEY": "sk-ant-api03-agentsandbox0123", "MY_VAR": "kept"}


def test_an_open_job_gets_none_of_the_sessions_relay_settings():
    env = jobstart.job_environment({"env": SESSION, "workdir": "/p"}, {"PATH": "/usr/bin"})
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "NO_PROXY", "AGENT_SANDBOX_EGRESS",
                 "ANTHROPIC_BASE_URL"):
        assert name not in env, name
    assert env["MY_VAR"] == "kept" and env["ANTHROPIC_API_KEY"].startswith("sk-ant-api03-")


def test_an_allowlist_job_keeps_its_own_relay_settings():
    own = {"HTTPS_PROXY": "http://127.0.0.1:3128", "NO_PROXY": "localhost,127.0.0.1"}
    env = jobstart.job_environment({"env": SESSION, "workdir": "/p"}, own)
    assert env["HTTPS_PROXY"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == "localhost,127.0.0.1"


def test_a_site_proxy_of_an_open_session_reaches_the_job():
    site = {"HTTPS_PROXY": "http://proxy.site.org:3128", "NO_PROXY": ".site.org"}
    env = jobstart.job_environment({"env": site, "workdir": "/p"}, {})
    assert env["HTTPS_PROXY"] == "http://proxy.site.org:3128" and env["NO_PROXY"] == ".site.org"
