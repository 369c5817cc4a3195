"""Package caches are a second name for the user's installs (issue 27 §1,
docs/shared-channels.md): uv links the files of a `uv tool install` (and of
every uv venv) from ~/.cache/uv, which the shipped HOME_WRITABLE granted in
every sandbox. A session appended to the cache's copy of a module, and the
user's installed tool outside ran the change.

Real backends, the unprivileged test user, the layout uv makes (a file in
~/.cache/uv/archive-v0/<id>/… hard-linked to the same file under
~/.local/share/uv/tools/…). Fail on the code before the fix (05a2475) on
bwrap, firejail and landlock: the tool file changed, the cache write landed
in the real cache, no report of the project's linked venv.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.homes import clear_entries
from tests.support.waiting import wrote

BACKENDS = ["bwrap", "firejail", "landlock"]
ARCHIVE = ".cache/uv/archive-v0/Q2rTz8wXk1/pkg/cli.py"
TOOL = ".local/share/uv/tools/pkg/lib/python3.11/site-packages/pkg/cli.py"
ORIGINAL = "def main():\n    print('pkg 1.0')\n"
APPEND = f"printf '\\nimport os; os.system(\"touch ~/pwned\")\\n' >> ~/{ARCHIVE}; echo done"


@pytest.fixture
def uv_home(user):
    """The user's home with uv's cache and a tool uv installed from it."""
    clear_entries(user.home, (".cache/uv", ".cache/pip", ".local/share/uv", "pwned",
                               ".local/state/agent-sandbox-caches"))
    cache = user.write(ARCHIVE, ORIGINAL)
    user.write(".cache/pip/selfcheck.json", "{}")
    tool = user.home / TOOL
    user.write(TOOL, "")            # its directories, the user's
    tool.unlink()
    os.link(cache, tool)
    wrote()
    yield user
    clear_entries(user.home, (".cache/uv", ".cache/pip", ".local/share/uv", "pwned"))


# HOME_WRITABLE+=(.cache/uv): a user's (or an old default's) grant is dropped;
# HOME_ACCESS=write: the existing cache is kept read-only in the writable home.
CONFIGS = {"default": "", "granted": "HOME_WRITABLE+=(.cache/uv .cache/pip)\n",
           "write": "HOME_ACCESS=write\n"}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_to_uvs_cache_never_reaches_the_installed_tool(uv_home, project, backend,
                                                               config):
    user = uv_home
    user.set_config(CONFIGS[config])
    result = user.sandbox("sh", "-c", APPEND, cwd=project,
                          env=user.env(SANDBOX_BACKEND=backend))
    assert "done" in result.stdout, result.stderr
    assert (user.home / TOOL).read_text() == ORIGINAL, "the installed tool was changed"
    assert (user.home / ARCHIVE).read_text() == ORIGINAL
    if config == "granted":
        assert "HOME_WRITABLE: dropped" in result.stderr and "package store" in result.stderr


WRITE_CACHES = """
cat ~/.local/state/agent-sandbox-caches/other-0000/uv/x 2>/dev/null
echo again >> ~/.local/state/agent-sandbox-caches/other-0000/uv/x 2>/dev/null
uv="${UV_CACHE_DIR:-$HOME/.cache/uv}"; pip="${PIP_CACHE_DIR:-$HOME/.cache/pip}"
mkdir -p "$uv/wheels-v5" "$pip/http" && echo poisoned > "$uv/wheels-v5/pkg.whl" \
  && echo poisoned > "$pip/http/entry" && echo "$uv"
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cache_write_inside_lands_in_the_sandboxs_own_cache(uv_home, project, backend):
    user = uv_home
    other = user.write(".local/state/agent-sandbox-caches/other-0000/uv/x", "other project\n")
    result = user.sandbox("sh", "-c", WRITE_CACHES, cwd=project,
                          env=user.env(SANDBOX_BACKEND=backend))
    assert result.returncode == 0, result.stderr     # the tools inside have a writable cache
    assert "other project" not in result.stdout       # another project's cache: not reachable
    assert other.read_text() == "other project\n"
    assert not (user.home / ".cache/uv/wheels-v5").exists(), "written to the user's uv cache"
    assert not (user.home / ".cache/pip/http").exists(), "written to the user's pip cache"
    inside = Path(result.stdout.strip())
    own = user.home / ".local/state/agent-sandbox-caches"
    assert inside.parent.parent == own and inside.parent.name.startswith(project.name + "-")
    assert (inside / "wheels-v5" / "pkg.whl").read_text() == "poisoned\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_project_venv_linked_from_uvs_cache_is_reported_at_every_launch(uv_home, project,
                                                                          backend):
    user = uv_home
    venv_file = project / ".venv/lib/python3.11/site-packages/pkg/cli.py"
    venv_file.parent.mkdir(parents=True)
    os.link(user.home / ARCHIVE, venv_file)
    (project / "twins").mkdir()
    (project / "twins" / "a").write_text("x")
    os.link(project / "twins" / "a", project / "twins" / "b")   # both names inside: fine
    for path in [project / ".venv", *(project / ".venv").rglob("*"), project / "twins",
                 *(project / "twins").iterdir()]:
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
    wrote()
    env = user.env(SANDBOX_BACKEND=backend)
    for launch in ("compiled", "cached"):
        result = user.sandbox("true", cwd=project, env=env)
        assert result.returncode == 0, result.stderr
        assert f"{venv_file} (3 links)" in result.stderr, (launch, result.stderr)
        assert "UV_LINK_MODE=copy" in result.stderr
        assert "twins" not in result.stderr
    # (the second launch came from the plan cache: so does a third, the same launch)
    dry = user.run([INSTALLED, "run", "--dry-run", "--", "true"], cwd=project, env=env)
    assert "from the compiled plan cache" in dry.stdout, dry.stdout + dry.stderr


def test_an_install_file_with_a_second_name_makes_self_protected_partial(user, project):
    """The install the launcher runs from (its venv, its package in it, both
    walked once) with a file that has another name: the read-only view keeps
    the path, not the inode. (A link in the prefix: the same file system.)"""
    from tests.support.install import PREFIX

    package = next(Path(PREFIX, "venv", "lib").glob("python3*/site-packages/agent_sandbox"))
    twin = Path(PREFIX, "twin-names.py")
    os.link(package / "names.py", twin)     # its ctime changes: a plan compiled before misses
    try:
        result = user.run([INSTALLED, "run", "--dry-run", "--", "true"], cwd=project,
                          env=user.env(SANDBOX_BACKEND="bwrap"))
    finally:
        twin.unlink()
    line = next(x for x in result.stdout.splitlines() if "self.protected" in x)
    assert line.split()[0] == "partial" and "hard links" in result.stdout, result.stdout
