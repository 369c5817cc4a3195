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


def test_the_launchers_own_directory_is_reached_without_following_a_link(tmp_path):
    """paths.open_own_dir: made 0700 where missing; a symlink, a file or
    another user's directory on the way is refused by its path (the launcher
    never makes, writes or grants its directory through what a sandbox with
    ~/.cache writable planted)."""
    import os
    import stat

    import pytest

    from agent_sandbox.paths import NotOwnDirectory, open_own_dir

    home = tmp_path / "home"
    home.mkdir()
    fd = open_own_dir(str(home), ".cache/agent-sandbox/agents", create=True)
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(home / ".cache/agent-sandbox/agents"))
    finally:
        os.close(fd)
    assert stat.S_IMODE((home / ".cache/agent-sandbox").stat().st_mode) == 0o700
    elsewhere = tmp_path / "vim-pack"
    elsewhere.mkdir()
    (home / ".cache/agent-sandbox/agents").rmdir()
    (home / ".cache/agent-sandbox/agents").symlink_to(elsewhere)
    with pytest.raises(NotOwnDirectory) as refused:
        open_own_dir(str(home), ".cache/agent-sandbox/agents", create=True)
    assert str(refused.value) == f"{home}/.cache/agent-sandbox/agents is a symlink"
    (home / ".cache/agent-sandbox/agents").unlink()
    (home / ".cache/agent-sandbox/agents").write_text("")
    with pytest.raises(NotOwnDirectory, match="is not a directory"):
        open_own_dir(str(home), ".cache/agent-sandbox/agents")
    (home / ".cache/agent-sandbox/agents").unlink()
    (home / ".cache/agent-sandbox/agents").mkdir()
    os.chown(home / ".cache/agent-sandbox", os.getuid() + 1, -1)
    with pytest.raises(NotOwnDirectory, match="agent-sandbox is not owned by you"):
        open_own_dir(str(home), ".cache/agent-sandbox/agents")
    with pytest.raises(FileNotFoundError):
        open_own_dir(str(home), ".cache/missing")
    assert list(elsewhere.iterdir()) == []
