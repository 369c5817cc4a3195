"""Issue 28's redesign changes no plan: for every case of the matrix
(tests/integration/plan_corpus.py — every backend, home mode, network mode,
launch kind and the chaperon on and off, pairwise), the installed launcher's
`--dry-run` report, from the plan cache and compiled anew, is exactly the one
recorded on the commit before the redesign (plan_corpus.json), or the same
refusal. Real launches and dry runs as an unprivileged user of its own."""
from __future__ import annotations

import difflib
import itertools
import json
import re

import pytest

from tests.integration.plan_corpus import (CASES, DIMENSIONS, FIXTURE, MATRIX, host,
                                           record, report)

RECORDED = json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def current(installed):
    return record(installed)


def test_the_matrix_covers_every_pair_of_values():
    for i, j in itertools.combinations(range(len(DIMENSIONS)), 2):
        pairs = {(case[i], case[j]) for case in MATRIX}
        assert pairs == set(itertools.product(DIMENSIONS[i], DIMENSIONS[j])), (i, j)
    assert sorted(RECORDED["cases"]) == sorted("/".join(case) for case in CASES)


def test_the_corpus_was_recorded_on_a_host_like_this_one():
    """The plans name what the host has (the Landlock ABI; Slurm's binaries):
    elsewhere, re-record the corpus at the commit before the change
    (plan_corpus.py's docstring). The entries of / (firejail blacklists
    those the policy does not show) may differ: a CI machine has no
    /work or tool folders of a workstation; the lines that name an entry
    only one host has are left out of both sides (masked, below)."""
    now, then = host(), RECORDED["host"]
    assert {k: v for k, v in now.items() if k != "root"} == \
        {k: v for k, v in then.items() if k != "root"}
    assert {"bin", "etc", "home", "usr", "tmp"} <= set(now["root"]) & set(then["root"])


def masked(text: str, entries: set) -> str:
    """`text` without the lines that name one of the root `entries` (as a
    whole path component: /work, not /workflows), and with firejail's count
    of profile lines (which counts them) left out."""
    if not entries:
        return text
    named = re.compile(r"(?<![\w./-])/(?:%s)(?![\w.-])" % "|".join(map(re.escape, sorted(entries))))
    return "".join(re.sub(r"in order \(\d+\):", "in order (…):", line)
                   for line in text.splitlines(True) if not named.search(line))


def test_the_mask_names_whole_root_entries_only():
    text = ("firejail profile (--profile), in order (3):\n  blacklist /work\n"
            "  blacklist /farm/x\n  ro-bind    /p/.claude/workflows\n  blacklist /workdir\n")
    assert masked(text, {"work", "farm"}) == (
        "firejail profile (--profile), in order (…):\n  ro-bind    /p/.claude/workflows\n"
        "  blacklist /workdir\n")
    assert masked(text, set()) == text


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]))
@pytest.mark.parametrize("way", ["cached", "compiled"])
def test_the_launch_yields_the_recorded_plan(current, case, way):
    assert current["cases"][case]["exit"] == RECORDED["cases"][case]["exit"]
    only_one_host = set(host()["root"]) ^ set(RECORDED["host"]["root"])
    now = masked(report(current, case, way), only_one_host)
    then = masked(report(RECORDED, case, way), only_one_host)
    assert now == then, "".join(difflib.unified_diff(
        then.splitlines(True), now.splitlines(True), "recorded", "now"))
