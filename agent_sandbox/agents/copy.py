"""An agent's configuration on a session copy, merged back under a guard.

Some settings keys make an agent run commands outside the sandbox later
(hooks, MCP server commands, status-line and key-helper commands, plugin
sources), others are choices the user wants kept (trust, permissions, auth
method, model, theme). So the agent never writes its live settings: for a
profile with AGENT_CONFIG_DIR the launcher builds, before the sandbox starts,

- a copy root `~/.local/state/agent-sandbox-run/agents/<session>/` (0700, writable
  inside, the profile's variable — CLAUDE_CONFIG_DIR, CODEX_HOME,
  GEMINI_CLI_HOME — points the agent at it), holding
- the guarded settings files (AGENT_SETTINGS) as plain copies, and
- for every other entry of the real configuration directory a symlink to it
  (except the profile's AGENT_CONFIG_SCRATCH entries — shell snapshots,
  caches —, which start empty in the copy): the entries the profile's
  allow-list AGENT_CONFIG_KEEP names (history, todos, sessions, logs)
  are writable inside and land in the real directory as before; every other
  entry is read-only inside (scripts the user's settings run, rules,
  backups: nothing the session writes is live for the user's unsandboxed
  runs) — except state keyed by project (AGENT_CONFIG_PER_PROJECT: the
  copy's own directory holding a link to this project's entry alone) and
  the logins (AGENT_LOGINS: a plain copy from the sandbox's own login store,
  never the real file; a change goes back to the store only), and
- a record in the hidden state directory `agents/<session>.json` with the
  launcher's identity (services/registry.py fields) and a copy of each guarded file
  as it started (the base of the three-way merge).

At exit, under one lock per user, `finish` merges each guarded file back
with policy/agentmerge.py — only the keys the session changed, only those
the profile's allow-list names, with their types; the rest is dropped and
reported — and moves back the entries the session created in the copy
whose names AGENT_CONFIG_KEEP lists (plain files and directories, never a
symlink, never over a symlink or a protected path of the user's); all else
the session made is dropped and reported (a `.env`, a `.config.json`, a
`rules/` directory would steer or run the user's unsandboxed agent). A launcher killed with SIGKILL leaves its record: the
next launch of a profile or `agent-sandbox status` finds it stale (registry
judge) and runs the same guarded merge. Nothing is applied unchecked.
Every file of the copy is opened without following symlinks, and the copy
root lies in the always-hidden run directory (copies_dir: no sandbox can
reach another session's copy or swap a directory on the way to it) and is
made, merged and removed through a descriptor of that directory
(paths.open_own_dir).
"""
from __future__ import annotations

import os
import stat
from collections import namedtuple

from agent_sandbox.errors import say
from agent_sandbox.paths import remove_entry

SUBDIR = "agents"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_BYTES = 16 << 20


# collections.namedtuple, not typing.NamedTuple: typing costs every agent
# launch ~2.5 ms of imports (a cached launch imports this module).
class Guarded(namedtuple("Guarded", ("name", "real", "patterns", "where"), defaults=("home",))):
    """name: the path below the copy root (the project copy's for "project");
    real: the user's file; patterns: the allow-list of keys merged back;
    where: "project" for a file in the project, bound over (bwrap)."""
    __slots__ = ()


class Spec(namedtuple("Spec", ("profile", "variable", "real_dir", "mirror", "files",
                               "project_files", "keep", "scratch", "per_project", "logins",
                               "quiet"),
                  defaults=((), (), (), (), (), ()))):
    """mirror: where real_dir appears below the copy root ("" = the root);
    files: the Guarded settings; project_files: (path in the project,
    patterns), AGENT_PROJECT_SETTINGS; keep: AGENT_CONFIG_KEEP, entries
    written inside and moved back; scratch: AGENT_CONFIG_SCRATCH, entries
    fresh per session, dropped; per_project: AGENT_CONFIG_PER_PROJECT
    (policy/agentstate.py); logins: AGENT_LOGINS, on the login store;
    quiet: AGENT_SETTINGS_QUIET, COPY:KEY.PATH of keys known to be inert,
    dropped without a word."""
    __slots__ = ()


def spec_for(profile, home: str) -> Spec | None:
    """The profile's guarded configuration, or None when it has none."""
    if not profile.config_dir:
        return None
    variable, directory = profile.config_dir[0], profile.config_dir[1]
    mirror = os.path.normpath(profile.config_dir[2]) if len(profile.config_dir) > 2 else ""
    def patterns(name: str) -> tuple[str, ...]:
        return tuple(p.partition(":")[2] for p in profile.settings_keep
                     if os.path.normpath(p.partition(":")[0]) == name)

    files = []
    for entry in profile.settings:
        name, _, real = entry.partition("=")
        name = os.path.normpath(name)
        if not real or name.startswith("..") or os.path.isabs(name):
            continue
        files.append(Guarded(name, os.path.join(home, os.path.expanduser(real)), patterns(name)))
    project = tuple((os.path.normpath(r), patterns(os.path.normpath(r)))
                    for r in profile.project_settings
                    if not os.path.isabs(r) and not os.path.normpath(r).startswith(".."))
    return Spec(profile.name, variable, os.path.join(home, directory),
                "" if mirror == "." else mirror, tuple(files), project,
                tuple(profile.config_keep),
                tuple(profile.config_scratch),
                tuple(profile.config_per_project),
                tuple(profile.logins), tuple(profile.settings_quiet))


def _named(name: str, patterns, is_dir: bool) -> bool:
    """Whether an entry of the configuration directory is on a list (fnmatch
    globs; a trailing / names a directory only)."""
    for pattern in patterns:
        want_dir = pattern.endswith("/")
        bare = pattern.rstrip("/")
        if "*" in bare or "?" in bare or "[" in bare:
            from fnmatch import fnmatchcase    # fnmatch imports re: ~3 ms a launch

            matched = fnmatchcase(name, bare)
        else:
            matched = name == bare
        if matched and (is_dir or not want_dir):
            return True
    return False


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode)
    except OSError:
        return False


def copies_dir(home: str) -> str:
    """Where the copy roots go: in the run directory, which every sandbox
    hides (policy.CREDENTIAL_DIRS) and whose parents none can rename (mount
    points, or not granted on landlock); each session is granted its own
    root alone, by exact path, past the hiding (policy/view.py, firejail,
    landlock: a hidden writable path). Before, in ~/.cache/agent-sandbox/:
    a sandbox with ~/.cache writable (HOME_WRITABLE+=(.cache)) could swap
    `agents` for a link while another session's launcher made its copy, and
    have that copy granted writable wherever it pointed."""
    from agent_sandbox.paths import run_dir

    return os.path.join(run_dir(home), SUBDIR)


def copy_root(home: str, session: str) -> str:
    return os.path.join(copies_dir(home), session)


def _open_copies(home: str) -> int:
    """The copies' directory, made and opened through descriptors
    (paths.open_own_dir: no symlink, the user's own), refused by name when
    it is not agent-sandbox's."""
    from agent_sandbox.paths import NotOwnDirectory, open_own_dir, run_dir

    os.makedirs(run_dir(home), mode=0o700, exist_ok=True)
    try:
        return open_own_dir(run_dir(home), SUBDIR, create=True)
    except NotOwnDirectory as exc:
        from agent_sandbox.errors import PolicyError

        raise PolicyError(
            f"{exc.path} {exc.what} — agent-sandbox makes its agents' session copies only "
            f"in a directory of its own there. See what it is (ls -la {exc.path}), "
            f"remove it, and run again.", reason="agent_copy_dir") from None


def _copies_of(record: dict) -> int | None:
    """The copy roots' directory of a record's session, opened as
    _open_copies does (None when it is gone or no longer ours)."""
    from agent_sandbox.paths import open_own_dir

    from agent_sandbox.paths import run_dir

    home = str(record.get("home", ""))
    if not home or os.path.dirname(str(record.get("root", ""))) != copies_dir(home):
        return None     # (a record of an older version: its copy stays, unmerged)
    try:
        return open_own_dir(run_dir(home), SUBDIR)
    except OSError:
        return None


def _remove_copy(copies: int, session: str) -> None:
    remove_entry(copies, session)
    remove_entry(copies, session + ".project")


def _record_dir(home: str) -> str:
    from agent_sandbox.paths import state_dir

    return os.path.join(state_dir(home), SUBDIR)


# ---------------------------------------------------------------- start
def start(spec: Spec, policy, *, note_path: str = ""):
    """Build the copy and the record; returns (policy with the copy writable
    and the variable set, record path)."""
    from agent_sandbox.errors import PolicyError

    configured = policy.env.get(spec.variable)
    if configured and os.path.normpath(configured) != spec.real_dir:
        raise PolicyError(
            f"{spec.variable}={configured} is set — the {spec.profile} profile runs the agent "
            f"on a guarded session copy of {spec.real_dir}. Unset {spec.variable}, or copy "
            f"your configuration to {spec.real_dir}.", reason="agent_config_dir")
    root = copy_root(policy.home, policy.session_id)
    records = _record_dir(policy.home)
    os.makedirs(records, mode=0o700, exist_ok=True)
    copies = _open_copies(policy.home)
    try:
        os.mkdir(policy.session_id, 0o700, dir_fd=copies)
        try:
            root_fd = os.open(policy.session_id, _DIR, dir_fd=copies)
            try:
                return _build(spec, policy, root, root_fd, copies, records, note_path)
            finally:
                os.close(root_fd)
        except BaseException:
            _remove_copy(copies, policy.session_id)   # no record yet: nothing refers to it
            raise
    finally:
        os.close(copies)


def _build(spec: Spec, policy, root: str, root_fd: int, copies: int, records: str,
           note_path: str):
    """Everything made below root_fd, by descriptor (the names are what the
    sandbox is given)."""
    from agent_sandbox.services import registry

    mirror = os.path.join(root, spec.mirror) if spec.mirror else root
    mirror_fd = _open_below(root_fd, spec.mirror, create=True)
    if mirror_fd is None:
        raise OSError(f"cannot make {mirror}")
    guarded = {os.path.join(root, g.name) for g in spec.files}
    try:
        names = set(os.listdir(spec.real_dir))
    except OSError:
        names = set()
    # Missing protected entries and the note get their placeholder at the
    # real path before the sandbox starts: link them too.
    for path in [p.path for p in policy.protected] + [note_path]:
        if path and os.path.dirname(path) == spec.real_dir:
            names.add(os.path.basename(path))
    protected = [p.path for p in policy.protected]
    per_project = _per_project(spec, policy, register=True)
    logins = {}
    try:
        for name in sorted(names):
            if _scratch(spec, name, protected) or name in per_project or name in spec.logins:
                continue    # starts empty in the copy; the real one stays unseen by it
            if os.path.join(mirror, name) not in guarded:
                os.symlink(os.path.join(spec.real_dir, name), name, dir_fd=mirror_fd)
        for parent, keys in per_project.items():
            _link_project_state(spec, parent, keys, mirror_fd)
        for name in spec.logins:
            logins[name] = _login_start(spec, policy.home, name, mirror_fd)
    finally:
        os.close(mirror_fd)
    base, resolved = {}, {}
    for item in spec.files:
        # The user's own symlink (a dotfiles repository) is followed — the
        # agent cannot change it, the path is read-only inside — but never
        # into a hidden path (its content would become readable in the copy).
        real = os.path.realpath(item.real)
        resolved[item.name] = None if policy.is_hidden(real) else real
        data = None if resolved[item.name] is None else _read(real)
        base[item.name] = None if data is None else data.decode("utf-8", "surrogateescape")
        if data is not None:
            parent = _open_below(root_fd, os.path.dirname(item.name), create=True)
            if parent is None:
                raise OSError(f"cannot make {os.path.dirname(os.path.join(root, item.name))}")
            try:
                _write_new(os.path.basename(item.name), data, dir_fd=parent)
            finally:
                os.close(parent)
    project_files, session_files = _project_copies(spec, policy, root + ".project", copies,
                                                   base)
    record = {"session": policy.session_id, "pid": os.getpid(), "host": registry.host_name(),
              "boot_id": registry.boot_id(), "start_ticks": registry.start_ticks(),
              "uid": os.getuid(), "spec": spec._replace(files=spec.files + project_files),
              "root": root, "base": base, "home": policy.home, "resolved": resolved,
              "project": policy.project_dir, "per_project": per_project, "logins": logins,
              "workdir": policy.workdir or policy.project_dir,
              "registry_slug": _registry_slug(spec, policy.workdir
                                              or policy.project_dir, register=False),
              # read-only inside, so never moved back: protected paths and the note
              "protected": [p.path for p in policy.protected] + [p for p in (note_path,) if p]}
    path = os.path.join(records, f"{policy.session_id}.json")
    temp = path + ".tmp"
    from agent_sandbox.jsonlite import dumps     # json imports re: ~3.5 ms a launch

    _write_new(temp, dumps(record))
    os.replace(temp, path)
    env = dict(policy.env)
    env[spec.variable] = root
    return policy._replace(env=env, extra_writable=policy.extra_writable + (root,),
                           session_files=tuple(session_files),
                           **_entry_grants(spec, policy, record["protected"], per_project)), path


def _project_copies(spec: Spec, policy, project_root: str, copies: int, base: dict) -> tuple:
    """Session copies of the protected project files the agent saves choices
    in (Claude Code's .claude/settings.local.json), bound writable over the
    read-only placeholder — only where the backend binds a file at another
    path (its trait fixed_mount_points: bwrap; Claude Code writes it in place
    when the rename beside it fails on the mount point). Read below the
    project without following a symlink: the project is the agent's to shape."""
    from agent_sandbox.traits import traits

    protected = {p.path for p in policy.protected}
    if not traits(policy.backend).fixed_mount_points or not spec.project_files:
        return (), ()
    files, binds = [], []
    project_fd = os.open(policy.project_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    copy_fd = None
    try:
        for relative, patterns in spec.project_files:
            real = os.path.join(policy.project_dir, relative)
            if real not in protected:
                continue            # not kept read-only: nothing to stand in for
            parent = _open_below(project_fd, os.path.dirname(relative))
            data = None
            if parent is not None:
                try:
                    data = _read(os.path.basename(relative), dir_fd=parent)
                    present = _exists_at(parent, os.path.basename(relative))
                finally:
                    os.close(parent)
                if data is None and present:
                    continue        # a symlink or not a file: it stays read-only
            text = (data or b"{}\n").decode("utf-8", "surrogateescape")
            copy = os.path.join(project_root, relative)
            if copy_fd is None:       # made by descriptor, as the copy root
                os.mkdir(os.path.basename(project_root), 0o700, dir_fd=copies)
                copy_fd = os.open(os.path.basename(project_root), _DIR, dir_fd=copies)
            parent = _open_below(copy_fd, os.path.dirname(relative), create=True)
            if parent is None:
                raise OSError(f"cannot make {os.path.dirname(copy)}")
            try:
                _write_new(os.path.basename(relative),
                           text.encode("utf-8", "surrogateescape"), dir_fd=parent)
            finally:
                os.close(parent)
            base["project:" + relative] = text
            files.append(Guarded(relative, real, patterns, "project"))
            binds.append((copy, real))
    finally:
        os.close(project_fd)
        if copy_fd is not None:
            os.close(copy_fd)
    return tuple(files), tuple(binds)


def _scratch(spec: Spec, name: str, protected) -> bool:
    """An entry of the real directory the copy has its own, empty one of
    (AGENT_CONFIG_SCRATCH), unless protected: nothing inside refers to the
    real one."""
    return (_named(name, spec.scratch, True)
            and not _protected(os.path.join(spec.real_dir, name), protected))


def _per_project(spec: Spec, policy, *, register: bool = False) -> dict:
    """parent entry → this project's names in it (AGENT_CONFIG_PER_PROJECT);
    `register`: a project new to the agent's registry is registered (the
    copy's build), else only looked up."""
    if not spec.per_project:
        return {}
    from agent_sandbox.policy.agentstate import per_project_names

    workdir = policy.workdir or policy.project_dir
    return per_project_names(spec.per_project, policy.project_dir, workdir,
                             _registry_slug(spec, workdir, register=register))


def _registry_parents(spec: Spec) -> list[str]:
    from agent_sandbox.policy.agentstate import parse_per_project

    out = []
    for entry in spec.per_project:
        try:
            parent, encoding = parse_per_project(entry)
        except ValueError:
            continue
        if encoding == "gemini-registry":
            out.append(parent)
    return out


class _Owners:
    """The owner markers of the registry's parents, read by descriptor."""

    def __init__(self, real_fd: int, parents):
        self.real_fd, self.parents = real_fd, parents

    def __call__(self, slug: str) -> list:
        from agent_sandbox.policy.agentstate import OWNER_MARKER

        owners = []
        for parent in self.parents:
            fd = _open_below(self.real_fd, f"{parent}/{slug}")
            if fd is None:
                owners.append(None)
                continue
            try:
                data = _read(OWNER_MARKER, dir_fd=fd)
                present = _exists_at(fd, OWNER_MARKER)
            finally:
                os.close(fd)
            owners.append(None if not present else
                          "" if data is None else data.decode("utf-8", "replace").strip())
        return owners

    def marked(self) -> list[str]:
        from agent_sandbox.policy.agentstate import OWNER_MARKER, is_slug

        names = set()
        for parent in self.parents:
            fd = _open_below(self.real_fd, parent)
            if fd is None:
                continue
            try:
                for name in os.listdir(fd):
                    if is_slug(name) and _exists_at(fd, f"{name}/{OWNER_MARKER}"):
                        names.add(name)
            finally:
                os.close(fd)
        return sorted(names)


def _registry_slug(spec: Spec, project: str, *, register: bool) -> str | None:
    """The project's name in the agent's registry (gemini-registry), claimed
    and registered outside as the agent would when `register` and it has
    none; None when the profile keys nothing so, or it cannot be had."""
    parents = _registry_parents(spec)
    if not parents:
        return None
    from agent_sandbox.policy.agentstate import OWNER_MARKER, REGISTRY, claim_slug

    try:
        real_fd = os.open(spec.real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = _read(REGISTRY, dir_fd=real_fd)
        try:
            from agent_sandbox.jsonlite import loads

            document = loads(data) if data else {}
        except ValueError:
            document = {}
        projects = document.get("projects") if isinstance(document, dict) else None
        projects = projects if isinstance(projects, dict) else {}
        slug, new = claim_slug(project, projects, _Owners(real_fd, parents))
        if not new:
            return slug
        if not register:
            return None
        for parent in parents:
            fd = _open_below(real_fd, f"{parent}/{slug}", create=True, mode=0o700)
            if fd is None:
                return None
            try:
                _write_new(OWNER_MARKER, project.encode(), 0o600, dir_fd=fd)
            except FileExistsError:
                pass
            finally:
                os.close(fd)
        from agent_sandbox.jsonlite import dumps

        document = document if isinstance(document, dict) else {}
        document["projects"] = dict(projects, **{project: slug})
        _replace_at(real_fd, REGISTRY, dumps(document))
        return slug
    except (OSError, ValueError, TypeError):
        return None         # nothing of this kind granted: the session's writes are dropped
    finally:
        os.close(real_fd)


def _restore_markers(spec: Spec, record: dict, refused: list) -> None:
    """An owner marker the session changed in this project's entries is put
    back (Gemini adopts a directory whose marker names a project it opens)."""
    from agent_sandbox.policy.agentstate import OWNER_MARKER

    slug, project = record.get("registry_slug"), str(record.get("workdir") or "")
    if not slug or not project:
        return
    try:
        real_fd = os.open(spec.real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for parent in _registry_parents(spec):
            fd = _open_below(real_fd, f"{parent}/{slug}")
            if fd is None:
                continue
            try:
                if _read(OWNER_MARKER, dir_fd=fd) != project.encode():
                    try:
                        os.unlink(OWNER_MARKER, dir_fd=fd)   # (a directory stays: refused)
                    except OSError:
                        pass
                    _replace_at(fd, OWNER_MARKER, project.encode())
                    refused.append(os.path.join(spec.real_dir, parent, slug, OWNER_MARKER))
            except OSError:
                refused.append(os.path.join(spec.real_dir, parent, slug, OWNER_MARKER))
            finally:
                os.close(fd)
    finally:
        os.close(real_fd)


def _link_project_state(spec: Spec, parent: str, keys, mirror_fd: int) -> None:
    """The copy's `parent` is a directory of its own holding a link to this
    project's entries alone, each made in the real parent (0700) if missing —
    walked by descriptor from the configuration directory, never through a
    symlink: a parent or entry that is a symlink is not linked (the
    session's writes there stay in the copy and are dropped)."""
    os.mkdir(parent, 0o700, dir_fd=mirror_fd)
    copy_fd = os.open(parent, _DIR, dir_fd=mirror_fd)
    try:
        real_fd = os.open(spec.real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        os.close(copy_fd)
        return
    try:
        parent_fd = _open_below(real_fd, parent, create=True, mode=0o700)
        if parent_fd is None:
            return
        try:
            for key in keys:
                try:
                    os.mkdir(key, 0o700, dir_fd=parent_fd)
                except FileExistsError:
                    pass
                except OSError:
                    continue
                if _is_dir_at(parent_fd, key):
                    os.symlink(os.path.join(spec.real_dir, parent, key), key, dir_fd=copy_fd)
        finally:
            os.close(parent_fd)
    finally:
        os.close(real_fd)
        os.close(copy_fd)


def _is_dir_at(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


# ---------------------------------------------------------------- logins
# A login file (AGENT_LOGINS: Claude Code's .credentials.json, Codex's
# auth.json, Gemini's oauth_creds.json) is never granted: the session works
# on a plain copy of the sandbox's own login store, hidden inside
# (~/.local/state/agent-sandbox/logins/<profile>/, per user and agent).
# The store is seeded from the real file whenever that changed outside since
# (the user logged in or refreshed outside: their login wins); a session's
# change (a token refresh, or another login) goes to the store at exit, so
# later sandboxed sessions run on it, and never to the real file — adopting
# it outside takes `agent-sandbox config adopt-login PROFILE`, run outside
# (docs/shared-channels.md §4 says why this is safe).
LOGINS = "logins"


def _digest(data: bytes | None) -> str:
    import hashlib

    return "absent" if data is None else hashlib.sha256(data).hexdigest()


def _open_store(home: str, profile: str, *, create: bool) -> int | None:
    """The profile's login store, below the hidden state directory, opened
    by descriptor (never through a symlink)."""
    from agent_sandbox.paths import state_dir

    try:
        if create:
            os.makedirs(state_dir(home), mode=0o700, exist_ok=True)
        top = os.open(state_dir(home), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _open_below(top, f"{LOGINS}/{profile}", create=create, mode=0o700)
    finally:
        os.close(top)


def _store_put(store_fd: int, name: str, data: bytes | None) -> None:
    if data is None:
        try:
            os.unlink(name, dir_fd=store_fd)
        except FileNotFoundError:
            pass
        return
    temp = f".{name}.{os.urandom(6).hex()}"
    _write_new(temp, data, 0o600, dir_fd=store_fd)
    os.replace(temp, name, src_dir_fd=store_fd, dst_dir_fd=store_fd)


def _real_login(spec: Spec, name: str) -> bytes | None:
    try:
        real_fd = os.open(spec.real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read(name, dir_fd=real_fd)
    finally:
        os.close(real_fd)


def _login_start(spec: Spec, home: str, name: str, mirror_fd: int) -> str:
    """The login the session gets (a plain file in the copy); returns its
    digest (the record's, to tell a change at exit)."""
    from agent_sandbox.policy.agentstate import login_source

    real = _real_login(spec, name)
    store_fd = _open_store(home, spec.profile, create=True)
    if store_fd is None:
        raise OSError(f"cannot make the login store of {spec.profile}")
    try:
        stored = _read(name, dir_fd=store_fd)
        seen = _read(name + ".outside", dir_fd=store_fd)
        if login_source(_digest(real), stored is not None,
                        None if seen is None else seen.decode("ascii", "replace")) == "real":
            _store_put(store_fd, name, real)
            _store_put(store_fd, name + ".outside", _digest(real).encode())
            stored = real
    finally:
        os.close(store_fd)
    if stored is not None:
        _write_new(name, stored, 0o600, dir_fd=mirror_fd)
    return _digest(stored)


def _login_finish(spec: Spec, record: dict, mirror_fd: int | None) -> list[str]:
    """The session's changed logins put in the store (never the real file);
    returns the real paths whose login changed."""
    changed = []
    for name, started in (record.get("logins") or {}).items():
        if name not in spec.logins or mirror_fd is None:
            continue
        now = _read(name, dir_fd=mirror_fd)
        if now is None and _exists_at(mirror_fd, name):
            continue            # a symlink or no file: nothing of it is kept
        if _digest(now) == started:
            continue
        store_fd = _open_store(str(record.get("home", "")), spec.profile, create=True)
        if store_fd is None:
            continue
        try:
            _store_put(store_fd, name, now)
        finally:
            os.close(store_fd)
        changed.append(os.path.join(spec.real_dir, name))
    return changed


def adopt_login(spec: Spec, home: str) -> list[str]:
    """`agent-sandbox config adopt-login PROFILE`, outside: the sandbox's
    logins become the real files (written by descriptor from the
    configuration directory); returns the paths written."""
    store_fd = _open_store(home, spec.profile, create=False)
    if store_fd is None:
        return []
    written = []
    try:
        real_fd = os.open(spec.real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in spec.logins:
                data = _read(name, dir_fd=store_fd)
                if data is None or data == _read(name, dir_fd=real_fd):
                    continue
                _replace_at(real_fd, name, data)
                _store_put(store_fd, name + ".outside", _digest(data).encode())
                written.append(os.path.join(spec.real_dir, name))
        finally:
            os.close(real_fd)
    finally:
        os.close(store_fd)
    return written


def discard_logins(spec: Spec, home: str) -> bool:
    """`adopt-login --discard`: the store emptied; True if it held a login."""
    store_fd = _open_store(home, spec.profile, create=False)
    if store_fd is None:
        return False
    held = False
    try:
        for name in spec.logins:
            held = _exists_at(store_fd, name) or held
            for entry in (name, name + ".outside"):
                _store_put(store_fd, entry, None)
    finally:
        os.close(store_fd)
    return held


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except OSError:
        return False


def _entry_grants(spec: Spec, policy, protected, per_project) -> dict:
    """The real directory is no longer writable as a whole (the agent creates
    new entries in the copy; the allowed ones are moved back at exit): an
    existing entry is writable only when AGENT_CONFIG_KEEP names it and it
    is not a symlink, a guarded file or a protected path; every other entry
    stays read-only (a script the user's status line runs, a notify script,
    rules). So the user's settings are read-only inside on every backend,
    Landlock included (it cannot carve a read-only file out of a writable
    directory). A scratch entry (the copy has its own, empty) is not granted
    at all: nothing inside refers to it, and on bwrap each grant is a mount
    (left out, it does not exist inside: stricter, and a mount less)."""
    if spec.real_dir not in policy.home_writable:
        return {}
    guarded = {g.real for g in spec.files}
    writable, readonly = [], []
    try:
        names = sorted(os.listdir(spec.real_dir))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(spec.real_dir, name)
        if _scratch(spec, name, protected) or name in spec.logins:
            continue
        if name in per_project:
            # only this project's entries (made by _link_project_state);
            # the parent and other projects' entries are not granted
            writable += [os.path.join(path, key) for key in per_project[name]
                         if not os.path.islink(path) and _is_dir(os.path.join(path, key))
                         and not _protected(os.path.join(path, key), protected)]
            continue
        if (path in guarded or _protected(path, protected) or os.path.islink(path)
                or not _named(name, spec.keep, _is_dir(path))):
            readonly.append(path)
        else:
            writable.append(path)
    return {"home_writable": tuple(w for w in policy.home_writable if w != spec.real_dir)
            + tuple(writable),
            "home_readonly": policy.home_readonly + tuple(readonly)}


def _read(path: str, dir_fd: int | None = None) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_BYTES + 1)
        chunks = [data]
        while data:
            data = os.read(fd, MAX_BYTES)
            chunks.append(data)
            if sum(map(len, chunks)) > MAX_BYTES:
                return None
        return b"".join(chunks)
    finally:
        os.close(fd)


def _load_record(data: bytes):
    from agent_sandbox.jsonlite import loads     # json imports re: ~3.5 ms a launch

    return loads(data)


def _write_new(path: str, data: bytes, mode: int = 0o600, dir_fd: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                 dir_fd=dir_fd)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- finish
def _open_below(root_fd: int, relative: str, *, create: bool = False,
                mode: int = 0o755) -> int | None:
    """A directory below root opened component by component, no symlinks;
    missing components made (`mode`) when `create`."""
    fd = os.dup(root_fd)
    for part in [p for p in relative.split("/") if p]:
        if create:
            try:
                os.mkdir(part, mode, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError:
                os.close(fd)
                return None
        try:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = inner
    return fd


def _parse(kind: str, text: str, *, editable: bool = False):
    """A settings file's tree: plain (tomllib, json) to compare, or a tomlkit
    document to write back with its comments and layout (tomlkit costs
    ~15 ms to import: only when something is merged into a TOML file)."""
    if kind == "toml":
        if editable:
            import tomlkit

            return tomlkit.parse(text)
        try:
            import tomllib
        except ModuleNotFoundError:     # Python < 3.11: its source, a dependency there
            import tomli as tomllib

        return tomllib.loads(text)
    # NaN/Infinity are not JSON: an agent reading the user's file back would
    # refuse it (Claude Code then offers a backup to restore).
    import json

    return json.loads(text, parse_constant=_not_json) if text.strip() else {}


def _not_json(word: str):
    raise ValueError(f"{word} is not JSON")


def _dump(kind: str, document) -> str:
    if kind == "toml":
        import tomlkit

        return tomlkit.dumps(document)
    import json

    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def _merge_file(item: Guarded, copy_fd: int, base_text: str | None, theirs_io) -> tuple:
    """(kept paths, dropped paths, problem) for one guarded file; `theirs_io`
    is (read() -> bytes | None, write(bytes)) for the user's file."""
    from agent_sandbox.policy import agentmerge

    kind = "toml" if item.name.endswith(".toml") else "json"
    parent = _open_below(copy_fd, os.path.dirname(item.name))
    if parent is None:
        return [], [], ""
    try:
        ours_bytes = _read(os.path.basename(item.name), dir_fd=parent)
    finally:
        os.close(parent)
    if ours_bytes is None or ours_bytes.decode("utf-8", "surrogateescape") == base_text:
        return [], [], ""       # unchanged, removed or replaced by a non-file: nothing to apply
    try:
        ours = _parse(kind, ours_bytes.decode("utf-8"))
        base = _parse(kind, base_text or "")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # RecursionError: a tree nested deeper than the parser goes (the
        # session controls this file); nothing of it is applied.
        return [], [], f"the session left it unreadable ({exc.__class__.__name__}); nothing kept"
    kept, dropped = agentmerge.changes(base, ours, item.patterns)
    if not kept:
        return [], dropped, ""
    read, write = theirs_io
    try:
        theirs_bytes = read()
        theirs = _parse(kind, (theirs_bytes or b"").decode("utf-8"), editable=True)
    except _Unusable as exc:
        return [], dropped, f"{exc}; nothing merged"
    except (ValueError, UnicodeDecodeError, RecursionError):
        return [], dropped, "your file is not valid now; nothing merged"
    if not isinstance(theirs, dict):
        return [], dropped, "your file does not hold a table; nothing merged"
    new_table = dict
    if kind == "toml":
        import tomlkit

        new_table = tomlkit.table
    conflicts = agentmerge.apply(theirs, kept, new_table)
    try:
        write(_dump(kind, theirs).encode())
    except _Unusable as exc:
        return [], dropped, f"{exc}; nothing merged"
    except OSError as exc:
        return [], dropped, f"it could not be written ({exc.strerror}); nothing merged"
    return [c.path for c in kept if c.path not in conflicts], dropped + conflicts, ""


class _Unusable(Exception):
    """The user's file cannot be merged into as it is now (said why)."""


def _home_io(item: Guarded, resolved: str | None):
    """The user's home file, through their own symlink as at the start: read
    and written by descriptor, every component of the path resolved then
    opened without following a symlink (from /), the file replaced by a
    rename inside the directory read — never by name: a concurrent session
    that swaps a directory on the way for a link (a writable parent such as
    ~/.config with HOME_WRITABLE) between the check and the write would have
    had the user's settings written wherever the link points."""
    seen = {}

    def parent_fd() -> int:
        if resolved is None or os.path.realpath(item.real) != resolved:
            raise _Unusable("it leads elsewhere than when the session started")
        top = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = _open_below(top, os.path.dirname(resolved))
        finally:
            os.close(top)
        if fd is None:
            raise _Unusable(f"{os.path.dirname(resolved)} is not the directory it was (a "
                            "symlink on the way, or gone)")
        return fd

    def read():
        fd = parent_fd()
        try:
            info = os.fstat(fd)
            seen["dir"] = (info.st_dev, info.st_ino)
            name = os.path.basename(resolved)
            data = _read(name, dir_fd=fd)
            if data is None and _exists_at(fd, name):
                raise _Unusable("your file cannot be read now")
            return data
        finally:
            os.close(fd)

    def write(data: bytes):
        fd = parent_fd()
        try:
            info = os.fstat(fd)
            if seen.get("dir") != (info.st_dev, info.st_ino):
                raise _Unusable(f"{os.path.dirname(resolved)} was replaced during the merge")
            _replace_at(fd, os.path.basename(resolved), data)
        finally:
            os.close(fd)
    return read, write


def _project_io(item: Guarded, project: str):
    """A file in the project: every component below it opened without
    following a symlink, written by a rename beside it."""
    relative = os.path.relpath(item.real, project)
    name = os.path.basename(relative)

    def parent(create: bool = False):
        # (the placeholder's directory, made for the session, may be gone)
        try:
            top = os.open(project, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            raise _Unusable("the project is gone") from None
        try:
            fd = _open_below(top, os.path.dirname(relative), create=create)
        finally:
            os.close(top)
        if fd is None:
            raise _Unusable(f"{os.path.dirname(relative)} is not a directory of the project now")
        return fd

    def read():
        if not os.path.lexists(os.path.dirname(item.real)):
            return None
        fd = parent()
        try:
            data = _read(name, dir_fd=fd)
            if data is None and _exists_at(fd, name):
                raise _Unusable("your file is a symlink or not a file now")
            return data
        finally:
            os.close(fd)

    def write(data: bytes):
        fd = parent(create=True)
        try:
            temp = f".{name}.agent-sandbox-{os.urandom(6).hex()}"
            fd_file = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o644, dir_fd=fd)
            try:
                os.write(fd_file, data)
            finally:
                os.close(fd_file)
            os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)
    return read, write


def _replace_at(dir_fd: int, name: str, data: bytes) -> None:
    """Write `name` in the directory dir_fd whole, by a rename beside it,
    keeping its mode (0600 for a new file)."""
    try:
        mode = stat.S_IMODE(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        mode = 0o600
    temp = f".{name}.agent-sandbox-{os.urandom(6).hex()}"
    try:
        _write_new(temp, data, mode, dir_fd=dir_fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _protected(path: str, protected) -> bool:
    from agent_sandbox.paths import is_within

    return any(is_within(path, p) or is_within(p, path) for p in protected)


def _move_back(src_fd: int, dst_fd: int, real_dir: str, protected, skip, moved: list,
               refused: list, spec: Spec | None = None, per_project=None) -> None:
    """Entries of the copy (src_fd) that are not our links go to the real
    directory (dst_fd, named real_dir), walked by descriptor on both sides,
    never through a symlink. At the top (`spec` given) only the names
    AGENT_CONFIG_KEEP lists go back, and never a symlink; below a kept
    directory everything does. Nothing is ever renamed over a symlink, a
    directory or a protected path of the user's: only over a plain file the
    session could write anyway (an allowed entry). `per_project` (at the
    top): parent → this project's names, the only entries of the copy's own
    parent that go back."""
    per_project = per_project or {}
    for name in sorted(os.listdir(src_fd)):
        target = os.path.join(real_dir, name)
        if name in skip:
            continue
        try:
            info = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode) and os.readlink(name, dir_fd=src_fd) == target:
                continue                       # our own link
            is_dir = stat.S_ISDIR(info.st_mode)
            if spec is not None and name in per_project:
                # the copy's own parent: only this project's entries go back
                inner, inner_dst = _open_below(src_fd, name), _open_below(dst_fd, name)
                try:
                    if inner is None or inner_dst is None:
                        refused.append(target)
                    else:
                        _move_back(inner, inner_dst, target, protected, (), moved, refused,
                                   spec._replace(keep=per_project[name], scratch=(),
                                                 per_project=(), logins=()))
                finally:
                    for fd in (inner, inner_dst):
                        if fd is not None:
                            os.close(fd)
                continue
            if spec is not None:
                if _named(name, spec.scratch, is_dir):
                    continue                   # per session: dropped quietly
                if not _named(name, spec.keep, is_dir) or stat.S_ISLNK(info.st_mode):
                    refused.append(target)
                    continue
            if _protected(target, protected) or not (is_dir or stat.S_ISREG(info.st_mode)
                                                     or stat.S_ISLNK(info.st_mode)):
                refused.append(target)
                continue
            try:
                real_info = os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
            except FileNotFoundError:
                real_info = None
            if real_info is None:
                os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
                moved.append(target)
            elif is_dir and stat.S_ISDIR(real_info.st_mode):
                inner, inner_dst = _open_below(src_fd, name), _open_below(dst_fd, name)
                try:
                    if inner is None or inner_dst is None:
                        refused.append(target)
                    else:
                        _move_back(inner, inner_dst, target, protected, (), moved, refused)
                finally:
                    for fd in (inner, inner_dst):
                        if fd is not None:
                            os.close(fd)
            elif stat.S_ISREG(info.st_mode) and stat.S_ISREG(real_info.st_mode):
                # the session rewrote an allowed file (a rename over our link)
                os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
                moved.append(target)
            else:
                refused.append(target)         # never over a symlink or a directory
        except OSError:
            refused.append(target)


def finish(record_path: str, *, recovered: bool = False) -> None:
    """Merge one session's copy back under the guard, report, clean up. The
    record is read under the lock: two launches recovering the same stale
    session merge it once."""
    import fcntl

    try:
        lock = os.open(os.path.join(os.path.dirname(record_path), "merge.lock"),
                       os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(record_path, "rb") as handle:
                record = _load_record(handle.read(MAX_BYTES))
            spec = Spec(*record["spec"])
            spec = spec._replace(files=tuple(Guarded(n, r, tuple(p), w)
                                             for n, r, p, w in spec.files))
            root, protected = record["root"], record["protected"]
        except (OSError, ValueError, TypeError, KeyError):
            return
        # The copy is reached from the home by descriptor (_copies_of), never
        # through a link a session left on the way: that would merge from,
        # and remove, whatever it points at.
        copies = _copies_of(record)
        if copies is None:
            say(f"{spec.profile}: the session's changes to its settings were NOT merged back — "
                f"its copy {root} is not in agent-sandbox's own directory "
                f"{copies_dir(str(record.get('home', '')))} (a symlink or another owner's "
                f"directory on the way, or a copy an earlier version made elsewhere); nothing "
                f"of it was applied or removed. Look at it, and remove it.")
            os.unlink(record_path)
            return
        try:
            name = os.path.basename(root)
            try:
                root_fd = os.open(name, _DIR, dir_fd=copies)
            except OSError:
                root_fd = None
            if root_fd is not None:
                try:
                    _report(spec, _finish_copy(spec, root_fd, copies, record, protected),
                            recovered, record.get("session", "?"), str(record.get("home", "")))
                finally:
                    os.close(root_fd)
            _remove_copy(copies, name)
        finally:
            os.close(copies)
        os.unlink(record_path)
    except OSError:
        pass
    finally:
        os.close(lock)


def discard(record_path: str, why: str) -> None:
    """Drop a session's copy unmerged (a session process outlived the
    launcher: what it writes next must not reach the user's files), saying so."""
    try:
        with open(record_path, "rb") as handle:
            record = _load_record(handle.read(MAX_BYTES))
        root, profile = record["root"], Spec(*record["spec"]).profile
    except (OSError, ValueError, TypeError, KeyError):
        return
    say(f"{profile}: the session's changes to its settings were NOT merged back — {why}. "
        f"Nothing of {root} was applied; it is removed.")
    copies = _copies_of(record)
    if copies is not None:
        try:
            _remove_copy(copies, os.path.basename(root))
        finally:
            os.close(copies)
    try:
        os.unlink(record_path)
    except OSError:
        pass


def _finish_copy(spec: Spec, root_fd: int, copies: int, record: dict, protected) -> dict:
    outcome = {"kept": {}, "dropped": {}, "problems": {}, "moved": [], "refused": [],
               "logins": []}
    base, resolved = record.get("base") or {}, record.get("resolved") or {}
    try:
        project_fd = os.open(os.path.basename(record["root"]) + ".project", _DIR, dir_fd=copies)
    except OSError:
        project_fd = None
    for item in spec.files:
        if item.where == "project":
            if project_fd is None:
                continue
            kept, dropped, problem = _merge_file(
                item, project_fd, base.get("project:" + item.name),
                _project_io(item, str(record.get("project"))))
        else:
            kept, dropped, problem = _merge_file(item, root_fd, base.get(item.name),
                                                 _home_io(item, resolved.get(item.name)))
        outcome["kept"][item.real] = kept
        outcome["dropped"][item.real] = dropped
        if problem:
            outcome["problems"][item.real] = problem
    if project_fd is not None:
        os.close(project_fd)
    mirror_fd = _open_below(root_fd, spec.mirror)
    try:
        real_fd = os.open(spec.real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        real_fd = None
    try:
        if mirror_fd is not None and real_fd is not None:
            skip = {os.path.relpath(g.name, spec.mirror or ".") for g in spec.files
                    if g.where == "home"} | set(spec.logins)
            if _registry_parents(spec):
                from agent_sandbox.policy.agentstate import REGISTRY

                skip.add(REGISTRY)     # the launcher keeps it; the agent's rewrite: dropped
            per_project = {parent: tuple(keys) for parent, keys
                           in (record.get("per_project") or {}).items()}
            _move_back(mirror_fd, real_fd, spec.real_dir,
                       tuple(protected) + tuple(g.real for g in spec.files), skip,
                       outcome["moved"], outcome["refused"], spec, per_project)
        outcome["logins"] = _login_finish(spec, record, mirror_fd)
        _restore_markers(spec, record, outcome["refused"])
    finally:
        for fd in (mirror_fd, real_fd):
            if fd is not None:
                os.close(fd)
    return outcome


def quiet_paths(spec: Spec, real: str, dropped) -> tuple[list, list]:
    """(reported, quiet) of the key paths dropped from the user's file
    `real`: quiet when an AGENT_SETTINGS_QUIET pattern of that file names
    the path or a table above it (a UI statistic, a cache, a notice
    counter: known to be inert). Everything else is reported — unknown keys
    included (allow, never deny)."""
    from fnmatch import fnmatchcase

    names = {g.real: g.name for g in spec.files}
    name = names.get(real)
    patterns = [tuple(p.partition(":")[2].split(".")) for p in spec.quiet
                if name is not None and os.path.normpath(p.partition(":")[0]) == name]
    reported, quiet = [], []
    for path in dropped:
        inert = any(len(path) >= len(p) and all(fnmatchcase(k, q) for k, q in zip(path, p))
                    for p in patterns)
        (quiet if inert else reported).append(path)
    return reported, quiet


def _report(spec: Spec, outcome: dict, recovered: bool, session: str, home: str) -> None:
    """What the end of a session says: only what matters to the user's
    safety or work — drops of keys not known to be inert (one line a file),
    entries the session made that were dropped, a changed login, a file
    that could not be merged. Everything (kept keys, quiet drops, entries
    moved back) goes to the session's log (`agent-sandbox logs --session
    ID`), one record a file."""
    from agent_sandbox.policy.agentmerge import show
    from agent_sandbox import errors
    from agent_sandbox.logfiles import clean

    def say(message: str) -> None:
        # The names and keys are the session's (entries it made, keys of a
        # settings file it wrote): escaped, so that none prints a line or a
        # terminal escape of its choosing.
        errors.say(clean(message))

    def short(path: str) -> str:
        return "~" + path[len(home):] if home and path.startswith(home + "/") else path

    def listed(paths, most: int = 8) -> str:
        more = f" and {len(paths) - most} more" if len(paths) > most else ""
        return ", ".join(short(p) for p in paths[:most]) + more

    when = f" (session {session}, left by a launcher that was killed)" if recovered else ""
    details = f"`agent-sandbox logs --session {session}` lists them"
    records = []
    for real in dict.fromkeys([*outcome["kept"], *outcome["dropped"]]):
        kept = outcome["kept"].get(real) or []
        reported, quiet = quiet_paths(spec, real, outcome["dropped"].get(real) or [])
        if kept or reported or quiet:
            records.append({"file": short(real), "kept": [show(p) for p in kept],
                            "dropped": [show(p) for p in reported],
                            "dropped_inert": [show(p) for p in quiet]})
        if reported:
            shown = [show(p) for p in reported]
            more = f" and {len(shown) - 6} more" if len(shown) > 6 else ""
            say(f"{spec.profile}: dropped the session's changes to {short(real)}{when}: "
                f"{', '.join(shown[:6])}{more} — keys that can run "
                f"commands outside the sandbox, or not known to be harmless, are never merged "
                f"back; make such changes yourself, outside ({details}).")
    for real, problem in outcome["problems"].items():
        say(f"{spec.profile}: {short(real)}: {problem}{when}")
    if outcome["moved"]:
        records.append({"moved": [short(p) for p in outcome["moved"]]})
    if outcome["logins"]:
        say(f"{spec.profile}: the session's login changed (a token refresh, or another "
            f"login){when}: later sandboxed sessions use it; {listed(outcome['logins'])} "
            f"outside is unchanged. If you logged in inside on purpose, run "
            f"`agent-sandbox config adopt-login {spec.profile}` (outside) to use it in your "
            f"own runs too; `agent-sandbox config adopt-login --discard {spec.profile}` "
            "drops it.")
    if outcome["refused"]:
        records.append({"refused": [short(p) for p in outcome["refused"]]})
        say(f"{spec.profile}: dropped what the session made at "
            f"{listed(outcome['refused'], 3)}{when} — only the entries the "
            f"{spec.profile} profile's AGENT_CONFIG_KEEP names go back; copy what you want "
            f"yourself, outside ({details}).")
    if records and home:
        import time

        from agent_sandbox.logfiles import TIME_FORMAT, append_records

        stamp = time.strftime(TIME_FORMAT)
        append_records(home, f"agent_{session}.log", (
            dict({"time": stamp, "session": session, "command": spec.profile,
                  "event": "agent-settings"}, **r) for r in records))


# ---------------------------------------------------------------- keys
def approve_keys(record_path: str, entries, keys) -> None:
    """The launcher's own placeholder keys (API key brokering: new each
    session, never a real key) put on the agent's approved list in the
    session copy (AGENT_KEY_APPROVAL: FILE:KEY.PATH=tail:N — Claude Code
    keeps the last 20 characters of each key it was told to use), so the
    agent does not ask "Do you want to use this API key?" every session
    (whose default, No, left it logged out). The record's base gets the
    same change: the merge sees none, and the list never reaches the user's
    file. Nothing else of the copy changes."""
    from agent_sandbox.config.agentkeys import parse_entry
    from agent_sandbox.jsonlite import dumps, loads

    keys = [k for k in keys if k]
    if not keys or not entries:
        return
    with open(record_path, "rb") as handle:
        record = loads(handle.read(MAX_BYTES))
    copies = _copies_of(record)
    if copies is None:
        return
    try:
        root_fd = os.open(os.path.basename(record["root"]), _DIR, dir_fd=copies)
    finally:
        os.close(copies)
    base = record.get("base") or {}
    try:
        for entry in entries:
            name, path, value = parse_entry(entry)
            name = os.path.normpath(name)
            if name not in base:
                continue          # not a guarded file of this profile
            tails = [k[-int(value[5:]):] for k in keys]
            parent = _open_below(root_fd, os.path.dirname(name), create=True)
            if parent is None:
                continue
            try:
                leaf = os.path.basename(name)
                data = _read(leaf, dir_fd=parent)
                if data is None and _exists_at(parent, leaf):
                    continue
                try:
                    document = _parse("json", (data or b"").decode("utf-8"))
                except (ValueError, UnicodeDecodeError, RecursionError):
                    continue      # the agent says what is wrong with it
                if not isinstance(document, dict) or not _add_to_list(document, path, tails):
                    continue
                text = _dump("json", document)
                _replace_at(parent, leaf, text.encode())
                base[name] = text
            finally:
                os.close(parent)
    finally:
        os.close(root_fd)
    record["base"] = base
    temp = record_path + ".tmp"
    _write_new(temp, dumps(record))
    os.replace(temp, record_path)


def _add_to_list(document: dict, path, items) -> bool:
    """`items` added to the list at `path` (made when missing); False when
    something on the way is not what the agent writes there."""
    table = document
    for key in path[:-1]:
        inner = table.setdefault(key, {})
        if not isinstance(inner, dict):
            return False
        table = inner
    present = table.setdefault(path[-1], [])
    if not isinstance(present, list):
        return False
    present.extend(i for i in items if i not in present)
    return True


# ---------------------------------------------------------------- recovery
def recover(home: str) -> int:
    """Merge (under the guard) the copies of sessions whose launcher is gone;
    returns how many."""
    from agent_sandbox.services import registry

    directory = _record_dir(home)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except OSError:
        return 0
    host, boot = registry.host_name(), registry.boot_id()
    done = 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as handle:
                record = _load_record(handle.read(MAX_BYTES))
        except (OSError, ValueError):
            continue
        if registry.judge(record, host=host, boot=boot, lookup=registry.lookup_proc) \
                == registry.STALE:
            finish(path, recovered=True)
            done += 1
    return done
