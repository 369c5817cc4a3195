"""The launcher helper: an unprivileged user with secrets (the `user`
fixture, a `SandboxUser`), and a way to run the installed agent-sandbox as
that user (`SandboxUser.run`, `.sandbox`), with a fresh project per test.

The integration tests must prove the jail works for an ordinary user, so they
run the installed console script (scripts/install.sh puts it in
/opt/agent-sandbox) as a user created here, never as root. A missing piece of
the system makes the test fail with a message naming it; nothing is skipped.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.install import INSTALLED
from tests.support.waiting import settle, wrote

# Overridable like the install (tests/support/install.py): never two runs
# with the same users.
TEST_USER = os.environ.get("AGENT_SANDBOX_TEST_USER", "astest")
OTHER_USER = os.environ.get("AGENT_SANDBOX_TEST_OTHER_USER", "asother")
SECRET_ENV = {
    "GH_TOKEN": "ghp_secret_token_value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "VAULT_TOKEN": "vault-secret",
    "ANTHROPIC_API_KEY": "sk-ant-kept-value",
}
SECRET_FILES = {
    ".ssh/id_rsa": "PRIVATE KEY",
    ".ssh/config": "Host *",
    ".aws/credentials": "[default]\naws_secret_access_key=x\n",
    ".gnupg/secring.gpg": "gpg",
    ".netrc": "machine example.org password hunter2\n",
    ".config/gh/hosts.yml": "oauth_token: gho_x\n",
    ".docker/config.json": "{}",
    ".kube/config": "apiVersion: v1",
}
HIDDEN = [".ssh", ".ssh/id_rsa", ".aws", ".aws/credentials", ".gnupg", ".netrc",
          ".config/gh", ".config/gh/hosts.yml", ".docker/config.json", ".kube",
          ".local/state/agent-sandbox"]


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        if os.geteuid() != 0:
            pytest.fail(f"the tests must run as root to create the test user {name} "
                        "(run scripts/test.sh as root)")
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
        return pwd.getpwnam(name)


def kill_launcher_when_ready(user, project: Path, argv: list, ready: Path, env) -> None:
    """Start `argv` (a launch) as `user` in `project`; once the session has
    made `ready`, SIGKILL the launcher — what a killed terminal or an OOM kill
    leaves for the next launch and `status` to clean up."""
    proc = subprocess.Popen(argv, user=user.uid, group=user.gid, extra_groups=[], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(0.3)    # the sandbox dies with its launcher


@dataclass
class SandboxUser:
    """The unprivileged test user: `run` runs ARGV as them (after the plan
    cache's racy window, tests/support/waiting.py), `sandbox` runs
    `agent-sandbox run OPTIONS -- COMMAND`, `write` puts a file they own in
    their home."""
    name: str
    uid: int
    gid: int
    home: Path

    @property
    def project(self) -> Path:
        return self.home / "proj"

    def env(self, **extra: str) -> dict[str, str]:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
               "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8",
               "SANDBOX_QUIET": "1", **SECRET_ENV}
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def run(self, argv, *, env=None, cwd=None, input=None, timeout=60, text=True,
            **kwargs) -> subprocess.CompletedProcess:
        settle()
        return subprocess.run(
            [str(a) for a in argv], user=self.uid, group=self.gid, extra_groups=[],
            env=env if env is not None else self.env(), cwd=str(cwd or self.project),
            input=input, capture_output=True, text=text, timeout=timeout, **kwargs)

    def sandbox(self, *command, options=(), **kwargs) -> subprocess.CompletedProcess:
        """`agent-sandbox run OPTIONS -- COMMAND` as this user."""
        return self.run([INSTALLED, "run", *options, "--", *command], **kwargs)

    def write(self, relative: str, content: str, mode: int = 0o644) -> Path:
        path = self.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)
        wrote()
        for parent in [path, *path.parents]:
            if parent == self.home.parent:
                break
            os.chown(parent, self.uid, self.gid)
        return path

    def set_config(self, text: str) -> None:
        self.write(".config/agent-sandbox/sandbox.conf", text)


@pytest.fixture(scope="session")
def other_user() -> pwd.struct_passwd:
    return _ensure_user(OTHER_USER)


@pytest.fixture(scope="session")
def user(installed, other_user) -> SandboxUser:
    entry = _ensure_user(TEST_USER)
    sandbox_user = SandboxUser(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
    home = sandbox_user.home
    for relative in (".config/agent-sandbox", ".local/state/agent-sandbox"):
        shutil.rmtree(home / relative, ignore_errors=True)
    for relative, content in SECRET_FILES.items():
        sandbox_user.write(relative, content, 0o600)
    sandbox_user.write(".bashrc", "# test user's bashrc\n")
    sandbox_user.write(".gitconfig", "[user]\n\tname = Test User\n")
    sandbox_user.write(".config/other/settings.txt", "visible when .config is granted\n")
    shutil.rmtree(sandbox_user.project, ignore_errors=True)
    sandbox_user.project.mkdir()
    os.chown(sandbox_user.project, sandbox_user.uid, sandbox_user.gid)
    (home / ".ssh").chmod(0o700)
    return sandbox_user


@pytest.fixture
def project(user) -> Path:
    """A fresh, empty project directory below the user's home."""
    import uuid

    path = user.project / f"p{uuid.uuid4().hex[:8]}"
    path.mkdir()
    os.chown(path, user.uid, user.gid)
    yield path
    user.set_config("")


@pytest.fixture
def probes(user, project) -> Path:
    """tests/probes copied into the project, where the sandboxed user can read them."""
    target = project / "probes"
    shutil.copytree(Path(__file__).parent.parent / "probes", target)
    for path in [target, *target.iterdir()]:
        os.chown(path, user.uid, user.gid)
    return target



@pytest.fixture
def no_session_dirs(user):
    """A file (owned by the user) where the chaperon's session directories
    go, so none can be made; the real directory comes back afterwards."""
    parent = user.home / ".local/state/agent-sandbox-run"
    moved = parent.with_name("agent-sandbox-run.moved")
    if parent.exists():
        parent.rename(moved)
    parent.write_text("not a directory")
    os.chown(parent, user.uid, user.gid)
    yield parent
    parent.unlink(missing_ok=True)
    if moved.exists():
        moved.rename(parent)
