"""policy/model.py: the Policy's classes (tuples with named fields, built
without exec), their round trip through the plan cache as themselves, the
one home of the hidden / shown / writable predicates, and the module's
import cost (stdlib and the vocabulary only)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from agent_sandbox.plancache import plans as plancache
from agent_sandbox.plancache.plans import freeze, thaw
from agent_sandbox.policy import model
from agent_sandbox.policy.model import (BoundFileFinding, BoundFileReport, Policy, Protected,
                                        is_hidden, is_shown, is_writable)
from tests.support.import_graph import STDLIB
from tests.support.policies import sample_policy as policy


def _thaw(value):
    return thaw(value, lambda s: s, lambda b: b, {})


def test_a_policy_is_built_like_a_named_tuple():
    p = policy()
    assert p.network_mode == "open" and p.install_links == (0, ()) and p.private_mounts is True
    assert Policy(*p) == p and Policy._make(tuple(p)) == p and type(Policy._make(p)) is Policy
    assert p._replace(backend="landlock").backend == "landlock" and p.backend == "bwrap"
    assert p._asdict()["home"] == "/h/u" and len(p) == len(Policy._fields) == 51
    assert Protected("/a", False, True) == ("/a", False, True, b"")
    assert BoundFileReport("off", 0) == ("off", 0, ())
    with pytest.raises(AttributeError):
        p.backend = "x"
    with pytest.raises(TypeError):
        Policy(backend="bwrap")                      # fields without a default
    with pytest.raises(TypeError):
        policy(no_such_field=1)
    with pytest.raises(ValueError):
        p._replace(no_such_field=1)
    with pytest.raises(TypeError):
        Protected._make(("/a", True))                # an item short
    assert "secret" not in repr(p)                   # the environment holds API keys


def test_the_cache_rebuilds_the_policy_as_its_own_class():
    p = policy(bound_file_report=BoundFileReport("blank", 2, (
        BoundFileFinding("/h/u/.bashrc", "line 3", "GH_TOKEN", "blanked"),)))
    back = _thaw(freeze({"policy": p}))["policy"]
    assert type(back) is Policy and back == p
    assert type(back.protected[0]) is Protected
    assert type(back.bound_file_report) is BoundFileReport
    assert type(back.bound_file_report.findings[0]) is BoundFileFinding
    assert back.is_hidden("/h/u/.ssh/id_rsa") and "secret" not in repr(back)


def test_a_model_class_stored_with_other_fields_is_a_miss():
    frozen = (2, "agent_sandbox.policy.model:Protected", ("path", "is_dir"), ("/a", True))
    with pytest.raises(ValueError):
        _thaw(frozen)
    with pytest.raises(ValueError):
        _thaw((2, "agent_sandbox.policy.model:NoSuchClass", ("a",), (1,)))
    assert "agent_sandbox.policy.model" in plancache.MODELS


def test_is_hidden_by_name():
    p = policy()
    assert p.is_hidden("/h/u/.ssh") and p.is_hidden("/h/u/.ssh/id_rsa")
    assert p.is_hidden("/nfs/keys/k") and not p.is_hidden("/h/u/.sshx")
    assert is_hidden("/a/b", ("/a",)) and not is_hidden("/ab", ("/a",))


def test_is_shown_needs_a_shown_tree_and_no_hidden_path(tmp_path):
    p = policy()
    assert is_shown(p, "/usr/bin/node") and p.is_shown("/h/u/proj/x")
    assert is_shown(p, "/opt/as/bin/agent-sandbox") and is_shown(p, "/h/u/.claude/settings.json")
    assert not is_shown(p, "/h/u/tools/claude")                  # tmpfs home
    assert is_shown(p._replace(home_access="read"), "/h/u/tools/claude")
    assert not is_shown(p._replace(home_access="read"), "/h/u/.ssh/id_rsa")
    # A shown tree counts as named and as resolved.
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    linked = p._replace(system_readonly=(str(tmp_path / "link"),))
    assert is_shown(linked, str(real / "bin")) and is_shown(linked, str(tmp_path / "link/x"))


def test_is_writable_covers_the_project_writable_entries_and_a_writable_home(tmp_path):
    p = policy()
    assert is_writable(p, "/h/u/proj/node_modules/.bin/claude")
    assert is_writable(p, "/h/u/.claude/local/claude") and is_writable(p, "/scratch/u/x")
    assert not is_writable(p, "/h/u/tools/bin/claude") and not p.is_writable("/usr/bin/node")
    assert is_writable(p._replace(home_access="write"), "/h/u/tools/bin/claude")
    assert p.writable_trees() == ("/h/u/.claude", "/scratch/u", "/h/u/proj")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert is_writable(p._replace(extra_writable=(str(tmp_path / "link"),)), str(real / "x"))


def test_the_model_imports_the_standard_library_and_the_vocabulary_only():
    root = model.__file__.rsplit("/agent_sandbox/", 1)[0]
    script = ("import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); "
              "import agent_sandbox.policy.model; "
              "print(' '.join(sorted(set(sys.modules) - before)))")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", script, root],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # (the standard library's names read as on 3.9, which has no sys.stdlib_module_names)
    assert [m for m in result.stdout.split() if m.startswith("agent_sandbox")
            or m.partition(".")[0] not in STDLIB] == [
        "agent_sandbox", "agent_sandbox.paths", "agent_sandbox.policy",
        "agent_sandbox.policy.model"]
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import agent_sandbox.policy.model; "
              "print('typing' in sys.modules)")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", script, root],
                            capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
