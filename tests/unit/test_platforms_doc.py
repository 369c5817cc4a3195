"""docs/platforms.md is kept current by the tests (issue 30 item 6): every
row of its "Measured in CI" table names the test that measures it, that test
exists, and the versions the Debian root rows state are the ones
tests/integration/test_platform_roots.py asserts of its root."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.platformroot import CLAIMED

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "platforms.md"


def measured_rows(text: str) -> list[list[str]]:
    section = text.split("## Measured in CI", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header, separator, *body = rows
    assert set(separator) <= set("|-: "), separator
    assert [c.strip() for c in header.strip("|").split("|")][-1] == "measured by"
    return [[c.strip() for c in row.strip("|").split("|")] for row in body]


def problems(text: str) -> list[str]:
    """A line per measured row whose last cell names no existing test."""
    out = []
    for row in measured_rows(text):
        found = re.fullmatch(r"`(tests/[\w/]+\.py)::(test_\w+)`", row[-1])
        if not found:
            out.append(f"{row[0]}: the last cell names no test ({row[-1]!r})")
            continue
        path, name = REPO / found.group(1), found.group(2)
        if not path.exists():
            out.append(f"{row[0]}: {path} does not exist")
            continue
        names = {node.name for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef)}
        if name not in names:
            out.append(f"{row[0]}: {found.group(1)} has no {name}")
    return out


def test_every_measured_row_names_a_test_that_exists():
    assert len(measured_rows(DOC.read_text())) >= 5
    assert problems(DOC.read_text()) == []


def test_the_root_rows_state_the_versions_the_smoke_set_asserts():
    rows = {row[0].split(" (")[0]: row for row in measured_rows(DOC.read_text())}
    for suite, title in (("bullseye", "Debian 11 root"), ("trixie", "Debian 13 root"),
                         ("sid", "Debian sid root")):
        versions = rows[title][1]
        for package, prefix in CLAIMED[suite].items():
            word = {"python3": "Python"}.get(package, package)
            assert f"{word} {prefix.rstrip('.')}" in versions, (title, package, versions)


def test_the_guard_finds_a_row_without_its_test():
    text = ("## Measured in CI\n\n| platform | measured by |\n|---|---|\n"
            "| X | `tests/integration/test_platform_roots.py::test_nothing_like_this` |\n"
            "| Y | by hand |\n")
    assert problems(text) == [
        "X: tests/integration/test_platform_roots.py has no test_nothing_like_this",
        "Y: the last cell names no test ('by hand')"]
