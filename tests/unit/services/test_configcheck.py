"""services/configcheck.py: agents' project configuration made or changed by a
session, at any depth (the real sessions: tests/adversarial/test_project_configs.py)."""
from __future__ import annotations

import io
import json
import os

from agent_sandbox.services import configcheck
from agent_sandbox.names import PROJECT_CONFIGS, PROJECT_CONFIGS_REPORTED

HOOK = json.dumps({"hooks": {"SessionStart": [{"hooks": [{"type": "command",
                                                            "command": "touch /tmp/x"}]}]}})


def write(path, text: str = "x") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    return str(path)


def test_the_table_names_each_entry_once_relative_and_with_its_readers():
    paths = [p for p, _ in PROJECT_CONFIGS + PROJECT_CONFIGS_REPORTED]
    assert len(paths) == len(set(paths))
    assert all(not p.startswith(("/", "~", "..")) and readers
               for p, readers in PROJECT_CONFIGS + PROJECT_CONFIGS_REPORTED)
    for expected in (".claude/settings.json", ".claude/skills/", ".mcp.json", ".codex/",
                     ".gemini/", ".opencode/", ".vscode/", ".envrc"):
        assert expected in paths


def test_files_made_or_changed_at_any_depth_are_reported_and_the_users_own_are_not(tmp_path):
    own = write(tmp_path / ".vscode/settings.json", '{"a": 1}')
    kept = write(tmp_path / "lib/.claude/skills/s/SKILL.md", "mine")
    changed = write(tmp_path / "lib/.codex/config.toml", "model = 'x'\n")
    before = configcheck.snapshot(str(tmp_path))
    assert set(before) == {own, kept, changed}
    nested = write(tmp_path / "a/b/.claude/settings.json", HOOK)
    write(changed, 'notify = ["sh", "-c", "evil"]\n[mcp_servers.m]\ncommand = "srv"\n')
    env = write(tmp_path / "svc/.env", "AIDER_LINT_CMD=evil2\nOTHER=1\n")
    write(tmp_path / ".claude/settings.local.json", "")         # empty: a placeholder
    write(tmp_path / ".git/x/.claude/settings.json", HOOK)       # .git is not entered
    write(tmp_path / "src/settings.json", HOOK)                  # not a table entry
    findings, walk = configcheck.evaluate(str(tmp_path), before)
    assert walk.complete
    by_path = {f.path: f for f in findings}
    assert set(by_path) == {nested, changed, env}
    assert by_path[nested].runs == "touch /tmp/x" and "Claude Code" in by_path[nested].readers
    assert by_path[changed].runs == "sh -c evil; srv"
    assert by_path[env].runs == "AIDER_LINT_CMD=evil2"
    assert by_path[nested].remedy == ("rm", "--", nested)


def test_without_a_snapshot_every_non_empty_file_is_reported(tmp_path):
    own = write(tmp_path / ".vscode/tasks.json", "{}")
    findings, _ = configcheck.evaluate(str(tmp_path), None)
    assert [f.path for f in findings] == [own]


def test_a_symlink_is_reported_by_its_target_and_never_followed(tmp_path):
    os.makedirs(tmp_path / "sub/.claude")
    os.symlink("/etc", tmp_path / "sub/.claude/hooks")
    findings, _ = configcheck.evaluate(str(tmp_path), {})
    assert [(f.path, f.runs) for f in findings] == [
        (str(tmp_path / "sub/.claude/hooks"), "a symlink to /etc")]


def test_a_walk_cut_short_is_said_and_its_snapshot_knows_nothing(tmp_path):
    for n in range(5):
        write(tmp_path / f"d{n}/f")
    assert configcheck.walk(str(tmp_path), limit=3).complete is False
    out = io.StringIO()
    findings, walk = configcheck.evaluate(str(tmp_path), {})
    configcheck.report(str(tmp_path / "home"), "s", str(tmp_path), findings,
                       configcheck.Walk({}, False, [str(tmp_path / "x")]), out)
    assert "stopped after" in out.getvalue() and "could not be listed" in out.getvalue()


def test_the_report_names_the_file_what_it_runs_and_the_removal_and_logs_it(tmp_path):
    home = tmp_path / "home"
    nested = write(tmp_path / "p/sub/.claude/settings.json", HOOK)
    out = io.StringIO()
    configcheck.check(str(home), "sess1", str(tmp_path / "p"), {}, out)
    line = out.getvalue()
    assert line.startswith(f"agent-sandbox: agent config: {nested} ")
    assert "touch /tmp/x" in line and line.rstrip().endswith(f"rm -- {nested}")
    from agent_sandbox.logfiles import log_directory

    record = json.loads(open(os.path.join(log_directory(str(home)),
                                          "config_sess1.log")).read())
    assert record["event"] == "agent-config" and record["file"] == nested


def test_commands_in_each_format():
    assert configcheck.commands_in("x/.mcp.json", b'{"mcpServers": {"a": {"command": "n",'
                                   b' "args": ["s.js", "-v"]}}}') == "n; s.js -v"
    assert configcheck.commands_in("x/.aider.conf.yml", b"model: x\nlint-cmd: evil\n") == \
        "lint-cmd: evil"
    assert configcheck.commands_in("x/settings.json", b"{not json") == ""
    assert configcheck.commands_in("x/hooks/run.sh", b"#!/bin/sh\nevil\n") == ""


def test_a_walk_reads_each_inode_once_and_no_more_than_its_budget(tmp_path, monkeypatch):
    # Review of issue 27: thousands of links to one large file under a table
    # name made every launch and every end read (and hash) it again and again.
    from agent_sandbox import paths

    reads, read_regular = [], paths.read_regular

    def counting(path, limit):
        reads.append(path)
        return read_regular(path, limit)

    monkeypatch.setattr(paths, "read_regular", counting)
    first = write(tmp_path / "sub/.claude/skills/a/SKILL.md", "y" * 1000)
    for n in range(50):
        os.link(first, tmp_path / f"sub/.claude/skills/a/copy{n}.md")
    found = configcheck.walk(str(tmp_path))
    assert len(found.files) == 51 and len(reads) == 1, reads
    assert len({f for f, _ in found.files.values()}) == 1

    reads.clear()
    monkeypatch.setattr(configcheck, "HASH_BUDGET", 1500)
    for n in range(3):
        write(tmp_path / f"sub/.claude/skills/b{n}/SKILL.md", "z" * 1000 + str(n))
    found = configcheck.walk(str(tmp_path))
    hashed = {f for f, _ in found.files.values() if f.startswith("sha256:")}
    # 1500 bytes: one of the ~1000-byte files is read, the others are known
    # by their metadata (the linked one once, whichever the walk meets first).
    assert len(reads) == 1 and len(hashed) == 1, reads
    assert sum(f.startswith("large:") for f, _ in found.files.values()) >= 2
