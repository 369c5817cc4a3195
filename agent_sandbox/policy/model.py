"""The Policy's classes, and the questions asked of a Policy, in one module
that imports only the standard library and agent_sandbox.paths (issue 28,
item 3: one Policy, typed through the cache).

A compiled launch builds a `Policy` (policy/resolve.py); a cached launch
thaws the same class from the plan cache (plancache/plans.py rebuilds the
classes of the modules named in its MODELS, this one among them): both have
the same type, the same fields and the same methods, so no caller reads a
field through `getattr(policy, name, default)` and no caller keeps a copy of
a predicate "because a cached policy has no methods". This module is what a
warm launch imports of the policy: it must stay cheap — no `typing` (~3 ms),
no namedtuple (it builds its class with exec), no other policy module.

The classes are tuples with named, read-only fields (`fields_tuple`), like
a NamedTuple: equal to the tuple of their items (a cached plan equals the
compiled one), `_fields`, `_field_defaults`, `_make`, `_replace`, `_asdict`.

The predicates over a policy's paths live here, once:
  is_hidden   a path is, or lies in, a hidden path (by name: `hidden` holds
              each hidden path as named and as resolved, resolve.py)
  is_shown    a real path shows the host's file inside (not hidden, and in a
              tree the sandbox shows)
  is_writable a path lies in a tree the sandbox can write
"""
from __future__ import annotations

import os

from agent_sandbox.paths import is_within

try:                                    # the C accessor namedtuple uses (3.8+)
    from _collections import _tuplegetter as _getter
except ImportError:                     # pragma: no cover - other interpreters
    from _operator import itemgetter

    def _getter(index: int, doc: str):
        return property(itemgetter(index), doc=doc)


def fields_tuple(name: str, fields: tuple, defaults: dict | None = None,
                 module: str = __name__) -> type:
    """The base of a class of tuples with named fields, built without exec:
    positional or keyword construction with `defaults` for the trailing
    fields, `_make` (what the plan cache calls), `_replace`, `_asdict`."""
    fields = tuple(fields)
    defaults = dict(defaults or {})
    count = len(fields)
    index = {field: i for i, field in enumerate(fields)}
    required = tuple(f for f in fields if f not in defaults)

    def __new__(cls, *args, **kwargs):
        if not kwargs and len(args) == count:
            return tuple.__new__(cls, args)
        if len(args) > count:
            raise TypeError(f"{name}() takes {count} arguments, {len(args)} given")
        values = list(args) + [_MISSING] * (count - len(args))
        for key, value in kwargs.items():
            at = index.get(key)
            if at is None:
                raise TypeError(f"{name}() got an unexpected field {key!r}")
            if values[at] is not _MISSING:
                raise TypeError(f"{name}() got field {key!r} twice")
            values[at] = value
        for at, value in enumerate(values):
            if value is _MISSING:
                if fields[at] not in defaults:
                    missing = [f for f in required if values[index[f]] is _MISSING]
                    raise TypeError(f"{name}() missing fields: {', '.join(missing)}")
                values[at] = defaults[fields[at]]
        return tuple.__new__(cls, values)

    def _make(cls, iterable):
        made = tuple.__new__(cls, iterable)
        if len(made) != count:
            raise TypeError(f"{name} takes {count} items, {len(made)} given")
        return made

    def _replace(self, **changes):
        made = self._make(map(changes.pop, fields, self))
        if changes:
            raise ValueError(f"unknown fields {sorted(changes)}")
        return made

    def _asdict(self) -> dict:
        return dict(zip(fields, self))

    def __repr__(self) -> str:
        return f"{name}(" + ", ".join(f"{f}={v!r}" for f, v in zip(fields, self)) + ")"

    def __getnewargs__(self):
        return tuple(self)

    namespace = {"__slots__": (), "_fields": fields, "_field_defaults": defaults,
                 "__new__": __new__, "_make": classmethod(_make), "_replace": _replace,
                 "_asdict": _asdict, "__repr__": __repr__, "__getnewargs__": __getnewargs__,
                 "__module__": module}
    for at, field in enumerate(fields):
        namespace[field] = _getter(at, f"Alias for field number {at}")
    return type(f"_{name}Fields", (tuple,), namespace)


_MISSING = object()


# ---------------------------------------------------------------- the classes
class Protected(fields_tuple("Protected", ("path", "is_dir", "exists", "placeholder"),
                             {"placeholder": b""})):
    """A protected path of the project (read-only inside; a placeholder is
    written for a missing one and removed at exit when unchanged)."""
    __slots__ = ()


# (name, default): the fields without a default come first. The comments
# say what each holds; resolve.py decides them.
_POLICY = (
    ("session_id", _MISSING), ("backend", _MISSING), ("project_dir", _MISSING),
    ("workdir", _MISSING), ("uid", _MISSING), ("gid", _MISSING), ("user", _MISSING),
    ("home", _MISSING), ("home_access", _MISSING),
    ("system_readonly", _MISSING), ("home_readonly", _MISSING), ("home_writable", _MISSING),
    ("home_seeded", _MISSING), ("extra_writable", _MISSING), ("hidden", _MISSING),
    ("protected", _MISSING),             # Protected, …
    ("readonly_overlays", _MISSING),     # install dir, user config tree
    ("run_binds", _MISSING), ("slurm_masks", _MISSING), ("slurm_binaries", _MISSING),
    ("devices", _MISSING), ("private_tmp", _MISSING), ("private_ipc", _MISSING),
    ("filter_passwd", _MISSING), ("network_isolated", _MISSING), ("seccomp", _MISSING),
    ("seccomp_extra", _MISSING),
    ("env", _MISSING),                   # never printed: it holds API keys
    ("env_removed", ()), ("require", ()), ("quiet", False), ("warnings", ()),
    ("chaperon_dir", None),              # this session's chaperon directory (host path)
    ("staging_dir", None),               # job output staging, read-only inside
    ("notes", ()),                       # (path, payload name): read-only notes for the agent
    # Home files that held a secret (policy/boundfiles.py): (path, payload
    # name, mode) bound from a blanked copy, and the check's BoundFileReport
    # for the banner.
    ("generated_files", ()), ("bound_file_report", None),
    ("pinned", ()),                      # bound onto themselves: cannot be renamed (gitrepo.py)
    ("prompt", ""),                      # SANDBOX_PROMPT: prompt prefix and title tag
    # Protected project files an agent edits on a session copy (agents/copy.py):
    # (copy, path) — bwrap binds the copy there writable instead of read-only.
    ("session_files", ()),
    # The site's slurm.conf the chaperon uses (slurm_conf_path), None: Slurm's default.
    ("slurm_conf", None),
    # NETWORK_MODE (names.NETWORK_MODES). With allowlist, with_egress adds the
    # proxy's socket (host path, in this session's egress directory) and the
    # relay's port; landlock_partial: the admin accepts landlock's weaker form.
    ("network_mode", "open"),
    # PRIVATE_MOUNTS: no mount the host makes after the start propagates in (bwrap).
    ("private_mounts", True),
    # The util-linux unshare that makes that namespace (UNSHARE_PATH, admin).
    ("unshare", "/usr/bin/unshare"),
    ("egress_socket", None),
    ("relay_port", 0), ("landlock_partial", False),
    # Pathname unix sockets in the trees shown from the host (policy/sockets.py):
    # left out of the view like hidden paths on the backends with a mount view.
    ("sockets", ()),
    # The sandbox's own package cache (policy/caches.py own_cache): made by
    # the launcher, granted writable by exact path (it lies in an always-
    # hidden directory, paths.CACHES_DIR), named by the tools' variables inside.
    ("package_cache", None),
    # Files of the install with more than one link: (how many, a few of them)
    # — self.protected is partial then (backends/base.py self_protection).
    ("install_links", (0, ())),
    # LaunchContext.launcher_paths: self.protected is partial when one of them
    # is writable inside (backends/base.py self_protection).
    ("launcher_paths", ()),
)


class Policy(fields_tuple("Policy", tuple(f for f, _ in _POLICY),
                          {f: d for f, d in _POLICY if d is not _MISSING})):
    """What the sandbox is for this user, project and host (resolve.py
    decides it; backends compile it, never change it)."""
    __slots__ = ()

    def __repr__(self) -> str:            # never the environment: it holds API keys
        return f"Policy(backend={self.backend!r}, project_dir={self.project_dir!r}, …)"

    def is_hidden(self, path: str) -> bool:
        return is_hidden(path, self.hidden)

    def is_shown(self, path: str) -> bool:
        return is_shown(self, path)

    def is_writable(self, path: str) -> bool:
        return is_writable(self, path)

    def writable_trees(self) -> tuple[str, ...]:
        return writable_trees(self)


class BoundFileFinding(fields_tuple("BoundFileFinding", ("path", "lines", "what", "action"))):
    """path: as bound inside; lines: "line 3", "lines 5-9", "" (the whole
    file); action: "blanked" | "not bound" (policy/boundfiles.py)."""
    __slots__ = ()


class BoundFileReport(fields_tuple("BoundFileReport", ("mode", "checked", "findings"),
                                   {"findings": ()})):
    """The bound-file check's verdict, for the banner and --dry-run."""
    __slots__ = ()


# ---------------------------------------------------------------- the predicates
def is_hidden(path: str, hidden) -> bool:
    """`path` is, or lies in, one of `hidden` by name (the policy's hidden
    paths hold each one as named and as resolved)."""
    return any(is_within(path, h) for h in hidden)


def shown_trees(policy) -> tuple[str, ...]:
    """The trees the sandbox shows from the host."""
    roots = (policy.system_readonly + policy.home_readonly + policy.home_writable
             + policy.extra_writable + policy.readonly_overlays + (policy.project_dir,))
    return roots + ((policy.home,) if policy.home_access in ("read", "write") else ())


def is_shown(policy, path: str, *, realpath=os.path.realpath) -> bool:
    """Does `path` (a real path) show the host's file inside? Each tree is
    taken as named and as resolved (`realpath`: the read that resolves)."""
    if is_hidden(path, policy.hidden):
        return False
    return any(is_within(path, realpath(r)) or is_within(path, r)
               for r in shown_trees(policy))


def writable_trees(policy) -> tuple[str, ...]:
    """The trees the sandbox can write (the project, writable home entries,
    EXTRA_WRITABLE_PATHS, the whole home with HOME_ACCESS=write)."""
    trees = policy.home_writable + policy.extra_writable + (policy.project_dir,)
    return trees + ((policy.home,) if policy.home_access == "write" else ())


def writable_tree_of(policy, *paths: str, realpath=os.path.realpath) -> str | None:
    """The first tree the sandbox can write that holds one of `paths`, the
    tree taken as named and as resolved (the paths as given: callers pass
    each form of a path they mean); None when there is none."""
    return next((tree for tree in writable_trees(policy) if tree and any(
        is_within(path, tree) or is_within(path, realpath(tree)) for path in paths)), None)


def is_writable(policy, path: str, *, realpath=os.path.realpath) -> bool:
    """`path` lies in a tree the sandbox can write (writable_tree_of)."""
    return writable_tree_of(policy, path, realpath=realpath) is not None
