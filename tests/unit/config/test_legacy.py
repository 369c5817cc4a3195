"""The table of the bash original's keys (config/legacy.py): every key is
mapped or inert with a reason, network modes never widen, the merge accepts
them with one warning a key, and migrate rewrites a file in our terms."""
from __future__ import annotations

import pytest

from agent_sandbox.config.legacy import LEGACY, LegacyValueError, migrate, translate
from agent_sandbox.config.load import merge
from agent_sandbox.config.syntax import parse_config

# The keys the bash original's config loader declares beside ours.
ORIGINAL_ONLY = {"BIND_DEV_PTS", "NETWORK_FILTER_MODE", "NETWORK_FILTER_FALLBACK",
                 "NETWORK_BLOCKLIST", "NETWORK_BLOCKLIST_EXCEPT", "NETWORK_MAIL_BLOCK",
                 "SUPPRESS_AGENT_WARNINGS", "HIDE_FROM_SANDBOX", "SANDBOX_MODULES",
                 "SANDBOX_NPROC_LIMIT", "LANDLOCK_REQUIRED_ABI", "LANDLOCK_HARD_REQUIREMENT",
                 "MOUNT_GUARD", "MOUNT_GUARD_INTERVAL", "CLEANUP_MATERIALIZED_BLOCKED_FILES"}


def test_every_key_of_the_original_is_in_the_table():
    assert set(LEGACY) == ORIGINAL_ONLY
    assert all(entry.why for entry in LEGACY.values())


@pytest.mark.parametrize("mode,ours", [("open", "open"), ("isolated", "isolated"),
                                       ("filtered", "allowlist"), ("proxied", "allowlist"),
                                       ("FILTERED", "allowlist")])
def test_network_modes_map_to_ours_never_wider(mode, ours):
    assignments, warning = translate("NETWORK_FILTER_MODE", mode)
    assert assignments == (("NETWORK_MODE", ours),)
    assert warning.startswith("NETWORK_FILTER_MODE (a key of the bash agent-sandbox)")


def test_fallback_to_open_has_no_effect():
    assert translate("NETWORK_FILTER_FALLBACK", "open")[0] == ()


def test_a_bad_network_mode_is_refused():
    with pytest.raises(LegacyValueError):
        translate("NETWORK_FILTER_MODE", "wide")


DEFAULTS = "NETWORK_MODE=open\nHOME_ACCESS=tmpwrite\n"


def layers(user_text):
    return [("default", "/d.conf", DEFAULTS), ("user", "/u.conf", user_text)]


def test_merge_maps_and_warns_once_per_key():
    merged = merge(layers("BIND_DEV_PTS=true\nNETWORK_FILTER_MODE=filtered\n"
                          "BIND_DEV_PTS=false\n"), home="/h", user="u", overrides=[])
    assert merged.raw["NETWORK_MODE"] == "allowlist"
    assert merged.origins["NETWORK_MODE"] == "/u.conf:2"
    assert sum("BIND_DEV_PTS" in w for w in merged.warnings) == 1
    assert "BIND_DEV_PTS" not in merged.raw


def test_a_genuinely_unknown_key_stays_an_error():
    from agent_sandbox.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown key BIND_DEV_PTSS; did you mean"):
        merge(layers("BIND_DEV_PTSS=true\n"), home="/h", user="u", overrides=[])


def test_migrate_rewrites_in_our_terms():
    text = "HOME_ACCESS=read\nNETWORK_FILTER_MODE=proxied\nMOUNT_GUARD=true\nDEVICES+=(/dev/x)\n"
    out = migrate(parse_config(text, file="f", variables={"HOME": "/h", "USER": "u"}))
    lines = out.splitlines()
    assert lines[1:] == [
        "HOME_ACCESS=read",
        f"# NETWORK_FILTER_MODE=proxied — {LEGACY['NETWORK_FILTER_MODE'].why}",
        "NETWORK_MODE=allowlist",
        f"# MOUNT_GUARD=true — {LEGACY['MOUNT_GUARD'].why}",
        "DEVICES+=(/dev/x)"]


def test_the_blocklist_takes_hosts_out_of_the_allow_list():
    merged = merge([("default", "/d.conf", DEFAULTS + "ALLOWED_HOSTS=(pypi.org github.com)\n"),
                    ("user", "/u.conf", "NETWORK_FILTER_MODE=filtered\n"
                                        "NETWORK_BLOCKLIST=(GitHub.com pastebin.com)\n")],
                   home="/h", user="u", overrides=[])
    assert merged.raw["ALLOWED_HOSTS"] == ("pypi.org",)
    assert merged.raw["NETWORK_MODE"] == "allowlist"
    assert any("NETWORK_BLOCKLIST" in w for w in merged.warnings)


def test_the_blocklist_exception_list_widens_nothing():
    assert translate("NETWORK_BLOCKLIST_EXCEPT", ("evil.example",))[0] == ()


def test_migrate_writes_the_blocklist_as_a_comment():
    text = "NETWORK_BLOCKLIST=(pastebin.com)\n"
    out = migrate(parse_config(text, file="f", variables={"HOME": "/h", "USER": "u"}))
    assert "ALLOWED_HOSTS-" not in out
    assert "# (remove (pastebin.com) from ALLOWED_HOSTS if you list them)" in out
