"""A `.git` that holds exactly another running session's placeholders (a
project that is no repository, while a session of it runs) is read-only as a
whole, like the one the placeholders are about to make — or this session
could make the project a repository (policy/view.py _placeholders_only;
docs/shared-channels.md §7). Anything else in it keeps the writable pin."""
from __future__ import annotations

import shutil

from agent_sandbox.policy.view import Bind, RoBind, placeholders
from tests.support.homes import make_home
from tests.support.plans import under, view_of


def _placeholders_of_a_running_session(home):
    shutil.rmtree(home / "proj" / ".git")
    policy, _ = view_of(home)
    for item in placeholders(policy):
        path = home / "proj" / item.path[len(str(home / "proj")) + 1:]
        if ".git" not in path.parts:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if item.is_dir:
            path.mkdir()
        else:
            path.write_bytes(item.placeholder)
    return str(home / "proj" / ".git")


def test_another_sessions_placeholders_only_keep_the_git_read_only(tmp_path):
    home = make_home(tmp_path)
    dotgit = _placeholders_of_a_running_session(home)
    _, ops = view_of(home)
    assert under(ops, dotgit) == [RoBind(dotgit, dotgit)]


def test_anything_else_in_it_keeps_the_writable_pin(tmp_path):
    for extra in ("HEAD", "objects", "config"):
        home = make_home(tmp_path / extra)
        dotgit = _placeholders_of_a_running_session(home)
        target = home / "proj" / ".git" / extra
        if extra == "objects":
            target.mkdir()
        else:
            target.write_text("ref: refs/heads/main\n" if extra == "HEAD" else "[core]\n")
        _, ops = view_of(home)
        assert under(ops, dotgit)[0] == Bind(dotgit, dotgit), extra
