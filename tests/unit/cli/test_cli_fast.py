"""Unit tests for the hand-written fast path of `agent-sandbox run`
(agent_sandbox.cli._fast_run) and its agreement with the full typer CLI."""
from __future__ import annotations

import subprocess
import sys

import pytest

from agent_sandbox import cli


def expected(command, project_dir=None, backend=None, dry_run=False, keep_fds=(),
             job_shared=False, allocation=None) -> dict:
    return {"project_dir": project_dir, "backend": backend, "dry_run": dry_run,
            "keep_fds": keep_fds, "command": list(command),
            **({"job_shared": True} if job_shared else {}),
            **({"allocation": allocation} if allocation else {})}


ACCEPTED = [
    (["claude"], expected(["claude"])),
    (["claude", "--resume", "-p", "x"], expected(["claude", "--resume", "-p", "x"])),
    (["--project-dir", "/p", "bash"], expected(["bash"], project_dir="/p")),
    (["--project-dir=/p", "bash", "-l"], expected(["bash", "-l"], project_dir="/p")),
    (["--project-dir=/a=b", "x"], expected(["x"], project_dir="/a=b")),
    (["--backend", "bwrap", "x"], expected(["x"], backend="bwrap")),
    (["--backend=landlock", "x"], expected(["x"], backend="landlock")),
    (["--dry-run", "true"], expected(["true"], dry_run=True)),
    (["--job-shared", "--backend", "bwrap", "x"], expected(["x"], backend="bwrap",
                                                            job_shared=True)),
    (["--", "true"], expected(["true"])),
    (["--dry-run", "--backend", "auto", "--project-dir", "/p", "--", "sh", "-c", "exit 3"],
     expected(["sh", "-c", "exit 3"], project_dir="/p", backend="auto", dry_run=True)),
    (["--project-dir", "/a", "--project-dir", "/b", "x"], expected(["x"], project_dir="/b")),
    # the command starts at the first non-option: later options belong to it
    (["cmd", "--dry-run"], expected(["cmd", "--dry-run"])),
    (["cmd", "--project-dir", "/p"], expected(["cmd", "--project-dir", "/p"])),
    (["--dry-run", "cmd", "--", "x"], expected(["cmd", "--", "x"], dry_run=True)),
    # after -- everything is the command, even what looks like an option
    (["--", "--weird"], expected(["--weird"])),
    (["--", "--help"], expected(["--help"])),
    (["--", "--", "x"], expected(["--", "x"])),
    (["--", "--dry-run"], expected(["--dry-run"])),
    # an option's value is taken as is, like the full CLI does
    (["--project-dir", "--dry-run", "x"], expected(["x"], project_dir="--dry-run")),
    (["--keep-fd", "9", "x"], expected(["x"], keep_fds=(9,))),
    (["--keep-fd=9", "--keep-fd", "12", "x"], expected(["x"], keep_fds=(9, 12))),
    (["--allocation", "8283", "x"], expected(["x"], allocation="8283")),
    (["--allocation=8283", "x"], expected(["x"], allocation="8283")),
]


@pytest.mark.parametrize("args,result", ACCEPTED, ids=[" ".join(a) for a, _ in ACCEPTED])
def test_fast_run_parses(args, result):
    assert cli._fast_run(list(args)) == result


def test_fast_run_does_not_modify_its_input():
    args = ["--dry-run", "--", "x"]
    cli._fast_run(args)
    assert args == ["--dry-run", "--", "x"]


REJECTED = [
    [],                               # no command
    ["--"],                           # no command after --
    ["--dry-run"],
    ["--dry-run", "--"],
    ["--project-dir"],                # missing value
    ["--backend"],
    ["--project-dir", "/p"],          # value, then no command
    ["--help"],
    ["-h"],
    ["--help", "x"],
    ["--version", "x"],
    ["--unknown", "x"],
    ["--dry-run=yes", "x"],           # a flag does not take a value
    ["--dry", "x"],                   # no abbreviations
    ["--project", "/p", "x"],
    ["-p", "/p", "x"],
    ["-", "x"],                       # unusual: let typer decide
    ["--dry-run", "--bogus", "x"],
    ["--keep-fd", "x", "y"],           # not a number: typer says so
    ["--keep-fd=-1", "x"],
    ["--keep-fd"],
    ["--allocation", "12a", "x"],     # not a job id: typer says so
    ["--allocation"],
]


@pytest.mark.parametrize("args", REJECTED, ids=[" ".join(a) or "(empty)" for a in REJECTED])
def test_fast_run_defers_to_typer(args):
    assert cli._fast_run(list(args)) is None


# ---------------------------------------------------------------- main() routing
@pytest.fixture
def launches(monkeypatch):
    import agent_sandbox.launch.run as launcher

    calls: list[dict] = []

    def fake_run(command, *, project_dir=None, backend=None, dry_run=False, environ=None,
                 keep_fds=(), job_shared=False, allocation=None):
        calls.append({"command": list(command), "project_dir": project_dir,
                      "backend": backend, "dry_run": dry_run, "keep_fds": tuple(keep_fds),
                      **({"job_shared": True} if job_shared else {}),
                      **({"allocation": allocation} if allocation else {})})
        return 42

    monkeypatch.setattr(launcher, "run", fake_run)
    return calls


def test_main_fast_path_passes_options_and_exit_code(launches):
    code = cli.main(["run", "--project-dir=/p", "--dry-run", "--", "--weird", "arg"])
    assert code == 42
    assert launches == [{"command": ["--weird", "arg"], "project_dir": "/p", "backend": None,
                         "dry_run": True, "keep_fds": ()}]


def test_main_help_goes_to_typer_and_runs_nothing(launches, capsys):
    code = cli.main(["run", "--help"])
    assert code == 0
    assert launches == []
    out = capsys.readouterr().out
    assert "--project-dir" in out and "--dry-run" in out and "--backend" in out
    assert "--keep-fd" in out


@pytest.mark.parametrize("args", [["run"], ["run", "--project-dir"], ["run", "--bogus", "x"],
                                  ["run", "--dry-run"], ["run", "--keep-fd", "x", "y"]])
def test_main_errors_go_to_typer_and_run_nothing(launches, capsys, args):
    code = cli.main(args)
    assert code == 2, capsys.readouterr()
    assert launches == []


def test_fast_path_does_not_import_typer_or_pydantic():
    script = (
        "import sys\n"
        "import agent_sandbox.launch.run as launcher\n"
        "launcher.run = lambda command, **kw: 7\n"
        "from agent_sandbox import cli\n"
        "code = cli.main(['run', '--dry-run', '--project-dir', '/p', '--', 'true'])\n"
        "heavy = sorted(m for m in ('typer', 'click', 'pydantic', 'agent_sandbox.cli.app')\n"
        "               if m in sys.modules)\n"
        "print(code, heavy)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "7 []"


# ---------------------------------------------------------------- agreement with typer
@pytest.mark.parametrize("args,result", ACCEPTED, ids=[" ".join(a) for a, _ in ACCEPTED])
def test_fast_path_agrees_with_typer(launches, args, result):
    from agent_sandbox.cli.app import app

    try:
        app(args=["run", *args], prog_name="agent-sandbox", standalone_mode=False)
    except SystemExit:
        pass
    assert len(launches) == 1, f"typer did not launch for {args}"
    fast = cli._fast_run(list(args))
    assert launches[0] == fast
