"""The strictness rules of admin floors (pure)."""
import pytest

from agent_sandbox.config import locks

A = dict(admin_origin="/etc/agent-sandbox/sandbox.conf:3", origin="/home/u/.config/x:1")


@pytest.mark.parametrize("key,admin,candidate,expected", [
    ("HOME_ACCESS", "tmpwrite", "write", "tmpwrite"),
    ("HOME_ACCESS", "tmpwrite", "read", "tmpwrite"),
    ("HOME_ACCESS", "tmpwrite", "restricted", "restricted"),
    ("HOME_ACCESS", "read", "tmpwrite", "tmpwrite"),
    ("SLURM_SCOPE", "project", "none", "project"),
    ("SLURM_SCOPE", "project", "user", "project"),
    ("SLURM_SCOPE", "project", "session", "session"),
    ("NETWORK_MODE", "isolated", "open", "isolated"),
    ("PRIVATE_TMP", "true", "false", "true"),
    ("PRIVATE_TMP", "true", "0", "true"),
    ("PRIVATE_TMP", "false", "true", "true"),
    ("SECCOMP", "yes", "no", "yes"),
    ("CHAPERON", "false", "true", "false"),
    ("SLURM_MAX_JOBS", "10", "0", "10"),
    ("SLURM_MAX_JOBS", "10", "11", "10"),
    ("SLURM_MAX_JOBS", "10", "5", "5"),
    ("CHAPERON_LOG_RETAIN_DAYS", "30", "7", "30"),
])
def test_scalar_floors(key, admin, candidate, expected):
    value, warning = locks.enforce(key, admin, candidate, **A)
    assert value == expected
    if expected != candidate:
        assert warning and key in warning and candidate in warning and A["admin_origin"] in warning
    else:
        assert warning is None


def test_keep_lists_cannot_lose_admin_entries():
    value, warning = locks.enforce("BLOCKED_FILES", (".a", ".b"), (".c",), **A)
    assert value == (".c", ".a", ".b")
    assert "removing (.a .b)" in warning
    value, warning = locks.enforce("BLOCKED_FILES", (".a",), (".a", ".z"), **A)
    assert value == (".a", ".z") and warning is None


def test_narrow_lists_can_only_shrink():
    value, warning = locks.enforce("ALLOWED_BACKENDS", ("bwrap",), ("bwrap", "landlock"), **A)
    assert value == ("bwrap",) and "landlock" in warning
    value, warning = locks.enforce("ALLOWED_PROJECT_PARENTS", ("/home/u",),
                                   ("/home/u/work", "/scratch"), **A)
    assert value == ("/home/u/work",) and "/scratch" in warning
    value, warning = locks.enforce("ALLOWED_PROJECT_PARENTS", ("/home/u",), (), **A)
    assert value == ("/home/u",) and warning
    value, warning = locks.enforce("SLURM_ALLOWED_PARTITIONS", (), ("gpu",), **A)
    assert value == ("gpu",) and warning is None


def test_admin_blocked_names_beat_user_allowed_names():
    value, warning = locks.drop_allowed_blocked(("GH_TOKEN", "ANTHROPIC_API_KEY"),
                                                ("GH_TOKEN",), **A)
    assert value == ("ANTHROPIC_API_KEY",) and "GH_TOKEN" in warning
