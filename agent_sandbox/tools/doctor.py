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
user's, plus slurm.boundary where auto implies it on a Slurm host:
launch/run.py implied_require), and the configuration loads.

Gathering (`gather`) touches the system; deciding and rendering are pure.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from agent_sandbox.names import BACKENDS
from agent_sandbox import __version__
from agent_sandbox.paths import helper_module
from agent_sandbox.tools.checks import (GAPS, GO, NOGO, Item, _read, _run, _sysctls,
                                        auth_item, chaperon_pipes_item, fs_item, munge_item,
                                        seccomp_check, slurm_item, slurm_site_item,
                                        userns_check,
                                        version_line)
from agent_sandbox.mountinfo import parse_mountinfo

ORDER = BACKENDS
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
    probe_fix: str = ""         # the fix for the probe's observed failure (backends/hints.py)

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
def _settings(ctx):
    """(settings, error): the effective Settings, or the shipped defaults and
    the error when the configuration does not load (doctor goes on with the
    defaults for the host checks)."""
    from agent_sandbox.paths import defaults_path
    from agent_sandbox.config.load import Settings, load_settings, merge
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
        return Settings.of(values, merged.origins, (path,)), exc


def config_items(settings, error) -> list[Item]:
    from agent_sandbox.paths import ADMIN_CONFIG

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
    from agent_sandbox.launch.payloads import base_payloads, seccomp_payload
    from agent_sandbox.launch.run import backend_plan

    def seccomp(policy, home):
        try:
            return seccomp_payload(policy, home)
        except Exception:   # noqa: BLE001 - reported by the seccomp line
            return Payload(data=b"\0" * 8), ()

    payloads, _ = base_payloads(policy, name, seccomp=seccomp)
    from agent_sandbox.backends import BACKENDS

    if path is None:
        # Not installed: what it would give once installed (the plan needs the program).
        return (*BACKENDS[name].guarantees(policy, landlock_abi=abi), "")
    try:
        from agent_sandbox.process.select import program_features

        selection = Selection(name, path, "", features=program_features(name, path, home))
        plan = backend_plan(selection, policy, ["true"], payloads, abi)
    except SandboxError as exc:
        return (*BACKENDS[name].guarantees(policy, landlock_abi=abi), str(exc))
    return plan.provides, plan.partial, plan.cannot, ""


def backend_items(backends, abi: int) -> list[Item]:
    from agent_sandbox.traits import traits

    any_usable = any(b.usable for b in backends)
    items = []
    for b in backends:
        known = traits(b.name)
        label = known.display_name
        extra = ""
        if known.landlock_enforced:     # its reach is the kernel's Landlock ABI
            extra = f"ABI {abi}" if abi else "no Landlock in this kernel"
            if abi and abi < 6:
                FEATURES = helper_module("landlock").FEATURES

                lost = sorted({text for need, _, _, text in FEATURES if abi < need})
                extra += f" (missing: {'; '.join(lost)})"
            extra += ", "
        if b.path is None:
            # why: not on PATH, or only where the user can write it, or the
            # admin's BWRAP_PATH / FIREJAIL_PATH unusable (Backend.locate)
            why = b.probe_detail if b.probe_detail != "not run" else "not found on PATH"
            items.append(Item(b.name, unusable_status(any_usable),
                              f"{extra}{label} {why}", known.install_hint))
            continue
        what = f"{extra}{b.version or label} ({b.path})"
        if not b.probe_ok:
            items.append(Item(b.name, unusable_status(any_usable),
                              f"{what}: probe failed — {b.probe_detail}",
                              b.probe_fix or known.probe_hint))
            continue
        if b.refusal:
            items.append(Item(b.name, GAPS, f"{what}: probe passed, but it would refuse this "
                              f"configuration — {b.refusal}", "see the message"))
            continue
        note = "" if b.allowed else " (not in ALLOWED_BACKENDS: never used)"
        status = GO
        fix = ""
        if known.landlock_enforced and abi < 6:
            status, fix = GAPS, ("a kernel with Landlock ABI 6 (Linux 6.12 or newer) scopes "
                                 "abstract unix sockets and signals on every backend")
        items.append(Item(b.name, status, f"{what}: probe passed{note}", fix))
    return items


def install_links_item(links: tuple, install: tuple) -> Item:
    """The install the launcher runs from, checked for files with more than
    one link (services/linkcheck.py): such a file is read-only inside by its
    path only — a write through its other name changes the launcher."""
    count, sample = links or (0, ())
    where = " ".join(install) or "(unknown)"
    if not count:
        return Item("install links", GO, f"no file of the install ({where}) has a second name "
                    "(hard link)", data={"count": 0})
    return Item("install links", GAPS,
                f"{count} file(s) of the install have another name (hard links, e.g. "
                f"{', '.join(sample)}): the sandbox keeps the install's paths read-only, not "
                "its inodes — whoever can write the other name (a package cache such as "
                "~/.cache/uv, which uv links installs from) changes the launcher; "
                "self.protected is partial",
                "reinstall it as copies: UV_LINK_MODE=copy uv tool install --reinstall "
                "agent-sandbox (or pipx/pip into a venv; docs/install.md)",
                data={"count": count, "sample": list(sample)})


def _logins(home: str, environ) -> Item:
    """Which login each agent uses (tools/logins.py); brokered keys from the
    profiles' AGENT_BROKERS (services/egress.BROKERS)."""
    from agent_sandbox.config.profiles import available, load
    from agent_sandbox.config.load import known_keys
    from agent_sandbox.errors import SandboxError
    from agent_sandbox.services.egress import BROKERS
    from agent_sandbox.tools.logins import LOGINS, logins_item

    brokered, user = {}, os.path.basename(home)
    try:
        keys = known_keys(home, user)
        for name in set(available(home)) & set(LOGINS):
            profile = load(name, home=home, user=user, known_keys=keys)
            brokered[name] = tuple(BROKERS[b].key_var for b in profile.brokers if b in BROKERS)
    except (SandboxError, OSError):
        pass
    return logins_item(home, environ, brokered)


def gather(project_dir: str | None, environ) -> Report:
    from agent_sandbox.backends import BACKENDS, traits
    from agent_sandbox.launch.run import launch_context
    from agent_sandbox.process.select import (choose_backend, forget_probe, landlock_abi,
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
        backend, fix = BACKENDS[name], ""
        if hasattr(backend, "locate"):
            configured = getattr(settings, f"{name.upper()}_PATH", "") if settings else ""
            path, missing = backend.locate(path_env, configured)
        else:
            path, missing = backend.find(path_env), ""
        version, ok, detail = "", False, missing or "not run"
        if path is not None:
            forget_probe(name)
            ok, detail, *hint = probe_backend(name, path, ctx.home)
            fix = hint[0] if hint else ""
            if (ok and settings is not None and settings.PRIVATE_MOUNTS
                    and hasattr(backend, "private_mounts_probe_argv")):
                from agent_sandbox.process.select import private_mounts_probe

                ok, detail, *hint = private_mounts_probe(name, path, ctx.home,
                                                         settings.UNSHARE_PATH)
                fix = hint[0] if hint else ""
            if not traits(name).landlock_enforced:
                code, text = _run([path, "--version"])
                version = version_line(text) if code == 0 else ""
            else:               # no program of its own: the helper applies the ruleset
                version = f"{traits(name).display_name} helper"
        policy = policies.get(name)
        provides = partial = cannot = ()
        refusal_text = ""
        if policy is not None:
            provides, partial, cannot, refusal_text = _guarantees(name, path, policy,
                                                                  ctx.home, abi)
        reports.append(Backend(name, name in settings.ALLOWED_BACKENDS, path, version, ok,
                               detail, provides, partial, cannot, refusal_text, fix))

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
    if slurm_present:
        items.append(auth_item(settings, any_policy, environ))
    items.append(slurm)
    items.append(slurm_site_item(any_policy, environ, slurm_present))

    if slurm_present and settings.CHAPERON:
        items.append(chaperon_pipes_item(ctx.home))
    mounts = parse_mountinfo(_read("/proc/self/mountinfo", 1 << 24))
    items.append(fs_item("home fs", ctx.home, mounts, project=False,
                         slurm_present=slurm_present))
    project = os.path.realpath(ctx.project_dir or ctx.cwd)
    items.append(fs_item("project fs", project, mounts, project=True,
                         slurm_present=slurm_present, refusal=refusal))
    from agent_sandbox.tools.visibility import automount_item, gpu_item, site_paths_item

    items.append(site_paths_item(any_policy))
    items.append(automount_item(any_policy, mounts))
    gpus = gpu_item(any_policy, environ)
    if gpus is not None:
        items.append(gpus)

    items.append(_logins(ctx.home, environ))
    items.append(install_links_item(ctx.install_links, ctx.install_paths))
    from agent_sandbox.tools.platform import platform_items

    items[0:0] = platform_items(environ, ctx.home)     # first: what this is, where

    requested = settings.SANDBOX_BACKEND
    from agent_sandbox.errors import SandboxError

    try:
        selection = choose_backend(settings, None, home=ctx.home, environ=environ)
        pick, reason = selection.name, selection.reason
    except SandboxError as exc:
        pick, reason = None, str(exc)
    require = tuple(settings.REQUIRE)
    implied: tuple[str, ...] = ()
    if any_policy is not None:
        # On a Slurm host auto requires slurm.boundary (launch/run.py).
        from agent_sandbox.launch.run import implied_require

        implied = tuple(g for g in implied_require(settings, any_policy, agent=False)
                        if g not in require)
        require += implied
    verdict, message, fix, code = decide(items, reports, require, pick)
    if implied and any(g in message for g in implied):
        fix = (fix + "; " if fix else "") + (
            "slurm.boundary is required on this Slurm host for SANDBOX_BACKEND=auto and "
            "agent profiles (the real srun would escape): a plain `run --backend landlock` "
            "is still allowed, and the site admin may set SLURM_BOUNDARY_OPTIONAL=true")
    import pwd

    return Report(host=os.uname().nodename, user=pwd.getpwuid(os.getuid()).pw_name,
                  as_root=os.geteuid() == 0, items=tuple(items), backends=tuple(reports),
                  require=require, requested=requested, pick=pick, pick_reason=reason,
                  verdict=verdict, message=message, fix=fix, exit_code=code)
