"""Unit tests for the bwrap argv builder: fsview (the ordered mount operations)
and backends/bwrap (namespaces, payload fds, guarantees, the argv).

Trees are real (tmp_path): a fake $HOME with credentials, dotfiles, symlinks
into hidden paths, and a project below it. Two kinds of assertion are used:
the literal operations (order, kinds) and an *effect* oracle that replays the
operations the way bwrap applies them (a later mount on a path or one of its
parents wins) to decide what a path inside shows and whether it is writable.
"""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.process.spawn import render_argv
from agent_sandbox.launch import report
from agent_sandbox.backends import bwrap
from agent_sandbox.backends.bwrap import PRIVATE_MOUNTS
from agent_sandbox.backends.base import FdRef, Payload, Plan, PlanContext
from agent_sandbox.policy.view import mount_ops, placeholders
from agent_sandbox.policy.resolve import _is_within, resolve_policy
from tests.support.homes import HOME_MODES, USER, context, settings_for

pytestmark = pytest.mark.home(symlinks=True)     # the `home` fixture: links to hidden places too

SECRET = "sk-ant-api03-DISTINCTIVE-SECRET-VALUE-8c1f"
OTHER_SECRET = "ghp_ANOTHER_DISTINCTIVE_TOKEN_77"
HOST_MOUNTS = frozenset({"/"})    # no submounts: mountcost moves nothing
MOUNT_KINDS = {"ro-bind", "bind", "dev-bind", "tmpfs", "symlink", "proc", "dev", "ro-data",
               "file"}


# ---------------------------------------------------------------- building
def build(home: Path, conf: str = "", *, environ=None, cwd=None, project_dir=None,
          install_paths=(), readonly_mounts=("/usr", "/etc"), command=("claude", "--resume")):
    # A HOME_WRITABLE entry that is no package store (the shipped list is empty).
    settings = settings_for(home, "HOME_WRITABLE=(.cache/tool)\n" + conf)
    if readonly_mounts is not None:
        settings = settings.replace(READONLY_MOUNTS=tuple(str(p) for p in readonly_mounts))
    ctx = context(home, cwd=cwd, project_dir=project_dir, environ=environ,
                  install_paths=install_paths)
    policy = resolve_policy(settings, ctx, backend="bwrap")
    return policy, make_plan(policy, list(command))


def make_plan(policy, command=("claude",), *, setuid: bool = False) -> Plan:
    payloads = {"marker": Payload(data=b"session=sess-0001\n")}
    if policy.seccomp:
        payloads["seccomp"] = Payload(data=b"\x06\x00\x00\x00\x00\x00\xff\x7f")
    if policy.filter_passwd:
        for name in ("etc-passwd", "etc-group", "etc-nsswitch.conf"):
            payloads[name] = Payload(data=b"root:x:0:0::/root:/bin/sh\n")
    return bwrap.plan(policy, list(command), payloads,
                      context=PlanContext("/usr/bin/bwrap", host_mounts=HOST_MOUNTS,
                                          program_setuid=setuid))


# ---------------------------------------------------------------- the oracle
def dest(op) -> str:
    kind = op[0]
    if kind in ("ro-bind", "bind", "dev-bind", "symlink", "ro-data", "file"):
        return op[2]
    return op[1]


def covering(ops, path: str):
    """Index of the mount that decides what `path` shows inside: the last one
    on the path itself or on one of its parents (later mounts cover earlier)."""
    found = None
    for index, op in enumerate(ops):
        if op[0] in MOUNT_KINDS and _is_within(path, dest(op)):
            found = index
    return found


def host_writable(ops, path: str) -> bool:
    """True when a process inside can write the *host's* `path`: the covering
    mount is a writable bind of a source that maps onto it and no later
    --remount-ro hits that mount."""
    index = covering(ops, path)
    if index is None:
        return False
    op = ops[index]
    if op[0] not in ("bind", "dev-bind"):
        return False
    source = op[1] + path[len(op[2]):]
    if os.path.realpath(source) != os.path.realpath(path):
        return False
    return not any(later == ("remount-ro", op[2]) for later in ops[index + 1:])


def op_strings(op) -> list[str]:
    return [a for a in op[1:] if isinstance(a, str)]


def assert_never_exposes_hidden(policy, ops):
    hidden = policy.hidden
    for op in ops:
        kind = op[0]
        target = dest(op)
        if kind == "bind" and op[1] == op[2] == policy.package_cache:
            continue    # the sandbox's own package cache: in the hidden state tree on purpose
        assert not policy.is_hidden(target), f"{op} creates something at a hidden path"
        if kind in ("ro-bind", "bind", "dev-bind"):
            for source in {op[1], os.path.realpath(op[1])}:
                assert not policy.is_hidden(source), f"{op} binds a hidden path"
                inner = [h for h in hidden if _is_within(h, source) and h != source]
                assert not inner, f"{op} binds a parent of the hidden path {inner[0]}"
        if kind == "symlink":
            resolved = os.path.realpath(os.path.join(os.path.dirname(target), op[1]))
            assert not policy.is_hidden(resolved), f"{op} points at a hidden path"


def index_of(ops, op) -> int:
    assert op in ops, f"{op} missing from the plan"
    return ops.index(op)


def ops_under(ops, directory: str):
    return [(i, op) for i, op in enumerate(ops) if op[0] in MOUNT_KINDS
            and _is_within(dest(op), directory)]


# ---------------------------------------------------------------- order
def test_mount_order(home, tmp_path):
    install = tmp_path / "opt" / "agent-sandbox"
    install.mkdir(parents=True)
    (home / ".config" / "agent-sandbox").mkdir()
    policy, plan = build(home, install_paths=(install,), readonly_mounts=("/usr", "/etc"))
    ops = list(plan.mounts)
    assert ops == mount_ops(policy)
    h, p = str(home), str(home / "proj")

    system = [index_of(ops, ("ro-bind", "/usr", "/usr")), index_of(ops, ("ro-bind", "/etc", "/etc"))]
    proc, dev = index_of(ops, ("proc", "/proc")), index_of(ops, ("dev", "/dev"))
    assert max(system) < min(proc, dev)
    assert dev < index_of(ops, ("tmpfs", "/dev/shm", 0o1777))
    passwd = index_of(ops, ("ro-data", "etc-passwd", "/etc/passwd", 0o644))
    assert system[1] < passwd

    run = index_of(ops, ("tmpfs", "/run", 0o755))
    assert run < index_of(ops, ("ro-data", "marker", "/run/agent-sandbox/session", 0o444))
    for i, op in ops_under(ops, "/run"):
        assert i >= run, f"{op} before the /run tmpfs would be hidden by it"

    home_tmpfs = next(i for i, op in enumerate(ops) if op[0] == "tmpfs" and op[1] == h)
    project = index_of(ops, ("bind", p, p))
    for i, op in ops_under(ops, h):
        if i == home_tmpfs:
            continue
        assert i > home_tmpfs, f"{op} comes before the home tmpfs and would be covered"
        if not _is_within(dest(op), p) and dest(op) != str(home / ".config" / "agent-sandbox"):
            assert i < project, f"home entry {op} after the project bind"
    assert index_of(ops, ("bind", f"{h}/.cache/tool", f"{h}/.cache/tool")) < project
    assert index_of(ops, ("file", "seed-0", f"{h}/.gitconfig", 0o644)) < project

    for protected in (".git/hooks", ".git/config", ".envrc", ".mcp.json"):
        assert index_of(ops, ("ro-bind", f"{p}/{protected}", f"{p}/{protected}")) > project
    assert index_of(ops, ("ro-bind", str(install), str(install))) > project
    config_tree = str(home / ".config" / "agent-sandbox")
    assert index_of(ops, ("ro-bind", config_tree, config_tree)) > project

    kinds = [op[0] for op in ops]
    first_remount = kinds.index("remount-ro")
    assert all(k == "remount-ro" for k in kinds[first_remount:]), "remounts must come last"
    assert ops[-1] == ("remount-ro", "/")
    assert ("remount-ro", f"{h}/.config/git") in ops[first_remount:]


def test_project_bind_is_never_covered_by_a_later_writable_or_tmpfs_mount(home):
    for mode in HOME_MODES:
        policy, plan = build(home, f"HOME_ACCESS={mode}\n")
        ops = list(plan.mounts)
        p = policy.project_dir
        project = max(i for i, op in enumerate(ops) if op == ("bind", p, p))
        for op in ops[project + 1:]:
            if op[0] in MOUNT_KINDS and _is_within(p, dest(op)):
                raise AssertionError(f"{mode}: {op} covers the project bind")
        assert host_writable(ops, p + "/src/main.py")


# ---------------------------------------------------------------- hidden never exposed
@pytest.mark.parametrize("mode", HOME_MODES)
def test_no_op_exposes_a_hidden_path(home, mode):
    policy, plan = build(home, f"HOME_ACCESS={mode}\nHOME_READONLY+=(.config .ssh keys)\n"
                               "HOME_WRITABLE+=(.local .config/other)\n")
    ops = list(plan.mounts)
    assert_never_exposes_hidden(policy, ops)
    for entry in (".ssh", ".ssh/id_rsa", ".aws", ".gnupg", ".netrc", ".git-credentials",
                  ".config/gh", ".config/gh/hosts.yml", ".config/git/credentials",
                  ".local/state/agent-sandbox", "keys", "key-file"):
        path = str(home / entry)
        assert not any(path in op_strings(op) for op in ops), f"{mode}: an op names {entry}"
        index = covering(ops, path)
        assert index is not None and ops[index][0] == "tmpfs", \
            f"{mode}: {entry} is not under a tmpfs (covering op: {index and ops[index]})"
        assert ops[index][1] != path


@pytest.mark.parametrize("mode", HOME_MODES)
def test_symlinked_ssh_dir_and_its_target_stay_hidden(home, tmp_path, mode):
    nfs = tmp_path / "nfs"
    store = nfs / "keys" / USER
    (nfs / "keys" / "bob").mkdir(parents=True)
    store.mkdir()
    (store / "id_ed25519").write_text("KEY")
    (nfs / "keys" / "README").write_text("public")
    shutil.rmtree(home / ".ssh")
    (home / ".ssh").symlink_to(store)
    policy, plan = build(home, f"HOME_ACCESS={mode}\n",
                         readonly_mounts=("/usr", "/etc", str(nfs)))
    ops = list(plan.mounts)
    assert_never_exposes_hidden(policy, ops)
    # the tree holding the real key directory is carved, its other entries bound back
    assert ("tmpfs", str(nfs), ops[index_of_kind(ops, "tmpfs", str(nfs))][2]) in ops
    assert ("tmpfs", str(nfs / "keys"), ops[index_of_kind(ops, "tmpfs", str(nfs / "keys"))][2]) in ops
    assert ("ro-bind", str(nfs / "keys/bob"), str(nfs / "keys/bob")) in ops
    assert ("ro-bind", str(nfs / "keys/README"), str(nfs / "keys/README")) in ops
    assert not any(str(store) in s for op in ops for s in op_strings(op))


def index_of_kind(ops, kind, path) -> int:
    return next(i for i, op in enumerate(ops) if op[0] == kind and dest(op) == path)


def test_granting_config_readonly_carves_around_gh(home):
    policy, plan = build(home, "HOME_READONLY=(.config)\n")
    ops = list(plan.mounts)
    config = str(home / ".config")
    assert ("tmpfs", config, os.stat(config).st_mode & 0o7777) in ops
    assert ("ro-bind", f"{config}/other", f"{config}/other") in ops
    assert ("tmpfs", f"{config}/git", os.stat(f"{config}/git").st_mode & 0o7777) in ops
    assert ("ro-bind", f"{config}/git/config", f"{config}/git/config") in ops
    assert not any(f"{config}/gh" in s for op in ops for s in op_strings(op))
    assert not any(f"{config}/git/credentials" in s for op in ops for s in op_strings(op))
    assert ("remount-ro", config) in ops and ("remount-ro", f"{config}/git") in ops
    assert not host_writable(ops, f"{config}/other/settings.txt")
    assert_never_exposes_hidden(policy, ops)


def test_default_config_git_grant_is_carved_around_credentials(home):
    policy, plan = build(home)
    ops = list(plan.mounts)
    git = str(home / ".config" / "git")
    assert index_of_kind(ops, "tmpfs", git) < index_of(ops, ("ro-bind", f"{git}/config",
                                                             f"{git}/config"))
    assert not any(f"{git}/credentials" in s for op in ops for s in op_strings(op))


def test_symlink_entry_pointing_at_hidden_path_yields_no_op(home):
    policy, plan = build(home, "HOME_ACCESS=read\n")
    ops = list(plan.mounts)
    for name in ("keys", "key-file"):
        assert not [op for op in ops if dest(op) == str(home / name)], name
    # a harmless symlink is recreated as a symlink, not followed
    assert ("symlink", ".config/other", str(home / "notes-link")) in ops


def test_symlink_in_a_carved_system_tree_pointing_at_hidden_path_yields_no_op(home, tmp_path):
    tree = tmp_path / "sw"
    (tree / "secret").mkdir(parents=True)
    (tree / "secret" / "license.key").write_text("k")
    (tree / "bin").mkdir()
    (tree / "link-to-secret").symlink_to("secret/license.key")
    (tree / "link-to-bin").symlink_to("bin")
    policy, plan = build(home, f"EXTRA_BLOCKED_PATHS=({tree / 'secret'})\n",
                         readonly_mounts=("/usr", "/etc", str(tree)))
    ops = list(plan.mounts)
    assert index_of_kind(ops, "tmpfs", str(tree)) >= 0
    assert ("ro-bind", str(tree / "bin"), str(tree / "bin")) in ops
    assert ("symlink", "bin", str(tree / "link-to-bin")) in ops
    assert not [op for op in ops if dest(op) == str(tree / "link-to-secret")]
    assert not any(str(tree / "secret") in s for op in ops for s in op_strings(op))
    assert ("remount-ro", str(tree)) in ops
    assert_never_exposes_hidden(policy, ops)


def test_system_mount_reached_through_a_symlinked_parent_cannot_expose_hidden(home, tmp_path):
    """A grant is checked against hidden paths by its literal name only. A
    READONLY_MOUNTS entry whose *parent* is a symlink into $HOME therefore
    binds ~/.ssh (or all of ~/.config, gh tokens included) under another name."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "homes").symlink_to(home.parent)          # e.g. /site/homes -> /home
    via_ssh = site / "homes" / USER / ".ssh"
    via_config = site / "homes" / USER / ".config"
    policy, plan = build(home, readonly_mounts=("/usr", "/etc", str(via_ssh), str(via_config)))
    assert_never_exposes_hidden(policy, list(plan.mounts))


# ---------------------------------------------------------------- home modes
@pytest.mark.parametrize("mode,bind", [("read", "ro-bind"), ("write", "bind")])
def test_read_and_write_modes_carve_home(home, mode, bind):
    policy, plan = build(home, f"HOME_ACCESS={mode}\n")
    ops = list(plan.mounts)
    h = str(home)
    home_tmpfs = index_of_kind(ops, "tmpfs", h)
    assert ops[home_tmpfs] == ("tmpfs", h, os.stat(h).st_mode & 0o7777)
    by_name: dict[str, list] = {}
    for i, op in enumerate(ops):
        if i > home_tmpfs and op[0] in MOUNT_KINDS and os.path.dirname(dest(op)) == h:
            by_name.setdefault(os.path.basename(dest(op)), []).append(op)
    hidden_names = {".ssh", ".aws", ".gnupg", ".netrc", ".git-credentials", "keys", "key-file"}
    for name in sorted(os.listdir(h)):
        path = f"{h}/{name}"
        if name in hidden_names:
            assert name not in by_name, f"{mode}: {name} is hidden but has {by_name[name]}"
        elif name == "proj":   # the project bind covers the entry's (mountcost.drop_covered)
            assert by_name[name] == [("bind", path, path)]
        elif name == ".gitconfig" and mode == "read":
            assert by_name[name] == [("file", "seed-0", path, 0o644)]
        elif os.path.islink(path):
            assert [op[0] for op in by_name[name]] == ["symlink"]
        elif name in (".config", ".local"):
            assert [op[0] for op in by_name[name]] == ["tmpfs"], f"{name}: carved"
        else:
            assert by_name[name] == [(bind, path, path)], f"{mode}: {name}"
    assert (mode == "write") == host_writable(ops, f"{h}/notes.txt")
    assert (mode == "write") == host_writable(ops, f"{h}/.config/other/settings.txt")
    assert_never_exposes_hidden(policy, ops)


def test_write_mode_binds_gitconfig_instead_of_seeding(home):
    policy, plan = build(home, "HOME_ACCESS=write\n")
    ops = list(plan.mounts)
    gitconfig = str(home / ".gitconfig")
    assert ("bind", gitconfig, gitconfig) in ops
    assert not [op for op in ops if op[0] == "file"]
    assert "seed-0" not in plan.payloads


@pytest.mark.parametrize("mode", HOME_MODES)
def test_only_restricted_remounts_home_readonly(home, mode):
    policy, plan = build(home, f"HOME_ACCESS={mode}\n")
    ops = list(plan.mounts)
    assert (("remount-ro", str(home)) in ops) == (mode == "restricted")
    # HOME_WRITABLE entries stay writable in every mode (their own mounts)
    assert host_writable(ops, str(home / ".cache" / "tool" / "data"))


def test_tmpwrite_binds_only_selected_entries(home):
    policy, plan = build(home)
    ops = list(plan.mounts)
    h = str(home)
    assert ("ro-bind", f"{h}/.bashrc", f"{h}/.bashrc") in ops
    assert ("ro-bind", f"{h}/.local/bin", f"{h}/.local/bin") in ops
    assert ("file", "seed-0", f"{h}/.gitconfig", 0o644) in ops
    for name in ("notes.txt", ".config/other", ".local/share"):
        assert covering(ops, f"{h}/{name}") == index_of_kind(ops, "tmpfs", h), name
    assert not host_writable(ops, f"{h}/.bashrc")


# ---------------------------------------------------------------- denied writable paths
DENIED_CASES = ["extra_writable_parent", "home_write_mode", "project_parent",
                "denied_named_through_symlinked_parent", "denied_entry_is_a_symlink"]


@pytest.mark.parametrize("case", DENIED_CASES)
def test_denied_writable_path_is_never_writable(home, tmp_path, case):
    """SPEC §4: DENIED_WRITABLE_PATHS are never writable, whatever the user adds.
    A writable grant that *contains* a denied path must not make it writable,
    also when the admin names the denied path through a symlink (on HPC
    systems /scratch -> /lustre/scratch and the like are the rule)."""
    shared = tmp_path / "shared"
    if case == "extra_writable_parent":
        denied = shared / "datasets"
        denied.mkdir(parents=True)
        conf = f"EXTRA_WRITABLE_PATHS=({shared})\nDENIED_WRITABLE_PATHS=({denied})\n"
    elif case == "home_write_mode":
        denied = home / ".local" / "bin"
        conf = f"HOME_ACCESS=write\nDENIED_WRITABLE_PATHS=({denied})\n"
    elif case == "project_parent":
        denied = home / "proj" / "vendor"
        denied.mkdir()
        conf = f"DENIED_WRITABLE_PATHS=({denied})\n"
    elif case == "denied_named_through_symlinked_parent":
        (shared / "datasets").mkdir(parents=True)
        (tmp_path / "alias").symlink_to(shared)
        denied = tmp_path / "alias" / "datasets"
        conf = f"EXTRA_WRITABLE_PATHS=({shared})\nDENIED_WRITABLE_PATHS=({denied})\n"
    else:
        (shared / "datasets").mkdir(parents=True)
        denied = tmp_path / "datasets-link"
        denied.symlink_to(shared / "datasets")
        conf = f"EXTRA_WRITABLE_PATHS=({shared})\nDENIED_WRITABLE_PATHS=({denied})\n"
    real = Path(os.path.realpath(denied))
    (real / "payload").write_text("x")
    try:
        policy, plan = build(home, conf)
    except Exception as exc:   # refusing the launch is an acceptable answer too
        from agent_sandbox.errors import PolicyError

        assert isinstance(exc, PolicyError), exc
        assert "DENIED_WRITABLE_PATHS" in str(exc)
        return
    ops = list(plan.mounts)
    assert not host_writable(ops, str(real)), f"{denied} is writable inside"
    assert not host_writable(ops, str(real / "payload")), f"{denied}/payload is writable"


# ---------------------------------------------------------------- protected and overlays
def test_protected_paths_are_readonly_binds_over_the_project(home):
    policy, plan = build(home)
    ops = list(plan.mounts)
    p = policy.project_dir
    for protected in (".git/hooks", ".git/config", ".envrc", ".vscode", ".idea", ".mcp.json"):
        path = f"{p}/{protected}"
        assert covering(ops, path) == index_of(ops, ("ro-bind", path, path)), protected
        assert not host_writable(ops, path)
    assert host_writable(ops, f"{p}/src/main.py")
    missing = {item.path for item in placeholders(policy)}
    from agent_sandbox.names import PROJECT_CONFIGS

    table = {os.path.normpath(f"{p}/{path}") for path, _ in PROJECT_CONFIGS}
    assert missing == table | {f"{p}/.git/config.worktree", f"{p}/.git/commondir"}
    # The repository directory is bound onto itself (immovable) before its
    # control files are bound read-only.
    pin = index_of(ops, ("bind", f"{p}/.git", f"{p}/.git"))
    assert index_of(ops, ("bind", p, p)) < pin < index_of(ops, ("ro-bind", f"{p}/.git/config",
                                                                 f"{p}/.git/config"))


def test_protected_symlink_is_not_bound(home):
    (home / "proj" / "real-envrc").write_text("")
    (home / "proj" / ".envrc").symlink_to("real-envrc")
    policy, plan = build(home)
    assert not [op for op in plan.mounts if dest(op) == str(home / "proj" / ".envrc")]
    assert any(w.startswith("PROTECTED_PATHS:") for w in policy.warnings)


def test_symlink_in_project_to_ssh_stays_a_symlink_and_ssh_stays_absent(home):
    policy, plan = build(home)
    ops = list(plan.mounts)
    ssh = str(home / ".ssh")
    assert covering(ops, ssh) == index_of_kind(ops, "tmpfs", str(home))
    assert_never_exposes_hidden(policy, ops)


def test_readonly_overlays_win_over_writable_home(home, tmp_path):
    (home / ".config" / "agent-sandbox").mkdir()
    policy, plan = build(home, "HOME_ACCESS=write\n")
    ops = list(plan.mounts)
    conf = str(home / ".config" / "agent-sandbox" / "sandbox.conf")
    assert not host_writable(ops, conf)
    assert host_writable(ops, str(home / ".config" / "other" / "settings.txt"))


def test_slurm_masks_binaries_and_devices(home):
    policy, _ = build(home)
    policy = policy._replace(slurm_masks=("/etc/slurm",), slurm_binaries=("/usr/bin/sbatch",),
                             devices=("/dev/nvidia0",))
    ops = mount_ops(policy)
    etc = index_of(ops, ("ro-bind", "/etc", "/etc"))
    assert etc < index_of(ops, ("tmpfs", "/etc/slurm", 0o755))
    assert ("remount-ro", "/etc/slurm") in ops
    assert index_of(ops, ("ro-bind", "/usr", "/usr")) < index_of(
        ops, ("ro-bind", "/dev/null", "/usr/bin/sbatch"))
    assert index_of(ops, ("dev", "/dev")) < index_of(ops, ("dev-bind", "/dev/nvidia0",
                                                          "/dev/nvidia0"))


# ---------------------------------------------------------------- toggles
def argv_of(plan) -> list:
    return list(plan.argv)


def pairs(argv) -> list[tuple]:
    return list(zip(argv, argv[1:]))


def test_default_namespaces_and_process_options(home):
    policy, plan = build(home)
    argv = argv_of(plan)
    # bwrap in a user and mount namespace of its own, whose mounts are private
    # (no mount the host makes later propagates into the sandbox).
    assert tuple(argv[:len(PRIVATE_MOUNTS)]) == PRIVATE_MOUNTS
    assert argv[len(PRIVATE_MOUNTS)] == "/usr/bin/bwrap"
    assert "fs.write_confined" in plan.provides
    head = argv[:argv.index("--chdir")]
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
                 "--unshare-ipc", "--die-with-parent", "--new-session", "--disable-userns"):
        assert flag in head, flag
    assert "--unshare-net" not in argv
    assert "--share-net" not in argv
    assert ("--json-status-fd", FdRef("status")) in pairs(argv)
    assert ("--seccomp", FdRef("seccomp")) in pairs(argv)
    assert "--setenv" not in argv and "--clearenv" not in argv
    for i, arg in enumerate(argv):
        if arg == "--tmpfs":
            assert argv[i - 2] == "--perms" and len(argv[i - 1]) == 4, argv[i - 2:i + 2]


def test_a_setuid_bwrap_runs_unwrapped_and_says_what_propagation_costs(home):
    """In a user namespace a setuid bwrap would lose its privileges: it runs
    as it is, and the plan says that later host mounts stay writable."""
    policy, _ = build(home)
    plan = make_plan(policy, setuid=True)
    assert plan.argv[0] == "/usr/bin/bwrap" and "/usr/bin/unshare" not in plan.argv
    assert "a setuid bwrap keeps" in dict(plan.partial)["fs.write_confined"]


def test_private_mounts_false_keeps_the_host_propagation_and_says_so(home):
    policy, plan = build(home, "PRIVATE_MOUNTS=false\n")
    assert not policy.private_mounts
    assert plan.argv[0] == "/usr/bin/bwrap" and "/usr/bin/unshare" not in plan.argv
    assert dict(plan.partial)["fs.write_confined"].endswith("PRIVATE_MOUNTS=false")


def test_private_tmp_toggle(home):
    _, plan = build(home)
    assert ("--tmpfs", "/tmp") in pairs(argv_of(plan))
    _, plan = build(home, "PRIVATE_TMP=false\n")
    argv = argv_of(plan)
    assert ("--tmpfs", "/tmp") not in pairs(argv)
    assert ("--bind", "/tmp") in pairs(argv)


def test_private_ipc_toggle(home):
    _, plan = build(home)
    argv = argv_of(plan)
    assert "--unshare-ipc" in argv and ("--tmpfs", "/dev/shm") in pairs(argv)
    assert "ipc.isolated" in plan.provides
    _, plan = build(home, "PRIVATE_IPC=false\n")
    argv = argv_of(plan)
    assert "--unshare-ipc" not in argv
    assert ("--tmpfs", "/dev/shm") not in pairs(argv)
    assert "ipc.isolated" in dict(plan.cannot)
    assert "ipc.isolated" not in plan.provides


def test_network_mode_toggle(home):
    _, plan = build(home)
    assert "--unshare-net" not in argv_of(plan)
    assert "abstract_unix.scoped" in dict(plan.cannot)
    _, plan = build(home, "NETWORK_MODE=isolated\n")
    assert "--unshare-net" in argv_of(plan)
    assert "abstract_unix.scoped" in plan.provides


def test_seccomp_false_drops_the_filter_and_reports_it(home):
    policy, plan = build(home, "SECCOMP=false\n")
    argv = argv_of(plan)
    assert "--seccomp" not in argv
    assert FdRef("seccomp") not in argv
    assert "seccomp" not in plan.payloads
    assert "seccomp" in dict(plan.cannot)
    assert "seccomp" not in plan.provides
    assert any(line.split()[:2] == ["no", "seccomp"] for line in report.guarantee_lines(plan))
    assert plan.missing(("seccomp", "fs.hidden")) == ("seccomp",)


def test_filter_passwd_toggle(home):
    _, plan = build(home)
    argv = argv_of(plan)
    for name in ("passwd", "group", "nsswitch.conf"):
        i = argv.index(f"/etc/{name}")
        assert argv[i - 2:i] == ["--ro-bind-data", FdRef(f"etc-{name}")]
        assert argv[i - 4:i - 2] == ["--perms", "0644"]
        assert f"etc-{name}" in plan.payloads
    assert "passwd.filtered" in plan.provides
    _, plan = build(home, "FILTER_PASSWD=false\n")
    argv = argv_of(plan)
    assert "/etc/passwd" not in argv and "/etc/nsswitch.conf" not in argv
    assert not any(k.startswith("etc-") for k in plan.payloads)
    assert "passwd.filtered" in dict(plan.cannot)


def test_filter_passwd_without_etc_is_not_claimed(home):
    _, plan = build(home, readonly_mounts=("/usr",))
    assert "/etc/passwd" not in argv_of(plan)
    assert "passwd.filtered" not in plan.provides


def test_guarantees_are_known_and_disjoint(home):
    from agent_sandbox.backends.base import GUARANTEE_TEXT

    _, plan = build(home)
    cannot = [g for g, _ in plan.cannot]
    partial = [g for g, _ in plan.partial]
    assert set(plan.provides) | set(cannot) | set(partial) == set(GUARANTEE_TEXT)
    assert not set(plan.provides) & set(cannot)
    assert not (set(plan.provides) | set(cannot)) & set(partial)
    for required in ("fs.hidden", "fs.write_confined", "env.scrubbed", "pid.isolated",
                     "slurm.boundary", "self.protected", "tty.safe", "seccomp"):
        assert required in plan.provides


# ---------------------------------------------------------------- argv tail, fds
def test_argv_ends_with_chdir_and_command(home):
    policy, plan = build(home, cwd=home / "proj" / "src", project_dir=home / "proj",
                         command=("claude", "--", "-x", "a b"))
    argv = argv_of(plan)
    assert argv[-9:] == ["--chdir", str(home / "proj" / "src"), "--", "/usr/bin/env", "--",
                         "claude", "--", "-x", "a b"]
    assert argv.count("--chdir") == 1
    assert argv.index("--chdir") > max(i for i, a in enumerate(argv) if a == "--remount-ro")


def test_command_is_not_interpreted(home):
    _, plan = build(home, command=("--help",))
    assert argv_of(plan)[-3:] == ["/usr/bin/env", "--", "--help"]


def test_render_substitutes_fd_numbers(home):
    _, plan = build(home)
    refs = {a.name for a in plan.argv if isinstance(a, FdRef)}
    assert refs == {"status", "hold", "seccomp", "marker", "etc-passwd", "etc-group",
                    "etc-nsswitch.conf", "seed-0"}
    assert set(plan.payloads) == refs - {"status", "hold"}
    assert plan.status_fd == "status" and plan.hold_fd == "hold"
    # the session lock is held by bwrap's init, never by the command (registry.hold)
    assert argv_of(plan)[argv_of(plan).index("--sync-fd") + 1] == FdRef("hold")
    fds = {name: 100 + i for i, name in enumerate(sorted(refs))}
    rendered = render_argv(plan.argv, fds)
    assert len(rendered) == len(plan.argv)
    assert all(isinstance(a, str) for a in rendered)
    assert not any("<fd:" in a for a in rendered)
    for original, new in zip(plan.argv, rendered):
        if isinstance(original, FdRef):
            assert new == str(fds[original.name])
        else:
            assert new == original
    i = rendered.index("--seccomp")
    assert rendered[i + 1] == str(fds["seccomp"])
    assert str(FdRef("marker")) == "<fd:marker>"


def test_seed_payload_is_the_host_file(home):
    policy, plan = build(home)
    assert plan.payloads["seed-0"] == Payload(path=str(home / ".gitconfig"))


@pytest.mark.parametrize("mode", ["tmpwrite", "restricted", "read"])
def test_seeded_files_are_created_in_a_writable_tmpfs(home, mode):
    """bwrap's --file creates its destination, so it fails (EROFS: the launch
    dies with 125) when an earlier op already put a read-only bind there or
    on a parent. A nested seeded file (.config/git/config is a natural one:
    .config/git is in HOME_READONLY) must not be granted read-only first."""
    policy, plan = build(home, f"HOME_ACCESS={mode}\nHOME_SEEDED_FILES+=(.config/git/config)\n")
    ops = list(plan.mounts)
    files = [(i, op) for i, op in enumerate(ops) if op[0] == "file"]
    assert {op[2] for _, op in files} == {str(home / ".gitconfig"),
                                          str(home / ".config/git/config")}
    for i, op in files:
        before = covering(ops[:i], op[2])
        assert before is not None and ops[before][0] == "tmpfs" and ops[before][1] != op[2], \
            f"{op} lands on {ops[before] if before is not None else 'nothing'}"


def test_seeded_dotfile_that_is_a_symlink_can_be_handed_over(home):
    """Dotfile managers (stow, chezmoi, home-manager) make ~/.gitconfig a
    symlink. The launcher opens seeded files with O_NOFOLLOW, so such a
    payload must either be resolved by the plan or left out — never fail the
    launch with an uncaught ELOOP."""
    from agent_sandbox.process.spawn import _payload_fd

    dotfiles = home / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "gitconfig").write_text("[user]\n\tname = Stowed\n")
    (home / ".gitconfig").unlink()
    (home / ".gitconfig").symlink_to("dotfiles/gitconfig")
    policy, plan = build(home)
    for name, payload in plan.payloads.items():
        if payload.path is None:
            continue
        fd = _payload_fd(name, payload)
        try:
            assert os.read(fd, 1000) == b"[user]\n\tname = Stowed\n"
        finally:
            os.close(fd)


# ---------------------------------------------------------------- secrets
CALLER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "ANTHROPIC_API_KEY": SECRET,
              "GH_TOKEN": OTHER_SECRET, "HOME": "/home/forged"}


def test_no_environment_value_in_argv(home):
    policy, plan = build(home, "SANDBOX_ENV=(EXTRA_VALUE=sandbox-env-value-zz9)\n",
                         environ=CALLER_ENV)
    assert plan.env["ANTHROPIC_API_KEY"] == SECRET
    assert plan.env["EXTRA_VALUE"] == "sandbox-env-value-zz9"
    assert "GH_TOKEN" not in plan.env
    rendered = render_argv(plan.argv, {a.name: 3 for a in plan.argv if isinstance(a, FdRef)})
    for secret in (SECRET, OTHER_SECRET, "sandbox-env-value-zz9", "/home/forged"):
        assert not any(secret in arg for arg in rendered), secret
    assert "ANTHROPIC_API_KEY" not in " ".join(rendered)
    assert SECRET not in repr(plan)
    assert SECRET not in repr(policy)


def test_dry_run_report_and_banner_print_names_not_values(home):
    policy, plan = build(home, environ=CALLER_ENV)
    text = report.dry_run_report(policy, plan, ("bpf", "mount"))
    assert SECRET not in text and OTHER_SECRET not in text
    assert "ANTHROPIC_API_KEY" in text and "GH_TOKEN" in text
    assert shlex.join(str(a) for a in plan.argv) in text
    assert SECRET not in report.banner(policy, plan)


def test_plan_env_is_a_copy_of_the_policy_env(home):
    policy, plan = build(home, environ=CALLER_ENV)
    assert plan.env == dict(policy.env)
    assert plan.env["HOME"] == str(home)
    assert plan.env is not policy.env


def test_where_unshare_cannot_make_the_namespace_private_mounts_refuses_with_the_fix(home):
    """An AppArmor policy may let bwrap make user namespaces but not
    util-linux's unshare: PRIVATE_MOUNTS cannot hold, and the launch is
    refused (never run with the host's propagation unannounced)."""
    policy, _ = build(home)
    context = PlanContext("/usr/bin/bwrap", private_mounts_failure="unshare failed: EPERM")
    with pytest.raises(PolicyError) as refused:
        bwrap.refuse(policy, context=context)
    assert "unshare failed: EPERM" in str(refused.value)
    assert "PRIVATE_MOUNTS=false" in str(refused.value)
    bwrap.refuse(policy, context=PlanContext("/usr/bin/bwrap"))          # it works: no refusal
    policy_false, _ = build(home, "PRIVATE_MOUNTS=false\n")
    bwrap.refuse(policy_false, context=context)                          # not asked for
    bwrap.refuse(policy, context=context._replace(program_setuid=True))  # setuid: said partial


def test_the_private_mounts_probe_is_the_plain_probe_behind_unshare():
    assert bwrap.private_mounts_probe_argv("/usr/bin/bwrap") == (
        list(PRIVATE_MOUNTS) + bwrap.probe_argv("/usr/bin/bwrap"))
    assert bwrap.probe_argv("/usr/bin/bwrap")[0] == "/usr/bin/bwrap"
