"""The helper-interpreter rule's one choice starts everything that runs on
Python in a session (issue 29): the helper, the Slurm stubs' `#!` line, and,
through the chaperon's config, the job wrapper and jobstart — so a host whose
/usr/bin/python3 is 3.6 (RHEL 8, SLES 15) works with a launcher on a newer
Python. The choice is injected here (launch/run.py's helper_python); the rule
itself: tests/unit/backends/test_helperpython.py; for real, on every backend:
tests/integration/test_helper_python.py."""
from __future__ import annotations

import pytest

from agent_sandbox.backends import Selection
from agent_sandbox.config import load as confload
from agent_sandbox.errors import SETUP_FAILED, PolicyError
from agent_sandbox.launch import run
from chaperon.jobwrap import launch_argv
from tests.support.homes import USER
from tests.support.plans import BACKENDS, PLAN_HOME, policy_for

pytestmark = pytest.mark.home(**PLAN_HOME)     # the `home` fixture's layout

CHOSEN = "/opt/site-python3.11/bin/python3.11"   # not /usr/bin/python3: the rule's choice


def _prepare(home, backend, monkeypatch, chosen=CHOSEN):
    """run.prepare on a fake home's policy, the rule answering `chosen`."""
    asked = []
    policy = policy_for(home, backend=backend)
    settings = confload.load_settings(home=str(home), user=USER, environ={},
                                      admin_path=str(home.parent / "none.conf"), cache=False)
    selection = Selection(backend, {"bwrap": "/usr/bin/bwrap", "firejail": "/usr/bin/firejail",
                                    "landlock": "/usr/bin/python3"}[backend], "test")
    monkeypatch.setattr(run, "resolve", lambda **_: (settings, selection, policy))
    monkeypatch.setattr(run, "helper_python", lambda p=None: asked.append(p) or chosen)
    monkeypatch.setattr(run, "landlock_abi", lambda: 5)
    chaperon = {"session_dir": str(home / ".local/state/run/s"),
                "staging_dir": str(home / ".local/share/st"), "jobstart": "/j.py",
                "launcher": ["L"], "job_backend": backend}
    prepared = run.prepare(["true"], project_dir=None, backend=None, environ={}, terminal=True,
                           chaperon=lambda s, p: dict(chaperon))
    return prepared, asked


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_choice_starts_the_helper_the_stubs_and_the_jobs(home, backend, monkeypatch):
    prepared, asked = _prepare(home, backend, monkeypatch)
    assert len(asked) == 1 and asked[0].chaperon_dir      # asked once, of the final policy
    assert prepared.chaperon["python"] == CHOSEN          # the stubs on disk, the jobs
    argv = [str(a) for a in prepared.plan.argv]
    assert f"{CHOSEN} -I -S -c" in " ".join(argv) or argv[0] == CHOSEN, argv   # the helper
    assert "/usr/bin/python3" not in argv
    stub = prepared.plan.payloads.get("stub")
    if stub is not None:                                  # bwrap: the stub is a payload
        assert stub.data.startswith(f"#!{CHOSEN} -IS\n".encode())
    assert launch_argv(prepared.chaperon, "/p", "/j.py", "/s")[-4:] == [CHOSEN, "-IS", "/j.py",
                                                                          "/s"]


def test_a_choice_no_first_line_can_name_is_refused_at_the_compile(home, monkeypatch):
    with pytest.raises(PolicyError) as refused:
        _prepare(home, "firejail", monkeypatch, chosen="/opt/my python/bin/python3.12")
    assert refused.value.exit_code == SETUP_FAILED
    assert "CHAPERON=false" in str(refused.value)
