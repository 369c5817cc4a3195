"""Unit tests for agent_sandbox.policy.envfilter: the environment scrub of SPEC §6."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_sandbox.policy.envfilter import is_removed, scrub

# The shipped defaults' shape, reduced to what the tests need.
BLOCKED = ("KUBECONFIG", "SLURM_CONF", "DATABASE_URL")
PATTERNS = ("SSH_*", "*_TOKEN", "AWS_*", "*SECRET*/i")
ALLOWED = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")


def run(environ, *, blocked=BLOCKED, patterns=PATTERNS, allowed=ALLOWED, extra=(), forced=None):
    return scrub(environ, blocked=blocked, patterns=patterns, allowed=allowed, extra=extra,
                 forced=forced or {})


def test_exact_names_are_removed_and_only_exact_names():
    kept, removed = run({"KUBECONFIG": "/k", "KUBECONFIG_X": "1", "XKUBECONFIG": "2",
                         "kubeconfig": "3", "PATH": "/usr/bin"})
    assert removed == ("KUBECONFIG",)
    assert kept == {"KUBECONFIG_X": "1", "XKUBECONFIG": "2", "kubeconfig": "3",
                    "PATH": "/usr/bin"}


@pytest.mark.parametrize("name", ["SSH_AUTH_SOCK", "SSH_", "GH_TOKEN", "_TOKEN", "AWS_PROFILE",
                                  "AWS_SECRET_ACCESS_KEY"])
def test_globs_remove_matching_names(name):
    kept, removed = run({name: "v", "HOME": "/h"})
    assert removed == (name,)
    assert name not in kept


@pytest.mark.parametrize("name", ["XSSH_AGENT", "ssh_auth_sock", "GH_TOKENS", "gh_token",
                                  "TOKEN", "MYAWS_X", "aws_profile"])
def test_globs_are_anchored_and_case_sensitive_without_i(name):
    kept, removed = run({name: "v"})
    assert removed == ()
    assert kept == {name: "v"}


@pytest.mark.parametrize("name", ["MY_SECRET", "my_secret_thing", "SeCrEt", "xsecretx"])
def test_i_suffix_makes_a_pattern_case_insensitive(name):
    _, removed = run({name: "v"})
    assert removed == (name,)


def test_i_suffix_is_not_part_of_the_glob_and_applies_to_its_own_pattern_only():
    # "*SECRET*/i" must not require a literal "/i"; "SSH_*" stays case-sensitive.
    _, removed = run({"A_SECRET": "1", "ssh_x": "2"})
    assert removed == ("A_SECRET",)
    _, removed = run({"db_token": "1"}, patterns=("*_TOKEN/i",))
    assert removed == ("db_token",)
    _, removed = run({"db_token": "1"}, patterns=("*_TOKEN",))
    assert removed == ()


def test_allowed_names_survive_patterns_and_exact_blocks():
    environ = {"CLAUDE_CODE_OAUTH_TOKEN": "oauth", "ANTHROPIC_API_KEY": "sk-ant",
               "OTHER_TOKEN": "gone"}
    kept, removed = run(environ, blocked=BLOCKED + ("ANTHROPIC_API_KEY",))
    assert kept == {"CLAUDE_CODE_OAUTH_TOKEN": "oauth", "ANTHROPIC_API_KEY": "sk-ant"}
    assert removed == ("OTHER_TOKEN",)


def test_allowed_is_exact_not_a_pattern():
    # ALLOWED_ENV_VARS are exact names: a near miss is still removed by the pattern.
    kept, removed = run({"ANTHROPIC_API_KEY_TOKEN": "x", "anthropic_api_key": "y"},
                        patterns=("*_TOKEN", "*_KEY/i"))
    assert kept == {}
    assert removed == ("ANTHROPIC_API_KEY_TOKEN", "anthropic_api_key")


def test_sandbox_env_is_added_after_filtering_and_splits_on_first_equals():
    kept, removed = run({"PATH": "/usr/bin", "GH_TOKEN": "t"},
                        extra=("EDITOR=vi", "OPTS=a=b=c", "EMPTY=", "PATH=/opt/bin"))
    assert kept["EDITOR"] == "vi"
    assert kept["OPTS"] == "a=b=c"
    assert kept["EMPTY"] == ""
    assert kept["PATH"] == "/opt/bin"          # SANDBOX_ENV replaces the caller's value
    assert removed == ("GH_TOKEN",)


def test_forced_values_win_over_caller_and_sandbox_env():
    forced = {"HOME": "/home/alice", "AGENT_SANDBOX": "1"}
    kept, removed = run({"HOME": "/home/forged", "AGENT_SANDBOX": "0"},
                        extra=("HOME=/also/forged",), forced=forced)
    assert kept["HOME"] == "/home/alice"
    assert kept["AGENT_SANDBOX"] == "1"
    assert removed == ()


def test_forced_values_are_set_even_when_the_name_is_blocked():
    kept, removed = run({"SSH_X": "1"}, patterns=("*",), forced={"HOME": "/h"})
    assert kept == {"HOME": "/h"}
    assert removed == ("SSH_X",)


def test_removed_names_are_sorted_and_values_never_reported():
    environ = {"ZZ_TOKEN": "z-secret", "AWS_A": "a-secret", "SSH_M": "m-secret",
               "KUBECONFIG": "k-secret", "KEEP": "ok"}
    kept, removed = run(environ)
    assert removed == ("AWS_A", "KUBECONFIG", "SSH_M", "ZZ_TOKEN")
    assert list(removed) == sorted(removed)
    assert kept == {"KEEP": "ok"}
    assert not any("secret" in name for name in removed)


def test_no_patterns_and_no_blocks_keeps_everything():
    environ = {"A": "1", "B_TOKEN": "2"}
    kept, removed = scrub(environ, blocked=(), patterns=(), allowed=())
    assert kept == environ
    assert kept is not environ
    assert removed == ()


def test_caller_environment_is_not_modified():
    environ = {"GH_TOKEN": "t", "HOME": "/forged"}
    run(environ, extra=("X=1",), forced={"HOME": "/home/alice"})
    assert environ == {"GH_TOKEN": "t", "HOME": "/forged"}


def test_shipped_default_patterns_cover_spec_examples():
    from agent_sandbox.config.load import load_settings

    settings = load_settings(home="/nonexistent-home", user="alice", environ={},
                             admin_path="/nonexistent/admin.conf", cache=False)
    kwargs = dict(blocked=settings.BLOCKED_ENV_VARS, patterns=settings.BLOCKED_ENV_PATTERNS,
                  allowed=settings.ALLOWED_ENV_VARS)
    for name in ("SSH_AUTH_SOCK", "GITHUB_TOKEN", "MY_SECRET", "DB_PASSWORD", "X_CREDENTIAL",
                 "X_CREDENTIALS", "SOME_API_KEY", "AWS_SECRET_ACCESS_KEY",
                 "AZURE_CLIENT_SECRET", "GCP_PROJECT", "GOOGLE_CLOUD_PROJECT", "VAULT_ADDR",
                 "KUBECONFIG", "KUBE_CONTEXT", "SLURM_JWT", "DOCKER_HOST", "CI_JOB_TOKEN",
                 "GITLAB_TOKEN", "DATABASE_URL", "PGPASSWORD", "MYSQL_PWD", "KRB5CCNAME",
                 "SLURM_CONF", "DBUS_SESSION_BUS_ADDRESS", "GOOGLE_APPLICATION_CREDENTIALS",
                 "my_passwd"):
        assert is_removed(name, **kwargs), name
    for name in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY",
                 "GEMINI_API_KEY", "PATH", "LANG", "TERM", "SLURM_JOB_ID", "HOME"):
        assert not is_removed(name, **kwargs), name


names = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefgh0123456789", min_size=1,
                max_size=12)


@given(environ=st.dictionaries(names, st.text(max_size=8), max_size=12),
       allowed=st.sets(names, max_size=4), blocked=st.sets(names, max_size=4),
       forced=st.dictionaries(names, st.text(max_size=8), max_size=3))
def test_partition_property(environ, allowed, blocked, forced):
    kept, removed = scrub(environ, blocked=blocked, patterns=("*_TOKEN", "A*/i"),
                          allowed=allowed, forced=forced)
    # every caller name is either kept (with its value) or removed, never both
    for name, value in environ.items():
        if name in forced:
            assert kept[name] == forced[name]
        elif name in removed:
            assert name not in kept
            assert name not in allowed
        else:
            assert kept[name] == value
    for name in allowed & environ.keys():
        assert name not in removed
    assert set(removed) <= environ.keys()
    assert list(removed) == sorted(removed)
    assert set(kept) == (environ.keys() - set(removed)) | forced.keys()
