"""Real policies and plans for the pure backend tests: `policy_for` resolves a
real Policy from the shipped defaults and the user's config in a fake home
(a HOME_WRITABLE entry that is no package store, fixed read-only mounts and
launch context), `plan_for` a backend's real Plan with fixed payloads, `rows`
a plan's guarantee table; `view_of` a fake home's default Policy (bwrap)
and its mount operations, `under` those below a path. The fake home they expect is the `home` fixture
laid out by PLAN_HOME (`pytestmark = pytest.mark.home(**PLAN_HOME)`)."""
from __future__ import annotations

from pathlib import Path

from agent_sandbox.backends import bwrap, firejail
from agent_sandbox.backends import landlock as landlock_backend
from agent_sandbox.backends.base import Payload, PlanContext
from agent_sandbox.config import load as confload
from agent_sandbox.paths import is_within
from agent_sandbox.policy.resolve import LaunchContext, resolve_policy
from agent_sandbox.policy.view import mount_ops
from tests.support.homes import USER, context, settings_for

PLAN_FILES = {
    ".ssh/id_rsa": "KEY", ".aws/credentials": "x", ".netrc": "machine x",
    ".config/gh/hosts.yml": "token", ".config/other/settings.txt": "visible",
    ".config/agent-sandbox/sandbox.conf": "", ".bashrc": "# rc", ".profile": "# profile",
    ".gitconfig": "[user]", ".cache/uv/w": "w", ".cache/tool/w": "w", "notes.txt": "n",
    "proj/src/main.py": "print()", "proj/.git/config": "[core]",
}
BACKENDS = ("bwrap", "firejail", "landlock")
PLAN_HOME = {"files": PLAN_FILES, "links": {"keys": ".ssh"}}     # @pytest.mark.home(**PLAN_HOME)
SECCOMP = Payload(data=b"\x06\x00\x00\x00\x00\x00\xff\x7f")


def policy_for(home: Path, conf: str = "", *, backend="bwrap", install=()):
    # A HOME_WRITABLE entry that is no package store (the shipped list is empty).
    (home / ".config/agent-sandbox/sandbox.conf").write_text("HOME_WRITABLE=(.cache/tool)\n" + conf)
    settings = confload.load_settings(home=str(home), user=USER, environ={},
                                      admin_path=str(home.parent / "none.conf"), cache=False)
    settings = settings.replace(READONLY_MOUNTS=("/usr", "/etc"))
    ctx = LaunchContext(uid=1000, gid=1000, user=USER, home=str(home),
                        environ={"PATH": "/usr/bin:/bin", "GH_TOKEN": "secret-value",
                                 "LD_LIBRARY_PATH": "/opt/lib"},
                        cwd=str(home / "proj"), project_dir=None,
                        install_paths=tuple(install), session_id="sess01")
    return resolve_policy(settings, ctx, backend=backend)


def plan_for(name: str, policy, abi: int = 7, command=("claude",), *, keep_fds=(),
             terminal: bool = False, features=None):
    """The backend's plan; `keep_fds`, `terminal`: the launch's facts
    (PlanContext); `features`: what the program supports (None: the newest)."""
    launch = {"keep_fds": tuple(keep_fds), "terminal": terminal, "features": features}
    payloads = {"seccomp": SECCOMP, "marker": Payload(data=b"m")}
    if name == "bwrap":
        for item in ("etc-passwd", "etc-group", "etc-nsswitch.conf"):
            payloads[item] = Payload(data=b"root:x:0:0::/root:/bin/sh\n")
        return bwrap.plan(policy, list(command), payloads,
                          context=PlanContext("/usr/bin/bwrap", landlock_abi=abi, **launch))
    if name == "firejail":
        return firejail.plan(policy, list(command), payloads,
                             context=PlanContext("/usr/bin/firejail", landlock_abi=abi,
                                                 root_entries=("usr", "etc", "home", "tmp",
                                                               "proc", "srv", "data", "bin"),
                                                 **launch))
    return landlock_backend.plan(policy, list(command), payloads,
                                 context=PlanContext("/usr/bin/python3", landlock_abi=abi,
                                                     **launch))


def rows(plan) -> dict[str, str]:
    table = {g: "yes" for g in plan.provides}
    table.update({g: "partial" for g, _ in plan.partial})
    table.update({g: "no" for g, _ in plan.cannot})
    return table


def view_of(home: Path):
    """(policy, mount operations) of the default settings in `home` (bwrap)."""
    policy = resolve_policy(settings_for(home), context(home), backend="bwrap")
    return policy, mount_ops(policy)


def under(ops, path: str) -> list:
    return [op for op in ops if is_within(op.dest, path)]
