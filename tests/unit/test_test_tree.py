"""The test tree's own shape (issue 28 item 6): tests are not libraries.

A helper more than one test module needs lives in tests/support/ and its
fixtures come in through `pytest_plugins` (tests/conftest.py); a test module
(test_*.py) imports no other test module and no conftest — neither as
`tests.x.test_y`, nor `from tests.x import test_y`, nor by the bare name
pytest's rootdir insertion makes importable (`from test_y import …`), nor
relatively. Read from the source (AST), imports nested in functions too. Test
files are named by what they test, not by the review round that wrote them.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROUND_NAMES = re.compile(r"review|finding|round\d|fixup", re.I)


def _is_test_module(name: str) -> bool:
    """A dotted module name that names a test module or a conftest."""
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def offending_imports(tests: Path) -> list[str]:
    """'FILE:LINE imports MODULE' for every import of a test module or a
    conftest in a test module below `tests`."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                targets = [base] if node.module else []
                # `from tests.unit.backends import test_backends`, `from . import conftest`
                targets += [f"{base}.{alias.name}".replace("..", ".") for alias in node.names]
            else:
                continue
            for target in targets:
                if _is_test_module(target):
                    where = path.relative_to(tests.parent)
                    found.append(f"{where}:{node.lineno} imports {target}")
                    break
    return found


def test_no_test_module_imports_another_test_module_or_a_conftest():
    assert offending_imports(TESTS) == []


def test_the_guard_finds_every_way_to_import_a_test_module(tmp_path):
    tests = tmp_path / "tests"
    (tests / "unit").mkdir(parents=True)
    (tests / "support").mkdir()
    (tests / "support" / "homes.py").write_text("def make_home(): pass\n")
    (tests / "unit" / "test_b.py").write_text("def helper(): pass\n")
    (tests / "unit" / "test_a.py").write_text(
        "from tests.support.homes import make_home\n"         # allowed: the helper library
        "import pytest\n"
        "from tests.unit.test_b import helper\n"              # 3
        "from tests.unit import test_b\n"                     # 4
        "from tests.conftest import INSTALLED\n"              # 5
        "from test_b import helper as h\n"                    # 6: rootdir insertion
        "from .test_b import helper as r\n"                   # 7: relative
        "def test_x():\n"
        "    import tests.unit.test_b\n")                     # 9: nested
    assert offending_imports(tests) == [
        f"tests/unit/test_a.py:{line} imports {target}" for line, target in [
            (3, "tests.unit.test_b"), (4, "tests.unit.test_b"), (5, "tests.conftest"),
            (6, "test_b"), (7, ".test_b"), (9, "tests.unit.test_b")]]


def test_the_helpers_are_a_package_delivered_as_plugins():
    conftest = ast.parse((TESTS / "conftest.py").read_text())
    plugins = [node.value for node in conftest.body if isinstance(node, ast.Assign)
               and any(getattr(t, "id", None) == "pytest_plugins" for t in node.targets)]
    assert len(plugins) == 1, "tests/conftest.py names the support modules in pytest_plugins"
    names = [elt.value for elt in plugins[0].elts]
    assert names and all(name.startswith("tests.support.") for name in names), names
    for name in names:
        assert (TESTS.parent / (name.replace(".", "/") + ".py")).is_file(), name
    assert (TESTS / "support" / "__init__.py").is_file()
    # No other conftest: fixtures come from the support package alone.
    assert sorted(p.relative_to(TESTS) for p in TESTS.rglob("conftest.py")) == [Path("conftest.py")]


def test_test_files_are_named_by_subject():
    named_by_round = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                            if ROUND_NAMES.search(p.name))
    assert named_by_round == []
