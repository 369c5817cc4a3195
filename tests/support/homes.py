"""Homes for tests, behind one `home` fixture.

A pure policy or plan test gets a fake home under its tmp_path (`make_home`):
credentials, config and a project, so hiding and mounting decisions can be
checked on real paths; `settings_for` and `context` build the real Settings
and LaunchContext for it. A test of the installed sandbox (one that asks for
the `user` fixture) gets that user's real home instead, without the agent
state its module names (HOME_STATE, by default AGENT_STATE) before and after.
A module that needs more in the home layers its own `home` over this one."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent_sandbox.config import load as confload
from agent_sandbox.policy.resolve import LaunchContext
from tests.support.agents import AGENT_STATE

USER = "alice"
HOME_MODES = ("tmpwrite", "restricted", "read", "write")
HOME_FILES = {
    ".ssh/id_rsa": "PRIVATE KEY",
    ".ssh/config": "Host *",
    ".aws/credentials": "[default]",
    ".gnupg/pubring.kbx": "gpg",
    ".netrc": "machine x password y",
    ".git-credentials": "https://u:p@host",
    ".config/gh/hosts.yml": "oauth_token: gho_x",
    ".config/other/settings.txt": "visible",
    ".config/git/config": "[core]",
    ".config/git/credentials": "secret",
    ".local/state/agent-sandbox/chaperon/x.log": "log",
    ".local/bin/tool": "#!/bin/sh",
    ".local/share/thing": "x",
    ".cache/uv/wheel": "w",
    ".cache/pip/http": "h",
    ".cache/tool/data": "t",          # a writable entry that is no package store
    ".bashrc": "# rc",
    ".gitconfig": "[user]\n\tname = Alice\n",
    "notes.txt": "n",
    "proj/src/main.py": "print()",
    "proj/.git/hooks/pre-commit": "#!/bin/sh",
    "proj/.git/config": "[core]",
}


def make_home(root: Path, *, symlinks: bool = False, files=None, links=None, dirs=(),
              user: str = USER) -> Path:
    """A fake home of `user` under `root` with credentials, config and a
    project (`files`: relative path -> content, HOME_FILES by default; `dirs`:
    empty directories besides); `symlinks` adds links to hidden places (some
    harmless), `links` the links given (name -> target) instead."""
    home = root / "home" / user
    for relative in dirs:
        (home / relative).mkdir(parents=True, exist_ok=True)
    for relative, content in (HOME_FILES if files is None else files).items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    for name, target in (links or {}).items():
        (home / name).symlink_to(target)
    if not symlinks:
        return home
    (home / "notes-link").symlink_to(".config/other")          # harmless symlink
    (home / "keys").symlink_to(".ssh")                         # symlink to a hidden dir
    (home / "key-file").symlink_to(home / ".ssh" / "id_rsa")   # absolute, to a hidden file
    (home / "proj" / "ssh-link").symlink_to(home / ".ssh")     # inside the project
    return home


def settings_for(home: Path, user_conf: str = "", **changes):
    """Settings from the shipped defaults and `user_conf`, no admin file."""
    if user_conf:
        conf = home / ".config" / "agent-sandbox" / "sandbox.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(user_conf)
    settings = confload.load_settings(home=str(home), user=USER, environ={},
                                      admin_path=str(home.parent / "no-admin.conf"), cache=False)
    return settings.replace(**changes) if changes else settings


def context(home: Path, *, cwd=None, project_dir=None, environ=None, install_paths=()):
    return LaunchContext(
        uid=1000, gid=1000, user=USER, home=str(home),
        environ=dict(environ if environ is not None else {"PATH": "/usr/bin:/bin"}),
        cwd=str(cwd if cwd is not None else home / "proj"),
        project_dir=None if project_dir is None else str(project_dir),
        install_paths=tuple(str(p) for p in install_paths), session_id="sess-0001")


def clear_entries(home: Path, entries) -> None:
    """Remove each of `entries` below `home`: a tree (never through a link)
    or anything else, a link itself included."""
    for entry in entries:
        path = home / entry
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "home(symlinks, files, links, dirs, user): the "
                            "fake home's layout, make_home's arguments (tests/support/homes.py)")


@pytest.fixture
def home(request, tmp_path) -> Path:
    """The home a test works in: the test user's real home, cleared of the
    module's HOME_STATE (AGENT_STATE by default) before and after, when the
    test runs the installed sandbox (asks for `user`); else a fake home under
    tmp_path, laid out by @pytest.mark.home(**make_home's arguments)."""
    if "user" in request.fixturenames:
        user = request.getfixturevalue("user")
        state = getattr(request.module, "HOME_STATE", AGENT_STATE)
        clear_entries(user.home, state)
        yield user.home
        clear_entries(user.home, state)
        return
    marker = request.node.get_closest_marker("home")
    yield make_home(tmp_path, **(marker.kwargs if marker else {}))
