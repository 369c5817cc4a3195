"""The helper's interpreter (backends/helperpython.py, issue 29 item 2): the
launcher's own when the sandbox shows it read-only, else the system python3
when new enough, else a refusal (exit 125) — on real policies."""
from __future__ import annotations

import os
import sys

import pytest

from agent_sandbox.backends import helperpython
from agent_sandbox.backends.helperpython import Interpreter, choose, policy_verdict
from agent_sandbox.errors import SETUP_FAILED, PolicyError
from agent_sandbox.policy.resolve import resolve_policy
from tests.support.homes import context, make_home, settings_for

SYSTEM_OLD = Interpreter("/usr/bin/python3", "/usr/bin/python3.6", (3, 6), ("/usr/bin/python3.6",))
SYSTEM_NEW = Interpreter("/usr/bin/python3", "/usr/bin/python3.11", (3, 11),
                         ("/usr/bin/python3.11",))


def own(prefix: str, version=(3, 12)) -> Interpreter:
    real = f"{prefix}/bin/python{version[0]}.{version[1]}"
    return Interpreter(real, real, version, (real, f"{prefix}/lib/python{version[0]}.{version[1]}")
                       + helperpython.startup_files(real))


@pytest.fixture
def home(tmp_path):
    return make_home(tmp_path)


def _verdict(home, **settings):
    ctx = context(home)
    return policy_verdict(resolve_policy(settings_for(home, **settings), ctx, backend="bwrap"))


def test_the_launchers_own_interpreter_wins_when_the_sandbox_shows_it_read_only(home):
    assert choose(own("/opt/python3.12"), SYSTEM_NEW, _verdict(home)) \
        == "/opt/python3.12/bin/python3.12"


def test_an_old_system_python_with_a_good_launcher_interpreter_still_works(home):
    assert choose(own("/opt/python3.9", (3, 9)), SYSTEM_OLD, _verdict(home)) \
        == "/opt/python3.9/bin/python3.9"


def test_one_file_keeps_the_system_name(home):
    same = Interpreter("/usr/bin/python3.11", "/usr/bin/python3.11", (3, 11),
                       ("/usr/bin/python3.11", "/usr/lib/python3.11"))
    assert choose(same, SYSTEM_NEW, _verdict(home)) == "/usr/bin/python3"


@pytest.mark.parametrize("mode", ["write", "read"])
def test_an_interpreter_in_the_home_is_used_only_where_no_grant_writes_it(home, mode):
    mine = own(str(home / ".local" / "share" / "uv" / "python"))
    chosen = choose(mine, SYSTEM_NEW, _verdict(home, HOME_ACCESS=mode))
    assert chosen == ("/usr/bin/python3" if mode == "write" else mine.path)


def test_an_interpreter_in_the_project_falls_back_to_the_system_python(home):
    mine = own(str(home / "proj" / ".venv-python"))
    verdict = _verdict(home)
    assert "is writable inside the sandbox (it lies in the writable" in verdict(mine.real)
    assert choose(mine, SYSTEM_NEW, verdict) == "/usr/bin/python3"


def test_an_interpreter_in_an_extra_writable_path_is_not_used(home, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    mine = own(str(scratch / "py"))
    assert choose(mine, SYSTEM_NEW, _verdict(home, EXTRA_WRITABLE_PATHS=[str(scratch)])) \
        == "/usr/bin/python3"


@pytest.mark.parametrize("granted", ["pyvenv.cfg", "bin/pyvenv.cfg", "bin", "lib"])
def test_what_the_interpreter_reads_at_its_start_is_as_unwritable_as_itself(
        home, tmp_path, granted):
    """A writable grant of a file the interpreter reads before the helper
    runs (a pyvenv.cfg that redirects its home, a ._pth beside it, the zip
    or libpython in its lib/) makes it as unusable as a writable executable
    (review: the rule checked the executable and the stdlib only)."""
    prefix = tmp_path / "py"
    (prefix / "bin").mkdir(parents=True)
    target = prefix / granted
    if granted.endswith(".cfg"):
        target.write_text("home = /elsewhere\n")
    else:
        target.mkdir(exist_ok=True)
    mine = own(str(prefix))
    verdict = _verdict(home, READONLY_MOUNTS=["/usr", "/etc", str(prefix)],
                       EXTRA_WRITABLE_PATHS=[str(target)])
    assert choose(mine, SYSTEM_NEW, verdict) == "/usr/bin/python3"


def test_an_interpreter_the_sandbox_does_not_show_is_not_used(home):
    mine = own("/nowhere-shown/py")
    verdict = _verdict(home)
    assert "is not shown inside" in verdict(mine.real)
    assert choose(mine, SYSTEM_NEW, verdict) == "/usr/bin/python3"


def test_neither_usable_is_a_refusal_naming_what_why_and_the_fix(home):
    mine = own(str(home / "proj" / "py"))
    with pytest.raises(PolicyError) as caught:
        choose(mine, SYSTEM_OLD, _verdict(home))
    message = str(caught.value)
    assert caught.value.exit_code == SETUP_FAILED
    assert "is writable inside the sandbox" in message and "Python 3.6" in message
    assert "Install agent-sandbox on a Python 3.9+" in message
    assert "Traceback" not in message


def test_no_system_python_and_no_usable_launcher_interpreter_is_a_refusal(home):
    with pytest.raises(PolicyError, match="there is no /usr/bin/python3"):
        choose(own(str(home / "proj" / "py")), None, _verdict(home))


def test_a_system_python_of_unknown_version_is_not_trusted():
    odd = Interpreter("/usr/bin/python3", "/usr/bin/python3", (), ("/usr/bin/python3",))
    with pytest.raises(PolicyError, match="not known from its name"):
        choose(own("/opt/py", (3, 8)), odd)


@pytest.mark.parametrize("name, version", [("python3.9", (3, 9)), ("python3.14", (3, 14)),
                                           ("python3", ()), ("pypy3.10-c", ()), ("x", ())])
def test_the_version_comes_from_the_name_alone(name, version):
    assert helperpython.version_from_name(f"/usr/bin/{name}") == version


def test_the_real_reads_describe_this_interpreter():
    mine = helperpython.launcher()
    assert mine.real == os.path.realpath(sys.executable)
    assert mine.version == tuple(sys.version_info[:2])
    assert os.path.isfile(os.path.join(mine.tree[1], "os.py"))


def test_without_a_policy_only_what_the_user_cannot_write_is_chosen(tmp_path):
    mine = helperpython.launcher()
    assert helperpython.host_verdict(mine.real) == ""           # root's, not writable by others
    assert helperpython.host_verdict(str(tmp_path)) == "is writable by you"
    copy = own(str(tmp_path / "py"))
    assert choose(copy, SYSTEM_NEW._replace(real=mine.real, tree=(mine.real,)),
                  helperpython.host_verdict) == "/usr/bin/python3"


def test_a_compile_records_what_the_choice_reads(home):
    """The plan cache keys on every path a compile observes (docs/design.md
    "The warm launch"): the links to both interpreters and the access check."""
    from agent_sandbox.plancache.plans import Recorder

    ctx = context(home)
    policy = resolve_policy(settings_for(home), ctx, backend="bwrap")
    with Recorder() as recorder:
        helperpython.helper_python(policy)
    seen = {path for path, _ in recorder.seen}
    assert helperpython.SYSTEM_PYTHON in seen                    # access, realpath
    assert sys.executable in seen or os.path.realpath(sys.executable) in seen
    assert os.path.dirname(os.__file__) in seen


@pytest.mark.parametrize("python", ["/usr/bin/python3", "/opt/python3.11/bin/python3.11"])
def test_the_stubs_and_the_job_wrapper_name_the_chosen_interpreter_in_their_first_line(python):
    from agent_sandbox.services.chaperon import ChaperonSession

    assert helperpython.shebang_line(python) == f"#!{python} -IS"
    assert ChaperonSession.stub_script(python).startswith(f"#!{python} -IS\n".encode())


@pytest.mark.parametrize("python", ["/home/a b/py/bin/python3.12", "/opt/py\t/bin/python3",
                                    "/opt/py\n/bin/python3", "python3",
                                    "/opt/" + "x" * 120 + "/bin/python3"])
def test_an_interpreter_a_first_line_cannot_name_is_a_refusal(python):
    with pytest.raises(PolicyError) as refused:
        helperpython.shebang_line(python)
    assert refused.value.exit_code == SETUP_FAILED
    assert "CHAPERON=false" in str(refused.value) and "#!" in str(refused.value)
