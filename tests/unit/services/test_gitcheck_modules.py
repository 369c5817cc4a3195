"""The end check finds every submodule gitdir git could take, at any depth
(services/gitcheck.py module_gitdirs; docs/shared-channels.md §7)."""
from __future__ import annotations

import os

from agent_sandbox.services import gitcheck


def test_module_gitdirs_are_found_at_any_depth_by_head_or_config(tmp_path):
    modules = tmp_path / "modules"
    (modules / "a" / "b" / "c" / "d" / "e" / "f").mkdir(parents=True)
    (modules / "a" / "b" / "c" / "d" / "e" / "f" / "config").write_text("")
    (modules / "x").mkdir()
    (modules / "x" / "HEAD").write_text("ref: refs/heads/main\n")
    (modules / "x" / "y").mkdir()
    (modules / "x" / "y" / "HEAD").write_text("")        # a module inside another's gitdir
    (modules / "plain").mkdir()
    found = sorted(os.path.relpath(p, modules) for p in gitcheck.module_gitdirs(str(tmp_path)))
    assert found == ["a/b/c/d/e/f", "x", "x/y"]
    assert len(gitcheck.module_gitdirs(str(tmp_path), limit=2)) <= 2
