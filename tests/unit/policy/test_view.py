"""The bwrap view of a project's `.git` (policy/view.py ViewBuilder.overlays).

In a project that is no repository, the placeholders make a `.git` holding
only git's control files (hooks/, config, config.worktree, commondir), all
kept read-only: one read-only bind of the directory shows the same and pins
it, where the pin and a bind per entry took five mounts. An existing `.git`
(a repository, or anything but another session's untouched placeholders:
test_view_running_git.py) keeps the writable pin and its read-only control
files.
"""
from __future__ import annotations

import os
import shutil

from agent_sandbox.policy.resolve import resolve_policy
from agent_sandbox.policy.view import Bind, RoBind, mount_ops, placeholders
from tests.support.homes import context, make_home, settings_for
from tests.support.plans import under, view_of


def test_a_project_without_a_repository_gets_one_read_only_git(tmp_path):
    home = make_home(tmp_path)
    shutil.rmtree(home / "proj" / ".git")
    dotgit = str(home / "proj" / ".git")
    policy, ops = view_of(home)
    assert under(ops, dotgit) == [RoBind(dotgit, dotgit)]
    # The placeholders still make what it shows, before the sandbox starts.
    made = {p.path for p in placeholders(policy)}
    assert {f"{dotgit}/hooks", f"{dotgit}/config", f"{dotgit}/commondir"} <= made
    # The project's other protected paths keep their own binds.
    envrc = str(home / "proj" / ".envrc")
    assert RoBind(envrc, envrc) in ops


def test_an_existing_git_of_placeholders_only_keeps_the_pin(tmp_path):
    """A `.git` holding more than placeholders (here a config with content)
    is not listed, HEAD or not."""
    home = make_home(tmp_path)
    dotgit = str(home / "proj" / ".git")
    os.unlink(f"{dotgit}/hooks/pre-commit")
    _, ops = view_of(home)
    assert under(ops, dotgit)[0] == Bind(dotgit, dotgit)


def test_a_repository_keeps_its_writable_pin_and_read_only_control_files(tmp_path):
    home = make_home(tmp_path)
    dotgit = str(home / "proj" / ".git")
    (home / "proj" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    _, ops = view_of(home)
    mounts = under(ops, dotgit)
    assert mounts[0] == Bind(dotgit, dotgit)
    assert RoBind(f"{dotgit}/hooks", f"{dotgit}/hooks") in mounts
    assert RoBind(f"{dotgit}/config", f"{dotgit}/config") in mounts


def test_a_pinned_directory_below_the_read_only_git_is_not_bound_again(tmp_path):
    """A protected path deeper in the `.git` the placeholders make pins its
    parent (resolve._pinned_parents): the read-only `.git` holds it already."""
    home = make_home(tmp_path)
    shutil.rmtree(home / "proj" / ".git")
    policy = resolve_policy(settings_for(home, "PROTECTED_PATHS+=(.git/info/attributes)\n"),
                            context(home), backend="bwrap")
    dotgit = str(home / "proj" / ".git")
    assert f"{dotgit}/info" in policy.pinned
    assert under(mount_ops(policy), dotgit) == [RoBind(dotgit, dotgit)]
