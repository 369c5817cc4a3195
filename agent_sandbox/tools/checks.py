"""The host facts `doctor` checks, each a real attempt: parsing
/proc/self/mountinfo and slurm.conf (pure), running a program with a time
limit, creating and using a user namespace in a forked child, compiling and
loading the seccomp filter in a forked child. `tools/doctor.py` turns their
answers into GO / GAPS / NO-GO items.
"""
from __future__ import annotations

import os
import stat
import subprocess
from typing import NamedTuple

from agent_sandbox.paths import helper_module

GO, GAPS, NOGO = "GO", "GAPS", "NO-GO"
MUNGE_SOCKETS = ("/run/munge/munge.socket.2", "/var/run/munge/munge.socket.2")
SLURM_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")
# The configless cache slurmd (and 23.11+ sackd) keep on a node of a
# SlurmctldParameters=enable_configless cluster (read_config.c
# _establish_config_source: SLURM_CONF, the default file, this, then
# SLURM_CONF_SERVER or DNS SRV).
CONFIG_CACHE = "/run/slurm/conf/slurm.conf"
USERNS_SYSCTLS = ("/proc/sys/user/max_user_namespaces",
                  "/proc/sys/kernel/unprivileged_userns_clone",
                  "/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
# Filesystem types by what they mean for a sandbox on a login node.
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "fuse.sshfs"})
PARALLEL_FS = frozenset({"lustre", "gpfs", "beegfs", "fuse.beegfs", "ceph", "cephfs",
                         "glusterfs", "fuse.glusterfs", "panfs", "wekafs", "pvfs2",
                         "orangefs"})


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


# ---------------------------------------------------------------- items
class Item(NamedTuple):
    name: str
    status: str                 # GO, GAPS, NO-GO
    summary: str
    fix: str = ""
    blocking: bool = False      # a NO-GO that stops every launch
    data: dict | None = None


# auth/slurm (23.11+) with sackd: its sockets, and the configless cache it keeps
# (24.11 auth_slurm.so); the key files lie beside slurm.conf.
SACK_SOCKETS = ("/run/slurm/sack.socket", "/run/slurmctld/sack.socket",
                "/run/slurmdbd/sack.socket")
SACK_CACHE = "/run/slurm/conf"
AUTH_KEYS = ("slurm.key", "slurm.jwks")


def auth_types_from_conf(text: str) -> list[str]:
    """AuthType and AuthAltTypes of slurm.conf (the last setting wins, as in
    Slurm); auth/munge when AuthType is not set (Slurm's default)."""
    main, alt = "auth/munge", []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "authtype" and value.strip():
            main = value.strip()
        elif key == "authalttypes":
            alt = [v.strip() for v in value.split(",") if v.strip()]
    return [main] + [a for a in alt if a != main]


def auth_item(settings, policy, environ) -> Item:
    """The site's Slurm authentication (AuthType from the config the launcher
    can read) and every one of its paths on this host — munge's and sackd's
    sockets, slurm.key/slurm.jwks beside slurm.conf, the configless cache —
    checked against what the sandbox shows: none may lie under a shown tree
    (bwrap and firejail show no /run and mask the configuration directories;
    landlock leaves those directories out and its supervisor refuses the
    sockets). Cheap: a few stat() calls, no probe launch."""
    site = (policy.slurm_conf if policy is not None else None) or environ.get("SLURM_CONF", "")
    conf = next((c for c in [site] + list(SLURM_CONFS) if c and os.path.isfile(c)), "")
    plugins = auth_types_from_conf(_read(conf)) if conf else []
    paths = list(MUNGE_SOCKETS) + list(SACK_SOCKETS) + [SACK_CACHE]
    if conf:
        paths += munge_sockets_from_conf(_read(conf))
        paths += [os.path.join(os.path.dirname(conf), name) for name in AUTH_KEYS]
    found = [p for p in dict.fromkeys(paths) if os.path.lexists(p)]
    data = {"plugins": plugins, "conf": conf, "paths": found}
    if not conf:
        return Item("slurm auth", GO, "no slurm.conf readable here (configless or no Slurm): "
                    "no auth plugin named", data=data)
    from agent_sandbox.policy.resolve import _is_within

    visible = []
    if policy is not None:
        roots = list(policy.system_readonly) + [policy.project_dir] + list(policy.extra_writable)
        masks = list(policy.slurm_masks)
        for path in found:
            real = os.path.realpath(path)
            under = [r for r in roots if _is_within(real, r)]
            if under and not any(_is_within(real, m) for m in masks):
                visible.append((path, under[0]))
    data["visible"] = [p for p, _ in visible]
    if visible:
        path, root = visible[0]
        return Item("slurm auth", NOGO, f"{' + '.join(plugins)}: {path} lies under {root}, "
                    "which the sandbox shows: slurm.boundary does not hold",
                    f"remove {root} from READONLY_MOUNTS / EXTRA_WRITABLE_PATHS, or keep "
                    "Slurm's sockets below /run and its keys beside slurm.conf", data=data)
    shown = ", ".join(found) if found else "none present"
    return Item("slurm auth", GO, f"{' + '.join(plugins)} ({conf}); its paths unreachable "
                f"inside ({shown})", data=data)


def munge_item(settings, policy, slurm_present: bool, environ) -> Item:
    candidates = list(MUNGE_SOCKETS)
    # No policy when no backend resolved one (doctor's any_policy).
    site = (policy.slurm_conf if policy is not None else None) or environ.get("SLURM_CONF", "")
    for conf in [site] + list(SLURM_CONFS) + [CONFIG_CACHE]:
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
    from agent_sandbox.backends import AUTO_ORDER, TRAITS

    private = [n for n in AUTO_ORDER if TRAITS[n].mount_namespace]
    shared = [n for n in AUTO_ORDER
              if not TRAITS[n].mount_namespace and n in settings.ALLOWED_BACKENDS]
    # No mount view (landlock): its supervisor refuses connect() to munge's
    # and sackd's sockets wherever Landlock runs (process/supervisor.py NEVER).
    reachable = (f"; refused by the supervisor on {' and '.join(shared)}" if shared else "")
    return Item("munge", GO, f"{socket}: unreachable inside on {' and '.join(private)} "
                f"(private /run){reachable}", data={"sockets": found})


def slurm_tables(binaries, data: dict) -> str:
    """Which option tables the chaperon uses (issue 32): the version of the
    real sbatch read as the chaperon reads it, and the note when that
    version has no table of its own (the nearest older one is used)."""
    from chaperon.slurm.versions import series_for
    from chaperon.slurmversion import detect

    sbatch = next((b for b in binaries if os.path.basename(b) == "sbatch"), None)
    version, how = detect(sbatch)
    series, note = series_for(version)
    data.update(tables=series, tables_version=version, tables_found=how, tables_note=note)
    return f"option tables of Slurm {series}" + (f" ({note})" if note else "")


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` as {key: value} (`Key   = value` lines)."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            found.setdefault(key.strip(), value.strip())
    return found


def config_source(site: str | None, exists) -> tuple[str, bool]:
    """Where the Slurm commands read their configuration, as Slurm looks
    (read_config.c): (description, configless). `exists(path)` tests a file."""
    if site:
        return f"SLURM_CONF={site}", False
    if exists(SLURM_CONFS[0]):
        return SLURM_CONFS[0], False
    if exists(CONFIG_CACHE):
        return f"{CONFIG_CACHE} (the configless cache of slurmd/sackd)", True
    return "fetched from slurmctld (SLURM_CONF_SERVER or DNS SRV; no local file)", True


def slurm_site(config: dict[str, str], site: str | None, exists) -> dict:
    """The facts of the site's Slurm that doctor reports (pure): version,
    where the configuration comes from, configless or not (the login node
    has no slurm.conf, or slurmctld serves it: enable_configless), and the
    job container / namespace plugin (25.11 renamed JobContainerType to
    NamespaceType; job_container/tmpfs gives each job a private /tmp).
    `config` keeps every key for the other parts of this section (auth)."""
    source, local_configless = config_source(site, exists)
    params = [p.strip() for p in config.get("SlurmctldParameters", "").split(",")]
    namespace = config.get("NamespaceType") or config.get("JobContainerType") or ""
    if namespace in ("(null)", "none") or namespace.endswith("/none"):
        namespace = ""
    return {"version": config.get("SLURM_VERSION") or None, "config_source": source,
            "configless": local_configless, "served_configless": "enable_configless" in params,
            "namespace_type": namespace or None, "config": config}


def slurm_site_item(policy, environ, slurm_present: bool) -> Item:
    """doctor's "slurm site" section: the version, the configuration's
    source (configless or not) and the job container / namespace type, from
    `scontrol show config` as the chaperon's commands see it."""
    if not slurm_present:
        return Item("slurm site", GO, "no Slurm here", data={})
    binaries = list(policy.slurm_binaries) if policy is not None else []
    scontrol = next((b for b in binaries if os.path.basename(b) == "scontrol"), None)
    env = {"PATH": "/usr/bin:/bin"}
    site = (policy.slurm_conf if policy is not None else None) or environ.get("SLURM_CONF")
    if site:
        env["SLURM_CONF"] = site
    if environ.get("SLURM_CONF_SERVER"):
        env["SLURM_CONF_SERVER"] = environ["SLURM_CONF_SERVER"]
    code, text = _run([scontrol, "show", "config"], env=env) if scontrol else (-1, "no scontrol")
    facts = slurm_site(parse_show_config(text) if code == 0 else {}, site, os.path.isfile)
    if code != 0:
        return Item("slurm site", GAPS, f"`scontrol show config` failed — {version_line(text)}"
                    f"; configuration: {facts['config_source']}",
                    "check that slurmctld answers (and SLURM_CONF / SLURM_CONF_SERVER)",
                    data={k: v for k, v in facts.items() if k != "config"})
    configless = "configless" if facts["configless"] else "not configless"
    if facts["served_configless"] and not facts["configless"]:
        configless += " (slurmctld serves it: enable_configless)"
    namespace = facts["namespace_type"] or "none"
    if namespace.endswith("/tmpfs"):
        namespace += " (each job has a private /tmp; the job cage uses the job's own)"
    return Item("slurm site", GO, f"Slurm {facts['version'] or 'unknown version'}; "
                f"configuration: {facts['config_source']} ({configless}); "
                f"job container: {namespace}",
                data={k: v for k, v in facts.items() if k != "config"})


def slurm_item(settings, policy, environ) -> tuple[Item, bool]:
    binaries = list(policy.slurm_binaries) if policy is not None else []
    if not binaries:
        return Item("slurm", GO, "no Slurm commands on this host: the chaperon is not started",
                    data={"binaries": []}), False
    sinfo = next((b for b in binaries if os.path.basename(b) == "sinfo"), None)
    env = {"PATH": "/usr/bin:/bin"}
    site = policy.slurm_conf or environ.get("SLURM_CONF")
    if site:   # the site's Slurm, as the chaperon uses it (resolve.slurm_conf_path)
        env["SLURM_CONF"] = site
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
        inside += "; " + slurm_tables(binaries, data)
    return Item("slurm", GO, f"{version_line(text)} ({len(binaries)} commands in {where}); "
                f"{inside}", data=data), True


def chaperon_pipes_item(home: str) -> Item:
    """The chaperon's session directory holds named pipes: make one there, as
    a launch would (a home filesystem without FIFO support refuses launches)."""
    from agent_sandbox.services.chaperon import session_parent

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
