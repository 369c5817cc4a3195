"""The files a plan hands to its backend (as descriptors, never paths the
sandbox could swap): the session marker, the seccomp program (cached: making
it loads libseccomp), the filtered passwd/group/nsswitch, the profile's note,
and blanked copies of home files that held a secret (boundfiles.py).
`base_payloads` is what every plan of a policy needs — the launch and
`doctor` build them the same way.
"""
from __future__ import annotations

import os
import pwd

from agent_sandbox import __version__


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except OSError:
        return ""


def identity_payloads(policy) -> dict:
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.policy.passwd import filter_group, filter_nsswitch, filter_passwd, sys_id_max

    sys_uid_max, sys_gid_max = sys_id_max(_read_text("/etc/login.defs"))
    entry = pwd.getpwuid(policy.uid)
    user_entry = ":".join([entry.pw_name, "x", str(entry.pw_uid), str(entry.pw_gid),
                           entry.pw_gecos, entry.pw_dir, entry.pw_shell])
    gids = os.getgrouplist(policy.user, policy.gid)
    extra = []
    import grp

    for gid in gids:
        try:
            extra.append(f"{grp.getgrgid(gid).gr_name}:x:{gid}:")
        except KeyError:
            pass
    return {
        "etc-passwd": Payload(data=filter_passwd(
            _read_text("/etc/passwd"), uid=policy.uid, sys_uid_max=sys_uid_max,
            user_entry=user_entry).encode()),
        "etc-group": Payload(data=filter_group(
            _read_text("/etc/group"), user=policy.user, gids=gids, sys_gid_max=sys_gid_max,
            extra_entries=extra).encode()),
        "etc-nsswitch.conf": Payload(data=filter_nsswitch(
            _read_text("/etc/nsswitch.conf")).encode()),
    }


def seccomp_payload(policy, home: str, *, no_user_namespaces: bool = False):
    """The BPF program for the policy's deny list, cached in the hidden state
    directory (generating it loads libseccomp, which costs more than a launch)."""
    from agent_sandbox.traits import traits
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.paths import state_dir
    from agent_sandbox.config.load import load_cache, store_cache
    from agent_sandbox.policy.seccomp import compile_filter, deny_list

    denied = deny_list(policy.seccomp_extra,
                       no_pid_namespace=not traits(policy.backend).pid_namespace,
                       no_user_namespaces=no_user_namespaces)
    inputs = (__version__, os.uname().machine, denied)
    path = os.path.join(state_dir(home), "cache", "seccomp.marshal")
    data = load_cache(path, inputs)
    if not isinstance(data, bytes) or not data or len(data) % 8:
        data = compile_filter(denied)
        store_cache(path, inputs, data)
    return Payload(data=data), denied


#: Raised whenever compile_notify_filter's rules change (2: unix datagram
#: sockets and io_uring refused; families compared on 32 bits).
NOTIFY_REVISION = 2


def notify_payload(home: str, restrict_inet: bool = False):
    """The landlock supervisor's user-notification filter (process/supervisor.py),
    cached beside the deny list's (the same for every policy)."""
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.paths import state_dir
    from agent_sandbox.config.load import load_cache, store_cache

    # The revision: a filter changed within a version must not be read back.
    inputs = (__version__, os.uname().machine, "notify", NOTIFY_REVISION, restrict_inet)
    path = os.path.join(state_dir(home), "cache",
                        f"seccomp-notify{'-inet' if restrict_inet else ''}.marshal")
    data = load_cache(path, inputs)
    if not isinstance(data, bytes) or not data or len(data) % 8:
        from agent_sandbox.policy.seccomp import compile_notify_filter

        data = compile_notify_filter(restrict_inet)
        store_cache(path, inputs, data)
    return Payload(data=data)


def base_payloads(policy, backend: str, *, seccomp=None,
                  no_user_namespaces: bool = False) -> tuple[dict, tuple[str, ...]]:
    """(payloads, denied syscalls) every plan of `policy` on `backend` needs:
    the session marker, the seccomp program, and where the backend binds
    generated files (bwrap) the filtered identity files. `seccomp`
    builds the program (default: seccomp_payload)."""
    from agent_sandbox.traits import traits

    payloads = {"marker": marker_payload(policy)}
    denied: tuple[str, ...] = ()
    if policy.seccomp:
        if seccomp is None:
            payloads["seccomp"], denied = seccomp_payload(
                policy, policy.home, no_user_namespaces=no_user_namespaces)
        else:
            payloads["seccomp"], denied = seccomp(policy, policy.home)
    if not traits(backend).mount_namespace:
        # No mount view: the supervisor decides sockets and metadata (SPEC §5a).
        payloads["notify"] = notify_payload(
            policy.home, policy.network_isolated or policy.network_mode == "allowlist")
    if policy.filter_passwd and traits(backend).generated_files:
        payloads.update(identity_payloads(policy))
    return payloads, denied


def marker_payload(policy):
    from agent_sandbox.backends.base import Payload

    text = (f"session={policy.session_id}\nbackend={policy.backend}\n"
            f"project={policy.project_dir}\n")
    return Payload(data=text.encode())


def check_bound_files(settings, policy, backend: str) -> tuple:
    """(policy, payloads): the single files bound from the home, read here and
    checked for secrets by boundfiles (SECRETS_IN_BOUND_FILES)."""
    from agent_sandbox.launch import boundfiles
    from agent_sandbox.traits import traits
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.policy.envfilter import removal_rule

    from agent_sandbox.config.load import load_cache, store_cache
    from agent_sandbox.paths import state_dir

    mode = settings.SECRETS_IN_BOUND_FILES
    files = boundfiles.bound_files(policy) if mode != "off" else ()
    can_generate = traits(backend).generated_files
    # The verdict "no secret in any of them" is kept while every file's stat
    # (inode, size, mtime and ctime: ctime cannot be set back) and every rule
    # are unchanged; anything else reads and scans again. Not kept for a file
    # changed within its file system's tick (_settled).
    inputs = (__version__, mode, can_generate, settings.BLOCKED_ENV_VARS,
              settings.BLOCKED_ENV_PATTERNS, settings.ALLOWED_ENV_VARS,
              tuple((path, source, _stat_key(source)) for path, source in files))
    cache = os.path.join(state_dir(policy.home), "cache", "boundfiles.marshal")
    if files and load_cache(cache, inputs) == "clean":
        return boundfiles.clean(policy, mode=mode, checked=len(files))
    contents = {path: _read_bound_file(source) for path, source in files}
    policy, blanked = boundfiles.apply(
        policy, mode=mode, can_generate=can_generate,
        contents=contents, removed=removal_rule(blocked=settings.BLOCKED_ENV_VARS,
                                                patterns=settings.BLOCKED_ENV_PATTERNS,
                                                allowed=settings.ALLOWED_ENV_VARS))
    if files and not policy.bound_file_report.findings and _settled(inputs[-1]):
        store_cache(cache, inputs, "clean")
    return policy, {name: Payload(data=data) for name, data in blanked.items()}


def _settled(files) -> bool:
    """Every file's last change older than its file system's tick (the plan
    cache's racy rule): a same-size change now could keep its stat, and the
    verdict with it."""
    from time import time_ns

    from agent_sandbox.plancache.plans import COARSE_RACY_NS, RACY_NS

    now = time_ns()
    for _path, _source, key in files:
        if key is not None and key[5] > now - (RACY_NS if key[5] % 1_000_000_000
                                                else COARSE_RACY_NS):
            return False
    return True


def _stat_key(path: str):
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_bound_file(path: str):
    """The bytes of a home file the sandbox gets, opened once without following
    a symlink; boundfiles.TOO_LARGE above its cap; None when it cannot be read
    or is not a regular file (then nothing of it is readable inside either)."""
    from agent_sandbox.launch.boundfiles import MAX_BYTES, TOO_LARGE
    from agent_sandbox.paths import TOO_LARGE as OVER, read_regular

    data = read_regular(path, MAX_BYTES)
    return TOO_LARGE if data == OVER else data


def _with_note(policy, profile, payloads: dict, *, slurm: bool):
    """(policy, the note's payload): the profile's note after whatever the
    user keeps at that path, as check_bound_files left it (policy/note.py
    decides; a blanked copy it consumes leaves `payloads`)."""
    from agent_sandbox.backends.base import Payload
    from agent_sandbox.policy.note import with_note

    policy, note, used = with_note(policy, profile.note_path, slurm=slurm,
                                   blanked=lambda name: payloads[name].data,
                                   realpath=os.path.realpath, read=_read_note)
    if used is not None:
        del payloads[used]
    return policy, Payload(data=note)


def _read_note(path: str) -> bytes | None:
    from agent_sandbox.policy.note import MAX_BYTES

    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_BYTES)
    except OSError:
        return None
