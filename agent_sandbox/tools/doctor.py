"""`agent-sandbox doctor [--json]`: can this host give a real sandbox, and what to fix.

Strategy: every check is a real attempt, never a guess from a file name —
an unprivileged user namespace is created and used in a forked child, each
backend runs the same trivial sandbox the launcher's probe runs (a fresh
probe, which also refreshes the launcher's cached verdict), the seccomp
filter is compiled and loaded into a forked child, `sinfo --version` runs.
The backend `auto` would pick comes from the launcher's own choose_backend,
and the guarantees each backend gives come from the backend's own plan for
the policy a launch from here would get, so what doctor says cannot drift
from what `agent-sandbox run` does.

Each check yields one Item: GO (fine), GAPS (works, with something missing or
worth fixing) or NO-GO (this part does not work), a one-line summary and the
fix. An unusable backend is GAPS while another one is usable, NO-GO when none
is. `decide` turns the items and backend reports into the verdict; the exit
code is 0 exactly when some allowed, working backend gives every REQUIREd
guarantee (REQUIRE as in effect: the admin's entries always, plus the
user's), and the configuration loads.

Gathering (`gather`) touches the system; deciding and rendering are pure.
"""
from __future__ import annotations

import os
import stat
import subprocess
from typing import NamedTuple

from agent_sandbox import __version__
from agent_sandbox.paths import helper_module

GO, GAPS, NOGO = "GO", "GAPS", "NO-GO"
ORDER = ("bwrap", "firejail", "landlock")
MUNGE_SOCKETS = ("/run/munge/munge.socket.2", "/var/run/munge/munge.socket.2")
SLURM_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")
USERNS_SYSCTLS = ("/proc/sys/user/max_user_namespaces",
                  "/proc/sys/kernel/unprivileged_userns_clone",
                  "/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
# Filesystem types by what they mean for a sandbox on a login node.
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "fuse.sshfs"})
PARALLEL_FS = frozenset({"lustre", "gpfs", "beegfs", "fuse.beegfs", "ceph", "cephfs",
                         "glusterfs", "fuse.glusterfs", "panfs", "wekafs", "pvfs2",
                         "orangefs"})


class Item(NamedTuple):
    name: str
    status: str                 # GO, GAPS, NO-GO
    summary: str
    fix: str = ""
    blocking: bool = False      # a NO-GO that stops every launch
    data: dict | None = None


class Backend(NamedTuple):
    name: str
    allowed: bool
    path: str | None            # None: not installed
    version: str
    probe_ok: bool
    probe_detail: str
    provides: tuple = ()
    partial: tuple = ()         # (guarantee, what is missing)
    cannot: tuple = ()          # (guarantee, why not)
    refusal: str = ""           # this backend would refuse the policy (and why)

    @property
    def usable(self) -> bool:
        return self.allowed and self.path is not None and self.probe_ok and not self.refusal

    def missing(self, require) -> tuple[str, ...]:
        return tuple(g for g in require if g not in self.provides)

    def state(self) -> str:
        """Why it can(not) be used, in two words."""
        if not self.allowed:
            return "not allowed"
        if self.path is None:
            return "not found"
        if not self.probe_ok:
            return "probe failed"
        if self.refusal:
            return "refuses policy"
        return "yes"


class Report(NamedTuple):
    host: str
    user: str
    as_root: bool
    items: tuple[Item, ...]
    backends: tuple[Backend, ...]
    require: tuple[str, ...]
    requested: str              # SANDBOX_BACKEND in effect
    pick: str | None            # what a launch would use (None: none)
    pick_reason: str            # the launcher's own words
    verdict: str
    message: str
    fix: str
    exit_code: int


# ---------------------------------------------------------------- deciding (pure)
def unusable_status(any_usable: bool) -> str:
    return GAPS if any_usable else NOGO


def decide(items, backends, require, pick: str | None) -> tuple[str, str, str, int]:
    """(verdict, message, fix, exit code)."""
    blocking = [i for i in items if i.blocking and i.status == NOGO]
    if blocking:
        names = ", ".join(i.name for i in blocking)
        return NOGO, f"no sandbox can start: {names} (see above)", blocking[0].fix, 1
    usable = [b for b in backends if b.usable]
    if not usable:
        hints = "; ".join(f"{b.name}: {b.state()}" for b in backends)
        return (NOGO, f"no usable sandbox backend ({hints})",
                "fix one of the backend lines above", 1)
    complete = [b for b in usable if not b.missing(require)]
    if not complete:
        lacks = "; ".join(f"{b.name} lacks {' '.join(b.missing(require))}" for b in usable)
        givers = [b for b in backends if not b.missing(require)]
        fix = ("; ".join(f"{b.name} would give them but is {b.state()} here" for b in givers)
               + " — fix that, or change REQUIRE") if givers else (
            "no backend gives them with this configuration: change REQUIRE or the settings "
            "that rule them out")
        return (NOGO, f"no usable backend gives every guarantee in REQUIRE=({' '.join(require)})"
                f" — {lacks}", fix, 1)
    chosen = next((b for b in backends if b.name == pick), None)
    best = complete[0].name
    if chosen is None or not chosen.usable:
        return (GAPS, f"a launch with SANDBOX_BACKEND as configured fails, but {best} works",
                f"set SANDBOX_BACKEND={best} (or run with --backend {best})", 0)
    if chosen.missing(require):
        return (GAPS, f"{chosen.name} (the pick) lacks {' '.join(chosen.missing(require))} "
                f"from REQUIRE, so launches are refused; {best} gives everything",
                f"set SANDBOX_BACKEND={best} (or run with --backend {best})", 0)
    lacking = [g for g, _ in chosen.partial + chosen.cannot]
    runs = f"sandboxes run on {chosen.name}" + (
        f" (not, or only partly, enforced there: {' '.join(lacking)})" if lacking else "")
    flawed = [i for i in items if i.status != GO]
    if flawed:
        return (GAPS, f"{runs}; fix the lines marked "
                f"{'/'.join(sorted({i.status for i in flawed}))} for the rest", "", 0)
    return GO, f"this host gives a real sandbox: {runs}", "", 0


# ---------------------------------------------------------------- rendering (pure)
def _wrap_fix(text: str) -> str:
    return f"{'':9}fix: {text}"


def render(report: Report) -> str:
    out = [f"agent-sandbox doctor — {report.user} on {report.host} "
           f"(agent-sandbox {__version__}, Linux {os.uname().release})"]
    if report.as_root:
        out.append("  note: running as root; run doctor as an ordinary user to see what "
                   "users get")
    width = max(len(i.name) for i in report.items) if report.items else 10
    for item in report.items:
        out.append(f"  {item.status:<6} {item.name:<{width}}  {item.summary}")
        if item.fix and item.status != GO:
            out.append(_wrap_fix(item.fix))
    if report.pick:
        out.append(f"backend: a launch uses {report.pick} — {report.pick_reason}")
    else:
        out.append(f"backend: none — {report.pick_reason}")
    names = [b.name for b in report.backends]
    rows = [("usable here", [b.state() for b in report.backends])]
    from agent_sandbox.backends.base import GUARANTEE_TEXT

    for guarantee in GUARANTEE_TEXT:
        cells = []
        for b in report.backends:
            if guarantee in b.provides:
                cells.append("yes")
            elif guarantee in dict(b.partial):
                cells.append("partial")
            elif guarantee in dict(b.cannot):
                cells.append("no")
            else:
                cells.append("?")
        mark = " *" if guarantee in report.require else ""
        rows.append((guarantee + mark, cells))
    first = max(len(r[0]) for r in rows) + 2
    out.append(f"  {'guarantees here':<{first}}" + "".join(f"{n:<16}" for n in names).rstrip())
    for label, cells in rows:
        out.append(f"  {label:<{first}}" + "".join(f"{c:<16}" for c in cells).rstrip())
    require = " ".join(report.require)
    out.append(f"  (* REQUIRE=({require}))" if require else "  (REQUIRE is empty)")
    out.append(f"verdict: {report.verdict} — {report.message}")
    if report.fix:
        out.append(_wrap_fix(report.fix))
    return "\n".join(out) + "\n"


def as_json(report: Report) -> str:
    import json

    def backend(b: Backend) -> dict:
        return {"name": b.name, "allowed": b.allowed, "path": b.path, "version": b.version,
                "probe": {"ok": b.probe_ok, "detail": b.probe_detail}, "usable": b.usable,
                "state": b.state(), "refusal": b.refusal or None, "provides": list(b.provides),
                "partial": dict(b.partial), "cannot": dict(b.cannot),
                "missing_required": list(b.missing(report.require))}

    return json.dumps({
        "host": report.host, "user": report.user, "as_root": report.as_root,
        "version": __version__,
        "items": [{"name": i.name, "status": i.status, "summary": i.summary,
                   "fix": i.fix or None, "blocking": i.blocking, "data": i.data or {}}
                  for i in report.items],
        "backends": [backend(b) for b in report.backends],
        "require": list(report.require),
        "backend_setting": report.requested,
        "pick": {"backend": report.pick, "reason": report.pick_reason},
        "verdict": report.verdict, "message": report.message, "fix": report.fix or None,
        "exit_code": report.exit_code,
    }, indent=2) + "\n"


# ---------------------------------------------------------------- host facts (pure parts)
def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        octal = field[i + 1:i + 4]
        if field[i] == "\\" and len(octal) == 3 and set(octal) <= set("01234567"):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[str, str, str, str]]:
    """(mount point, fs type, source, per-mount options) in mount order."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 6 or len(rest) < 2:
            continue
        mounts.append((_unescape(fields[4]), rest[0], _unescape(rest[1]), fields[5]))
    return mounts


def mount_of(path: str, mounts) -> tuple[str, str, str, str] | None:
    """The mount a path lives on: the longest mount point containing it (the
    later of equal ones: it is mounted on top)."""
    best = None
    for mount in mounts:
        point = mount[0]
        if path == point or path.startswith(point.rstrip("/") + "/") or point == "/":
            if best is None or len(point) >= len(best[0]):
                best = mount
    return best


def fs_kind(fstype: str) -> str:
    if fstype in NETWORK_FS or fstype.startswith("nfs"):
        return "network"
    if fstype in PARALLEL_FS:
        return "parallel"
    return "local"


def munge_sockets_from_conf(text: str) -> list[str]:
    """Socket paths named by slurm.conf's AuthInfo=…socket=PATH… (any case)."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in ("authinfo", "authaltparameters"):
            for part in value.split(","):
                name, eq, path = part.strip().partition("=")
                if eq and name.strip().lower() == "socket" and path.strip():
                    found.append(path.strip())
    return found


def version_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


# ---------------------------------------------------------------- real checks
def _read(path: str, limit: int = 1 << 20) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _run(argv, timeout: float = 15.0, env=None) -> tuple[int, str]:
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=timeout, env=env or {"PATH": "/usr/bin:/bin"}, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    text = (result.stdout + result.stderr).decode("utf-8", "replace")
    return result.returncode, text


def _in_child(work) -> tuple[bool, str]:
    """Run `work()` in a forked child (it may change the process irreversibly:
    namespaces, seccomp). It returns a message; an exception fails it."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:    # pragma: no cover - runs in the child
        os.close(read_fd)
        code = 0
        try:
            message = work()
        except BaseException as exc:     # noqa: BLE001 - everything is reported
            message, code = str(exc) or type(exc).__name__, 1
        try:
            os.write(write_fd, message.encode("utf-8", "replace")[:4000])
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    message = b"".join(chunks).decode("utf-8", "replace")
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return False, message or f"killed by signal {-code}"
    return code == 0, message


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def userns_check() -> tuple[bool, str]:
    """Create a user and mount namespace as this user, map ourselves, and
    mount a tmpfs in it: what bwrap needs from the kernel."""
    import ctypes

    libc = _libc()
    uid, gid = os.getuid(), os.getgid()

    def work() -> str:
        def fail(step):
            err = ctypes.get_errno()
            raise OSError(err, f"{step}: {os.strerror(err)}")

        if libc.unshare(0x10000000 | 0x00020000) != 0:       # CLONE_NEWUSER | CLONE_NEWNS
            fail("unshare(CLONE_NEWUSER|CLONE_NEWNS)")
        for path, text in (("/proc/self/setgroups", "deny"),
                           ("/proc/self/uid_map", f"0 {uid} 1"),
                           ("/proc/self/gid_map", f"0 {gid} 1")):
            try:
                with open(path, "w") as handle:
                    handle.write(text)
            except OSError as exc:
                raise OSError(exc.errno, f"writing {path}: {exc.strerror}") from None
        if libc.mount(None, b"/", None, 16384 | 262144, None) != 0:   # MS_REC | MS_PRIVATE
            fail("making / private in the new mount namespace")
        target = b"/tmp" if os.path.isdir("/tmp") else b"/"
        if libc.mount(b"tmpfs", target, b"tmpfs", 0, None) != 0:
            fail("mounting a tmpfs inside it")
        return "ok"

    return _in_child(work)


def _sysctls() -> str:
    values = []
    for path in USERNS_SYSCTLS:
        value = _read(path).strip()
        if value:
            values.append(f"{path[len('/proc/sys/'):].replace('/', '.')}={value}")
    return ", ".join(values)


def seccomp_check(denied) -> tuple[str, str, str]:
    """(status, summary, fix): pyseccomp and libseccomp load, the filter for
    `denied` compiles, and a forked child can load it (a denied syscall then
    answers EPERM)."""
    try:
        import pyseccomp
    except Exception as exc:   # noqa: BLE001 - ImportError, OSError from ctypes
        return (NOGO, f"pyseccomp/libseccomp cannot be loaded — {exc}",
                "install libseccomp2 (apt-get install libseccomp2) and reinstall agent-sandbox")
    from agent_sandbox.policy.seccomp import compile_filter

    try:
        program = compile_filter(denied)
    except Exception as exc:   # noqa: BLE001
        return (NOGO, f"the seccomp filter does not compile — {exc}",
                "check SECCOMP_EXTRA_DENY; reinstall libseccomp2")
    version = ""
    try:
        import ctypes

        class Version(ctypes.Structure):
            _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint),
                        ("micro", ctypes.c_uint)]

        function = ctypes.CDLL(pyseccomp._libseccomp_path).seccomp_version
        function.restype = ctypes.POINTER(Version)
        v = function().contents
        version = f"libseccomp {v.major}.{v.minor}.{v.micro}: "
    except Exception:   # noqa: BLE001 - the version is decoration
        pass
    import ctypes

    libc = _libc()
    check_io_uring = os.uname().machine in ("x86_64", "aarch64", "riscv64", "ppc64le", "s390x")

    def work() -> str:
        landlock = helper_module("landlock")
        load_seccomp = helper_module("sandbox_exec").load_seccomp

        before = 0
        if check_io_uring and libc.syscall(425, 0, None) < 0:   # io_uring_setup
            before = ctypes.get_errno()
        landlock.no_new_privs()
        load_seccomp(program)
        if check_io_uring:
            result = libc.syscall(425, 0, None)
            after = ctypes.get_errno() if result < 0 else 0
            if after == 1 and before != 1:
                return "eperm"
            if after != 1:
                raise OSError(after, "io_uring_setup was not denied by the loaded filter")
        return "loaded"

    ok, message = _in_child(work)
    instructions = len(program) // 8
    if not ok:
        return (NOGO, f"{version}the filter compiles ({instructions} instructions) but the "
                f"kernel does not load it — {message}",
                "the kernel needs CONFIG_SECCOMP_FILTER; ask your admin")
    tail = "; a denied syscall answers EPERM" if message == "eperm" else ""
    return (GO, f"{version}{len(denied)}-syscall filter ({instructions} BPF instructions, "
            f"native and compat ABIs) compiles and loads{tail}", "")


# ---------------------------------------------------------------- gathering
def _settings(ctx):
    """(settings, error): the effective Settings, or the shipped defaults and
    the error when the configuration does not load (doctor goes on with the
    defaults for the host checks)."""
    from agent_sandbox.config.load import Settings, defaults_path, load_settings, merge
    from agent_sandbox.errors import SandboxError

    try:
        return load_settings(home=ctx.home, user=ctx.user, environ=ctx.environ,
                             project_dir=ctx.project_dir or ctx.cwd, cache=False), None
    except SandboxError as exc:
        from agent_sandbox.config.model import validate

        path = defaults_path()
        merged = merge([("default", path, _read(path))], home=ctx.home, user=ctx.user,
                       overrides=[])
        values = validate(merged.raw, merged.origins)
        return Settings(values, merged.origins, (path,)), exc


def config_items(settings, error) -> list[Item]:
    from agent_sandbox.config.load import ADMIN_CONFIG

    if error is not None:
        return [Item("config", NOGO, str(error), "fix the file named above; "
                     "`agent-sandbox config show` checks it again", blocking=True,
                     data={"reason": getattr(error, "reason", "bad_config")}),
                Item("admin locks", NOGO, "unknown — the configuration did not load",
                     data={"locks": {}})]
    files = ", ".join(settings.files)
    items = []
    if settings.warnings:
        items.append(Item("config", GAPS, f"loads ({files}), with {len(settings.warnings)} "
                          f"warning(s): {settings.warnings[0]}",
                          "see `agent-sandbox config show --origin` and fix the files named",
                          data={"files": list(settings.files),
                                "warnings": list(settings.warnings)}))
    else:
        items.append(Item("config", GO, f"valid ({files})",
                          data={"files": list(settings.files), "warnings": []}))
    if settings.locks:
        from agent_sandbox.tools.explain import _shell

        locked = {k: settings.locks[k] for k in sorted(settings.locks)}
        where = sorted({v.rsplit(":", 1)[0] for v in locked.values()})
        listing = ", ".join(f"{k}={_shell(settings.values[k])}" for k in locked)
        items.append(Item("admin locks", GO, f"{len(locked)} key(s) held by {' '.join(where)}:"
                          f" {listing}",
                          data={"locks": {k: {"value": settings.values[k], "at": v}
                                          for k, v in locked.items()}}))
    else:
        present = os.path.exists(ADMIN_CONFIG)
        items.append(Item("admin locks", GO,
                          f"{ADMIN_CONFIG} locks no key" if present else
                          f"no admin config ({ADMIN_CONFIG}): nothing is locked",
                          data={"locks": {}}))
    return items


def _policies(settings, ctx):
    """(policy per backend name, note): the policy a launch from the project
    would get; when the project is refused, the same settings applied to a
    throw-away directory (the guarantees do not depend on which project)."""
    import tempfile

    from agent_sandbox.errors import SandboxError
    from agent_sandbox.policy.resolve import resolve_policy

    try:
        return {n: resolve_policy(settings, ctx, backend=n) for n in ORDER}, None
    except SandboxError as exc:
        refusal = exc
    stand_in = tempfile.mkdtemp(prefix="agent-sandbox-doctor-")
    try:
        adjusted = settings.replace(ALLOWED_PROJECT_PARENTS=(os.path.dirname(
            os.path.realpath(stand_in)),))
        stand_ctx = ctx._replace(project_dir=stand_in, cwd=stand_in)
        return {n: resolve_policy(adjusted, stand_ctx, backend=n) for n in ORDER}, refusal
    except SandboxError:
        return {}, refusal
    finally:
        os.rmdir(stand_in)


def _guarantees(name: str, path: str | None, policy, home: str, abi: int):
    """(provides, partial, cannot, refusal) from the backend's own plan."""
    from agent_sandbox.backends import Selection
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.errors import SandboxError
    from agent_sandbox.launch.run import backend_plan, identity_payloads, marker_payload, seccomp_payload

    payloads = {"marker": marker_payload(policy)}
    if policy.seccomp:
        try:
            payloads["seccomp"] = seccomp_payload(policy, home)[0]
        except Exception:   # noqa: BLE001 - reported by the seccomp line
            payloads["seccomp"] = Payload(data=b"\0" * 8)
    if name == "bwrap" and policy.filter_passwd:
        payloads.update(identity_payloads(policy))
    from agent_sandbox.backends import BACKENDS

    if path is None:
        # Not installed: what it would give once installed (the plan needs the program).
        return (*BACKENDS[name].guarantees(policy, landlock_abi=abi), "")
    try:
        plan = backend_plan(Selection(name, path, ""), policy, ["true"], payloads, abi)
    except SandboxError as exc:
        return (*BACKENDS[name].guarantees(policy, landlock_abi=abi), str(exc))
    return plan.provides, plan.partial, plan.cannot, ""


def backend_items(backends, abi: int) -> list[Item]:
    from agent_sandbox.backends import INSTALL_HINT, PROBE_HINT

    any_usable = any(b.usable for b in backends)
    items = []
    for b in backends:
        label = {"bwrap": "bubblewrap"}.get(b.name, b.name)
        extra = ""
        if b.name == "landlock":
            extra = f"ABI {abi}" if abi else "no Landlock in this kernel"
            if abi and abi < 6:
                FEATURES = helper_module("landlock").FEATURES

                lost = sorted({text for need, _, _, text in FEATURES if abi < need})
                extra += f" (missing: {'; '.join(lost)})"
            extra += ", "
        if b.path is None:
            items.append(Item(b.name, unusable_status(any_usable),
                              f"{extra}{label} not found on PATH", INSTALL_HINT[b.name]))
            continue
        what = f"{extra}{b.version or label} ({b.path})"
        if not b.probe_ok:
            items.append(Item(b.name, unusable_status(any_usable),
                              f"{what}: probe failed — {b.probe_detail}", PROBE_HINT[b.name]))
            continue
        if b.refusal:
            items.append(Item(b.name, GAPS, f"{what}: probe passed, but it would refuse this "
                              f"configuration — {b.refusal}", "see the message"))
            continue
        note = "" if b.allowed else " (not in ALLOWED_BACKENDS: never used)"
        status = GO
        fix = ""
        if b.name == "landlock" and abi < 6:
            status, fix = GAPS, ("a kernel with Landlock ABI 6 (Linux 6.12 or newer) scopes "
                                 "abstract unix sockets and signals on every backend")
        items.append(Item(b.name, status, f"{what}: probe passed{note}", fix))
    return items


def munge_item(settings, policy, slurm_present: bool, environ) -> Item:
    candidates = list(MUNGE_SOCKETS)
    for conf in [environ.get("SLURM_CONF", "")] + list(SLURM_CONFS):
        if conf and os.path.isfile(conf):
            candidates = munge_sockets_from_conf(_read(conf)) + candidates
            break
    found = []
    for path in dict.fromkeys(candidates):
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    if not found:
        if slurm_present:
            return Item("munge", GAPS, f"no munge socket ({' '.join(dict.fromkeys(candidates))}):"
                        " Slurm commands cannot authenticate", "start munged (systemctl start "
                        "munge) or ask your admin", data={"sockets": []})
        return Item("munge", GO, "no munge socket (no Slurm here)", data={"sockets": []})
    socket = found[0]
    real = os.path.realpath(socket)
    from agent_sandbox.policy.resolve import _is_within

    visible = []
    if policy is not None:
        roots = list(policy.system_readonly) + [policy.project_dir] + list(policy.extra_writable)
        visible = [r for r in roots if _is_within(real, r)]
    if visible:
        return Item("munge", NOGO, f"{socket} lies under {visible[0]}, which the sandbox "
                    "shows: slurm.boundary does not hold", f"remove {visible[0]} from "
                    "READONLY_MOUNTS / EXTRA_WRITABLE_PATHS, or move the socket below /run",
                    data={"sockets": found, "visible_under": visible[0]})
    landlock = "; reachable on landlock" if "landlock" in settings.ALLOWED_BACKENDS else ""
    return Item("munge", GO, f"{socket}: unreachable inside on bwrap and firejail (private "
                f"/run){landlock}", data={"sockets": found})


def slurm_item(settings, policy, environ) -> tuple[Item, bool]:
    binaries = list(policy.slurm_binaries) if policy is not None else []
    if not binaries:
        return Item("slurm", GO, "no Slurm commands on this host: the chaperon is not started",
                    data={"binaries": []}), False
    sinfo = next((b for b in binaries if os.path.basename(b) == "sinfo"), None)
    env = {"PATH": "/usr/bin:/bin"}
    if environ.get("SLURM_CONF"):
        env["SLURM_CONF"] = environ["SLURM_CONF"]
    code, text = _run([sinfo, "--version"], env=env) if sinfo else (-1, "sinfo not found")
    data = {"binaries": binaries, "version": version_line(text) if code == 0 else None}
    where = " ".join(sorted({os.path.dirname(b) for b in binaries}))
    if code != 0:
        return Item("slurm", GAPS, f"`sinfo --version` failed — {version_line(text)}",
                    "check the Slurm installation (SLURM_CONF, munge)", data=data), True
    has_sbatch = any(os.path.basename(b) == "sbatch" for b in binaries)
    if not settings.CHAPERON:
        inside = "CHAPERON=false: no Slurm inside the sandbox"
    elif not has_sbatch:
        inside = "no sbatch: the chaperon is not started"
    else:
        inside = f"proxied inside by the chaperon (SLURM_SCOPE={settings.SLURM_SCOPE})"
    return Item("slurm", GO, f"{version_line(text)} ({len(binaries)} commands in {where}); "
                f"{inside}", data=data), True


def chaperon_pipes_item(home: str) -> Item:
    """The chaperon's session directory holds named pipes: make one there, as
    a launch would (a home filesystem without FIFO support refuses launches)."""
    from agent_sandbox.launch.chaperon import session_parent

    probe = None
    try:
        parent = session_parent(home)
        probe = os.path.join(parent, f".doctor-{os.getpid()}")
        os.mkfifo(probe, 0o600)
    except OSError as exc:
        return Item("chaperon pipes", NOGO, f"cannot make a named pipe in "
                    f"{os.path.join(home, '.local/state/agent-sandbox-run')} — "
                    f"{exc.strerror or exc}", "free space or fix the permissions there, or set "
                    "CHAPERON=false to run without Slurm", blocking=True,
                    data={"ok": False, "error": str(exc)})
    finally:
        if probe:
            try:
                os.unlink(probe)
            except OSError:
                pass
    return Item("chaperon pipes", GO, f"named pipes work in {parent}", data={"ok": True})


def fs_item(name: str, path: str, mounts, *, project: bool, slurm_present: bool,
            refusal=None) -> Item:
    mount = mount_of(os.path.realpath(path), mounts)
    if mount is None:
        return Item(name, GAPS, f"{path}: its filesystem is unknown (/proc/self/mountinfo)",
                    data={"path": path})
    point, fstype, source, options = mount
    kind = fs_kind(fstype)
    data = {"path": path, "mount_point": point, "fstype": fstype, "kind": kind,
            "options": options}
    text = f"{path}: {fstype} on {point}"
    if kind == "network":
        text += " (network: shared by login nodes; ledger and session records are per host)"
    elif kind == "parallel":
        text += " (parallel filesystem: compute nodes see it)"
    elif project and slurm_present:
        text += " (local: batch jobs see the project only where compute nodes mount it)"
    else:
        text += " (local)"
    if "ro" in options.split(","):
        what = ("the project cannot be written" if project else
                "caches, audit log and job ledger cannot be written")
        return Item(name, GAPS, f"{text}; mounted read-only: {what}",
                    "use a writable directory" if project else "ask your admin", data=data)
    if refusal is not None:
        # Not a host problem: doctor is often run from $HOME. Said, not rated.
        why = str(refusal).partition(" — ")[2].partition(". ")[0] or str(refusal)
        return Item(name, GO, f"{text}; not a project directory ({why})",
                    data=dict(data, refused=str(refusal)))
    return Item(name, GO, text, data=data)


def gather(project_dir: str | None, environ) -> Report:
    from agent_sandbox.backends import module
    from agent_sandbox.launch.run import (_forget_probe, choose_backend, landlock_abi, launch_context,
                                          probe_backend)

    environ = dict(environ)
    ctx = launch_context(project_dir, environ)
    settings, error = _settings(ctx)
    items = config_items(settings, error)
    abi = landlock_abi()
    policies, refusal = _policies(settings, ctx)

    # Backends: found on PATH as a launch finds them, then a fresh real probe.
    path_env = environ.get("PATH", "/usr/bin:/bin")
    reports = []
    for name in ORDER:
        path = module(name).find(path_env)
        version, ok, detail = "", False, "not run"
        if path is not None:
            _forget_probe(name)
            ok, detail = probe_backend(name, path, ctx.home)
            if name != "landlock":
                code, text = _run([path, "--version"])
                version = version_line(text) if code == 0 else ""
            else:
                version = "landlock helper"
        policy = policies.get(name)
        provides = partial = cannot = ()
        refusal_text = ""
        if policy is not None:
            provides, partial, cannot, refusal_text = _guarantees(name, path, policy,
                                                                  ctx.home, abi)
        reports.append(Backend(name, name in settings.ALLOWED_BACKENDS, path, version, ok,
                               detail, provides, partial, cannot, refusal_text))

    ok, detail = userns_check()
    any_usable = any(b.usable for b in reports)
    if ok:
        items.append(Item("user namespaces", GO, "an unprivileged user + mount namespace can "
                          "be made and used", data={"ok": True, "sysctls": _sysctls()}))
    else:
        items.append(Item("user namespaces", unusable_status(any_usable),
                          f"cannot be made — {detail} ({_sysctls() or 'no userns sysctls'})",
                          "ask your admin to allow them: sysctl user.max_user_namespaces > 0, "
                          "kernel.unprivileged_userns_clone=1 (Debian), "
                          "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor "
                          "profile for bwrap (Ubuntu); firejail (setuid) and landlock work "
                          "without them", data={"ok": False, "error": detail,
                                                "sysctls": _sysctls()}))
    items += backend_items(reports, abi)

    any_policy = next(iter(policies.values()), None)
    from agent_sandbox.policy.seccomp import deny_list

    try:
        denied = deny_list(settings.SECCOMP_EXTRA_DENY)
        status, summary, fix = seccomp_check(denied)
    except ValueError as exc:
        status, summary, fix = NOGO, f"SECCOMP_EXTRA_DENY — {exc}", "fix the name"
    if not settings.SECCOMP:
        items.append(Item("seccomp", GAPS, f"SECCOMP=false in the configuration ({summary})",
                          "set SECCOMP=true"))
    else:
        items.append(Item("seccomp", status, summary, fix, blocking=status == NOGO))

    slurm, slurm_present = slurm_item(settings, any_policy, environ)
    items.append(munge_item(settings, any_policy, slurm_present, environ))
    items.append(slurm)

    if slurm_present and settings.CHAPERON:
        items.append(chaperon_pipes_item(ctx.home))
    mounts = parse_mountinfo(_read("/proc/self/mountinfo", 1 << 24))
    items.append(fs_item("home fs", ctx.home, mounts, project=False,
                         slurm_present=slurm_present))
    project = os.path.realpath(ctx.project_dir or ctx.cwd)
    items.append(fs_item("project fs", project, mounts, project=True,
                         slurm_present=slurm_present, refusal=refusal))

    requested = settings.SANDBOX_BACKEND
    from agent_sandbox.errors import SandboxError

    try:
        selection = choose_backend(settings, None, home=ctx.home, environ=environ)
        pick, reason = selection.name, selection.reason
    except SandboxError as exc:
        pick, reason = None, str(exc)
    require = tuple(settings.REQUIRE)
    verdict, message, fix, code = decide(items, reports, require, pick)
    import pwd

    return Report(host=os.uname().nodename, user=pwd.getpwuid(os.getuid()).pw_name,
                  as_root=os.geteuid() == 0, items=tuple(items), backends=tuple(reports),
                  require=require, requested=requested, pick=pick, pick_reason=reason,
                  verdict=verdict, message=message, fix=fix, exit_code=code)
