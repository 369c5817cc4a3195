"""policy/boundfiles.py: the bound-file verdicts over injected reads (no
filesystem) — which home files are checked, and what a secret in one does by
mode and backend (tests/unit/policy/test_secrets.py runs the same through a
resolved policy and real files)."""
from __future__ import annotations

import pytest

from agent_sandbox.policy import boundfiles
from agent_sandbox.policy.boundfiles import TOO_LARGE, bound_files
from agent_sandbox.policy.model import BoundFileReport
from tests.support.policies import sample_policy as make_policy

TOKEN = "ghp_" + "A" * 36
PLAIN = {"/h/u/.gitconfig", "/h/u/.bashrc", "/h/u/.profile"}
LINKS = {"/h/u/.seeded": "/data/seeded"}


def policy(**changes):
    return make_policy(**{"home_seeded": ("/h/u/.seeded",), **changes})


def files(p):
    return bound_files(p, lambda path: path in PLAIN, lambda path: LINKS.get(path, path))


def verdict(p, contents, mode="blank", can_generate=True):
    return boundfiles.apply(p, mode=mode, can_generate=can_generate, contents=contents,
                            removed=lambda name: name == "GH_TOKEN", sources=files(p))


def test_the_single_files_bound_from_the_home():
    assert files(policy()) == (("/h/u/.gitconfig", "/h/u/.gitconfig"),
                               ("/h/u/.seeded", "/data/seeded"))
    # A HOME_READONLY entry that is no plain file (a link, a directory) is not one.
    assert files(policy(home_readonly=("/h/u/.zshrc", "/h/u/.gitconfig"))) == (
        ("/h/u/.gitconfig", "/h/u/.gitconfig"), ("/h/u/.seeded", "/data/seeded"))
    # A shown home brings the shell start-up files, hidden ones excepted.
    read = files(policy(home_access="read", hidden=("/h/u/.ssh", "/h/u/.profile")))
    assert [p for p, _ in read] == ["/h/u/.gitconfig", "/h/u/.seeded", "/h/u/.bashrc"]


def test_blank_where_the_backend_binds_generated_files():
    p, payloads = verdict(policy(), {"/h/u/.gitconfig": f"[a]\n\ttoken = {TOKEN}\n".encode(),
                                     "/h/u/.seeded": b"clean\n"})
    assert payloads == {"bound-0": b"[a]\n\n"}
    assert p.generated_files == (("/h/u/.gitconfig", "bound-0", 0o444),)
    report = p.bound_file_report
    assert (report.mode, report.checked) == ("blank", 2)
    assert [(f.path, f.lines, f.action) for f in report.findings] == [
        ("/h/u/.gitconfig", "line 2", "blanked")]
    assert TOKEN not in repr(report) and not p.is_hidden("/h/u/.gitconfig")


@pytest.mark.parametrize("mode,can_generate", [("blank", False), ("skip", True)])
def test_a_file_not_blanked_is_not_bound_and_hidden_with_its_source(mode, can_generate):
    p, payloads = verdict(policy(), {"/h/u/.seeded": f"export GH_TOKEN={TOKEN}\n".encode()},
                          mode, can_generate)
    assert payloads == {} and p.generated_files == ()
    assert p.home_seeded == () and p.is_hidden("/h/u/.seeded") and p.is_hidden("/data/seeded")
    assert [(f.lines, f.action) for f in p.bound_file_report.findings] == [
        ("line 1", "not bound")]
    assert "GH_TOKEN" in p.bound_file_report.findings[0].what


def test_too_large_is_not_bound_in_either_mode_and_unreadable_is_nothing():
    for mode in ("blank", "skip"):
        p, _ = verdict(policy(), {"/h/u/.gitconfig": TOO_LARGE, "/h/u/.seeded": None}, mode)
        assert p.home_readonly == () and p.is_hidden("/h/u/.gitconfig")
        assert [f.action for f in p.bound_file_report.findings] == ["not bound"]
        assert "too large" in p.bound_file_report.findings[0].what


def test_off_checks_nothing_and_clean_is_the_verdict_of_no_secret():
    p, payloads = verdict(policy(), {"/h/u/.gitconfig": TOKEN.encode()}, "off")
    assert payloads == {} and p.bound_file_report == BoundFileReport("off", 0)
    assert p.home_readonly == policy().home_readonly
    unsorted = policy(hidden=("/b", "/a", "/a"))
    p, payloads = boundfiles.clean(unsorted, mode="blank", checked=2)
    assert payloads == {} and p.hidden == ("/a", "/b") and p.generated_files == ()
    assert p.bound_file_report == BoundFileReport("blank", 2, ())
    assert verdict(unsorted, {"/h/u/.gitconfig": b"x\n", "/h/u/.seeded": None})[0] == p
