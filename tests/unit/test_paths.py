"""agent_sandbox/paths.py: remove_tree, the launcher's rmtree without shutil
(session copies, the egress proxy's and the chaperon's directories)."""
from __future__ import annotations

from agent_sandbox.paths import remove_tree


def test_a_copy_is_removed_without_following_the_links_a_session_planted(tmp_path):
    """paths.remove_tree (shutil.rmtree without its imports): the tree
    goes, a link in it is removed, never followed."""
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep/file").write_text("mine")
    root = tmp_path / "copy"
    (root / "a/b/c").mkdir(parents=True)
    (root / "a/b/c/file").write_text("x")
    (root / "a/link").symlink_to(outside)
    (root / "a/b/filelink").symlink_to(outside / "keep/file")
    (root / "fifo").touch()
    remove_tree(str(root))
    assert not root.exists() and not root.is_symlink()
    assert (outside / "keep/file").read_text() == "mine"
    link = tmp_path / "link-to-outside"
    link.symlink_to(outside)
    remove_tree(str(link))          # the path itself a link: unlinked
    assert not link.is_symlink() and (outside / "keep/file").exists()
    remove_tree(str(tmp_path / "gone"))   # missing: nothing to do
