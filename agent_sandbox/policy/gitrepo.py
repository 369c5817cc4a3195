"""What git reads that can run a command, and which of it the sandbox keeps
read-only in the project's own repository (SPEC §8 "Git"; docs/git.md).

Git runs commands named by configuration (`core.fsmonitor`, filters, aliases,
…, the CODE_KEYS table) and hooks. It finds that configuration through a
chain of files, every link of which a session could otherwise bend: the
`.git` entry (a directory, or a file saying `gitdir: X`), `commondir` (where
config and hooks really live), `config.worktree` (per-worktree config),
`include.path`/`includeIf.*.path` targets, `core.hooksPath`, and the gitdirs
of submodules (`modules/…`) and linked worktrees (`worktrees/…`).

`control_paths` lists, from the repository as it is at launch, every such
file and directory: the backends keep each read-only (a missing one gets a
read-only placeholder), and `pin_path` names the `.git` directory the bwrap
and firejail views bind onto itself, so it cannot be renamed or replaced
(a mount point answers EBUSY). Landlock cannot do either; there services/gitcheck.py
detects and reports at the end instead.

The reading helpers are shared with services/gitcheck.py. Files are opened once,
without following a symlink, and only regular files of at most READ_LIMIT
bytes are read; configuration is parsed by git itself (`git config --file -`
on the bytes read), so what is found is what git would read.
"""
from __future__ import annotations

import os
import stat

from agent_sandbox.paths import read_regular

READ_LIMIT = 1 << 20
# A commondir placeholder must name a directory: "." is the gitdir itself,
# which is what git assumes when the file is missing (an empty one is fatal).
COMMONDIR_PLACEHOLDER = b".\n"
MODULE_DEPTH = 4     # submodules of submodules of …

# Configuration keys whose value git runs (or hands to a shell), from
# git-config(1). Keys are canonical (`git config --list`): section and name
# lower case, subsection as written; matched lower-cased. The second field
# narrows a key to the values that run something.
CODE_KEYS: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "command"), ("core.hookspath", "any"), ("core.sshcommand", "any"),
    ("core.pager", "any"), ("core.editor", "any"), ("core.askpass", "any"),
    ("core.gitproxy", "any"), ("core.alternaterefscommand", "any"),
    ("sequence.editor", "any"), ("pager.*", "command"), ("interactive.difffilter", "any"),
    ("gpg.program", "any"), ("gpg.*.program", "any"), ("gpg.ssh.defaultkeycommand", "any"),
    ("credential.helper", "any"), ("credential.*.helper", "any"),
    ("diff.external", "any"), ("diff.*.textconv", "any"), ("diff.*.command", "any"),
    ("difftool.*.cmd", "any"), ("difftool.*.path", "any"),
    ("mergetool.*.cmd", "any"), ("mergetool.*.path", "any"), ("merge.*.driver", "any"),
    ("filter.*.clean", "any"), ("filter.*.smudge", "any"), ("filter.*.process", "any"),
    ("alias.*", "bang"), ("submodule.*.update", "bang"),
    ("remote.*.uploadpack", "any"), ("remote.*.receivepack", "any"),
    ("remote.*.vcs", "any"), ("protocol.allow", "any"), ("protocol.*.allow", "any"),
    ("uploadpack.packobjectshook", "any"), ("trailer.*.command", "any"),
    ("trailer.*.cmd", "any"), ("guitool.*.cmd", "any"), ("man.*.cmd", "any"),
    ("man.*.path", "any"), ("browser.*.cmd", "any"), ("browser.*.path", "any"),
    ("web.browser", "any"), ("help.browser", "any"), ("instaweb.browser", "any"),
    ("instaweb.httpd", "any"), ("hook.*", "any"),
    # git send-email: a command path as SMTP server, *cmd keys; each may sit
    # in a `sendemail.<identity>` subsection (`*` spans dots here).
    ("sendemail.*smtpserver", "any"), ("sendemail.*cmd", "any"),
    ("tar.*.command", "any"),                       # git archive --format=<format>
    ("imap.tunnel", "any"),                         # git imap-send
    ("gc.recentobjectshook", "any"),                # git gc, repack
    # git-lfs runs as the user's filter and reads the repository's config too.
    ("lfs.customtransfer.*.path", "any"), ("lfs.extension.*.clean", "any"),
    ("lfs.extension.*.smudge", "any"),
    # Not commands themselves, but they make git read more configuration.
    ("include.path", "any"), ("includeif.*.path", "any"),
    ("extensions.worktreeconfig", "any"),
)
BOOLEANS = {"", "true", "false", "yes", "no", "on", "off", "1", "0"}


def is_code_key(key: str, value: str) -> bool:
    from fnmatch import fnmatchcase   # (it imports re: kept off a launch's path)

    lowered = key.lower()
    for pattern, condition in CODE_KEYS:
        if not fnmatchcase(lowered, pattern):
            continue
        if condition == "bang":
            return value.lstrip().startswith("!")
        if condition == "command":
            return value.strip().lower() not in BOOLEANS
        return True
    return False


# ---------------------------------------------------------------- reading
def read_small(path: str) -> bytes | None:
    """A regular file's bytes (None: missing, a symlink, not regular, too big)."""
    data = read_regular(path, READ_LIMIT)
    return data if isinstance(data, bytes) else None


def config_entries(data: bytes, git: str | None) -> list[tuple[str, str]]:
    """(key, value) pairs git reads from config bytes, includes not followed
    (the caller follows them, knowing the file's directory)."""
    if not git or not data:
        return []
    import subprocess   # here: 5 ms of imports (threading) a launch would pay for nothing

    try:
        result = subprocess.run(
            [git, "config", "--no-includes", "--file", "-", "--list", "--null"], input=data,
            capture_output=True, cwd="/", timeout=10,
            env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1",
                 "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CEILING_DIRECTORIES": "/"})
    except (OSError, subprocess.TimeoutExpired):
        return []
    entries = []
    for item in result.stdout.split(b"\0"):
        if not item:
            continue
        key, _, value = item.partition(b"\n")
        entries.append((key.decode("utf-8", "replace"), value.decode("utf-8", "replace")))
    return entries


def find_git(path_env: str) -> str | None:
    """The git a shell would run (shutil.which without importing shutil: this
    runs on every launch), passing over one the user — so a sandbox of
    theirs — could have written: it runs outside (paths.runnable_outside)."""
    from agent_sandbox.paths import runnable_outside

    for directory in (path_env or "/usr/bin:/bin").split(":"):
        candidate = os.path.join(directory or ".", "git")
        if (os.path.isfile(candidate) and os.access(candidate, os.X_OK)
                and runnable_outside(candidate)):
            return candidate
    return None


def gitdir_of(dotgit: str) -> str | None:
    """The gitdir a `.git` entry leads to: itself when a directory, the target
    of a `gitdir:` file, else None. Git follows a `.git` symlink to either."""
    try:
        info = os.stat(dotgit)
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode):
        return dotgit
    data = read_small(os.path.realpath(dotgit))
    if data is None or not data.startswith(b"gitdir:"):
        return None
    target = data[len(b"gitdir:"):].strip().decode("utf-8", "surrogateescape")
    return os.path.normpath(os.path.join(os.path.dirname(dotgit), target)) if target else None


def commondir_of(gitdir: str) -> str:
    data = read_small(os.path.join(gitdir, "commondir"))
    if not data or not data.strip():
        return gitdir
    return os.path.normpath(os.path.join(gitdir, data.strip().decode("utf-8", "surrogateescape")))


def include_target(value: str, config_path: str, home: str) -> str:
    if value.startswith("~/"):
        return os.path.normpath(os.path.join(home, value[2:]))
    return os.path.normpath(os.path.join(os.path.dirname(config_path), value))


def hooks_dir(value: str | None, commondir: str, worktree: str, home: str) -> str:
    if not value:
        return os.path.join(commondir, "hooks")
    if value.startswith("~/"):
        return os.path.normpath(os.path.join(home, value[2:]))
    return os.path.normpath(os.path.join(worktree, value))


def module_gitdirs(gitdir: str, depth: int = 0) -> list[str]:
    """Submodule gitdirs below `gitdir/modules` (a name may contain slashes:
    any directory holding a HEAD file is one)."""
    found: list[str] = []
    if depth > MODULE_DEPTH:
        return found

    def walk(directory: str, level: int) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if os.path.isfile(os.path.join(entry.path, "HEAD")):
                found.append(entry.path)
                found.extend(module_gitdirs(entry.path, depth + 1))
            elif level < MODULE_DEPTH:
                walk(entry.path, level + 1)

    walk(os.path.join(gitdir, "modules"), 0)
    return found


# ---------------------------------------------------------------- launch
def _config_files(gitdir: str, commondir: str) -> list[str]:
    return [os.path.join(commondir, "config"), os.path.join(gitdir, "config.worktree")]


def control_paths(project: str, home: str, git: str | None) -> list[tuple[str, bool, bytes]]:
    """(path, is_dir, placeholder) of every control file and directory of the
    project's own repository as it stands now, the `.git` entry first."""
    dotgit = os.path.join(project, ".git")
    if os.path.islink(dotgit):
        return []                    # a symlink cannot be kept; PROTECTED_PATHS warns
    paths: list[tuple[str, bool, bytes]] = []
    gitdir = dotgit
    if os.path.isfile(dotgit):
        paths.append((dotgit, False, b""))          # a worktree or submodule checkout
        gitdir = gitdir_of(dotgit) or dotgit
    commondir = commondir_of(gitdir)
    configs: list[str] = []
    hooks_paths: list[str] = []
    for each in dict.fromkeys([gitdir] + module_gitdirs(gitdir)):
        common = commondir_of(each)
        paths += [(os.path.join(each, "config"), False, b""),
                  (os.path.join(each, "config.worktree"), False, b""),
                  (os.path.join(each, "commondir"), False, COMMONDIR_PLACEHOLDER),
                  (os.path.join(each, "hooks"), True, b"")]
        if common != each:
            paths += [(os.path.join(common, "config"), False, b""),
                      (os.path.join(common, "hooks"), True, b"")]
        configs += _config_files(each, common)
    if os.path.isdir(os.path.join(commondir, "worktrees")):
        paths.append((os.path.join(commondir, "worktrees"), True, b""))
    # Includes and a hooks path named by the repository's or the user's own
    # configuration may point into the project: those stay read-only too.
    configs += [os.path.join(home, ".gitconfig"), os.path.join(home, ".config/git/config")]
    seen: set[str] = set()
    while configs:
        config = configs.pop(0)
        if config in seen or len(seen) > 32:
            continue
        seen.add(config)
        data = read_small(config) or b""
        lowered = data.lower()
        if b"include" not in lowered and b"hookspath" not in lowered:
            continue       # neither can be spelt without these letters: spare a git call
        for key, value in config_entries(data, git):
            key = key.lower()
            if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
                target = include_target(value, config, home)
                paths.append((target, False, b""))
                configs.append(target)
            elif key == "core.hookspath":
                hooks_paths.append(value)   # every one: which wins depends on where git runs
    paths += [(hooks_dir(value, commondir, project, home), True, b"") for value in hooks_paths]
    return list({p[0]: p for p in paths}.values())


def pin_path(project: str) -> str:
    return os.path.join(project, ".git")
