"""services/linkcheck.py: files with a second name outside the writable trees,
reported at launch; the install's in self.protected and doctor (issue 27 §1)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_sandbox.backends.base import Guarantees, self_protection
from agent_sandbox.services import linkcheck
from agent_sandbox.tools.doctor import install_links_item
from tests.support.policies import policy_of


@pytest.fixture
def tree(tmp_path) -> Path:
    outside = tmp_path / "cache" / "archive" / "mod.py"
    outside.parent.mkdir(parents=True)
    outside.write_text("x")
    project = tmp_path / "proj"
    (project / ".venv" / "lib").mkdir(parents=True)
    os.link(outside, project / ".venv" / "lib" / "mod.py")
    (project / "src").mkdir()
    (project / "src" / "a").write_text("a")
    os.link(project / "src" / "a", project / "src" / "b")      # both names inside
    (project / "src" / "link").symlink_to(outside)              # never followed
    return project


def test_scan_finds_linked_files_and_shared_keeps_those_with_a_name_outside(tree):
    files, directories, complete = linkcheck.scan(str(tree), {})
    assert complete
    assert sorted(os.path.relpath(f[0], tree) for f in files) == [".venv/lib/mod.py", "src/a",
                                                                  "src/b"]
    assert linkcheck.shared(files) == [(str(tree / ".venv/lib/mod.py"), 2)]
    assert set(directories) == {str(tree), str(tree / ".venv"), str(tree / ".venv/lib"),
                                str(tree / "src")}


def test_remembered_directories_are_not_listed_again_until_they_change(tree, monkeypatch):
    _, remembered, _ = linkcheck.scan(str(tree), {})
    listed = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p: listed.append(p) or real(p))
    files, again, _ = linkcheck.scan(str(tree), remembered)
    assert listed == [] and again == remembered
    assert linkcheck.shared(files) == [(str(tree / ".venv/lib/mod.py"), 2)]
    (tree / "src" / "new").write_text("n")
    os.link(tree / "src" / "new", tree.parent / "cache" / "new-outside")
    files, _, _ = linkcheck.scan(str(tree), remembered)
    assert listed == [str(tree / "src")]
    assert (str(tree / "src/new"), 2) in linkcheck.shared(files)
    os.unlink(tree / ".venv" / "lib" / "mod.py")       # the venv made again as copies
    (tree / ".venv" / "lib" / "mod.py").write_text("x")
    files, _, _ = linkcheck.scan(str(tree), remembered)
    assert (str(tree / ".venv/lib/mod.py"), 2) not in linkcheck.shared(files)


def test_the_walk_stops_at_its_limit_and_says_so(tree):
    _, _, complete = linkcheck.scan(str(tree), {}, limit=2)
    assert not complete


def test_roots_are_the_writable_trees_outermost_without_the_hidden_ones(tmp_path):
    policy = policy_of("/h", project_dir="/h/proj", home_writable=("/h/.claude", "/h/proj/sub"),
                       extra_writable=("/h/.local/state/agent-sandbox-caches/p-1",),
                       hidden=("/h/.local/state/agent-sandbox-caches",))
    assert linkcheck.roots_of(policy) == ["/h/proj", "/h/.claude"]


def test_report_says_it_at_every_launch_and_remembers_the_directories(tree, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    policy = policy_of(str(home), project_dir=str(tree), home_writable=(), extra_writable=(),
                       hidden=())
    said = []
    for _ in range(2):
        found = linkcheck.report(policy, said.append)
        assert found == [(str(tree / ".venv/lib/mod.py"), 2)]
    assert len(said) == 2 and all("UV_LINK_MODE=copy" in s and "mod.py (2 links)" in s
                                  for s in said)
    stored = list((home / ".local/state/agent-sandbox/cache/links").iterdir())
    assert len(stored) == 1 and stored[0].stat().st_mode & 0o777 == 0o600
    assert linkcheck._load(str(home), [str(tree)])          # trusted: the user's, private
    stored[0].chmod(0o666)
    assert linkcheck._load(str(home), [str(tree)]) == {}    # writable by others: ignored


def test_the_install_check_feeds_self_protected_and_doctor(tree):
    links = linkcheck.install_links([str(tree / ".venv"), str(tree)])   # nested: walked once
    assert links == (1, (str(tree / ".venv/lib/mod.py"),))
    g = Guarantees()
    self_protection(g, policy_of("/h", install_links=links))
    assert g.rows["self.protected"][0] == "partial"
    assert "UV_LINK_MODE=copy" in g.rows["self.protected"][1]
    self_protection(g, policy_of("/h", install_links=(0, ())))
    assert g.rows["self.protected"] == ("yes", "")
    item = install_links_item(links, (str(tree),))
    assert item.status == "GAPS" and "UV_LINK_MODE=copy" in item.fix
    assert install_links_item((0, ()), (str(tree),)).status == "GO"
