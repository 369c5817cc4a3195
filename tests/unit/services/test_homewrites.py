"""Issue 36 item 7: what the session wrote to its tmpfs home is named at
exit (services/homewrites.py), and a project below a repository's top level
is warned about (policy/resolve.enclosing_repository)."""
from __future__ import annotations

import os
from types import SimpleNamespace

from agent_sandbox.policy.resolve import enclosing_repository
from agent_sandbox.policy.view import Bind, Tmpfs
from agent_sandbox.services.homewrites import made_paths, report_line, vanishing, watchable


def test_the_sessions_files_are_listed_not_the_plans_nor_other_filesystems(tmp_path):
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / "notes/a.txt").write_text("a")
    (home / "x.txt").write_text("x")
    (home / ".bashrc").write_text("seeded")          # the plan's own file
    os.symlink("/etc/passwd", home / "link")
    (home / "empty").mkdir()                          # a directory alone is no write
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = vanishing(fd, str(home), {f"{home}/.bashrc"})
    finally:
        os.close(fd)
    assert sorted(found) == [f"{home}/link", f"{home}/notes/a.txt", f"{home}/x.txt"]


def test_the_line_names_the_count_the_first_few_and_what_to_do():
    paths = ["/h/u/notes/a", "/h/u/notes/b", "/h/u/x", "/h/u/y"]
    line = report_line(paths, "/h/u", "/h/u/proj")
    assert line.startswith("4 files the session wrote to its private home vanished")
    assert "~/notes/a, ~/notes/b, ~/x and 1 more" in line
    assert "/h/u/proj" in line and "HOME_WRITABLE+=(notes)" in line


def test_only_a_tmpfs_home_the_plan_accounts_for_is_watched():
    plan = SimpleNamespace(backend="bwrap", mounts=(
        Tmpfs("/h/u", 0o755), Bind("/h/u/proj", "/h/u/proj"),
        Bind("/etc", "/etc")))
    policy = SimpleNamespace(home="/h/u", home_access="tmpwrite")
    assert watchable(plan, policy)
    assert made_paths(plan, "/h/u") == {"/h/u/proj"}
    assert not watchable(plan, SimpleNamespace(home="/h/u", home_access="write"))
    assert not watchable(SimpleNamespace(backend="landlock", mounts=()), policy)


def test_a_project_below_a_repository_is_told_its_top_level(tmp_path):
    home = tmp_path / "home"
    top = home / "work" / "repo"
    (top / "sub" / "deeper").mkdir(parents=True)
    (top / ".git").mkdir()
    parents = [str(home)]
    assert enclosing_repository(str(top / "sub" / "deeper"), str(home), parents) == str(top)
    assert enclosing_repository(str(top), str(home), parents) is None     # its own
    (home / "plain").mkdir()
    assert enclosing_repository(str(home / "plain"), str(home), parents) is None
    # A dotfiles repository in the home is not the project's.
    (home / ".git").mkdir()
    assert enclosing_repository(str(home / "plain"), str(home), parents) is None
    # A top level that would not be allowed as a project is not offered.
    assert enclosing_repository(str(top / "sub"), str(home), [str(top / "sub")]) is None
