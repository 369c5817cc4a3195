"""The compiled plan cache (issue 19): a launch whose inputs are unchanged
reuses the plan an identical earlier launch compiled, instead of resolving
the configuration and the policy and building the plan again.

Strategy — record, don't enumerate. Listing by hand every file the compile
may look at (admin, user and conf.d configs, profiles, credential paths that
decide masks, protected paths in the project, git control files, bound
files scanned for secrets, the backend's probe…) would drift from the code.
So the compile runs under `Recorder`, which wraps the os-level calls that
observe the filesystem (stat, lstat, listdir, scandir, readlink, access,
open) and fingerprints every path asked about *before* the call answers: its
lstat and stat (device, inode, mode, owner, size, mtime, ctime — a config
edit or a new entry in a listed directory changes them), or the content for
/proc and /sys. A later launch is a hit only when its context (identity and
groups, a digest of the environment — its values hold credentials —,
working directory, options, host, kernel, boot, every module of the
installed code) is equal and every recorded path still has the same
fingerprint. A change that happens during the compile leaves the old
fingerprint behind, so the next launch recomputes; a file read or listed
that changed within RACY_NS before the compile is not trusted to show its
next change in its times (one clock tick; COARSE_RACY_NS where the file
system keeps whole seconds): that compile is not stored.
Anything the recorder cannot describe (a descriptor-relative call, a
process started during the compile) makes the compile uncacheable: when in
doubt, recompute. The
derived caches in the state directory's cache/ (config, seccomp, probe,
bound-file verdicts) are not recorded: each checks its own inputs, which the
compile observes, and trusts only the user's own files (the rule below,
config/load.py load_cache).

Fresh at every launch: the session id, the chaperon's directory and the
tokens the caller names as random per launch (`renewed`: an egress proxy's
placeholder keys). A plan is stored with the ones it was compiled with
(random, 48 and 32 bits) and a hit substitutes new ones in every string
(and in payload bytes). The chaperon itself is started from its stored
configuration; an agent's session copy and egress proxy are made again from
what agents/launch.py stores beside the plan.

The environment is stored as a template: the value of every variable the
plan keeps verbatim from the launch's environment (an API key a profile
keeps, the user's PATH) is taken out of the policy's and the plan's
environment and the `env` payload, and a hit puts its own environment's
value back (template/filled). The key holds the environment's digest, so
those are the same values; a cache file holds no value the plan took from
the environment into one of those places.

Stored with marshal (no code runs on load). A NamedTuple is stored with its
class name and field names. The classes of a model module (MODELS: the
Policy's, policy/model.py, stdlib only) come back as themselves, with their
methods, so a cached policy is the compiled one's type. Any other class
comes back as a *record*: a tuple of the same items with the same field
names as attributes (and `_replace`), so that a hit imports none of the
modules that define them (the backends, the configuration: no pydantic, no
typer, no resolve code). Code that runs a plan therefore reads the plan's
fields and never calls a method of its classes (spawn.render_argv,
report.py dispatches on `kind`). A
cache file is used only if it is a regular file owned by this user and
writable by no one else, in a directory with the same properties, inside the
hidden state directory; anything else — foreign, corrupt, stale — is a miss,
never an error. The hit path imports only the standard library besides the
classes of the stored plan.
"""
from __future__ import annotations

import builtins
import marshal
import os
import sys
from _thread import get_ident
from time import time_ns

FORMAT = 3    # 2: records (class and field names); 3: the environment template
MAX_BYTES = 8 << 20
PLANS = "plans"
RACY_NS = 100_000_000    # files changed this recently are not trusted to show the next change
# A time in whole seconds comes from a file system that keeps no finer ones
# (ext3, ext4 with 128-byte inodes, Lustre, some NFS servers; FAT: two): its
# tick is that long, so is the window in which the next change can keep it.
COARSE_RACY_NS = 2_000_000_000

class _Unbound:
    """A patched-in function that stays a plain callable where a class keeps
    it as an attribute: a builtin (os.open) does not bind to an instance, a
    Python function would. Python 3.9's pathlib keeps `open = os.open` on
    its accessor class: imported for the first time during a compile, it
    called the wrapper with the accessor as an extra first argument
    (TypeError: open() takes at most 3 positional arguments; found by the
    smoke set under 3.9, tests/integration/test_python_smoke.py)."""
    __slots__ = ("call",)

    def __init__(self, call):
        self.call = call

    def __call__(self, *args, **kwargs):
        return self.call(*args, **kwargs)


_OBSERVING = ("stat", "lstat", "listdir", "scandir", "readlink", "access", "open")
_STARTING = ("posix_spawn", "posix_spawnp", "fork", "system", "execv", "execve")


# ---------------------------------------------------------------- fingerprints
def _stat_fields(st) -> tuple:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size,
            st.st_mtime_ns, st.st_ctime_ns)


# How a path was observed: its metadata only (stat, lstat, access,
# readlink), or what it holds (open, and listdir/scandir of a directory), or
# its type alone (os.path's exists, lexists, isdir, isfile, islink and
# realpath answer nothing else: a file an agent rewrites between sessions —
# its history, by a rename — stays the same to them).
META, CONTENT, TYPE = 0, 1, 2
_TYPED = ("exists", "lexists", "isdir", "isfile", "islink", "realpath")
_PROC_KEEP = (b"NoNewPrivs", b"Seccomp", b"Uid", b"Gid", b"Groups", b"Cap")


def fingerprint(path: str, kind: int = CONTENT, stat=os.stat):
    """What a compile could have learnt from `path`, in a comparable form. A
    directory only stat'ed is described without its size and times: those
    change with every entry made or removed in it (placeholders, a session's
    files), which a plan that never listed it does not depend on."""
    if type(kind) is tuple:
        return _derived_fingerprint(path, kind)
    if path.startswith(("/proc/", "/sys/")):
        return _pseudo_fingerprint(path)
    if kind == TYPE:
        return _type_fingerprint(path, stat)
    # (lstat, stat); stat is asked only for a symbolic link: of anything
    # else, or of a path lstat cannot find, it says what lstat said.
    try:
        own = _stat_fields(stat(path, follow_symlinks=False))
    except OSError as exc:
        return (exc.errno, exc.errno)
    except ValueError:
        return ("invalid", "invalid")
    if own[2] & 0o170000 != 0o120000:
        own = _kind_fields(own, kind)
        return (own, own)
    try:
        target = _kind_fields(_stat_fields(stat(path)), kind)
    except OSError as exc:
        target = exc.errno
    except ValueError:
        target = "invalid"
    return (own, target)


def _type_fingerprint(path: str, stat):
    """The file type, and for a symbolic link its target and the type it
    leads to: all that os.path's type questions and realpath can learn."""
    try:
        own = stat(path, follow_symlinks=False).st_mode & 0o170000
    except OSError as exc:
        return ("type", exc.errno)
    except ValueError:
        return ("type", "invalid")
    if own != 0o120000:
        return ("type", own)
    try:
        target = os.readlink(path)
    except OSError as exc:
        target = exc.errno
    try:
        followed = stat(path).st_mode & 0o170000
    except OSError as exc:
        followed = ("error", exc.errno)
    return ("type", own, target, followed)


def _derived_fingerprint(path: str, kind: tuple):
    """Answers the compile got from `path` to the questions `kind` names:
    ("mounts", questions) asks the mount table the bwrap plan's rules asked
    (mountinfo.MountPoints), not the whole table a login node keeps changing."""
    if kind[0] == "sockets":
        return _sockets_fingerprint(kind)
    if kind[0] != "mounts":
        return ("unknown", kind[0])
    from agent_sandbox.mountinfo import answers, read_mount_points

    return answers(read_mount_points(path), kind[1])


def _sockets_fingerprint(kind: tuple):
    """("sockets", prune, listed, found): the sockets a compile's walk found
    (policy/sockets.py), still `found` while no directory it listed gained
    or lost a socket and no directory new in one holds any."""
    from agent_sandbox.policy.sockets import Listed, recheck

    _, prune, listed, found = kind
    for fact in listed:
        fact = Listed(*fact)
        if recheck(fact, prune) != tuple(fact.sockets):
            return None
    return found


def socket_walker(recorder: "Recorder | None"):
    """The socket walk for a compile under `recorder` (resolve_policy's
    `socket_walk`): the walk itself unrecorded — its directories' times
    change with every file an agent's session writes there, and a plan
    depends only on where the sockets are — and recorded instead as one
    derived fact that a hit rechecks (_sockets_fingerprint). A directory
    changed within the racy window is not trusted to show its next change."""
    from agent_sandbox.policy.sockets import find_sockets

    if recorder is None:
        return find_sockets

    def walk(trees, prune=()):
        facts: list = []
        with Paused(recorder):
            found = find_sockets(trees, prune, facts)
        for fact in facts:
            if recorder._racy(fact.signature[3]):
                recorder.give_up(f"{fact.path} changed during the compile")
        recorder.derived("sockets", ("sockets", tuple(prune), tuple(map(tuple, facts)), found),
                         found)
        return found
    return walk


def _kind_fields(fields: tuple, kind: int) -> tuple:
    if kind == META and fields[2] & 0o170000 == 0o040000:
        return fields[:5]
    return fields


def _pseudo_fingerprint(path: str):
    try:
        return ("link", os.readlink(path))
    except OSError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return ("error", exc.errno)
    chunks = []
    try:
        # Whole: a login node's mountinfo runs past 64 KiB (hundreds of
        # NFS, Lustre and autofs mounts), and a change beyond a prefix
        # would go unseen.
        while sum(map(len, chunks)) < MAX_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        return ("error", exc.errno)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if path.startswith("/proc/") and path.endswith("/status"):
        # Pids, memory and counters change with every process; only the
        # confinement and identity lines can decide a plan.
        data = b"\n".join(line for line in data.splitlines() if line.startswith(_PROC_KEEP))
    if len(data) > 4096:
        return ("digest", _hash(data))   # not every cache file a copy of a long table
    return ("data", data)


# ---------------------------------------------------------------- recording
ACTIVE: list = []    # the recorders inside their `with` (for facts the compile derives)


class Recorder:
    """Fingerprints every path the code inside `with` observes. `ignore`:
    directories whose content is fresh per launch or checked by its own
    cache (never a configuration or a path that decides a mask)."""

    def __init__(self, ignore=()):
        self.seen: dict[tuple[str, int], object] = {}
        self.cacheable = True
        self.why = ""
        self.ignore = tuple(p.rstrip("/") + "/" for p in ignore)
        self.paused = 0
        self.typed: dict = {}   # thread → depth inside os.path's type questions
        self._saved: list = []
        now = time_ns()
        self.racy, self.coarse_racy = now - RACY_NS, now - COARSE_RACY_NS

    def note(self, path, dir_fd=None, kind: int = CONTENT) -> None:
        if self.paused:
            return
        if isinstance(path, int):
            return          # a descriptor opened (and noted) before
        if dir_fd is not None:
            self.give_up("a descriptor-relative lookup")
            return
        try:
            path = os.fsdecode(path)
        except TypeError:
            self.give_up("an unusual path argument")
            return
        if not path.startswith("/"):
            path = os.path.join(os.getcwd(), path)
        if kind == META and self.typed and get_ident() in self.typed:
            kind = TYPE     # (that thread's own: another's stat stays META)
        if ((path, kind) in self.seen or path.startswith(self.ignore)
                or path + "/" in self.ignore):
            return
        self.paused += 1
        try:
            print_ = self.seen[(path, kind)] = fingerprint(path, kind, self._real["stat"])
        finally:
            self.paused -= 1
        # "Racy" files (as git calls them): changed so recently that another
        # change within the same clock tick would leave size and times alone.
        if kind == CONTENT and any(isinstance(f, tuple) and len(f) > 7 and self._racy(f[7])
                                   for f in print_):
            self.give_up(f"{path} changed during the compile")

    def derived(self, path: str, kind: tuple, answers) -> None:
        """A fact the compile derived from `path` (read unrecorded): the
        answers it got, asked again at a hit (_derived_fingerprint)."""
        if not self.paused:
            self.seen[(path, kind)] = answers

    def _racy(self, ctime_ns: int) -> bool:
        if ctime_ns % 1_000_000_000:
            return ctime_ns > self.racy
        return ctime_ns > self.coarse_racy

    def give_up(self, why: str) -> None:
        if not self.paused and self.cacheable:
            self.cacheable, self.why = False, why

    def __enter__(self):
        import _posixsubprocess
        import io

        ACTIVE.append(self)
        self._real = {name: getattr(os, name) for name in _OBSERVING}
        note = self.note

        def observing(name):
            real = self._real[name]
            kind = CONTENT if name in ("listdir", "scandir", "open") else META

            def wrapper(*args, **kwargs):
                note(args[0] if args else kwargs.get("path", "."), kwargs.get("dir_fd"), kind)
                return real(*args, **kwargs)
            return _Unbound(wrapper)

        def starting(module, name):
            real = getattr(module, name)

            def wrapper(*args, **kwargs):
                self.give_up(f"a process started ({name})")
                return real(*args, **kwargs)
            return _Unbound(wrapper)

        real_open = builtins.open

        def _opening(file, *args, **kwargs):
            note(file)
            return real_open(file, *args, **kwargs)
        opening = _Unbound(_opening)

        patches = [(os, name, observing(name)) for name in _OBSERVING]
        patches += [(os, name, starting(os, name)) for name in _STARTING if hasattr(os, name)]
        fork_exec = starting(_posixsubprocess, "fork_exec")
        patches.append((_posixsubprocess, "fork_exec", fork_exec))
        # subprocess binds fork_exec when it is imported: patched there too
        # (and put back below if it is imported while recording).
        self._fork_exec = (_posixsubprocess.fork_exec, fork_exec)
        # (Python 3.11+; before, subprocess calls _posixsubprocess.fork_exec, patched above.)
        if hasattr(sys.modules.get("subprocess"), "_fork_exec"):
            patches.append((sys.modules["subprocess"], "_fork_exec", fork_exec))
        patches += [(builtins, "open", opening), (io, "open", opening)]

        def typed(real):
            recorder = self

            def wrapper(*args, **kwargs):
                me = get_ident()
                recorder.typed[me] = recorder.typed.get(me, 0) + 1
                try:
                    return real(*args, **kwargs)
                finally:
                    if recorder.typed[me] == 1:
                        del recorder.typed[me]
                    else:
                        recorder.typed[me] -= 1
            return _Unbound(wrapper)
        patches += [(os.path, name, typed(getattr(os.path, name))) for name in _TYPED]
        for module, name, value in patches:
            self._saved.append((module, name, getattr(module, name)))
            setattr(module, name, value)
        return self

    def __exit__(self, *exc) -> None:
        ACTIVE.remove(self)
        for module, name, value in reversed(self._saved):
            setattr(module, name, value)
        self._saved.clear()
        real, wrapper = self._fork_exec
        module = sys.modules.get("subprocess")
        if module is not None and getattr(module, "_fork_exec", None) is wrapper:
            module._fork_exec = real

    def pause(self) -> "Paused":
        return Paused(self)


class _Unbound:
    """A wrapper that, like the builtin it stands for, does not become a
    method when a class body copies it: Python 3.9's pathlib, first imported
    during a compile (pydantic's importlib.metadata), copies os.open & co.
    into its accessor class, and a plain function there was called with the
    accessor as its first argument (TypeError on Debian 11, issue 30)."""
    __slots__ = ("function",)

    def __init__(self, function):
        self.function = function

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)


class Paused:
    """`with Paused(recorder):` what happens inside is not recorded (the
    session's own directories and processes); with no recorder (a launch the
    cache does not serve) there is nothing to pause."""
    __slots__ = ("recorder",)

    def __init__(self, recorder: Recorder | None):
        self.recorder = recorder

    def __enter__(self):
        if self.recorder is not None:
            self.recorder.paused += 1

    def __exit__(self, *exc):
        if self.recorder is not None:
            self.recorder.paused -= 1


# ---------------------------------------------------------------- plain data
class Uncacheable(Exception):
    """The compiled launch holds something marshal cannot store."""


def freeze(value):
    """Built-in types only; every container tagged so that thaw rebuilds it."""
    if value is None or isinstance(value, (str, bytes, bool, int, float)):
        return value
    if isinstance(value, tuple):
        items = tuple(freeze(v) for v in value)
        if hasattr(type(value), "_fields"):
            cls = type(value)
            if not cls.__module__.startswith("agent_sandbox."):
                raise Uncacheable(f"{cls.__module__}.{cls.__qualname__}")
            return (2, f"{cls.__module__}:{cls.__qualname__}", tuple(cls._fields), items)
        if type(value) is not tuple:
            raise Uncacheable(type(value).__qualname__)
        return (0, items)
    if type(value) is list:
        return (1, tuple(freeze(v) for v in value))
    if type(value) is frozenset:
        return (3, tuple(freeze(v) for v in value))
    if type(value) is dict:
        return (4, tuple((freeze(k), freeze(v)) for k, v in value.items()))
    raise Uncacheable(type(value).__qualname__)


def _record(name: str, fields: tuple):
    """The class of the records that stand for a stored NamedTuple: a tuple
    whose fields are read-only attributes, equal to the original (tuple
    equality), with `_fields`, `_make` and `_replace`."""
    if not (isinstance(name, str) and name.startswith("agent_sandbox.") and fields
            and all(isinstance(f, str) and f.isidentifier() and not f.startswith("_")
                    for f in fields) and len(set(fields)) == len(fields)):
        raise ValueError(name)
    from _operator import itemgetter    # the C module: operator.py costs 0.2 ms

    def _replace(self, **changes):
        unknown = set(changes) - set(fields)
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        return type(self)(changes.get(f, v) for f, v in zip(fields, self))

    def __repr__(self):
        return name.partition(":")[2] + "(" + ", ".join(
            f"{f}={v!r}" for f, v in zip(fields, self)) + ")"

    module, _, qualname = name.partition(":")
    # Named as the class it stands for: frozen again (a job's hit, a test's
    # comparison) it is stored exactly as the original would be.
    namespace = {"__slots__": (), "_fields": fields, "_replace": _replace,
                 "_make": classmethod(lambda cls, items: cls(items)), "__repr__": __repr__,
                 "__module__": module, "__qualname__": qualname}
    for index, field in enumerate(fields):
        namespace[field] = property(itemgetter(index))
    return type(qualname, (tuple,), namespace)


def thaw(value, swap_str, swap_bytes, classes: dict):
    if isinstance(value, str):
        return swap_str(value)
    if isinstance(value, bytes):
        return swap_bytes(value)
    if not isinstance(value, tuple):
        return value
    tag = value[0]
    if tag == 4:
        return {thaw(k, swap_str, swap_bytes, classes): thaw(v, swap_str, swap_bytes, classes)
                for k, v in value[1]}
    items = [thaw(v, swap_str, swap_bytes, classes) for v in value[-1]]
    if tag == 0:
        return tuple(items)
    if tag == 1:
        return items
    if tag == 3:
        return frozenset(items)
    if tag == 2:
        key = (value[1], value[2])
        cls = classes.get(key) or classes.setdefault(key, _class(*key))
        if len(items) != len(cls._fields):
            raise ValueError(value[1])
        return cls._make(items)
    raise ValueError(tag)


# The modules whose classes a hit rebuilds as themselves (the same type and
# methods as a compile's): each imports only the standard library and the
# vocabulary, so a hit may import it. Any other stored class comes back as a
# record (_record).
MODELS = frozenset({"agent_sandbox.policy.model"})


def _class(name: str, fields: tuple):
    """The class that stands for stored class `name` with `fields`: the
    class itself when its module is a model (MODELS), else a record. A model
    class whose fields differ from the stored ones is a miss (ValueError)."""
    module, _, qualname = name.partition(":") if isinstance(name, str) else ("", "", "")
    if module not in MODELS:
        return _record(name, fields)
    __import__(module)
    cls = getattr(sys.modules[module], qualname, None)
    if cls is None or getattr(cls, "_fields", None) != fields:
        raise ValueError(name)
    return cls


# ---------------------------------------------------------------- environment template
FROM_ENVIRON = "\x00from the environment"   # no real value holds NUL


def template(launch: dict, environ) -> tuple[dict, tuple | None]:
    """(`launch` as stored, the names taken out): every variable whose value
    in the policy's environment is the launch environment's own is replaced
    by FROM_ENVIRON there, in the plan's environment where it has the same
    value, and the `env` payload (made from the policy's environment) is
    emptied, to be made again on a hit. A payload that is not exactly the
    policy's environment cannot be made again: names None (not stored,
    rather than a kept API key written in its bytes) unless no value came
    from the environment."""
    policy, plan = launch.get("policy"), launch.get("plan")
    if policy is None:
        return launch, ()
    names = tuple(sorted(n for n, v in policy.env.items() if environ.get(n) == v))
    rebuild = False
    if plan is not None and "env" in plan.payloads:
        from agent_sandbox.backends.base import env_payload

        rebuild = plan.payloads["env"] == env_payload(policy.env)
        if not rebuild:
            return launch, (None if names else ())
    if not names:
        return launch, ()
    out = dict(launch, from_environ=names, env_payload=rebuild)
    out["policy"] = policy._replace(env=_blanked(policy.env, names, policy.env))
    if plan is not None:
        changes = {"env": _blanked(plan.env, names, policy.env)}
        if rebuild:
            changes["payloads"] = dict(plan.payloads, env=plan.payloads["env"]._replace(data=b""))
        out["plan"] = plan._replace(**changes)
    return out, names


def _blanked(env: dict, names, source: dict) -> dict:
    return {k: FROM_ENVIRON if k in names and v == source[k] else v for k, v in env.items()}


def filled(launch: dict, environ) -> dict:
    """The stored `launch` with `environ`'s values put back; KeyError when
    one is missing, ValueError when a template value is left."""
    names = launch.pop("from_environ", ())
    rebuild = launch.pop("env_payload", False)
    if not names:
        return launch
    values = {name: environ[name] for name in names}

    def put(env: dict) -> dict:
        out = {k: values[k] if v == FROM_ENVIRON else v for k, v in env.items()}
        if FROM_ENVIRON in out.values():
            raise ValueError("a template value without a name")
        return out

    policy = launch["policy"] = launch["policy"]._replace(env=put(launch["policy"].env))
    plan = launch.get("plan")
    if plan is not None:
        changes = {"env": put(plan.env)}
        if rebuild:
            from agent_sandbox.backends.base import env_payload

            changes["payloads"] = dict(plan.payloads, env=plan.payloads["env"]._replace(
                data=env_payload(policy.env).data))
        launch["plan"] = plan._replace(**changes)
    return launch


# ---------------------------------------------------------------- the cache
def _install_stamp() -> tuple:
    """The code that compiles a plan: every module of the package and of the
    chaperon's (the compile imports some), by inode, size and times. A
    reinstall, one module updated in place (a site's fix) or a `git pull` in
    a source tree all change it; ~120 files, 0.3 ms."""
    from agent_sandbox import __version__

    stamps: list = [__version__, sys.executable, sys.version]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for tree in (package, os.path.join(os.path.dirname(package), "chaperon")):
        _stamp_tree(tree, stamps)
    return tuple(stamps)


def _stamp_tree(directory: str, stamps: list) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as exc:
        stamps.append((directory, exc.errno))
        return
    for entry in entries:
        if entry.name.endswith(".py"):
            try:
                stamps.append((entry.path, _stat_fields(entry.stat(follow_symlinks=False))))
            except OSError as exc:
                stamps.append((entry.path, exc.errno))
        elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
            _stamp_tree(entry.path, stamps)


def context(options: tuple, environ, home: str) -> tuple:
    """What decides a plan besides the files a compile observes."""
    import pwd

    from agent_sandbox.hostid import boot_id

    entry = pwd.getpwuid(os.getuid())
    return (FORMAT, _install_stamp(), os.getuid(), os.getgid(), tuple(os.getgroups()),
            tuple(entry), home, os.getcwd(), options, _digest(sorted(environ.items())),
            boot_id(), tuple(os.uname()))


def _digest(items) -> bytes:
    """The environment as a digest: its values hold credentials the sandbox
    removes (GH_TOKEN…), which a cache file must not keep on disk."""
    return _hash(repr(items).encode("utf-8", "surrogateescape"))


def _hash(data: bytes) -> bytes:
    try:
        from _blake2 import blake2b      # 35 µs to import; hashlib costs 2 ms
    except ImportError:
        from hashlib import blake2b
    return blake2b(data, digest_size=32).digest()


def _private_dir(path: str) -> bool:
    """Is `path` a directory of this user's that no one else can write?
    Made when missing; made private when another part of the launcher
    created it under a umask of 002 — at the load, before the compile
    looks at it, so that the plan it stores does not go stale at once."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mkdir(path, 0o700)
            st = os.lstat(path)
        except OSError:
            return False
    except OSError:
        return False
    if st.st_mode & 0o170000 != 0o040000 or st.st_uid != os.getuid():
        return False
    if st.st_mode & 0o022:
        # Made private for the next launches; this one misses (what others
        # could do in it meanwhile is not this launch's to judge). On a
        # descriptor opened without following a link, checked again: by
        # name, chmod would follow one put in its place since the lstat.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            again = os.fstat(fd)
            if (again.st_dev, again.st_ino, again.st_uid) == (st.st_dev, st.st_ino, st.st_uid):
                os.fchmod(fd, 0o700)
        except OSError:
            pass
        finally:
            os.close(fd)
        return False
    return True


def is_job(environ) -> bool:
    """A launch in a Slurm job or step (what the chaperon starts on a node),
    whose slot is a jobcache.JobCache. Here, not in plancache/jobs.py: every
    launch asks, and only jobs need that module."""
    return any(name in environ for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_FD"))


class Cache:
    """One launch's slot in the cache, named by a checksum of its context
    (the whole context is stored and compared: the checksum only picks
    the file)."""

    def __init__(self, options: tuple, environ, home: str):
        import zlib

        from agent_sandbox.paths import state_dir

        self.state = state_dir(home)
        self.directory = os.path.join(self.state, "cache", PLANS)
        self.context = context(options, environ, home)
        self.environ = environ      # a hit fills the template from it
        name = f"{zlib.crc32(repr(self.context).encode()):08x}.marshal"
        self.path = os.path.join(self.directory, name)
        self.missed = "no cached plan for these inputs"     # why load() missed

    def ignore(self, home: str) -> tuple:
        """Directories a compile's recorder skips: the derived caches (each
        checks its own inputs) and the per-session directories (the run
        directory holds an agent's session copies too, agents/copy.py
        copies_dir: a hit makes its own and compares, agents/launch.py)."""
        from agent_sandbox.paths import run_dir, staging_root

        return (os.path.join(self.state, "cache"), run_dir(home), staging_root(home))

    def load(self, session_id: str, chaperon_suffix: str):
        """The stored launch with this session's ids, or None (a miss, its
        reason in `self.missed` for --dry-run's plan line)."""
        # The state directory's parent (~/.local/state) is often group-
        # writable (umask 002): whoever can rename entries there can put in
        # only directories of their own (refused here) or of this user's,
        # and the file itself is checked on its descriptor.
        if not all(_private_dir(d) for d in (self.state, os.path.dirname(self.directory),
                                                self.directory)):
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (st.st_mode & 0o170000 != 0o100000 or st.st_uid != os.getuid()
                    or st.st_mode & 0o022 or st.st_size > MAX_BYTES):
                return None
            if time_ns() - st.st_mtime_ns > TOUCH_AFTER_NS:
                # Used: the eviction keeps the most recently used plans (a
                # burst of jobs does not flush the interactive ones); at most
                # once an hour, a metadata write on a home that may be NFS.
                try:
                    os.utime(fd)
                except OSError:
                    pass
            data = b""
            while len(data) < st.st_size:
                chunk = os.read(fd, st.st_size - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        try:
            stored_format, stored_context, seen, frozen = marshal.loads(data)
            if stored_format != FORMAT or stored_context != self.context:
                return None
            for (path, kind), print_ in seen:
                if fingerprint(path, kind) != print_:
                    self.missed = f"{path} changed since the cached plan was compiled"
                    return None
            old_session, old_chaperon = frozen["session"], frozen["chaperon_tag"] or ""
            renewals = [(old, _renew(old, fixed)) for old, fixed in frozen["renewed"]]
            new_chaperon = f"{session_id}-{chaperon_suffix}" if old_chaperon else ""
            # The chaperon's directory first (it holds the session id), then
            # the id; whatever still names the old directory afterwards (an
            # encoding the replacement missed) makes the entry a miss.
            old_suffix = old_chaperon.rpartition("-")[2]

            def swap_str(text: str) -> str:
                for old, new in renewals:
                    text = text.replace(old, new)
                if old_chaperon:
                    text = text.replace(old_chaperon, new_chaperon)
                    if old_suffix in text:
                        raise ValueError("a stale chaperon directory")
                return text.replace(old_session, session_id)

            swaps = [(old.encode(), new.encode()) for old, new in renewals]
            if old_chaperon:
                swaps.append((old_chaperon.encode(), new_chaperon.encode()))
            swaps.append((old_session.encode(), session_id.encode()))

            def swap_bytes(data: bytes) -> bytes:
                for old, new in swaps:
                    data = data.replace(old, new)
                if old_suffix and old_suffix.encode() in data:
                    raise ValueError("a stale chaperon directory")
                return data

            return filled(thaw(frozen["launch"], swap_str, swap_bytes, {}), self.environ)
        except (ValueError, TypeError, KeyError, EOFError, AttributeError, ImportError):
            return None

    def store(self, recorder: Recorder, launch: dict, session_id: str,
              chaperon_tag: str | None, required=(), renewed=()) -> None:
        """Best effort: a launch never fails because the cache cannot be
        written; an uncacheable compile is simply not stored. `required`:
        variables the template must take out (a job's per-task values).
        `renewed`: (token, its fixed part) for each string the compile made
        random for this launch alone, the rest hex digits: a hit makes new
        ones (_renew)."""
        if not recorder.cacheable:
            return
        launch, names = template(launch, self.environ)
        if names is None or not set(required) <= set(names):
            return
        try:
            frozen = {"launch": freeze(launch), "session": session_id,
                      "chaperon_tag": chaperon_tag,
                      "renewed": tuple((str(t), str(f)) for t, f in renewed)}
            data = marshal.dumps((FORMAT, self.context, tuple(recorder.seen.items()), frozen))
        except (Uncacheable, ValueError):
            return
        if len(data) > MAX_BYTES:
            return
        # Written, renamed and evicted relative to the plans directory's
        # descriptor, reached from the state directory one checked private
        # level at a time: a group-writable ~/.local/state (umask 002) lets
        # others swap the state directory for a link after the checks above,
        # and by name the plan would be written — and the eviction remove
        # files — in whatever directory that link leads to.
        if not all(_private_dir(d) for d in (self.state, os.path.dirname(self.directory),
                                                self.directory)):
            return
        dir_fd = _open_private(self.state, ("cache", PLANS))
        if dir_fd is None:
            return
        name = os.path.basename(self.path)
        temp = f"{name}.{os.getpid()}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except OSError:
                pass
        else:
            _evict(dir_fd, name)
        finally:
            os.close(dir_fd)


def _renew(token: str, fixed: str) -> str:
    """A new token like `token`: its fixed part, then as many random hex
    digits; ValueError (a miss) for anything else."""
    rest = token[len(fixed):]
    if not (fixed and token.startswith(fixed) and rest and len(rest) % 2 == 0
            and rest == rest.lower() and all(c in "0123456789abcdef" for c in rest)):
        raise ValueError("not a renewable token")
    return fixed + os.urandom(len(rest) // 2).hex()


def _open_private(path: str, below=()) -> int | None:
    """A descriptor of `path`/`below`..., each level opened from the one
    above without following a link and found a directory of this user's
    that no one else can write; None otherwise."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = None
    try:
        fd = os.open(path, flags)
        for part in below:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise OSError("not private")
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise OSError("not private")
        return fd
    except OSError:
        if fd is not None:
            os.close(fd)
        return None


MAX_PLANS = 64      # one per distinct context: environments, projects, options
TOUCH_AFTER_NS = 3600 * 10**9
STALE_TEMP_S = 60


def _evict(dir_fd: int, kept: str) -> None:
    """Keep the cache (the directory `dir_fd`) to MAX_PLANS files (the
    least recently used go — a hit touches its file, within the hour —: a
    plan still used is compiled again once)
    and remove temporary files a killed launcher left. Best effort, after a
    store only; `kept`: the name of the file just stored."""
    try:
        entries = [(e.stat(follow_symlinks=False).st_mtime, e.name) for e in os.scandir(dir_fd)
                   if e.is_file(follow_symlinks=False) and e.name != kept]
    except OSError:
        return
    now = time_ns() / 1e9
    plans = sorted(item for item in entries if item[1].endswith(".marshal"))
    doomed = plans[:max(0, len(plans) + 1 - MAX_PLANS)]
    doomed += [item for item in entries if item[1].endswith(".tmp")
               and now - item[0] > STALE_TEMP_S]
    for _, name in doomed:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
