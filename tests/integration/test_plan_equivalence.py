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
    """The plans name what the host has (firejail blacklists the entries of
    /; the Landlock ABI; Slurm's binaries): elsewhere, re-record the corpus
    at the commit before the change (plan_corpus.py's docstring)."""
    assert host() == RECORDED["host"]


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]))
@pytest.mark.parametrize("way", ["cached", "compiled"])
def test_the_launch_yields_the_recorded_plan(current, case, way):
    assert current["cases"][case]["exit"] == RECORDED["cases"][case]["exit"]
    now, then = report(current, case, way), report(RECORDED, case, way)
    assert now == then, "".join(difflib.unified_diff(
        then.splitlines(True), now.splitlines(True), "recorded", "now"))
