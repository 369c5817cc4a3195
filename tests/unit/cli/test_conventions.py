"""Pure parts of the CLI conventions: the subcommand vocabulary agrees with
the typer app, typo suggestions, launcher options before a profile name,
help text unwrapping, the man page generator, explain's env/path choice."""
from __future__ import annotations

import pytest

from agent_sandbox import cli
from agent_sandbox.config.profiles import unknown_profile_message
from agent_sandbox.names import SUBCOMMANDS


def test_subcommands_are_the_typer_commands():
    import typer

    from agent_sandbox.cli.app import app

    assert set(typer.main.get_command(app).commands) == set(SUBCOMMANDS)


@pytest.mark.parametrize("typo,meant", [("doctr", "doctor"), ("stauts", "status"),
                                        ("cluade", "claude"), ("explian", "explain"),
                                        ("zzzzqq", None)])
def test_suggestions(typo, meant):
    message = unknown_profile_message(typo, ["claude", "codex", "bash"])
    if meant:
        assert f"did you mean '{meant}'?" in message
    else:
        assert "did you mean" not in message
    assert "profiles here: claude codex bash" in message


@pytest.fixture
def profile_launches(monkeypatch):
    import agent_sandbox.launch.run as launcher

    calls = []
    monkeypatch.setattr(launcher, "run_profile",
                        lambda name, args, **kw: calls.append((name, list(args), kw)) or 0)
    return calls


def test_launcher_options_before_the_profile(profile_launches):
    assert cli.main(["--dry-run", "--project-dir", "/p", "claude", "--dry-run", "-x"]) == 0
    name, args, options = profile_launches[0]
    assert (name, args) == ("claude", ["--dry-run", "-x"])
    assert options["dry_run"] is True and options["project_dir"] == "/p"


def test_options_before_a_subcommand_are_a_usage_error(profile_launches, capsys):
    assert cli.main(["--dry-run", "doctor"]) == 2
    assert profile_launches == []


def test_version_flags(capsys):
    from agent_sandbox import __version__

    for flag in ("-V", "--version"):
        assert cli.main([flag]) == 0
        assert capsys.readouterr().out == f"agent-sandbox {__version__}\n"


def test_unwrap_joins_lines_and_keeps_paragraphs():
    from agent_sandbox.cli.app import _unwrap

    assert _unwrap("One line\n  broken here.\n\nSecond\n para.") == \
        "One line broken here.\n\nSecond para."


def test_man_page_covers_every_command_and_escapes():
    import typer

    from agent_sandbox.cli.app import app
    from agent_sandbox.cli.manpage import _escape, render

    text = render(typer.main.get_command(app), version="9.9", date="2000-01-01")
    assert text.startswith('.TH AGENT\\-SANDBOX 1 "2000-01-01" "agent\\-sandbox 9.9"')
    for name in SUBCOMMANDS:
        if name != "config":
            assert f"\n.SS {name}\n" in text, name
    assert "\n.SS config show\n" in text and "\n.SS config migrate\n" in text
    assert _escape(".TH x\n'y\\z") == "\\&.TH x\n\\&'y\\ez"


def test_explain_takes_an_existing_file_over_a_variable(tmp_path, monkeypatch):
    from agent_sandbox.tools.explain import is_env_name

    monkeypatch.chdir(tmp_path)
    assert is_env_name("keylink")
    (tmp_path / "keylink").symlink_to("/nonexistent")
    assert not is_env_name("keylink") and not is_env_name("./x") and not is_env_name("a/b")


# ---------------------------------------------------------------- issue 36 item 8
def _help(capsys, *args) -> str:
    assert cli.main([*args, "--help"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("args", [(), ("run",), ("logs",), ("explain",), ("config", "show"),
                                  ("sbatch",), ("status",)])
def test_help_shows_no_types_no_backticks_no_internal_options(capsys, args):
    text = _help(capsys, *args)
    for wrong in ("<bool>", "<str>", "<int>", "<list[str]>", "`", "--job ", "--job-shared"):
        assert wrong not in text, (args, wrong)


def test_the_top_help_has_examples_and_says_where_options_go(capsys):
    text = " ".join(_help(capsys).split())
    assert "Examples:" in text and "agent-sandbox run -- make test" in text
    assert "srun --pty agent-sandbox bash" in text
    assert "For a subcommand they go after it: agent-sandbox run --dry-run -- CMD" in text


def test_the_man_page_has_examples_environment_and_files():
    import typer

    from agent_sandbox.cli.app import EXAMPLES, app
    from agent_sandbox.cli.manpage import render

    text = render(typer.main.get_command(app), version="9.9", date="2000-01-01",
                  examples=EXAMPLES, admin_config="/etc/x/sandbox.conf")
    sections = [line[4:] for line in text.splitlines() if line.startswith(".SH ")]
    for wanted in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXIT STATUS",
                   "EXAMPLES", "ENVIRONMENT", "FILES", "SEE ALSO"):
        assert wanted in sections, wanted
    examples = text.split(".SH EXAMPLES")[1].split(".SH ")[0]
    assert examples.count(".TP") == len(EXAMPLES)
    assert "SLURM_JOB_ID" in text and "ANTHROPIC_BASE_URL" in text
    assert "/etc/x/sandbox.conf" in text and "\\-\\-job\\fR" not in text and "`" not in text


@pytest.mark.parametrize("args,right", [
    (["--dry-run", "run", "true"], "agent-sandbox run --dry-run -- true"),
    (["--project-dir", "/p", "run", "--", "ls", "-l"], "agent-sandbox run --project-dir /p -- ls -l"),
    (["--dry-run", "status"], "agent-sandbox status --help"),
])
def test_options_before_a_subcommand_say_the_right_order(profile_launches, capsys, args, right):
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert right in err and "options of a subcommand go after its name" in err
    assert profile_launches == []


def test_help_of_a_profile_says_what_it_changes():
    from agent_sandbox.config.profiles import Profile
    from agent_sandbox.tools.profilehelp import summary

    profile = Profile("claude", "/p/claude.conf", "", ("claude", "--x"), "", "",
                      (".claude/",), brokers=("anthropic",),
                      settings=("settings.json=.claude/settings.json",))
    text = summary(profile, {"NETWORK_MODE": "open", "ALLOWED_HOSTS": ("pypi.org",),
                             "HOME_WRITABLE": (), "QUIET": False},
                   {"NETWORK_MODE": "allowlist", "ALLOWED_HOSTS": ("pypi.org", "api.x"),
                    "HOME_WRITABLE": (".claude",), "QUIET": False})
    assert "runs: claude --x ARGS" in text
    assert "  NETWORK_MODE: open → allowlist" in text
    assert "  ALLOWED_HOSTS: +api.x" in text and "HOME_WRITABLE: +.claude" in text
    assert "QUIET" not in text
    assert "API keys brokered (NETWORK_MODE=allowlist): anthropic" in text
    assert "agent state kept between sessions: .claude/" in text
