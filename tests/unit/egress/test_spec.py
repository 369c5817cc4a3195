"""egress/spec.py: the launcher's spec is checked whole (exactly its keys,
rules that parse, brokers with an https upstream); the test/site hook is
read only when it is a regular file of root's that nobody else may write."""
from __future__ import annotations

import json
import os

import pytest

from egress.spec import HOOK_NAME, SpecError, load, load_hook

BROKER = {"upstream": "https://api.anthropic.com", "header": "X-Api-Key", "scheme": "",
          "placeholder": "sk-ant-api03-agentsandboxPLACE", "key": "sk-ant-REAL"}


def _spec(tmp_path, **changes) -> str:
    spec = {"socket": "/run/s.sock", "rules": [{"entry": "pypi.org", "origin": "f:1"}],
            "audit": "/tmp/a.log", "brokers": {"anthropic": BROKER}, "session": "s1"}
    spec.update(changes)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_a_good_spec(tmp_path):
    spec = load(_spec(tmp_path, brokers={"openai": {**BROKER, "scheme": "Bearer ",
                                                    "upstream": "https://api.openai.com/v1/"}}))
    assert spec.rules[0].label == "pypi.org (f:1)"
    broker = spec.brokers["openai"]
    assert (broker.host, broker.port, broker.base_path, broker.header) == (
        "api.openai.com", 443, "/v1", "x-api-key")
    assert "sk-ant-REAL" not in repr(spec)      # the key is never printed


def test_an_http_gateway_upstream_speaks_no_tls(tmp_path):
    spec = load(_spec(tmp_path, brokers={"a": {**BROKER, "upstream": "http://127.0.0.1:4000"}}))
    broker = spec.brokers["a"]
    assert (broker.host, broker.port, broker.tls) == ("127.0.0.1", 4000, False)
    assert spec.brokers["a"]._replace(port=80) and load(_spec(tmp_path, brokers={
        "a": {**BROKER, "upstream": "http://gw.lab"}})).brokers["a"].port == 80


@pytest.mark.parametrize("changes,message", [
    ({"extra": 1}, "exactly"),
    ({"socket": "relative.sock"}, "absolute"),
    ({"rules": [{"entry": "10.0.0.1/8", "origin": "conf:7"}]}, "ALLOWED_HOSTS (conf:7)"),
    ({"rules": [{"entry": "pypi.org"}]}, "each rule"),
    # http is an upstream since issue 36 (a listed gateway; server.py checks the rules)
    ({"brokers": {"a": {**BROKER, "upstream": "ftp://api.anthropic.com"}}}, "http(s)://"),
    ({"brokers": {"a": {**BROKER, "upstream": "https://u:p@api.anthropic.com"}}}, "http(s)://"),
    ({"brokers": {"a": {**BROKER, "key": "a\r\nX-Evil: 1"}}}, "one line"),
    ({"brokers": {"a": {**BROKER, "placeholder": ""}}}, "must be set"),
    ({"brokers": {"a": {k: v for k, v in BROKER.items() if k != "key"}}}, "exactly"),
])
def test_bad_specs_say_why(tmp_path, changes, message):
    with pytest.raises(SpecError) as info:
        load(_spec(tmp_path, **changes))
    assert message in str(info.value)


def test_an_unreadable_spec(tmp_path):
    with pytest.raises(SpecError):
        load(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SpecError):
        load(str(tmp_path / "bad.json"))


def test_the_hook_only_when_root_owns_it_alone(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test must run as root (it chowns the hook file)")
    path = tmp_path / HOOK_NAME
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    ca.chmod(0o644)
    path.write_text(json.dumps({"hosts": {"API.test.": ["127.0.0.2", "127.1", "x"]},
                                "ca_file": str(ca)}))
    path.chmod(0o644)
    hook = load_hook(str(tmp_path))
    assert hook.hosts == {"api.test": ["127.0.0.2"]}
    assert hook.ca_data == "-----BEGIN CERTIFICATE-----\n"
    path.chmod(0o664)
    assert load_hook(str(tmp_path)) is None          # group-writable
    path.chmod(0o644)
    os.chown(path, 1, 1)
    assert load_hook(str(tmp_path)) is None          # not root's
    os.chown(path, 0, 0)
    path.rename(tmp_path / "real.json")
    os.symlink(tmp_path / "real.json", path)
    assert load_hook(str(tmp_path)) is None          # a symlink
    assert load_hook(str(tmp_path / "nowhere")) is None


@pytest.mark.parametrize("spoil", ["not-roots", "group-writable", "symlink", "fifo", "relative"])
def test_the_hook_ca_file_passes_the_hooks_checks_and_is_read_once(tmp_path, spoil):
    """A root-owned hook naming a CA file someone else can write would let
    them sign a certificate for a broker upstream (which gets the real key)."""
    if os.geteuid() != 0:
        pytest.fail("this test must run as root (it chowns the files)")
    pem = "-----BEGIN CERTIFICATE-----\n"
    ca = tmp_path / "ca.pem"
    ca.write_text(pem)
    ca.chmod(0o644)
    named = str(ca)
    if spoil == "not-roots":
        os.chown(ca, 65534, 65534)
    elif spoil == "group-writable":
        ca.chmod(0o664)
    elif spoil == "symlink":
        named = str(tmp_path / "link.pem")
        os.symlink(ca, named)
    elif spoil == "fifo":
        named = str(tmp_path / "fifo.pem")
        os.mkfifo(named)
    else:
        named = "ca.pem"
    (tmp_path / HOOK_NAME).write_text(json.dumps({"hosts": {"api.test": ["127.0.0.2"]},
                                                  "ca_file": named}))
    (tmp_path / HOOK_NAME).chmod(0o644)
    hook = load_hook(str(tmp_path))
    assert hook.hosts == {"api.test": ["127.0.0.2"]} and hook.ca_data is None


def test_the_hook_ca_is_kept_not_reopened(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("first\n")
    ca.chmod(0o644)
    (tmp_path / HOOK_NAME).write_text(json.dumps({"hosts": {}, "ca_file": str(ca)}))
    (tmp_path / HOOK_NAME).chmod(0o644)
    hook = load_hook(str(tmp_path))
    ca.unlink()
    ca.symlink_to("/etc/passwd")       # swapped after the start: not read again
    assert hook.ca_data == "first\n"
