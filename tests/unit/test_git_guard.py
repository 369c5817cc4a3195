"""Git integrity, pure parts: which keys run code, which control files of the
project's repository a launch keeps read-only, what the end-of-session check
reports, and the .git/info/exclude block the placeholders use."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from agent_sandbox.launch import gitcheck, placeholders
from agent_sandbox.policy import gitrepo

GIT = shutil.which("git")


@pytest.mark.parametrize("key, value, runs", [
    ("core.fsmonitor", "touch /tmp/x", True), ("core.fsmonitor", "true", False),
    ("core.fsmonitor", "false", False), ("alias.st", "status", False),
    ("alias.x", "!sh -c true", True), ("filter.Evil.clean", "cat", True),
    ("diff.pdf.textconv", "pdftotext", True), ("merge.ours.driver", "true", True),
    ("submodule.a.update", "checkout", False), ("submodule.a.update", "!rm", True),
    ("includeIf.gitdir:~/x/.path", "y", True), ("user.name", "x", False),
    ("core.sshCommand", "ssh", True), ("credential.https://h.helper", "store", True),
])
def test_code_keys(key, value, runs):
    assert gitrepo.is_code_key(key, value) is runs


def test_config_is_parsed_by_git_as_git_reads_it():
    assert GIT, "git is not installed"
    data = b"[core] fsmonitor = \"touch x\" \n[Alias]\n\tX = !true\n[include]path=../a\n"
    assert gitrepo.config_entries(data, GIT) == [
        ("core.fsmonitor", "touch x"), ("alias.x", "!true"), ("include.path", "../a")]


def _git(*args, cwd):
    subprocess.run([GIT, *args], cwd=cwd, check=True, capture_output=True)


def test_control_paths_follow_includes_hooks_path_modules_and_worktrees(tmp_path):
    project, home = tmp_path / "proj", tmp_path / "home"
    project.mkdir(), home.mkdir()
    _git("init", "-q", ".", cwd=project)
    _git("config", "include.path", "../shared.gitconfig", cwd=project)
    _git("config", "core.hooksPath", ".husky", cwd=project)
    (project / ".git/modules/lib/hooks").mkdir(parents=True)
    (project / ".git/modules/lib/HEAD").write_text("ref: refs/heads/main\n")
    (project / ".git/worktrees").mkdir()
    paths = {p: (d, c) for p, d, c in gitrepo.control_paths(str(project), str(home), GIT)}
    g = f"{project}/.git"
    for path in (f"{g}/config", f"{g}/config.worktree", f"{g}/commondir", f"{g}/hooks",
                 f"{g}/worktrees", f"{g}/modules/lib/config", f"{g}/modules/lib/hooks",
                 f"{project}/shared.gitconfig", f"{project}/.husky"):
        assert path in paths, path
    assert paths[f"{g}/commondir"] == (False, b".\n")   # "." is what git assumes without one
    assert paths[f"{project}/.husky"][0] is True


def test_end_check_reports_only_what_changed(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    _git("init", "-q", ".", cwd=project)
    _git("config", "filter.lfs.process", "git-lfs filter-process", cwd=project)
    config = f"{project}/.git/config"
    files = {config: open(config, "rb").read().hex()}
    _git("config", "core.pager", "touch /tmp/x", cwd=project)
    nested = project / "sub"
    nested.mkdir()
    _git("init", "-q", ".", cwd=nested)
    _git("config", "alias.x", "!touch /tmp/y", cwd=nested)
    hook = nested / ".git/hooks/post-checkout"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    findings, complete = gitcheck.evaluate(str(project), str(tmp_path), files, 0.0, GIT)
    found = {(f.path, f.key) for f in findings}
    assert complete and found == {(config, "core.pager"),
                                  (f"{nested}/.git/config", "alias.x"),
                                  (str(hook), "hook")}
    pager = next(f for f in findings if f.key == "core.pager")
    assert pager.remedy == ("git", "config", "--file", config, "--unset-all", "core.pager")
    assert pager.message().startswith(f"git: {config} gained core.pager = touch /tmp/x — ")
    # Files older than the session and not in the snapshot are the user's;
    # a file the snapshot holds is compared with it whatever its time.
    later = gitcheck.evaluate(str(project), str(tmp_path), files, 2e10, GIT)[0]
    assert [(f.path, f.key) for f in later] == [(config, "core.pager")]


def test_repositories_walk_is_bounded_and_finds_bare_ones(tmp_path):
    (tmp_path / "a/b/.git").mkdir(parents=True)
    bare = tmp_path / "c/bare"
    (bare / "objects").mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    found, complete = gitcheck.repositories(str(tmp_path))
    assert complete and sorted(found) == [str(tmp_path / "a/b/.git"), str(bare)]
    assert gitcheck.repositories(str(tmp_path), limit=1)[1] is False


def test_exclude_block_is_added_merged_and_removed():
    user = b"*.log\n"
    block = placeholders.EXCLUDE_BEGIN + b"/.envrc\n" + placeholders.EXCLUDE_END
    rest, listed = placeholders._without_block(user + block)
    assert rest == user and listed == [b"/.envrc\n"]
    assert placeholders._pattern("a b*", False) == b"/a b\\*\n"
    assert placeholders._pattern(".vscode", True) == b"/.vscode/\n"


def test_exclude_is_written_beneath_the_project_without_following_links(tmp_path):
    project = tmp_path / "proj"
    (project / ".git/info").mkdir(parents=True)
    (project / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (project / ".git/info/exclude").write_bytes(b"*.log\n")
    placeholders._edit_exclude(str(project), lambda old: old + b"/.envrc\n")
    assert (project / ".git/info/exclude").read_bytes() == b"*.log\n/.envrc\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(project / ".git/info")
    os.symlink(elsewhere, project / ".git/info")
    placeholders._edit_exclude(str(project), lambda old: old + b"planted\n")
    assert list(elsewhere.iterdir()) == []
