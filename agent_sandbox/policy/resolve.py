"""Settings + facts about this launch → one immutable Policy.

The policy says *what* the sandbox is (which paths are hidden, read-only,
writable, which variables survive, which syscalls are denied); the backends
say *how* (bwrap mounts, firejail options, Landlock rules). Everything here is
a function of its inputs: the Settings, a LaunchContext (uid, home, caller
environment, …) and the state of the filesystem it inspects (existence,
symlinks, real paths). It never changes anything.

Rules that protect the user live here, in one place, so that every backend
inherits them: credential paths are always hidden, a hidden path can never be
made visible or writable again (also not through a symlink or a parent), the
project dir may not be $HOME, / or contain a hidden path, and every writable
entry is checked against the admin's DENIED_WRITABLE_PATHS.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from agent_sandbox.paths import (CACHES_DIR, RUN_DIR, STAGING_DIR, STATE_DIR,
                                 runnable_outside, user_config_dir)
from agent_sandbox.paths import is_within as _is_within
from agent_sandbox.names import forced_env, slurm_commands
from agent_sandbox.policy.envfilter import scrub
from agent_sandbox.policy import caches, siteconf
from agent_sandbox.policy.siteconf import slurm_conf_path
from agent_sandbox.policy.sockets import NO_RESOLVER, find_sockets, home_trees, run_trees
from agent_sandbox.errors import PolicyError
# The Policy's classes live in a stdlib-only module that a cached launch
# imports too (model.py); named here as well, where they are decided.
from agent_sandbox.policy.model import Policy, Protected  # noqa: F401

# Always hidden, in every HOME_ACCESS mode; not configurable away (SPEC §4).
# The last one holds the chaperon session directories: hidden so that no
# sandbox reaches another session's chaperon (firejail shows the parents of
# its own session's directory, nothing else). The job staging root too:
# slurmstepd writes each job's logs there, outside any sandbox, and the
# snapshots there run in the projects' sandboxes, so no sandbox may plant
# a link or a file in another project's (HOME_WRITABLE+=(.local/share) made
# them writable): each session is shown its own project's, read-only. So
# are the sandbox's package caches: each session is granted its project's.
CREDENTIAL_DIRS = (
    ".ssh", ".aws", ".gnupg", ".kube", ".docker", ".azure", ".config/gcloud",
    ".password-store", STATE_DIR, ".local/share/keyrings",
    ".netrc", ".config/gh", RUN_DIR, STAGING_DIR, CACHES_DIR,
)
# /run is a tmpfs; only what DNS needs comes back (never munge or D-Bus).
RUN_DNS_PATHS = ("/run/systemd/resolve", "/run/resolvconf", "/run/NetworkManager/resolv.conf")
RUN_NSCD = "/run/nscd"
MARKER_PATH = "/run/agent-sandbox/session"
# slurm.boundary: the real Slurm config and binaries are unusable inside (the
# chaperon's stubs take their place on PATH); the munge socket lives in /run.
SLURM_CONFIG_DIRS = ("/etc/slurm", "/etc/slurm-llnl", "/etc/munge")
SLURM_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/opt/slurm/bin")
# Written for a missing protected path and removed at exit when unchanged.
PLACEHOLDER_CONTENT = {".mcp.json": b'{"mcpServers": {}}\n', "settings.json": b"{}\n",
                       "settings.local.json": b"{}\n", "opencode.json": b"{}\n",
                       "opencode.jsonc": b"{}\n", "launch.json": b"{}\n",
                       "scheduled_tasks.json": b"{}\n", "package.json": b"{}\n"}


class LaunchContext(NamedTuple):
    uid: int
    gid: int
    user: str
    home: str                      # from the password database
    environ: dict                  # the caller's environment
    cwd: str
    project_dir: str | None        # --project-dir, else cwd
    install_paths: tuple[str, ...] # the package and the interpreter prefix
    session_id: str
    # Files of the install with more than one link (services/linkcheck.py):
    # (how many, a few of them).
    install_links: tuple = (0, ())
    # What the user's next launch runs before any sandbox: the entry point as
    # invoked (a link in ~/.local/bin, say), its target, the interpreter.
    launcher_paths: tuple[str, ...] = ()


def _home_path(home: str, entry: str) -> str:
    return os.path.normpath(entry if entry.startswith("/") else os.path.join(home, entry))


def _hidden_paths(settings, home: str) -> tuple[str, ...]:
    """Hidden paths in both their literal and their resolved form, so that
    ~/.ssh → /nfs/keys hides /nfs/keys as well."""
    paths = [_home_path(home, e) for e in CREDENTIAL_DIRS + tuple(settings.BLOCKED_FILES)]
    paths += [os.path.normpath(p) for p in settings.EXTRA_BLOCKED_PATHS]
    resolved = {os.path.realpath(p) for p in paths if os.path.lexists(p)}
    return tuple(sorted(set(paths) | resolved))


def resolve_project(settings, ctx: LaunchContext, hidden: tuple[str, ...]) -> str:
    requested = ctx.project_dir or ctx.cwd
    project = os.path.realpath(requested)
    if not os.path.isdir(project):
        raise PolicyError(f"the project directory {requested} does not exist or is not a "
                          "directory. Pass an existing directory with --project-dir.",
                          reason="bad_project_dir")
    home = os.path.realpath(ctx.home)
    why = None
    if project == "/":
        why = "it is / (everything would be writable)"
    elif project == home:
        why = "it is your home directory itself (your dotfiles and credentials would be writable)"
    else:
        inside = next((h for h in hidden if _is_within(project, h)), None)
        contains = next((h for h in hidden if _is_within(h, project) and h != project), None)
        if inside:
            why = f"it lies inside the hidden path {inside}"
        elif contains:
            why = f"it contains the hidden path {contains}"
    instead = ("Start the sandbox from a project directory below your home (or an "
               "ALLOWED_PROJECT_PARENTS entry) or pass --project-dir.")
    if why is None:
        parents = [os.path.realpath(p) for p in settings.ALLOWED_PROJECT_PARENTS]
        if project in parents:
            # The parent itself is not a project: its children are.
            why = (f"it is the project parent {project} itself (ALLOWED_PROJECT_PARENTS), "
                   "which holds projects but is none")
            instead = (f"Start the sandbox in a project below it ({project}/NAME) or pass "
                       "--project-dir DIR.")
        elif not any(_is_within(project, p) for p in parents):
            why = ("it is not under an allowed project parent "
                   f"({' '.join(settings.ALLOWED_PROJECT_PARENTS) or 'none configured'})")
            instead += (" To allow projects here, add the line "
                        f"`ALLOWED_PROJECT_PARENTS+=({_quoted(os.path.dirname(project))})` to "
                        "~/.config/agent-sandbox/sandbox.conf (an admin may cap the list).")
    if why:
        raise PolicyError(f"refusing project directory {project} — {why}. {instead}",
                          reason="bad_project_dir")
    return project


def _quoted(path: str) -> str:
    """A path as the configuration syntax reads it back (shell-like words)."""
    import shlex

    return shlex.quote(path)


def enclosing_repository(project: str, home: str, parents, hidden=()) -> str | None:
    """The top level of a git repository the project lies below (a `.git`
    directory or file in a parent, the nearest), when the project has none
    of its own and that top level would itself be an allowed project (below
    an ALLOWED_PROJECT_PARENTS entry, not the home — a dotfiles repository
    there is not the project's — and not hidden); else None. The sandbox
    shows the project alone: git inside does not find that repository."""
    if os.path.lexists(os.path.join(project, ".git")):
        return None
    home = os.path.realpath(home)
    directory = os.path.dirname(project)
    while directory != "/" and directory != home and not _is_within(home, directory):
        if os.path.lexists(os.path.join(directory, ".git")):
            allowed = any(_is_within(directory, p) and directory != p for p in parents)
            if allowed and not any(_is_within(directory, h) or _is_within(h, directory)
                                   for h in hidden):
                return directory
            return None
        directory = os.path.dirname(directory)
    return None


def _existing(paths) -> tuple[str, ...]:
    return tuple(p for p in paths if os.path.lexists(p))


def _writable_entries(candidates, *, hidden, denied, warnings, key, denied_origin="",
                      origin="", stores=()) -> tuple[str, ...]:
    """Drop writable entries that are symlinks, lie under a hidden path, lie
    under a denied path or in a package store of the user's (policy/caches.py)
    — each with a warning naming the key. (An entry that
    contains a hidden path is kept; the view carves the hidden path out.)
    With `origin` (EXTRA_WRITABLE_PATHS: named by the user, so a mistake
    should be seen), a missing entry or one the user cannot write outside
    either (/etc) is dropped with a warning too, instead of failing the
    mount."""
    kept = []
    where = f" in {origin}" if origin else ""
    for path in candidates:
        if not os.path.lexists(path):
            if origin:
                warnings.append(f"{key}: dropped {path} — it does not exist. Create it, or "
                                f"remove it from {key}{where}")
            continue
        real = os.path.realpath(path)
        reason = None
        if origin and not os.access(real, os.W_OK):
            reason = (f"you cannot write to it outside the sandbox either, so it cannot be "
                      f"made writable inside. Remove it from {key}{where}")
        elif os.path.islink(path):
            reason = "it is a symlink (it would make its target writable)"
        elif any(_is_within(path, h) or _is_within(real, h) for h in hidden):
            reason = "it lies under a hidden path"
        elif any(_is_within(real, d) for d in denied):
            reason = f"it lies under a DENIED_WRITABLE_PATHS entry ({denied_origin})"
        else:
            reason = caches.writable_rule(path, stores)
        if reason:
            warnings.append(f"{key}: dropped {path} — {reason}")
        else:
            kept.append(path)
    return tuple(kept)


def _protected(settings, project: str, home: str) -> tuple[Protected, ...]:
    """PROTECTED_PATHS, after the agents' and editors' project configuration
    (names.PROJECT_CONFIGS), which no profile or setting removes: a `run`
    session must not plant a hook the user's unsandboxed Claude Code obeys."""
    from agent_sandbox.names import PROJECT_CONFIGS

    result = []
    for entry in dict.fromkeys(tuple(p for p, _ in PROJECT_CONFIGS)
                               + tuple(settings.PROTECTED_PATHS)):
        is_dir = entry.endswith("/")
        base = home if entry.startswith("/") else project
        path = os.path.normpath(entry if entry.startswith("/") else os.path.join(base, entry))
        exists = os.path.lexists(path)
        result.append(Protected(path, is_dir, exists,
                                PLACEHOLDER_CONTENT.get(os.path.basename(path), b"")))
    return tuple(result)


def _git_protected(protected: tuple[Protected, ...], project: str, home: str,
                   environ) -> tuple[tuple[Protected, ...], tuple[str, ...]]:
    """The project's own repository: every control file git reads kept
    read-only (gitrepo.py), and its `.git` directory pinned — when it exists,
    or when placeholders will create it."""
    from agent_sandbox.policy import gitrepo

    have = {p.path for p in protected}
    extra = tuple(Protected(path, is_dir, os.path.lexists(path), placeholder)
                  for path, is_dir, placeholder in gitrepo.control_paths(
                      project, home, gitrepo.find_git(environ.get("PATH", "")))
                  if path not in have)
    protected += extra
    dotgit = gitrepo.pin_path(project)
    if os.path.islink(dotgit) or os.path.isfile(dotgit):
        return protected, ()
    creates = any(_is_within(p.path, dotgit) and not p.exists for p in protected)
    return protected, ((dotgit,) if os.path.isdir(dotgit) or creates else ())


def _pinned_parents(protected: tuple[Protected, ...], roots: tuple[str, ...]
                    ) -> tuple[str, ...]:
    """The directories between a writable root and a protected path in it
    (`.claude` for `.claude/settings.json`), parents first: pinned like
    `.git`, or the session renames `.claude` away and makes a new one whose
    settings.json (hooks) the user's unsandboxed agent obeys. A symlink is
    left alone (the policy warns about protected paths reached through one)."""
    found: dict[str, None] = {}
    for item in protected:
        for root in roots:
            if item.path == root or not _is_within(item.path, root):
                continue
            parent = os.path.dirname(item.path)
            chain = []
            while parent != root and _is_within(parent, root):
                chain.append(parent)
                parent = os.path.dirname(parent)
            for path in reversed(chain):
                if os.path.islink(path):
                    break
                if path not in roots:          # a root is bound already: a mount point
                    found[path] = None
    return tuple(sorted(found, key=lambda p: (p.count("/"), p)))


def _devices(settings, environ=None, site_conf: str | None = None) -> tuple[str, ...]:
    """DEVICES (globs) and, in a Slurm job or task, the devices of its
    allocated GPUs (policy/gres.py), minus DEVICES_BLACKLIST."""
    from agent_sandbox.policy import gres

    allocated = gres.devices(environ or {}, site_conf)
    if not settings.DEVICES and not allocated:
        return ()
    import glob
    from fnmatch import fnmatch

    found = sorted({p for g in settings.DEVICES for p in glob.glob(g)} | set(allocated))
    return tuple(p for p in found
                 if not any(fnmatch(p, b) for b in settings.DEVICES_BLACKLIST))


def _slurm_boundary(system: tuple[str, ...], environ,
                    site_conf: str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    def visible(path: str) -> bool:
        return any(_is_within(path, root) for root in system)

    # The site's config directory (a real path, siteconf.py) is masked like
    # /etc/slurm wherever it is, not only under READONLY_MOUNTS (the view
    # masks after the home and writable trees), unless it is a top-level tree
    # (a slurm.conf directly in /etc stays readable: the boundary is the munge
    # socket, which /run never shows).
    site_dir = os.path.dirname(site_conf) if site_conf else None
    site = (site_dir,) if site_dir and site_dir.count("/") >= 2 and os.path.isdir(site_dir) else ()
    masks = tuple(dict.fromkeys(
        tuple(p for p in SLURM_CONFIG_DIRS if os.path.isdir(p) and visible(p)) + site))
    dirs = SLURM_BIN_DIRS + tuple(environ.get("PATH", "").split(":"))
    binaries = set()
    for directory in dict.fromkeys(d for d in dirs if d.startswith("/")):
        for name in slurm_commands():
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate):
                real = os.path.realpath(candidate)
                # The chaperon runs these outside: never one a sandbox of
                # this user could have written (a writable PATH directory).
                if visible(real) and runnable_outside(real):
                    binaries.add(real)
    return masks, tuple(sorted(binaries))


def resolve_policy(settings, ctx: LaunchContext, *, backend: str,
                   chaperon: tuple[str, str] | None = None, socket_walk=find_sockets,
                   make_store=None) -> Policy:
    """`chaperon` is (session dir, staging dir) when a chaperon serves Slurm.
    `socket_walk` finds the sockets in shown trees (sockets.find_sockets; a
    compile for the plan cache passes one that records what it saw).
    `make_store(home, path)`: the launcher's, makes a missing package store
    of the user's that lies in a writable tree (caches.missing_inside_writable)."""
    warnings: list[str] = list(settings.warnings)
    home = ctx.home
    hidden = _hidden_paths(settings, home)
    project = resolve_project(settings, ctx, hidden)
    cwd_real = os.path.realpath(ctx.cwd)
    workdir = cwd_real if _is_within(cwd_real, project) else project
    top = enclosing_repository(project, home, [os.path.realpath(p) for p in
                                               settings.ALLOWED_PROJECT_PARENTS], hidden)
    if top is not None:
        warnings.append(
            f"the project {project} lies inside the git repository {top}, which the sandbox "
            f"does not show: git inside fails ('not a git repository'). To work on the "
            f"repository, give its top level as the project: `agent-sandbox run "
            f"--project-dir {top} …`, `agent-sandbox --project-dir {top} claude` (you still "
            f"start in {workdir}).")
    denied = tuple(os.path.realpath(p) for p in settings.DENIED_WRITABLE_PATHS)
    origins = settings.origins
    denied_origin = settings.locks.get(
        "DENIED_WRITABLE_PATHS", origins.get("DENIED_WRITABLE_PATHS", "default"))

    for key, entries in (("HOME_READONLY", settings.HOME_READONLY),
                         ("HOME_WRITABLE", settings.HOME_WRITABLE),
                         ("HOME_SEEDED_FILES", settings.HOME_SEEDED_FILES)):
        for entry in entries:
            if entry.startswith("/") and not _is_within(os.path.normpath(entry), home):
                warnings.append(f"{key}: dropped {entry} — home entries must lie under "
                                f"{home}; use READONLY_MOUNTS or EXTRA_WRITABLE_PATHS")
    stores = caches.user_stores(home, ctx.environ)
    home_writable = _writable_entries(
        (p for p in (_home_path(home, e) for e in settings.HOME_WRITABLE)
         if _is_within(p, home)),
        hidden=hidden, denied=denied, warnings=warnings, key="HOME_WRITABLE",
        denied_origin=denied_origin, stores=stores)
    extra_writable = _writable_entries(
        settings.EXTRA_WRITABLE_PATHS, hidden=hidden, denied=denied, warnings=warnings,
        key="EXTRA_WRITABLE_PATHS", denied_origin=denied_origin,
        origin=origins.get("EXTRA_WRITABLE_PATHS", "default"), stores=stores)
    if any(_is_within(project, d) for d in denied):
        raise PolicyError(f"refusing project directory {project} — it lies under a path the "
                          "site admin made never-writable (DENIED_WRITABLE_PATHS). Use a "
                          "project directory elsewhere.", reason="bad_project_dir")
    store = caches.store_of(project, stores)
    if store:
        raise PolicyError(f"refusing project directory {project} — it lies in {store}'s "
                          "package store, which feeds your installs outside the sandbox. "
                          "Use a project directory elsewhere.", reason="bad_project_dir")
    home_readonly = tuple(
        p for p in _existing(_home_path(home, e) for e in settings.HOME_READONLY)
        if _is_within(p, home) and not any(_is_within(p, h) or _is_within(os.path.realpath(p), h) for h in hidden))
    home_seeded = tuple(
        p for p in _existing(_home_path(home, e) for e in settings.HOME_SEEDED_FILES)
        if _is_within(p, home) and os.path.isfile(p) and not any(_is_within(os.path.realpath(p), h) for h in hidden))

    run_binds = list(RUN_DNS_PATHS)
    if not settings.FILTER_PASSWD and settings.NETWORK_MODE not in NO_RESOLVER:
        # nscd would answer name lookups for any user; in allowlist and
        # isolated it would resolve host names too (its directory holds only
        # its socket): not bound there.
        run_binds.append(RUN_NSCD)

    config_tree = user_config_dir(home)
    # The user's package stores inside a writable tree stay read-only there,
    # like the install (policy/caches.py): HOME_ACCESS=write, HOME_WRITABLE+=(.cache),
    # a UV_CACHE_DIR in the project.
    if make_store is not None:
        for place in caches.missing_inside_writable(
                stores, (project,) + home_writable + extra_writable, home):
            make_store(home, place)
    store_overlays = caches.inside_writable(
        stores, (project,) + home_writable + extra_writable
        + ((home,) if settings.HOME_ACCESS == "write" else ()))
    store_overlays = tuple(p for p in store_overlays if not any(_is_within(p, h) for h in hidden))
    overlays = tuple(p for p in dict.fromkeys(ctx.install_paths + (config_tree,)
                                              + store_overlays)
                     if os.path.exists(p))

    env, removed = scrub(
        ctx.environ, blocked=settings.BLOCKED_ENV_VARS, patterns=settings.BLOCKED_ENV_PATTERNS,
        allowed=settings.ALLOWED_ENV_VARS, extra=settings.SANDBOX_ENV,
        forced=forced_env(home=home, user=ctx.user, backend=backend, project=project,
                          session=ctx.session_id, workdir=workdir))
    if settings.PRIVATE_TMP and "TMPDIR" in env and not _is_within(env["TMPDIR"], project):
        env["TMPDIR"] = "/tmp"   # the caller's TMPDIR is not visible inside
    # The tools inside use the sandbox's own cache of this project, whatever
    # the caller's variables or SANDBOX_ENV say (policy/caches.py).
    package_cache = caches.own_cache(home, project)
    cache_env = caches.inside_env(package_cache)
    for name in sorted(set(cache_env) & {e.split("=", 1)[0] for e in settings.SANDBOX_ENV}):
        warnings.append(f"SANDBOX_ENV: {name} ignored — inside, the package tools use the "
                        f"sandbox's own cache ({package_cache}; docs/shared-channels.md)")
    env.update(cache_env)

    # Denied paths are never writable, not even inside a writable tree; they
    # are kept read-only by real path, so a symlinked name cannot dodge it.
    protected = _protected(settings, project, home) + tuple(
        Protected(r, os.path.isdir(r), True) for r in denied if os.path.exists(r))
    protected, pinned = _git_protected(protected, project, home, ctx.environ)
    roots = ((project,) + home_writable + extra_writable
             + ((home,) if settings.HOME_ACCESS == "write" else ()))
    pinned = tuple(dict.fromkeys(pinned + _pinned_parents(protected, roots)))
    # /sys read-only in every sandbox (SPEC §5: NVML, hwloc, UCX and libibverbs
    # read it); a hidden path under it is carved out like anywhere else.
    system = _existing(dict.fromkeys(tuple(settings.READONLY_MOUNTS) + ("/sys",)))
    site_conf = slurm_conf_path(settings, ctx.environ)
    siteconf.check(site_conf, uid=ctx.uid,
                   owners=siteconf.owner_uids(settings.SLURM_CONF_OWNERS),
                   from_env=ctx.environ.get("SLURM_CONF", "").startswith("/"),
                   writable=(project,) + home_writable + extra_writable
                   + ((home,) if settings.HOME_ACCESS == "write" else ()))
    slurm_masks, slurm_binaries = _slurm_boundary(system, ctx.environ, site_conf)
    # unix_sockets.confined: the sockets in the trees shown from the home (and
    # the resolver's where no name may resolve) go like hidden paths (sockets.py).
    sockets = socket_walk(
        home_trees(home=home, home_access=settings.HOME_ACCESS, home_readonly=home_readonly,
                   home_writable=home_writable, extra_writable=extra_writable,
                   overlays=overlays)
        + run_trees(settings.NETWORK_MODE, _existing(run_binds)),
        prune=hidden + (project,))
    for item in _protected(settings, project, home):
        if item.exists and os.path.islink(item.path):
            warnings.append(f"PROTECTED_PATHS: {item.path} is a symlink and cannot be kept "
                            "read-only; replace it with a regular file or directory")
    policy = Policy(
        session_id=ctx.session_id, backend=backend, project_dir=project, workdir=workdir,
        uid=ctx.uid, gid=ctx.gid, user=ctx.user, home=home,
        home_access=settings.HOME_ACCESS,
        system_readonly=system,
        home_readonly=home_readonly, home_writable=home_writable, home_seeded=home_seeded,
        extra_writable=extra_writable + (package_cache,), hidden=hidden,
        protected=protected, readonly_overlays=overlays, launcher_paths=ctx.launcher_paths,
        run_binds=_existing(run_binds), sockets=sockets, slurm_masks=slurm_masks,
        slurm_binaries=slurm_binaries, devices=_devices(settings, ctx.environ, site_conf),
        private_tmp=settings.PRIVATE_TMP, private_ipc=settings.PRIVATE_IPC,
        filter_passwd=settings.FILTER_PASSWD,
        network_isolated=settings.NETWORK_MODE == "isolated",
        network_mode=settings.NETWORK_MODE, private_mounts=settings.PRIVATE_MOUNTS,
        unshare=settings.UNSHARE_PATH,
        landlock_partial=settings.LANDLOCK_ALLOWLIST_PARTIAL,
        seccomp=settings.SECCOMP, seccomp_extra=tuple(settings.SECCOMP_EXTRA_DENY),
        env=env, env_removed=removed, require=tuple(settings.REQUIRE),
        quiet=settings.SANDBOX_QUIET, warnings=tuple(warnings), pinned=pinned,
        prompt=settings.SANDBOX_PROMPT, slurm_conf=site_conf,
        package_cache=package_cache, install_links=ctx.install_links)
    return with_chaperon(policy, *chaperon) if chaperon else policy


def with_chaperon(policy: Policy, session_dir: str, staging_dir: str) -> Policy:
    """The policy of a session whose Slurm calls a chaperon serves: its
    session directory and the job staging directory join the view, and the
    stubs come first on PATH."""
    from agent_sandbox.traits import TRAITS    # data only: no backend module
    from chaperon.wire.session import ENV_SESSION_DIR, visible_paths

    visible_dir, stub_bin = visible_paths(TRAITS[policy.backend].fixed_mount_points,
                                          session_dir)
    env = dict(policy.env)
    env["PATH"] = f"{stub_bin}:{env.get('PATH', '/usr/bin:/bin')}"
    env[ENV_SESSION_DIR] = visible_dir
    return policy._replace(env=env, chaperon_dir=session_dir, staging_dir=staging_dir)


def with_egress(policy: Policy, socket_path: str, port: int, env_changes: dict, *,
                no_proxy: str = "localhost,127.0.0.1", notes=()) -> Policy:
    """The policy of a NETWORK_MODE=allowlist session whose egress proxy
    listens on `socket_path` (host path): the relay inside listens on
    127.0.0.1:`port`, the proxy variables point at it, and `env_changes`
    (services/egress.py: brokered keys replaced by placeholders, base URLs) apply.
    `no_proxy`: NO_PROXY inside (egress.proxy_bypass: empty when a loopback
    host is listed); `notes`: the brokering's warnings (a gateway not used)."""
    from agent_sandbox.traits import TRAITS    # data only: no backend module
    from agent_sandbox.names import EGRESS_SOCKET

    proxy = f"http://127.0.0.1:{port}"
    env = dict(policy.env)
    for name, value in (("HTTPS_PROXY", proxy), ("HTTP_PROXY", proxy),
                        ("ALL_PROXY", f"socks5h://127.0.0.1:{port}"),
                        ("NO_PROXY", no_proxy)):
        env[name] = env[name.lower()] = value
    env.update(env_changes)
    fixed = TRAITS[policy.backend].fixed_mount_points    # else the host path is seen
    env["AGENT_SANDBOX_EGRESS"] = EGRESS_SOCKET if fixed else socket_path
    return policy._replace(env=env, egress_socket=socket_path, relay_port=port,
                           warnings=tuple(policy.warnings) + tuple(notes))
