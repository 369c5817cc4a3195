"""Agent sessions at a real terminal (issue 36): the real Claude Code under a
pty, driven through the test user's interactive bash (job control on) as a
person would, against the mock model API (tests/support/agentmock.py):

- after `agent-sandbox trust` (outside), two sessions in a row start at
  Claude Code's prompt with no trust dialog and — the key brokered, a new
  placeholder each session — no "Do you want to use this API key?"; the
  approval never reaches the user's file, the trust stays;
- Ctrl-Z suspends the whole session to the outer shell (terminal restored),
  `fg` resumes it and the session goes on (a prompt reaches the mock API);
- the end-of-session report names no inert key.

Output is polled for with a deadline (Terminal.expect), never slept for.
"""
from __future__ import annotations

import json
import time

import pytest

from tests.support.agentmock import MockAPI
from tests.support.install import INSTALLED
from tests.support.terminals import CTRL_C, CTRL_Z, OUTER_PS1, Terminal

KEY = "sk-ant-api03-" + "k" * 80
PROMPT = "\u276f\u00a0"           # Claude Code's input line, ready for a prompt
KEY_QUESTION = "API key"
TRUST_QUESTION = "trust this folder"


@pytest.fixture
def claude_term(user, project, home, clis):
    opened = []

    def open_terminal(**env) -> Terminal:
        base = user.env(PS1=OUTER_PS1, TERM="xterm-256color",
                        PATH=f"{clis}:/usr/local/bin:/usr/bin:/bin", **env)
        base.pop("PROMPT_COMMAND", None)
        term = Terminal(user, base, project)
        opened.append(term)
        return term

    yield open_terminal
    for term in opened:
        term.close()
    # A launcher hung up with its session still running (a failed test)
    # merges and removes its copy after the terminal is gone: wait for it,
    # before the home fixture clears the records it would look for.
    copies = home / ".local/state/agent-sandbox-run/agents"
    deadline = time.monotonic() + 15
    while copies.is_dir() and any(copies.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)     # polled for an outcome, with a deadline


def onboarded(user, **extra) -> None:
    """The user ran Claude Code before (its first-run onboarding done)."""
    user.write(".claude.json", json.dumps({"hasCompletedOnboarding": True, "theme": "dark",
                                           **extra}))


def session_text(term: Terminal, until: str, timeout: float = 40.0) -> str:
    """What the terminal showed up to `until`, escapes dropped (Claude Code
    draws spaces as cursor moves)."""
    import re

    found = term.expect(f"(.*?){re.escape(until)}", timeout)
    return re.sub(rb"\x1b\[[0-9;?<>=]*[A-Za-z]|\x1b\][^\x07]*\x07", b" ",
                  found.group(0)).decode(errors="replace")


def leave(term: Terminal) -> str:
    """Ctrl-C, and once Claude Code says "Press Ctrl-C again to exit", Ctrl-C
    again (a first one may close a dialog; a second one that does not count
    lets the hint expire: start over). Never a Ctrl-C once the session is
    over (the relay pops the title it set): it would interrupt the
    launcher's merge. Returns the report, up to the outer prompt."""
    for _ in range(5):
        term.send(CTRL_C)
        try:
            term.expect("again", 3)
        except AssertionError:
            continue
        term.send(CTRL_C)
        try:
            term.expect(r"\x1b\[23;0t", 3)        # the relay's end: the title popped
        except AssertionError:
            continue
        return session_text(term, OUTER_PS1, 30)
    raise AssertionError("Claude Code did not exit on Ctrl-C")


def test_two_sessions_ask_no_key_and_no_trust_question_after_trust(user, project, home,
                                                                   claude_term):
    onboarded(user)
    term = claude_term(ANTHROPIC_API_KEY=KEY, NETWORK_MODE="allowlist",
                       API_KEY_BROKERING="true")
    out = term.marker(f"{INSTALLED} trust --agent claude")
    assert f"claude: trusts {project}" in out, out
    for _ in range(2):
        term.line(f"{INSTALLED} claude")
        shown = session_text(term, PROMPT)
        assert KEY_QUESTION not in shown and TRUST_QUESTION not in shown, shown[-2000:]
        report = leave(term)
        # Known-inert keys (statistics, tips, caches) are not listed at the end.
        for inert in ("lastFpsAverage", "tipsHistory", "lastGracefulShutdown",
                      "officialMarketplace", "closedIssues"):
            assert inert not in report, report
    state = json.loads((home / ".claude.json").read_text())
    assert state["projects"][str(project)]["hasTrustDialogAccepted"] is True
    assert "customApiKeyResponses" not in state       # the session copy's alone
    assert KEY not in (home / ".claude.json").read_text()


def test_ctrl_z_suspends_the_session_to_the_outer_shell_and_fg_resumes_it(
        user, project, home, claude_term):
    # The user approved their key outside (NETWORK_MODE=open: not brokered).
    onboarded(user, customApiKeyResponses={"approved": [KEY[-20:]], "rejected": []})
    with MockAPI() as api:
        term = claude_term(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=api.url,
                           NETWORK_MODE="open")
        term.marker(f"{INSTALLED} trust --agent claude")
        term.line(f"{INSTALLED} claude")
        session_text(term, PROMPT)
        term.send(CTRL_Z)
        term.expect(r"Stopped.*" + OUTER_PS1.strip(), 15)
        # The outer shell, its terminal back in cooked mode.
        assert term.marker("echo x${AGENT_SANDBOX}x").strip() == "xx"
        assert "-icanon" not in term.marker("stty -a")
        term.line("fg")
        session_text(term, PROMPT)
        term.send("say hello")
        term.send("\r")
        shown = session_text(term, "id_rsa", 40)       # the mock's answer: a Bash call
        assert api.requests, shown[-1500:]
        leave(term)
        term.line("echo status=$?")
        term.expect("status=0")


def test_a_subdirectory_of_a_repository_is_warned_and_home_writes_are_named(user, project):
    top = project / "repo"
    user.run(["mkdir", "-p", str(top / "src")])
    user.run(["git", "init", "-q", str(top)], timeout=30)
    env = user.env(SANDBOX_BACKEND="bwrap", SANDBOX_QUIET="0")
    result = user.run([INSTALLED, "run", "--", "sh", "-c",
                       # (a session shorter than the sandbox's start is not watched)
                       "sleep 1; echo a > ~/notes.txt; mkdir ~/out; echo b > ~/out/r; echo c > kept; "
                       "echo > ~/\"$(printf 'e\\033]0;x\\007')\""],
                      cwd=top / "src", env=env)
    assert result.returncode == 0, result.stderr
    assert f"lies inside the git repository {top}" in result.stderr
    assert f"--project-dir {top}" in result.stderr
    line = next(line for line in result.stderr.splitlines() if "vanished" in line)
    # A name is the session's: its escape sequence is shown escaped.
    assert line.startswith("agent-sandbox: 3 files the session wrote to its private home")
    assert "\x1b" not in result.stderr and "e\\x1b]0;x\\x07" in line
    assert "~/notes.txt" in line and "~/out/r" in line and "kept" not in line
    assert (top / "src" / "kept").exists() and not (user.home / "notes.txt").exists()
    # With the top level as the project: no warning, git works inside.
    result = user.run([INSTALLED, "run", "--project-dir", str(top), "--", "git", "status",
                       "--short"], cwd=top / "src", env=env)
    assert result.returncode == 0, result.stderr
    assert "git repository" not in result.stderr and "vanished" not in result.stderr


def test_trust_is_refused_inside_the_sandbox(user, project, home):
    onboarded(user)
    result = user.run([INSTALLED, "run", "--", INSTALLED, "trust", "--agent", "claude"],
                      cwd=project, env=user.env(SANDBOX_BACKEND="bwrap"))
    assert result.returncode != 0
    assert "trust is refused inside the sandbox" in result.stderr
    assert "projects" not in json.loads((home / ".claude.json").read_text())
