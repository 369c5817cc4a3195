"""Per-project agent state names and the login rule (policy/agentstate.py,
issue 27): the names are the agents' own (read from Claude Code 2.1's and
Gemini CLI 0.61's sources), and a login changed outside wins."""
from __future__ import annotations

import pytest

from agent_sandbox.policy import agentstate


def test_claude_names_a_project_with_dashes_and_hashes_long_paths():
    assert agentstate.encode("path-dashed", "/home/u/my.proj_1") == "-home-u-my-proj-1"
    # long paths: the first 200 characters, then Claude Code's 32-bit string
    # hash in base 36 (computed with node from the CLI's function)
    long = "/home/u/" + "x" * 250
    assert agentstate.encode("path-dashed", long) == "-home-u-" + "x" * 192 + "-47iwxx"
    odd = "/home/ü/€" + "y" * 230
    assert agentstate.encode("path-dashed", odd).endswith("y-83qm60")
    assert agentstate.encode("path-dashed", "/a/😀") == "-a---"     # per UTF-16 unit


def test_this_project_is_the_chain_from_the_project_to_the_working_directory():
    names = agentstate.per_project_names(["projects/{path-dashed}"], "/h/p", "/h/p/a/b")
    assert names == {"projects": ("-h-p", "-h-p-a", "-h-p-a-b")}
    assert agentstate.per_project_names(["projects/{path-dashed}"], "/h/p", "/elsewhere") == {
        "projects": ("-h-p",)}


def test_a_bad_per_project_entry_is_refused():
    for bad in ("projects", "projects/{nope}", "../x/{path-dashed}", "a/b/{path-dashed}",
                "projects/literal"):
        with pytest.raises(ValueError):
            agentstate.parse_per_project(bad)
    assert agentstate.parse_per_project("tmp/{gemini-registry}") == ("tmp", "gemini-registry")


class Owners:
    def __init__(self, markers):
        self.markers = markers

    def __call__(self, slug):
        return [self.markers.get(slug)]

    def marked(self):
        return sorted(self.markers)


def test_gemini_slug_is_claimed_as_gemini_does():
    # registered, markers agree
    assert agentstate.claim_slug("/h/p", {"/h/p": "p"}, Owners({"p": "/h/p"})) == ("p", False)
    # a directory whose marker names the project
    assert agentstate.claim_slug("/h/p", {}, Owners({"old": "/h/p"})) == ("old", True)
    # new: the base name, past other projects' slugs and markers
    assert agentstate.claim_slug("/h/My Proj", {"/x/my-proj": "my-proj"},
                                 Owners({"my-proj-1": "/y"})) == ("my-proj-2", True)
    # a registry entry whose marker names another project is not this project's
    assert agentstate.claim_slug("/h/p", {"/h/p": "q"}, Owners({"q": "/other"})) == ("p", True)
    # a registry entry that is no name (a path out of the parent) is ignored
    assert agentstate.claim_slug("/h/p", {"/h/p": "../../x"}, Owners({})) == ("p", True)


def test_the_registry_name_is_granted_only_when_resolved():
    entries = ["tmp/{gemini-registry}"]
    assert agentstate.per_project_names(entries, "/h/p", "/h/p", "p") == {"tmp": ("p",)}
    assert agentstate.per_project_names(entries, "/h/p", "/h/p", None) == {"tmp": ()}
    assert agentstate.per_project_names(entries, "/h/p", "/h/p", "..") == {"tmp": ()}


def test_a_login_changed_outside_wins_a_sandbox_refresh_is_kept():
    assert agentstate.login_source("d1", False, None) == "real"       # first session
    assert agentstate.login_source("d1", True, "d1") == "store"       # refreshed inside
    assert agentstate.login_source("d2", True, "d1") == "real"        # login outside
    assert agentstate.login_source("absent", True, "absent") == "store"
