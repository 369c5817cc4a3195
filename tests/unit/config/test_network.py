"""ALLOWED_HOSTS in the configuration (config/network.py, config/load.py):
entries validated with their file:line, every entry's origin kept across
layers, the admin cap (remove freely, add only what an admin
ALLOWED_HOSTS_USER_MAY_ADD pattern covers), the admin-only keys, and the
NETWORK_MODE / JOB_NETWORK_MODE floor isolated < allowlist < open."""
from __future__ import annotations

import pytest

from agent_sandbox.config import locks, network
from agent_sandbox.config.load import merge
from agent_sandbox.errors import ConfigError

DEFAULTS = ("NETWORK_MODE=open\nJOB_NETWORK_MODE=open\nALLOWED_HOSTS=(pypi.org github.com)\n"
            "ALLOWED_HOSTS_USER_MAY_ADD=()\nLANDLOCK_ALLOWLIST_PARTIAL=false\n"
            "API_KEY_BROKERING=true\n")


def merged(*layers):
    return merge([("default", "/d.conf", DEFAULTS), *layers], home="/h", user="u",
                 overrides=[])


def test_every_entry_keeps_the_file_and_line_that_added_it():
    result = merged(("profile", "/p/claude.conf", "ALLOWED_HOSTS+=(api.anthropic.com)\n"),
                    ("user", "/u.conf", "\n\nALLOWED_HOSTS+=(*.npmjs.org)\n"))
    assert result.raw["ALLOWED_HOSTS"] == ("pypi.org", "github.com", "api.anthropic.com",
                                           "*.npmjs.org")
    assert result.origins[network.HOST_ORIGINS] == {
        "pypi.org": "/d.conf:3", "github.com": "/d.conf:3",
        "api.anthropic.com": "/p/claude.conf:1", "*.npmjs.org": "/u.conf:3"}


@pytest.mark.parametrize("entry", ["exa mple.org", "*", "host:99999", "10.0.0.0/33",
                                   "http://pypi.org", "*.*.org"])
def test_a_bad_entry_fails_naming_its_file_and_line(entry):
    with pytest.raises(ConfigError, match=r"/u\.conf:2: ALLOWED_HOSTS entry"):
        merged(("user", "/u.conf", f"\nALLOWED_HOSTS+=('{entry}')\n"))


def test_an_entry_of_an_earlier_layer_is_not_blamed_on_a_later_one():
    with pytest.raises(ConfigError, match=r"/d2\.conf:1"):
        merge([("default", "/d.conf", DEFAULTS), ("admin", "/d2.conf", "ALLOWED_HOSTS+=('a b')\n"),
               ("user", "/u.conf", "ALLOWED_HOSTS+=(x.org)\n")], home="/h", user="u",
              overrides=[])


@pytest.mark.parametrize("pattern,entry,covered", [
    ("*.example.org", "git.example.org", True),
    ("*.example.org", "*.lab.example.org", True),
    ("*.example.org", "example.org", False),
    ("*.example.org", "evilexample.org", False),
    ("*.example.org", "git.example.org:8443", False),
    ("*.example.org:8443", "git.example.org:8443", True),
    ("git.example.org", "git.example.org", True),
    ("git.example.org", "*.git.example.org", False),
    ("10.0.0.0/8", "10.1.2.0/24", True),
    ("10.0.0.0/8", "10.1.2.3", True),
    ("10.0.0.0/8", "0.0.0.0/0", False),
    ("10.0.0.0/8", "11.0.0.1", False),
    ("[fd00::]/8", "[fd12::]/16", True),
    ("[fd00::]/8", "10.0.0.1", False),
    ("*.example.org", "10.0.0.1", False),
])
def test_what_an_admin_pattern_covers(pattern, entry, covered):
    assert network.covers(pattern, entry) is covered


ADMIN = ("admin", "/etc/a.conf", "ALLOWED_HOSTS=(pypi.org github.com git.site.org)\n"
                                 "ALLOWED_HOSTS_USER_MAY_ADD=(*.site.org)\n")


def test_under_an_admin_cap_users_may_remove_entries():
    result = merged(ADMIN, ("user", "/u.conf", "ALLOWED_HOSTS=(pypi.org)\n"))
    assert result.raw["ALLOWED_HOSTS"] == ("pypi.org",)
    assert not any("ALLOWED_HOSTS" in w for w in result.warnings)


def test_under_an_admin_cap_users_add_only_what_a_pattern_covers():
    result = merged(ADMIN, ("user", "/u.conf",
                            "ALLOWED_HOSTS+=(wiki.site.org pastebin.com 10.0.0.0/8)\n"))
    assert result.raw["ALLOWED_HOSTS"] == ("pypi.org", "github.com", "git.site.org",
                                           "wiki.site.org")
    warning = next(w for w in result.warnings if w.startswith("ALLOWED_HOSTS"))
    assert "pastebin.com 10.0.0.0/8" in warning and "/etc/a.conf:1" in warning
    assert "ALLOWED_HOSTS_USER_MAY_ADD=(*.site.org)" in warning


def test_the_cap_holds_for_the_environment_and_flags_too():
    result = merge([("default", "/d.conf", DEFAULTS), ADMIN], home="/h", user="u",
                   overrides=[("flag", "ALLOWED_HOSTS", ("evil.org",))])
    assert result.raw["ALLOWED_HOSTS"] == ()


def test_without_a_pattern_a_capped_list_only_shrinks():
    result = merged(("admin", "/etc/a.conf", "ALLOWED_HOSTS=(pypi.org)\n"),
                    ("user", "/u.conf", "ALLOWED_HOSTS+=(x.site.org)\n"))
    assert result.raw["ALLOWED_HOSTS"] == ("pypi.org",)
    assert any("entries may only be removed" in w for w in result.warnings)


def test_without_an_admin_list_users_add_anything():
    result = merged(("admin", "/etc/a.conf", "NETWORK_MODE=allowlist\n"),
                    ("user", "/u.conf", "ALLOWED_HOSTS+=(x.org)\n"))
    assert result.raw["ALLOWED_HOSTS"][-1] == "x.org"


@pytest.mark.parametrize("kind", ["user", "conf.d", "profile"])
def test_only_the_admin_sets_the_patterns_users_may_add(kind):
    match = "PROJECT_MATCH=('*')\n" if kind == "conf.d" else ""
    result = merge([("default", "/d.conf", DEFAULTS),
                    ("admin", "/etc/a.conf", "ALLOWED_HOSTS=(pypi.org)\n"),
                    (kind, "/u.conf", f"{match}ALLOWED_HOSTS_USER_MAY_ADD=(*.org)\n"
                                      "ALLOWED_HOSTS+=(x.org)\n")],
                   home="/h", user="u", overrides=[], project_dir="/p")
    assert result.raw["ALLOWED_HOSTS"] == ("pypi.org",)
    assert result.raw["ALLOWED_HOSTS_USER_MAY_ADD"] == ()


def test_only_the_admin_accepts_landlocks_weaker_allowlist():
    result = merged(("user", "/u.conf", "LANDLOCK_ALLOWLIST_PARTIAL=true\n"))
    assert result.raw["LANDLOCK_ALLOWLIST_PARTIAL"] == "false"
    result = merged(("admin", "/etc/a.conf", "LANDLOCK_ALLOWLIST_PARTIAL=true\n"))
    assert result.raw["LANDLOCK_ALLOWLIST_PARTIAL"] == "true"


@pytest.mark.parametrize("key", ["NETWORK_MODE", "JOB_NETWORK_MODE"])
@pytest.mark.parametrize("admin,user,kept", [
    ("allowlist", "open", "allowlist"), ("allowlist", "isolated", "isolated"),
    ("isolated", "allowlist", "isolated"), ("open", "allowlist", "allowlist")])
def test_network_modes_are_ordered_isolated_allowlist_open(key, admin, user, kept):
    value, warning = locks.enforce(key, admin, user, admin_origin="/a:1", origin="/u:1")
    assert value == kept
    assert (warning is not None) is (kept != user)


def test_brokering_is_a_floor_the_admin_can_hold():
    value, warning = locks.enforce("API_KEY_BROKERING", "true", "false",
                                   admin_origin="/a:1", origin="/u:1")
    assert value == "true" and "floor" in warning


def test_the_proxys_rules_name_their_origin():
    from agent_sandbox.config.settings import Settings

    settings = Settings(ALLOWED_HOSTS=("pypi.org", "x.org"),
                        origins={"ALLOWED_HOSTS": "/u.conf:3",
                                 network.HOST_ORIGINS: {"pypi.org": "/d.conf:9"}})
    assert network.rules(settings) == [{"entry": "pypi.org", "origin": "/d.conf:9"},
                                       {"entry": "x.org", "origin": "/u.conf:3"}]
