"""Package caches and stores: never shared writable with the outside (issue 27).

A package manager's cache or store feeds the user's later installs outside
the sandbox, and several hard-link (or reflink) their files into what they
install: uv links a venv's and a `uv tool`'s files from ~/.cache/uv, pnpm a
project's node_modules from its store, conda an environment from pkgs/. A
file written through the cache's name then changes the installed program
too — the read-only view of the install protects its *path*, not its inode.
So the rule is an invariant over one table, `STORES`, not a list of
grants to remember:

- a store of the user's (its default place, or where the caller's variable
  puts it) is never writable inside: a HOME_WRITABLE / EXTRA_WRITABLE_PATHS
  entry that is one or lies in one is dropped with a warning naming it, and
  one that lies in a writable tree (HOME_ACCESS=write, HOME_WRITABLE+=(.cache))
  is kept read-only there like the install directory (`writable_rule`,
  `inside_writable`);
- the tools inside use the sandbox's own cache instead, one per project in
  an always-hidden directory beside the state tree (`own_cache`,
  paths.CACHES_DIR), through the variables each
  tool reads (`inside_env`) — which work on every backend, landlock's
  (no mount namespace) included. uv aborts on a read-only cache
  (astral-sh/uv#15934), so a cache of its own, not a read-only view, is what
  lets it work inside. Installs made inside copy from it (UV_LINK_MODE=copy,
  CONDA_ALWAYS_COPY), so the project's files share no inode with it.

Pure: paths in, paths and variables out (it asks the filesystem only for
real paths, like policy/resolve.py).
"""
from __future__ import annotations

import os
from typing import NamedTuple

from agent_sandbox.paths import CACHES_DIR, is_within


class Store(NamedTuple):
    tool: str
    # Where the user's store is by default: below $HOME, with {cache} and
    # {data} standing for $XDG_CACHE_HOME and $XDG_DATA_HOME (or their
    # defaults ~/.cache and ~/.local/share).
    places: tuple[str, ...]
    # The variable that moves it (its value in the caller's environment
    # names a store of the user's too; inside it names the sandbox's own),
    # or "" where no variable moves only the store (cargo, gradle: their
    # homes hold configuration and programs as well).
    variable: str = ""
    # Does the tool link the store's files into what it installs?
    links: bool = False
    # More variables set inside (an install copies rather than links).
    inside: tuple[tuple[str, str], ...] = ()
    # The variable's value is a list (conda: comma-separated).
    separator: str = ""


# Read from each tool's documentation: where its cache or store lives and
# which variable moves it.
STORES = (
    Store("uv", ("{cache}/uv",), "UV_CACHE_DIR", links=True,
          inside=(("UV_LINK_MODE", "copy"),)),
    Store("pip", ("{cache}/pip",), "PIP_CACHE_DIR"),
    Store("npm", (".npm",), "npm_config_cache"),
    # pnpm's store is moved by its store-dir setting; the only variable for it
    # (npm_config_store_dir) makes every npm inside warn, so it is not set:
    # inside, pnpm's store is the tmpfs home's (tmpwrite) or unwritable.
    Store("pnpm", ("{data}/pnpm", "{cache}/pnpm", ".pnpm-store"), links=True),
    Store("yarn", ("{cache}/yarn", ".yarn/berry"), "YARN_CACHE_FOLDER"),
    Store("bun", (".bun/install/cache",), "BUN_INSTALL_CACHE_DIR", links=True),
    Store("conda", (".conda/pkgs", "miniconda3/pkgs", "miniforge3/pkgs", "mambaforge/pkgs",
                    "anaconda3/pkgs", "micromamba/pkgs", "{data}/mamba/pkgs"),
          "CONDA_PKGS_DIRS", links=True, inside=(("CONDA_ALWAYS_COPY", "true"),),
          separator=","),
    Store("poetry", ("{cache}/pypoetry",), "POETRY_CACHE_DIR"),
    Store("pdm", ("{cache}/pdm",), "PDM_CACHE_DIR", links=True),
    Store("go modules", ("go/pkg/mod",), "GOMODCACHE"),
    Store("go build", ("{cache}/go-build",), "GOCACHE"),
    Store("ccache", ("{cache}/ccache", ".ccache"), "CCACHE_DIR"),
    Store("deno", ("{cache}/deno",), "DENO_DIR"),
    Store("cargo", (".cargo/registry", ".cargo/git")),
    Store("gradle", (".gradle/caches",)),
    Store("maven", (".m2/repository",)),
)



def _xdg(environ, name: str, home: str, default: str) -> str:
    value = environ.get(name, "")
    return os.path.normpath(value) if value.startswith("/") else os.path.join(home, default)


def user_stores(home: str, environ) -> tuple[tuple[str, str], ...]:
    """(path, tool) of every place a store of the user's is or would be:
    the table's defaults and what the caller's variables name, each as
    named and as it resolves (a link to /scratch moves the store there)."""
    cache = _xdg(environ, "XDG_CACHE_HOME", home, ".cache")
    data = _xdg(environ, "XDG_DATA_HOME", home, ".local/share")
    found: dict[str, str] = {}
    for store in STORES:
        places = [os.path.join(home, p.format(cache=cache, data=data)) for p in store.places]
        value = environ.get(store.variable, "") if store.variable else ""
        for each in (value.split(store.separator) if store.separator else [value]):
            if each.startswith("/"):
                places.append(each)
        for place in places:
            place = os.path.normpath(place)
            found.setdefault(place, store.tool)
            real = os.path.realpath(place)
            found.setdefault(real, store.tool)
    return tuple(found.items())


def store_of(path: str, stores) -> str | None:
    """The tool whose store `path` is or lies in (as named or resolved), or None."""
    real = os.path.realpath(path)
    for place, tool in stores:
        if is_within(path, place) or is_within(real, place):
            return tool
    return None


def writable_rule(path: str, stores) -> str | None:
    """Why `path` may not be a writable entry, or None."""
    tool = store_of(path, stores)
    if tool is None:
        return None
    return (f"it is {tool}'s package store, which feeds (and may hard-link into) your "
            "installs outside the sandbox: a write there would reach them. Inside, the "
            "tools use the sandbox's own cache (docs/shared-channels.md)")


def inside_writable(stores, roots) -> tuple[str, ...]:
    """The user's existing stores that lie inside a writable tree `roots`
    (but are not one): kept read-only there."""
    kept = []
    for place, _tool in stores:
        if any(is_within(place, root) and place != root for root in roots) \
                and os.path.isdir(place) and not os.path.islink(place):
            kept.append(place)
    return tuple(dict.fromkeys(kept))


def missing_inside_writable(stores, roots, home: str) -> tuple[str, ...]:
    """The user's stores, below the home, that do not exist yet but lie in a
    writable tree `roots` (HOME_WRITABLE+=(.cache)): a session would make
    one there and fill it for the user's next install outside. The launcher
    makes each (empty, 0700) before the compile looks, so that it is kept
    read-only like the existing ones (`inside_writable`)."""
    missing = []
    for place, _tool in stores:
        if is_within(place, home) and place != home and not os.path.lexists(place) \
                and any(is_within(place, root) and place != root for root in roots):
            missing.append(place)
    return tuple(dict.fromkeys(missing))


def own_cache(home: str, project: str) -> str:
    """The sandbox's own cache directory for `project` (a real path)."""
    try:   # built into CPython; hashlib loads OpenSSL
        from _blake2 import blake2b
    except ImportError:
        from hashlib import blake2b
    # Keyed by the path below the home when it lies there (the same home
    # moved or seen through a link keeps its caches), else the whole path.
    key = os.path.relpath(project, home) if is_within(project, home) else project
    digest = blake2b(os.fsencode(key), digest_size=8).hexdigest()
    name = "".join(c if c.isalnum() or c in "-_." else "_"
                   for c in os.path.basename(project))[:40].lstrip(".")
    return os.path.join(home, CACHES_DIR, f"{name}-{digest}" if name else digest)


def inside_env(cache_dir: str) -> dict[str, str]:
    """The variables that point each tool inside at the sandbox's own cache."""
    env = {}
    for store in STORES:
        if store.variable:
            env[store.variable] = os.path.join(cache_dir, store.tool.replace(" ", "-"))
        env.update(store.inside)
    return env
