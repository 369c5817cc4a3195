"""`doctor`'s platform lines: which distribution, which Pythons, which
install, and what that install lacks (issue 29).

Strategy: the facts are gathered once (`gather_facts`: /etc/os-release, the
launcher's interpreter and prefix, where the package lies, the entry
script's first line, the man page, the join interpreter, the helper's
interpreter asked for its version by running it) into an InstallFacts
record; everything after is pure — `parse_os_release`, `install_kind`
(site, venv, pipx, uv, user site, system, source) and `lacks` (what
scripts/install.sh adds that this install has not, each with its
consequence and its fix) — so each rule is unit-tested on injected facts.

What install.sh adds and a user install can add itself
(`python -m agent_sandbox.cli.userinstall`, cli/userinstall.py): the
`-IS` entry script, the man page, an execute-only join interpreter. A
`pip install --user` cannot work (the chaperon, the egress proxy and the job
wrapper start `python -I -m …`, which drops the user site) and is refused at
its first launch (tools/usersite.py, called at the CLI's edge).
"""
from __future__ import annotations

import os
import stat
import sys
from typing import NamedTuple

from agent_sandbox.tools.usersite import user_site, within

JOIN_NAME = "python3-join"           # <prefix>/libexec/python3-join (scripts/install.sh)
MAN_PAGE = "man1/agent-sandbox.1"


class InstallFacts(NamedTuple):
    package_dir: str            # .../agent_sandbox
    prefix: str                 # sys.prefix
    base_prefix: str            # sys.base_prefix
    prefix_uid: int             # owner of sys.prefix
    user_site: str              # site.getusersitepackages()
    pyvenv_cfg: str             # the text of <prefix>/pyvenv.cfg ("" without)
    entry_line: str             # the first line of <prefix>/bin/agent-sandbox ("" without)
    man_pages: tuple            # the agent-sandbox.1 files found on the man path
    join: tuple | None          # (uid, mode) of <prefix>/libexec/python3-join, None: absent
    uid: int                    # the user's


class Lack(NamedTuple):
    what: str
    consequence: str
    fix: str


# ---------------------------------------------------------------- pure
def parse_os_release(text: str) -> dict[str, str]:
    """os-release(5): KEY=value lines, values optionally quoted ("…" with
    backslash escapes, or '…'); comments and malformed lines ignored."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if not key.replace("_", "").isalnum() or not key.isupper():
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            quote, value = value[0], value[1:-1]
            if quote == '"':
                chars, i = [], 0
                while i < len(value):
                    if value[i] == "\\" and i + 1 < len(value):
                        i += 1
                    chars.append(value[i])
                    i += 1
                value = "".join(chars)
        out[key] = value
    return out


def distribution(release: dict[str, str]) -> str:
    """One line: `Rocky Linux 9.4 (rocky; like rhel centos fedora)`."""
    if not release:
        return "unknown (no /etc/os-release)"
    name = release.get("PRETTY_NAME") or " ".join(
        filter(None, (release.get("NAME", "Linux"), release.get("VERSION_ID"))))
    ids = release.get("ID", "")
    if release.get("ID_LIKE"):
        ids += f"; like {release['ID_LIKE']}"
    return f"{name} ({ids})" if ids else name


def package_manager(release: dict[str, str]) -> str | None:
    """The package manager a site install uses (scripts/install.sh): apt,
    dnf or zypper by the distribution's family, None when unknown."""
    family = {release.get("ID", "")} | set(release.get("ID_LIKE", "").split())
    if family & {"debian", "ubuntu"}:
        return "apt"
    if family & {"rhel", "fedora", "centos", "rocky", "almalinux"}:
        return "dnf"
    if family & {"suse", "sles", "opensuse"}:
        return "zypper"
    return None


def install_kind(facts: InstallFacts) -> str:
    """How this launcher was installed, from where its package lies."""
    origin = os.path.dirname(facts.package_dir)
    if within(origin, facts.user_site):
        return "user site"
    if os.path.basename(origin) not in ("site-packages", "dist-packages"):
        return "source"
    if facts.prefix == facts.base_prefix:
        return "system"
    parts = facts.prefix.split("/")
    if "pipx" in parts and "venvs" in parts:
        return "pipx"
    if ("uv" in parts and "tools" in parts) or any(
            line.split("=")[0].strip() == "uv" for line in facts.pyvenv_cfg.splitlines()):
        return "uv"
    if facts.prefix_uid == 0:      # root's venv: scripts/install.sh or a site's own
        return "site"
    return "venv"


def join_ok(join: tuple | None, uid: int) -> bool:
    """The join interpreter firejail --join may exec (jobs/join.py)."""
    from agent_sandbox.jobs.join import join_python_usable

    return join is not None and join_python_usable(join[0], join[1], uid)


def lacks(facts: InstallFacts, kind: str, python: str) -> list[Lack]:
    """What this install lacks of what scripts/install.sh adds, each with what
    follows and the command that adds it (`python`: the launcher's)."""
    # Root's installs are completed by root's script; a user's by the user.
    finish = "scripts/install.sh (as root)" if kind in ("site", "system") else \
        f"{python} -m agent_sandbox.cli.userinstall"
    if kind == "user site":
        return [Lack("a usable install: pip --user",
                     "every launch is refused: the chaperon, the egress proxy and the job "
                     "wrapper run `python -I -m …`, which ignores the user site",
                     "install into a venv, pipx or uv tool instead (docs/install.md): "
                     "python3 -m venv ~/.local/agent-sandbox && "
                     "~/.local/agent-sandbox/bin/pip install WHEEL, then "
                     "pip uninstall --user agent-sandbox")]
    if kind == "source":
        return []
    out = []
    if "-IS" not in facts.entry_line.split()[1:]:
        out.append(Lack("the isolated entry script (-IS)",
                        "the launcher honours PYTHONPATH and PYTHON* variables (HPC modules "
                        "set them): a module on PYTHONPATH named like a dependency is "
                        "imported by the launcher, and each launch pays for site's .pth files",
                        finish))
    if not facts.man_pages:
        out.append(Lack("the man page", "`man agent-sandbox` finds nothing "
                        "(`agent-sandbox help` still works)", finish))
    if not join_ok(facts.join, facts.uid):
        out.append(Lack("the execute-only join interpreter (libexec/python3-join)",
                        "on firejail a job step cannot join its job's sandbox and is refused "
                        "(bwrap and landlock steps join without it)", finish))
    return out


# ---------------------------------------------------------------- gathering
def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def man_dirs(prefix: str, home: str, environ) -> list[str]:
    """Where man(1) looks for agent-sandbox.1 (MANPATH, else man-db's
    mapping of PATH's bin/ to ../share/man, and the system's)."""
    dirs = [d for d in environ.get("MANPATH", "").split(":") if d]
    for directory in environ.get("PATH", "").split(":"):
        if directory.startswith("/"):
            dirs.append(os.path.join(os.path.dirname(directory.rstrip("/")), "share", "man"))
    dirs += [os.path.join(prefix, "share", "man"), os.path.join(home, ".local/share/man"),
             "/usr/local/share/man", "/usr/share/man", "/usr/local/man"]
    return list(dict.fromkeys(os.path.normpath(d) for d in dirs))


def gather_facts(environ, home: str) -> InstallFacts:
    from agent_sandbox.paths import PACKAGE_DIR

    prefix = sys.prefix
    try:
        prefix_uid = os.stat(prefix).st_uid
    except OSError:
        prefix_uid = -1
    try:
        with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8",
                  errors="replace") as handle:
            pyvenv = handle.read(4096)
    except OSError:
        pyvenv = ""
    try:
        info = os.stat(os.path.join(prefix, "libexec", JOIN_NAME))
        join = (info.st_uid, stat.S_IMODE(info.st_mode))
    except OSError:
        join = None
    pages = tuple(p for p in (os.path.join(d, MAN_PAGE) for d in man_dirs(prefix, home, environ))
                  if os.path.isfile(p))
    return InstallFacts(PACKAGE_DIR, prefix, sys.base_prefix, prefix_uid, user_site(), pyvenv,
                        _first_line(os.path.join(prefix, "bin", "agent-sandbox")), pages, join,
                        os.getuid())


def _python_line(python: str) -> str:
    from agent_sandbox.tools.checks import _run

    code, text = _run([python, "-I", "-S", "-c", "import sys; print(sys.version.split()[0])"])
    version = text.strip().splitlines()[-1] if code == 0 and text.strip() else "does not run"
    return f"{version} ({python})"


def platform_items(environ, home: str) -> list:
    """The doctor's `platform` and `install` items."""
    from agent_sandbox.tools.checks import GAPS, GO, Item, _read
    from agent_sandbox.process.select import helper_python

    release = parse_os_release(_read("/etc/os-release", 1 << 16)
                               or _read("/usr/lib/os-release", 1 << 16))
    launcher = f"{sys.version.split()[0]} ({os.path.realpath(sys.executable)})"
    try:
        helper = _python_line(helper_python())
    except Exception as exc:     # the helper rule refuses: say so, it is what a launch says
        helper = f"none usable — {exc}"
    items = [Item("platform", GO, f"{distribution(release)}; Python: launcher {launcher}, "
                  f"helper {helper}",
                  data={"os_release": {k: release[k] for k in ("ID", "ID_LIKE", "VERSION_ID",
                                                               "PRETTY_NAME") if k in release},
                        "launcher_python": launcher, "helper_python": helper})]
    facts = gather_facts(environ, home)
    kind = install_kind(facts)
    # The venv's own interpreter (its link, not what it points at: the module
    # must run inside the venv).
    missing = lacks(facts, kind, os.path.join(facts.prefix, "bin", "python")
                    if facts.prefix != facts.base_prefix else sys.executable)
    where = facts.prefix if kind not in ("source", "user site", "system") else \
        os.path.dirname(facts.package_dir)
    data = {"kind": kind, "where": where, "lacks": [m.what for m in missing]}
    if not missing:
        return items + [Item("install", GO, f"{kind} install in {where}", data=data)]
    summary = f"{kind} install in {where}; lacks " + "; ".join(
        f"{m.what} — {m.consequence}" for m in missing)
    fixes = list(dict.fromkeys(m.fix for m in missing))
    return items + [Item("install", GAPS, summary, "; ".join(fixes), data=data)]
