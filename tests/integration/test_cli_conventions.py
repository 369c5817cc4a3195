"""The CLI conventions of SPEC §3 and issue 18, run as the unprivileged test
user against the installed agent-sandbox: version and help flags, "did you
mean" with exit 2 for typos, launcher options before the profile name,
completion for bash/zsh/fish, help that wraps at the terminal, explain
following symlinks, --profile and --json, logs --follow, the installed man
page, an unbindable writable path, and a sandbox.conf of the bash original
(every key) loading with one warning a key."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess

import pytest

from tests.support.install import INSTALLED

VERSION = "agent-sandbox 0.1.0"


def cli(user, project, *args, env=None, **kwargs):
    return user.run([INSTALLED, *args], cwd=project, env=env, **kwargs)


# ---------------------------------------------------------------- version, help
@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flags(user, project, flag):
    result = cli(user, project, flag)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, VERSION, "")


def test_short_help_and_help_command(user, project):
    short = cli(user, project, "-h")
    assert short.returncode == 0 and "Usage: agent-sandbox" in short.stdout
    assert "Launcher options go before NAME" in short.stdout
    sub = cli(user, project, "help", "config", "show")
    assert sub.returncode == 0 and "--origin" in sub.stdout and "--profile" in sub.stdout
    assert cli(user, project, "doctor", "-h").stdout.count("Check this host") == 1
    profile = cli(user, project, "help", "claude")
    assert profile.returncode == 0 and "an agent profile" in profile.stdout
    wrong = cli(user, project, "help", "doctr")
    assert wrong.returncode == 2 and "Did you mean 'doctor'" in wrong.stderr


def test_help_wraps_at_the_terminal_not_at_source_line_breaks(user, project):
    result = cli(user, project, "-h", env=user.env(COLUMNS="200"))
    assert "125 means the sandbox could not be set up." in result.stdout


# ---------------------------------------------------------------- typos
@pytest.mark.parametrize("typo,meant", [("doctr", "doctor"), ("stauts", "status"),
                                        ("cluade", "claude")])
def test_typo_is_a_usage_error_with_a_suggestion(user, project, typo, meant):
    result = cli(user, project, typo)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"agent-sandbox: unknown command or agent profile '{typo}'")
    assert f"did you mean '{meant}'?" in result.stderr


def test_subcommand_typo_below_a_group(user, project):
    result = cli(user, project, "config", "shwo")
    assert result.returncode == 2 and "Did you mean 'show'?" in result.stderr


# ---------------------------------------------------------------- launcher options
def test_launcher_options_go_before_the_profile_and_never_reach_the_agent(user, project):
    result = cli(user, project, "--dry-run", "claude", "--resume", "--dry-run")
    assert result.returncode == 0, result.stderr
    argv_line = result.stdout.strip().splitlines()[-1]
    # the agent's own arguments, --dry-run among them, are the agent's (after
    # the profile's own flags)
    assert argv_line.endswith("' --resume --dry-run"), argv_line
    assert " claude --settings " in argv_line, argv_line
    refused = cli(user, project, "--dry-run", "doctor")
    # The usage error says the right order (issue 36 item 8; was typer's "No such option").
    assert refused.returncode == 2 and "options of a subcommand go after its name: " \
        "agent-sandbox doctor --help" in refused.stderr, refused.stderr


# ---------------------------------------------------------------- completion
def test_bash_completion_offers_subcommands_and_profiles(user, project):
    env = user.env(_AGENT_SANDBOX_COMPLETE="complete_bash", COMP_WORDS="agent-sandbox c",
                   COMP_CWORD="1")
    result = cli(user, project, env=env)
    offered = set(result.stdout.split())
    assert {"config", "claude", "codex"} <= offered, result.stdout
    assert "doctor" not in offered


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o default -F"),
                                          ("zsh", "#compdef agent-sandbox"),
                                          ("fish", "complete --command agent-sandbox")])
def test_completion_scripts(user, project, shell, marker):
    result = cli(user, project, env=user.env(_AGENT_SANDBOX_COMPLETE=f"source_{shell}"))
    assert result.returncode == 0 and marker in result.stdout


# ---------------------------------------------------------------- explain
def test_explain_follows_symlinks_to_what_they_reach_inside(user, project):
    link = project / "keylink"
    link.symlink_to(user.home / ".ssh/id_rsa")
    os.lchown(link, user.uid, user.gid)
    for target in ("keylink", "./keylink"):
        result = cli(user, project, "explain", target)
        assert result.returncode == 0, result.stderr
        assert f"a symlink to {user.home}/.ssh/id_rsa, which is hidden" in result.stdout
    data = json.loads(cli(user, project, "explain", "--json", "keylink").stdout)
    assert (data["verdict"], data["resolves_to"]) == ("hidden", f"{user.home}/.ssh/id_rsa")
    env = json.loads(cli(user, project, "explain", "--json", "AWS_SECRET_ACCESS_KEY").stdout)
    assert (env["kind"], env["verdict"]) == ("env", "removed")
    own = json.loads(cli(user, project, "explain", "--json", str(project)).stdout)
    assert own["verdict"] == "writable"


def test_explain_and_config_show_with_a_profile(user, project):
    user.write(".claude/settings.json", "{}\n")
    try:
        check_profile_views(user, project)
    finally:
        shutil.rmtree(user.home / ".claude", ignore_errors=True)


def check_profile_views(user, project):
    plain = json.loads(cli(user, project, "explain", "--json", "~/.claude").stdout)
    claude = json.loads(cli(user, project, "explain", "--json", "--profile", "claude",
                            "~/.claude").stdout)
    assert plain["verdict"] != "writable" and claude["verdict"] == "writable"
    shown = cli(user, project, "config", "show", "--json", "--profile", "claude")
    assert shown.returncode == 0, shown.stderr
    assert ".claude" in json.loads(shown.stdout)["HOME_WRITABLE"]
    unknown = cli(user, project, "config", "show", "--profile", "cluade")
    assert unknown.returncode == 2 and "did you mean 'claude'?" in unknown.stderr


# ---------------------------------------------------------------- logs
RECORD = {"time": "2026-01-01T10:00:00+0000", "session": "cliconv1", "event": "refused",
          "command": "sbatch", "reason": "partition", "detail": "gpu\x1b[2J"}


def test_logs_json_and_follow(user, project):
    log = user.write(".local/state/agent-sandbox/chaperon/h_1_1.log",
                     json.dumps(RECORD) + "\n", 0o600)
    try:
        result = cli(user, project, "logs", "--json", "--session", "cliconv")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == RECORD and "\x1b" not in result.stdout
        follower = subprocess.Popen(
            [INSTALLED, "logs", "--follow", "--json", "--session", "cliconv"], user=user.uid, group=user.gid,
            extra_groups=[], env=user.env(), cwd=project, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            assert json.loads(follower.stdout.readline()) == RECORD
            later = {**RECORD, "session": "cliconv2", "time": "2026-01-01T10:00:01+0000"}
            with open(log, "a") as handle:
                handle.write(json.dumps(later) + "\n")
            ready, _, _ = select.select([follower.stdout], [], [], 10)
            assert ready, "logs --follow printed nothing new"
            assert json.loads(follower.stdout.readline())["session"] == "cliconv2"
        finally:
            follower.send_signal(signal.SIGINT)
            follower.wait(10)
    finally:
        log.unlink()


def test_status_json(user, project):
    result = cli(user, project, "status", "--json")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)


# ---------------------------------------------------------------- man page
def test_man_page_is_installed_from_the_command_tree():
    text = open("/usr/local/share/man/man1/agent-sandbox.1", encoding="utf-8").read()
    assert text.startswith(".TH AGENT\\-SANDBOX 1")
    for section in (".SS run", ".SS doctor", ".SS config show", ".SS config migrate",
                    ".SS logs"):
        assert section in text
    assert "\\-\\-follow" in text and "\\-\\-version, \\-V" in text


# ---------------------------------------------------------------- writable paths
def test_unbindable_writable_paths_are_named_with_the_fix(user, project):
    user.set_config("EXTRA_WRITABLE_PATHS=(/etc /nonexistent/dir)\n")
    result = user.sandbox("sh", "-c", "echo ran", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ran\n"
    assert "changed while starting" not in result.stderr
    assert ("EXTRA_WRITABLE_PATHS: dropped /etc — you cannot write to it outside the "
            "sandbox either") in result.stderr
    assert "EXTRA_WRITABLE_PATHS: dropped /nonexistent/dir — it does not exist" in result.stderr
    assert "Remove it from EXTRA_WRITABLE_PATHS in" in result.stderr


# ---------------------------------------------------------------- the bash original's config
LEGACY_CONF = """# written by the bash agent-sandbox's installer
SANDBOX_BACKEND=auto
HOME_ACCESS=tmpwrite
BIND_DEV_PTS=true
NETWORK_FILTER_MODE=filtered
NETWORK_FILTER_FALLBACK=open
NETWORK_BLOCKLIST=(pastebin.com 0.0.0.0/8)
NETWORK_BLOCKLIST_EXCEPT=()
NETWORK_MAIL_BLOCK=true
SUPPRESS_AGENT_WARNINGS=false
HIDE_FROM_SANDBOX=()
SANDBOX_MODULES=()
SANDBOX_NPROC_LIMIT=4096
LANDLOCK_REQUIRED_ABI=3
LANDLOCK_HARD_REQUIREMENT=false
MOUNT_GUARD=true
MOUNT_GUARD_INTERVAL=5
CLEANUP_MATERIALIZED_BLOCKED_FILES=true
NETWORK_BLOCKLIST+=(example.org)
"""
LEGACY_KEYS = ("BIND_DEV_PTS", "NETWORK_FILTER_MODE", "NETWORK_FILTER_FALLBACK",
               "NETWORK_BLOCKLIST", "NETWORK_BLOCKLIST_EXCEPT", "NETWORK_MAIL_BLOCK",
               "SUPPRESS_AGENT_WARNINGS", "HIDE_FROM_SANDBOX", "SANDBOX_MODULES",
               "SANDBOX_NPROC_LIMIT", "LANDLOCK_REQUIRED_ABI", "LANDLOCK_HARD_REQUIREMENT",
               "MOUNT_GUARD", "MOUNT_GUARD_INTERVAL", "CLEANUP_MATERIALIZED_BLOCKED_FILES")


def test_a_config_of_the_bash_original_loads_with_one_warning_a_key(user, project):
    user.set_config(LEGACY_CONF)
    result = user.sandbox("sh", "-c", "echo ran; cat /proc/net/dev | grep -c :", cwd=project)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "ran" and lines[1] == "1", "filtered must become allowlist (only lo)"
    for key in LEGACY_KEYS:
        assert result.stderr.count(f"{key} (a key of the bash agent-sandbox)") == 1, key
    shown = json.loads(cli(user, project, "config", "show", "--json").stdout)
    assert shown["NETWORK_MODE"] == "allowlist"
    assert "pastebin.com" not in shown["ALLOWED_HOSTS"]
    migrated = cli(user, project, "config", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "\nNETWORK_MODE=allowlist\n" in migrated.stdout
    assert "\n# BIND_DEV_PTS=true — no effect" in migrated.stdout
    assert "\nHOME_ACCESS=tmpwrite\n" in migrated.stdout
    migrated_file = user.write(".config/agent-sandbox/migrated.conf", migrated.stdout)
    user.set_config(migrated_file.read_text())
    clean = user.sandbox("true", cwd=project)
    assert clean.returncode == 0 and "bash agent-sandbox" not in clean.stderr


def test_an_unknown_key_stays_an_error(user, project):
    user.set_config("BIND_DEV_PTS=true\nNETWORK_FILTER_MODDE=open\n")
    result = user.sandbox("true", cwd=project)
    assert result.returncode == 125
    assert "unknown key NETWORK_FILTER_MODDE; did you mean NETWORK_FILTER_MODE?" in result.stderr


def test_a_legacy_value_out_of_range_is_an_error(user, project):
    user.set_config("NETWORK_FILTER_MODE=wide-open\n")
    result = user.sandbox("true", cwd=project)
    assert result.returncode == 125 and "NETWORK_FILTER_MODE=wide-open" in result.stderr
