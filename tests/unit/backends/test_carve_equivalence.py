"""The backend protocol and the one carve walker change nothing: for every
case of the corpus (tests/unit/backends/carve_corpus.py), each backend's
mounts, argv, firejail profile, Landlock rules, guarantees and notes are
exactly those recorded on the code before them (carve_corpus.json)."""
from __future__ import annotations

import json

import pytest

from tests.unit.backends.carve_corpus import FIXTURE, record

RECORDED = json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def current():
    return record()


def test_the_corpus_covers_every_home_mode_and_layout():
    assert len(RECORDED) >= 28
    modes = {case.split("/")[1] for case in RECORDED}
    assert modes == {"tmpwrite", "restricted", "read", "write"}


@pytest.mark.parametrize("case", sorted(RECORDED))
@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_the_backend_yields_the_recorded_view(current, case, backend):
    assert current[case][backend] == RECORDED[case][backend]
