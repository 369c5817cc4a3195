"""Git integrity, pure parts: which keys run code, which control files of the
project's repository a launch keeps read-only, what the end-of-session check
reports, and the .git/info/exclude block the placeholders use."""
from __future__ import annotations

import io
import os
import shutil
import subprocess

import pytest

from agent_sandbox.services import gitcheck, placeholders
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
    # Found missing in review: each runs a command.
    ("tar.tgz.command", "gzip -cn", True), ("imap.tunnel", "ssh h imapd", True),
    ("gc.recentObjectsHook", "x", True), ("help.browser", "x", True),
    ("instaweb.httpd", "x", True), ("sendemail.work.smtpServer", "/bin/x", True),
    ("sendemail.headerCmd", "x", True), ("sendemail.work.toCmd", "x", True),
    ("alias.x.command", "!touch y", True), ("alias.x.command", "status", False),
    ("lfs.customtransfer.x.path", "x", True), ("tar.tgz.remote", "true", False),
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


def _start(project, home):
    """The snapshot a launch takes: (files, repositories)."""
    return gitcheck.snapshot_repositories(str(project), str(home), GIT)


def _found(findings):
    return {(f.path, f.key) for f in findings}


def test_end_check_reports_only_what_changed(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    _git("init", "-q", ".", cwd=project)
    _git("config", "filter.lfs.process", "git-lfs filter-process", cwd=project)
    lib = project / "lib"
    lib.mkdir()
    _git("init", "-q", ".", cwd=lib)
    _git("config", "alias.x", "!true", cwd=lib)           # the user's, there at the start
    files, repos = _start(project, tmp_path)
    config = f"{project}/.git/config"
    _git("config", "core.pager", "touch /tmp/x", cwd=project)
    nested = project / "sub"
    nested.mkdir()
    _git("init", "-q", ".", cwd=nested)
    _git("config", "alias.x", "!touch /tmp/y", cwd=nested)
    hook = nested / ".git/hooks/post-checkout"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    findings, walk = gitcheck.evaluate(str(project), str(tmp_path), files, repos, GIT)
    assert walk.complete and _found(findings) == {(config, "core.pager"),
                                                  (f"{nested}/.git/config", "alias.x"),
                                                  (str(hook), "hook")}
    pager = next(f for f in findings if f.key == "core.pager")
    assert pager.remedy == ("git", "config", "--file", config, "--unset-all", "core.pager")
    assert pager.message().startswith(f"git: {config} gained core.pager = touch /tmp/x — ")


def test_a_repository_activated_later_reports_keys_staged_before_it_started(tmp_path):
    """Review finding 1: a config staged by session A in a directory that is
    not a repository, activated by session B (HEAD, objects, refs, a gitdir:
    file), is reported at the end of B although the config is older than B."""
    project = tmp_path / "proj"
    stash = project / "stash"
    stash.mkdir(parents=True)
    (stash / "config").write_text('[core]\n\tbare = false\n\tfsmonitor = "touch /tmp/P; false"\n')
    hooks = stash / "hooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text("#!/bin/sh\ntouch /tmp/P\n")
    (hooks / "pre-commit").chmod(0o755)
    os.utime(stash / "config", (1, 1))                    # as old as you like
    files, repos = _start(project, tmp_path)              # session B starts
    assert repos == []
    for name in ("objects", "refs/heads"):
        (stash / name).mkdir(parents=True)
    (stash / "HEAD").write_text("ref: refs/heads/master\n")
    (project / "sub").mkdir()
    (project / "sub/.git").write_text(f"gitdir: {stash}\n")
    findings, _ = gitcheck.evaluate(str(project), str(tmp_path), files, repos, GIT)
    assert _found(findings) == {(f"{stash}/config", "core.fsmonitor"),
                                (f"{hooks}/pre-commit", "hook")}
    # A later session starts with it as a repository: what was there is not new.
    files, repos = _start(project, tmp_path)
    assert gitcheck.evaluate(str(project), str(tmp_path), files, repos, GIT)[0] == []


def test_a_symlinked_dotgit_and_a_gitdir_redirected_by_commondir_are_found(tmp_path):
    project = tmp_path / "proj"
    common = project / "common"
    for name in ("objects", "refs"):
        (common / name).mkdir(parents=True)
    (common / "config").write_text("[core]\n\tsshCommand = touch /tmp/P\n")
    gitdir = project / "gd"                      # HEAD and commondir, no objects
    gitdir.mkdir()
    (gitdir / "HEAD").write_text("ref: refs/heads/master\n")
    (gitdir / "commondir").write_text("../common\n")
    files, repos = _start(project, tmp_path)
    (project / "w").mkdir()
    os.symlink("../gd", project / "w/.git")
    assert str(project / "w/.git") in gitcheck.repositories(str(project)).found
    assert str(gitdir) in gitcheck.repositories(str(project)).found
    findings, _ = gitcheck.evaluate(str(project), str(tmp_path), {}, [], GIT)
    assert (f"{common}/config", "core.sshcommand") in _found(findings)
    assert (f"{project}/w/.git/commondir", "commondir") in _found(findings)


def test_a_renamed_repository_keeps_the_users_keys_and_a_moved_in_one_is_new(tmp_path):
    project = tmp_path / "proj"
    (project / "lib").mkdir(parents=True)
    _git("init", "-q", ".", cwd=project / "lib")
    _git("config", "filter.lfs.process", "git-lfs filter-process", cwd=project / "lib")
    outside = tmp_path / "elsewhere/sub"
    outside.mkdir(parents=True)
    _git("init", "-q", ".", cwd=outside)
    _git("config", "core.pager", "touch /tmp/P", cwd=outside)
    files, repos = _start(project, tmp_path)
    os.rename(project / "lib/.git", project / "lib/.git_orig")     # a bare-looking directory
    os.rename(outside, project / "sub")        # staged outside the project: old files
    findings, _ = gitcheck.evaluate(str(project), str(tmp_path), files, repos, GIT)
    assert _found(findings) == {(f"{project}/sub/.git/config", "core.pager")}


def test_a_directory_the_walk_cannot_list_is_reported(tmp_path, monkeypatch):
    """A repository under a directory made unreadable (chmod 000) escapes the
    walk: say so instead of passing over it (the test runs as root too, so
    the refusal is simulated)."""
    project = tmp_path / "proj"
    hidden = project / "d"
    (hidden / "sub/.git").mkdir(parents=True)
    real_scandir = os.scandir

    def scandir(path):
        if str(path) == str(hidden):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    walk = gitcheck.repositories(str(project))
    assert walk.found == [] and walk.unreadable == [str(hidden)]
    out = io.StringIO()
    gitcheck._report(str(tmp_path), "s", str(project), [], walk, out)
    assert out.getvalue() == (f"agent-sandbox: git: {hidden} could not be listed — a repository "
                              "there was not checked. Make it readable and check it before you "
                              "run git below it.\n")


def test_repositories_walk_is_bounded_and_finds_bare_ones(tmp_path):
    (tmp_path / "a/b/.git").mkdir(parents=True)
    bare = tmp_path / "c/bare"
    (bare / "objects").mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (bare / "x/.git").mkdir(parents=True)        # git finds it first from below the bare one
    found, complete, _ = gitcheck.repositories(str(tmp_path))
    assert complete and sorted(found) == sorted([str(tmp_path / "a/b/.git"), str(bare),
                                                 str(bare / "x/.git")])
    assert gitcheck.repositories(str(tmp_path), limit=1).complete is False


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
