"""A fake home for the pure policy and plan tests: credentials, config and a
project, so hiding and mounting decisions can be checked on real paths."""
from __future__ import annotations

from pathlib import Path

from agent_sandbox.config import load as confload
from agent_sandbox.policy.resolve import LaunchContext

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


def make_home(root: Path, *, symlinks: bool = False) -> Path:
    """A fake home under `root` with credentials, config and a project;
    `symlinks` adds links to hidden places (some harmless)."""
    home = root / "home" / USER
    for relative, content in HOME_FILES.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
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
