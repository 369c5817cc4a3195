"""Placeholders are made and removed by descriptor below their anchor, never
through a symlink (services/placeholders.py, docs/shared-channels.md §7): the
pure parts, and the walk on a temporary tree."""
from __future__ import annotations

import os

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.services import placeholders
from agent_sandbox.policy.resolve import Protected


def test_anchor_is_the_longest_tree_holding_the_path():
    anchors = ("/h/u/p", "/h/u", "/h/u/.claude")
    assert placeholders.anchor_of("/h/u/p/.claude/settings.json", anchors) == "/h/u/p"
    assert placeholders.anchor_of("/h/u/.claude/CLAUDE.md", anchors) == "/h/u/.claude"
    assert placeholders.anchor_of("/h/u/.envrc", anchors) == "/h/u"
    assert placeholders.anchor_of("/elsewhere/x", anchors) == "/"
    assert placeholders.anchor_of("/h/u/px/y", ("/h/u/p",)) == "/"     # not a prefix match


def test_components_are_lexical_and_never_climb():
    assert placeholders.components("/p/a/b", "/p") == ["a", "b"]
    with pytest.raises(OSError):
        placeholders.components("/p", "/p")
    with pytest.raises(OSError):
        placeholders.components("/q/a", "/p")


def _item(path, is_dir=False):
    item = Protected(str(path), is_dir, False)
    return item


def test_a_symlinked_parent_is_refused_and_nothing_lands_in_its_target(tmp_path):
    project, target = tmp_path / "p", tmp_path / "tgt"
    project.mkdir()
    target.mkdir()
    (project / ".claude").symlink_to(target)
    made: list = []
    with pytest.raises(PolicyError) as raised:
        placeholders.create([_item(project / ".claude" / "hooks" / "x")], (str(project),), made)
    assert f"{project}/.claude is a symbolic link (to {target})" in str(raised.value)
    assert raised.value.reason == "placeholder_symlink"
    assert list(target.iterdir()) == [] and made == []


def test_missing_parents_are_made_listed_and_removed_newest_first(tmp_path, monkeypatch):
    home, project = tmp_path, tmp_path / "p"
    project.mkdir()
    monkeypatch.setattr(placeholders, "_others_running", lambda *a: False)
    made = placeholders.create([_item(project / "a" / "b" / "f"),
                                _item(project / ".vscode", True)], (str(project),))
    assert [m[0] for m in made] == [str(project / "a"), str(project / "a" / "b"),
                                    str(project / "a" / "b" / "f"), str(project / ".vscode")]
    assert all(m[3] == str(project) for m in made)
    placeholders.release(str(home), str(project), "s", made)
    assert list(project.iterdir()) == []


def test_release_does_not_follow_a_directory_swapped_for_a_link(tmp_path, monkeypatch):
    project, outside = tmp_path / "p", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "f").write_bytes(b"")            # looks exactly like the placeholder
    monkeypatch.setattr(placeholders, "_others_running", lambda *a: False)
    made = placeholders.create([_item(project / "d" / "f")], (str(project),))
    os.unlink(project / "d" / "f")
    os.rmdir(project / "d")
    (project / "d").symlink_to(outside)        # what a session could do meanwhile
    placeholders.release(str(tmp_path), str(project), "s", made)
    assert (outside / "f").exists()



def test_a_missing_anchor_yields_to_the_one_above(tmp_path, monkeypatch):
    home = tmp_path
    made = placeholders.create([_item(home / ".codex" / "config.toml")],
                               (str(home), str(home / ".codex")))
    assert [(m[0], m[3]) for m in made] == [(str(home / ".codex"), str(home)),
                                            (str(home / ".codex" / "config.toml"), str(home))]
