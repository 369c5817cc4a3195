"""The install routes a user without root has (issue 29, docs/install.md):
a venv, pipx, `uv tool install`, each as the unprivileged test user from a
wheel built from this tree, with no network (`--no-index`, a wheelhouse of
the test environment's own dependencies: tests/integration/wheelhouse.py);
then `doctor` names the platform and the install and what it lacks,
`python -m agent_sandbox.cli.userinstall` adds it, and a sandbox runs on
every backend. A `pip install --user` is refused at its first launch, with
the reason.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent_sandbox.names import BACKENDS
from agent_sandbox.tools.platform import distribution, parse_os_release
from tests.integration import wheelhouse

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent          # the test venv: pipx and uv (the test extras)
PYTHON = "/usr/bin/python3"                # what a user on this host has


@pytest.fixture(scope="module")
def wheels():
    """(agent-sandbox's wheel, the wheelhouse), readable by the test user."""
    out = Path(tempfile.mkdtemp(prefix="agent-sandbox-wheels-"))
    try:
        wheel = wheelhouse.build(REPO, out)
        for path in [out, *out.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield wheel, out
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def routes(user):
    """A fresh directory in the test user's home for the installs."""
    base = user.home / "routes"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    os.chown(base, user.uid, user.gid)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _offline(user, routes: Path, wheels_dir: Path, **extra) -> dict:
    """The user's environment for an install with no index: pip, pipx and uv
    read only the wheelhouse (the host's pip.conf, which names indexes, off;
    uv's variables too: pipx runs uv when it finds it beside itself)."""
    return user.env(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
                    PIP_FIND_LINKS=str(wheels_dir), PIP_DISABLE_PIP_VERSION_CHECK="1",
                    PIPX_HOME=str(routes / "pipx"), PIPX_BIN_DIR=str(routes / "pipx-bin"),
                    PIPX_MAN_DIR=str(routes / "pipx-man"),
                    UV_TOOL_DIR=str(routes / "uv-tools"), UV_TOOL_BIN_DIR=str(routes / "uv-bin"),
                    UV_CACHE_DIR=str(routes / "uv-cache"), UV_LINK_MODE="copy",
                    UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1", UV_OFFLINE="1",
                    UV_NO_INDEX="1", UV_FIND_LINKS=str(wheels_dir), **extra)


def install(route: str, user, routes: Path, wheel: Path, wheels_dir: Path) -> Path:
    """Install by `route` as the user; the `agent-sandbox` the user runs."""
    env = _offline(user, routes, wheels_dir)
    if route == "venv":
        commands = [[PYTHON, "-m", "venv", routes / "venv"],
                    [routes / "venv/bin/pip", "install", "--quiet", wheel]]
        entry = routes / "venv/bin/agent-sandbox"
    elif route == "pipx":
        commands = [[BIN / "pipx", "install", "--python", PYTHON, wheel]]
        entry = routes / "pipx-bin/agent-sandbox"
    else:
        commands = [[BIN / "uv", "tool", "install", "--offline", "--no-index", "--find-links",
                     wheels_dir, "--python", PYTHON, wheel]]
        entry = routes / "uv-bin/agent-sandbox"
    for argv in commands:
        result = user.run(argv, env=env, cwd=routes, timeout=120)
        assert result.returncode == 0, f"{argv}: {result.stdout}{result.stderr}"
    return entry


def doctor_lines(user, entry: Path, env=None) -> dict[str, str]:
    """doctor's items as {name: "STATUS summary"}."""
    import json

    result = user.run([entry, "doctor", "--json"], env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return {item["name"]: f"{item['status']} {item['summary']}"
            for item in json.loads(result.stdout)["items"]}


@pytest.mark.parametrize("route", ["venv", "pipx", "uv"])
def test_a_user_install_runs_on_every_backend(route, user, routes, wheels):
    wheel, wheels_dir = wheels
    entry = install(route, user, routes, wheel, wheels_dir)
    target = Path(os.path.realpath(entry))
    prefix = target.parent.parent                  # <venv>/bin/agent-sandbox

    lines = doctor_lines(user, entry)
    with open("/etc/os-release") as handle:
        release = parse_os_release(handle.read())
    assert lines["platform"].startswith(f"GO {distribution(release)}; Python: launcher "
                                        f"{sys.version.split()[0]}")
    assert "helper 3." in lines["platform"]
    kind = {"venv": "venv", "pipx": "pipx", "uv": "uv"}[route]
    assert lines["install"].startswith(f"GAPS {kind} install in {prefix}; lacks the "
                                       "isolated entry script (-IS)"), lines["install"]
    assert "the execute-only join interpreter" in lines["install"]

    # What install.sh adds, added by the package's own tool, as the user.
    done = user.run([prefix / "bin/python", "-m", "agent_sandbox.cli.userinstall"],
                    timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert doctor_lines(user, entry)["install"] == f"GO {kind} install in {prefix}"
    assert (prefix / "share/man/man1/agent-sandbox.1").read_text().startswith(".TH")
    assert entry.read_text().startswith(f"#!{prefix}/bin/python -IS\n")   # the link follows

    # The join interpreter: the user's own, execute-only — the user cannot
    # read it, and a process that execs it is not dumpable (no ptrace).
    join = prefix / "libexec/python3-join"
    info = join.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (user.uid, 0o100)
    probe = user.run([join, "-I", "-S", "-c",
                      "import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)); "
                      f"open({str(join)!r}, 'rb')"])
    assert probe.stdout == "0\n" and "PermissionError" in probe.stderr, probe

    # Every backend, from a cold plan cache, with a module on PYTHONPATH that
    # shadows a dependency (HPC modules set PYTHONPATH): the -IS entry never
    # imports it.
    poison = routes / f"poison-{route}"
    poison.mkdir()
    (poison / "pydantic.py").write_text("raise ImportError('the PYTHONPATH pydantic')\n")
    shutil.rmtree(user.home / ".local/state/agent-sandbox/cache", ignore_errors=True)
    for backend in BACKENDS:
        argv = [entry, "run", "--backend", backend, "--", "true"]
        for _ in range(4):
            result = user.run(argv, env=user.env(PYTHONPATH=str(poison)))
            # Seen here with every install, the site's too (/opt/agent-sandbox
            # at 87445ef, from the plan cache or not): a firejail launch ends
            # 137 with nothing on stderr after its command ran, about one in
            # two under load. Not this test's subject; reported, tried again.
            if not (backend == "firejail" and result.returncode == 137
                    and not result.stderr):
                break
        assert result.returncode == 0, f"{backend}: {result.stderr}"


def test_a_pip_user_install_is_refused_at_its_first_launch(user, routes, wheels):
    wheel, wheels_dir = wheels
    base = routes / "userbase"                     # the user site, as PYTHONUSERBASE moves it
    env = _offline(user, routes, wheels_dir, PYTHONUSERBASE=str(base))
    # pip run from its own wheel (a host need not have python3-pip), as
    # forced past PEP 668 as a user would.
    (pip,) = wheels_dir.glob("pip-*.whl")
    result = user.run([PYTHON, pip / "pip", "install", "--quiet", "--user",
                       "--break-system-packages", "--no-warn-script-location", wheel],
                      env=env, cwd=routes, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    entry = base / "bin/agent-sandbox"
    env = user.env(PYTHONUSERBASE=str(base))

    # Why: the chaperon (and the egress proxy, the job wrapper) start
    # `python -I -m …`, which cannot find a package in the user site.
    why = user.run([PYTHON, "-I", "-m", "chaperon.server", "--help"], env=env)
    assert "No module named 'chaperon'" in why.stderr

    refused = user.run([entry, "run", "--", "true"], env=env)
    assert refused.returncode == 125, refused
    assert refused.stderr.startswith("agent-sandbox: this agent-sandbox was installed with "
                                     "pip --user — ")
    assert "python -I" in refused.stderr and "venv" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert user.run([entry, "bash", "-c", "true"], env=env).returncode == 125

    lines = doctor_lines(user, entry, env=env)
    site = base / f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    assert lines["install"].startswith(f"GAPS user site install in {site}; lacks a usable "
                                       "install: pip --user — every launch is refused")


def test_install_sh_names_what_is_missing_where_it_knows_no_package_manager(tmp_path):
    """With no package manager it knows (AGENT_SANDBOX_PACKAGES=none stands in
    for one), install.sh checks and names what is missing, and writes nothing."""
    prefix = tmp_path / "prefix"
    result = subprocess.run(
        [REPO / "scripts/install.sh"], capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "AGENT_SANDBOX_PACKAGES": "none",
             "AGENT_SANDBOX_PYTHON": str(tmp_path / "no-python"),
             "AGENT_SANDBOX_PREFIX": str(prefix)})
    assert result.returncode == 1, result
    assert "install.sh: missing (package manager: none):" in result.stderr
    assert "a Python >= 3." in result.stderr and "RHEL 8: dnf install python3.11" in result.stderr
    assert "apt" not in result.stdout and not prefix.exists()


def test_install_sh_on_a_python_36_names_the_route_and_installs_nothing(tmp_path):
    """RHEL 8's and SLES 15's python3 is 3.6 (pyenv's 3.6 stands in): one
    message — what, why, the distribution's newer Python or a module's — exit
    1, before any package or file."""
    old = Path(_pyenv_root()) / "versions/3.6.15/bin/python3.6"
    assert os.access(old, os.X_OK), f"{old}: the stand-in for RHEL 8's python3 is missing"
    prefix = tmp_path / "prefix"
    result = subprocess.run(
        [REPO / "scripts/install.sh"], capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "AGENT_SANDBOX_PYTHON": str(old),
             "AGENT_SANDBOX_PREFIX": str(prefix)})
    assert result.returncode == 1, result
    assert result.stderr.startswith(f"install.sh: {old} is Python 3.6.15 — agent-sandbox "
                                    "needs Python 3.9 or newer"), result.stderr
    for route in ("dnf install python3.11", "zypper install python311",
                  "AGENT_SANDBOX_PYTHON=/usr/bin/python3.11", "a module's or conda's Python",
                  "docs/install.md"):
        assert route in result.stderr, route
    assert result.stdout == "" and not prefix.exists()      # nothing installed, nothing written


def test_pip_on_a_python_36_refuses_the_package_by_its_requires_python(tmp_path):
    """What a user sees who tries anyway: pip (3.6's own, 18.1) reads
    requires-python from the wheel and installs nothing (docs/install.md
    quotes it)."""
    tree = tmp_path / "src"
    shutil.copytree(REPO, tree, ignore=shutil.ignore_patterns(
        ".git", "tests", "benchmarks", "build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "-w", tmp_path, tree], check=True,
                   env={**os.environ, "PIP_CONFIG_FILE": os.devnull}, timeout=120)
    (wheel,) = tmp_path.glob("agent_sandbox-*.whl")
    old = Path(_pyenv_root()) / "versions/3.6.15/bin/python3.6"
    subprocess.run([old, "-m", "venv", "--without-pip", tmp_path / "v36"], check=True,
                   timeout=120)
    (pip,) = (Path(_pyenv_root()) / "versions/3.6.15/lib/python3.6/ensurepip/_bundled").glob(
        "pip-*.whl")                       # 3.6's own pip, run from its wheel (no install)
    result = subprocess.run([tmp_path / "v36/bin/python", pip / "pip", "install", "--no-index",
                             wheel],
                            capture_output=True, text=True, timeout=120,
                            env={"PATH": os.environ["PATH"], "PIP_CONFIG_FILE": os.devnull})
    said = result.stdout + result.stderr
    assert "agent-sandbox requires Python '>=3.9' but the running Python is 3.6.15" in said
    assert not list((tmp_path / "v36/lib/python3.6/site-packages").glob("agent_sandbox*"))


def _pyenv_root() -> str:
    found = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else os.path.expanduser("~/.pyenv")


def test_the_modulefile_templates_name_what_install_sh_fills_in():
    import re

    for template in (REPO / "conf/modulefiles").iterdir():
        text = template.read_text()
        assert set(re.findall(r"@([A-Z_]+)@", text)) == {"PREFIX", "ADMIN_DIR", "VERSION",
                                                         "MANDIR"}, template
        assert "AGENT_SANDBOX_ADMIN_CONFIG" in text and "@PREFIX@/venv/bin" in text


MODULECMD = os.environ.get("AGENT_SANDBOX_TEST_MODULECMD",
                           "/usr/lib/x86_64-linux-gnu/modulecmd.tcl")   # environment-modules


def test_module_load_puts_the_launcher_on_path_and_names_the_admin_file(tmp_path):
    """The Tcl template as install.sh fills it in, under a real `module`
    command (environment-modules' modulecmd.tcl, what `module load` evals):
    the launcher first on PATH, AGENT_SANDBOX_ADMIN_CONFIG exported, the man
    page found and man's own pages still found; `module unload` takes all
    of it back."""
    from tests.support.install import PREFIX

    assert os.access(MODULECMD, os.R_OK), (
        f"{MODULECMD} is missing — apt-get install environment-modules (scripts/install.sh "
        "installs it with AGENT_SANDBOX_EXTRAS=test), or set AGENT_SANDBOX_TEST_MODULECMD")
    files = tmp_path / "modulefiles"
    (files / "agent-sandbox").mkdir(parents=True)
    text = (REPO / "conf/modulefiles/agent-sandbox.tcl").read_text()
    for name, value in (("PREFIX", PREFIX), ("ADMIN_DIR", "/etc/as-site"), ("VERSION", "0.1.0"),
                        ("MANDIR", "/usr/local/share/man")):   # as install.sh fills it in
        text = text.replace(f"@{name}@", value)
    (files / "agent-sandbox/0.1.0").write_text(text)
    script = (f'module() {{ eval "$(tclsh {MODULECMD} bash "$@")"; }}\n'
              "module load agent-sandbox || exit 9\n"
              'echo "launcher=$(command -v agent-sandbox)"\n'
              'echo "admin=$AGENT_SANDBOX_ADMIN_CONFIG"\n'
              'echo "manpath=$MANPATH"\n'
              "module unload agent-sandbox\n"
              'echo "after=$(command -v agent-sandbox || echo none) ${AGENT_SANDBOX_ADMIN_CONFIG-unset}"\n')
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                            text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "MODULEPATH": str(files),
                                 "HOME": str(tmp_path)})
    assert result.returncode == 0, result
    said = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert said["launcher"] == f"{PREFIX}/venv/bin/agent-sandbox"
    assert said["admin"] == "/etc/as-site/sandbox.conf"
    # An empty element after ours: man still searches its own path.
    assert said["manpath"].split(":") == ["/usr/local/share/man", ""], said["manpath"]
    assert said["after"] == "none unset"


@pytest.mark.parametrize("release, manager, packages", [
    ('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n', "dnf",
     ["bubblewrap", "firejail", "libseccomp", "util-linux", "python3"]),
    ('ID="sles"\nID_LIKE="suse"\nVERSION_ID="15.5"\n', "zypper",
     ["bubblewrap", "firejail", "libseccomp2", "util-linux", "python3"]),
])
def test_install_sh_installs_with_the_distributions_package_manager(tmp_path, release,
                                                                     manager, packages):
    """On a RHEL- or SUSE-family host install.sh asks rpm what is missing and
    installs it with dnf or zypper (stand-ins here that record their calls;
    rpm says nothing is installed, one package is not in the repositories),
    never apt; then it checks what it needs (a Python that is not there) and
    stops before writing anything."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    (fake / "rpm").write_text("#!/bin/sh\nexit 1\n")
    (fake / manager).write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *firejail*) exit 1;; esac\n')
    for tool in ("rpm", manager):
        (fake / tool).chmod(0o755)
    (tmp_path / "os-release").write_text(release)
    prefix = tmp_path / "prefix"
    result = subprocess.run(
        [REPO / "scripts/install.sh"], capture_output=True, text=True, timeout=60,
        env={"PATH": f"{fake}:{os.environ['PATH']}",
             "AGENT_SANDBOX_OS_RELEASE": str(tmp_path / "os-release"),
             "AGENT_SANDBOX_PYTHON": str(tmp_path / "no-python"),
             "AGENT_SANDBOX_PREFIX": str(prefix)})
    assert result.returncode == 1, result
    installed = [line.split()[-1] for line in calls.read_text().splitlines()]
    assert installed == packages
    assert "firejail is not in the configured repositories — skipped" in result.stderr
    assert f"install.sh: missing (package manager: {manager}):" in result.stderr
    assert not prefix.exists()
