"""The three backends as pure functions: guarantees, plans and argv for the
same policy; auto selection; REQUIRE refusals; the report.

Policies are built from a real tree in tmp_path (a fake $HOME with
credentials, dotfiles and a project), as in test_bwrap_plan.
"""
from __future__ import annotations

import marshal
from pathlib import Path

import pytest

from agent_sandbox.process.spawn import render_argv
from agent_sandbox.launch import run as launcher, report
from agent_sandbox.backends import BACKENDS as TABLE, Selection, Unavailable, bwrap, firejail, select
from agent_sandbox.backends import landlock as landlock_backend
from agent_sandbox.backends.base import GUARANTEE_TEXT, FdRef, HELPER_BOOT, Payload, PlanContext
from agent_sandbox.errors import PolicyError
from agent_sandbox.policy.resolve import _is_within
from agent_sandbox.paths import helper_module
from tests.support.plans import BACKENDS, PLAN_HOME, SECCOMP, plan_for, policy_for, rows
ll = helper_module("landlock")

pytestmark = pytest.mark.home(**PLAN_HOME)     # the `home` fixture's layout


# ---------------------------------------------------------------- the table
@pytest.mark.parametrize("name", BACKENDS)
def test_every_guarantee_is_answered_once(home, name):
    plan = plan_for(name, policy_for(home, backend=name))
    answered = list(plan.provides) + [g for g, _ in plan.partial] + [g for g, _ in plan.cannot]
    assert sorted(answered) == sorted(GUARANTEE_TEXT)
    for _, why in plan.partial + plan.cannot:
        assert why


def test_the_spec_table_as_implemented(home):
    """SPEC §5 with the defaults, on a kernel with Landlock ABI 7. One
    deviation, documented in docs/backends.md: firejail's fs.write_confined
    is partial (a mount the host makes after the start propagates in with
    the host's flags; bwrap runs in private mount propagation, PRIVATE_MOUNTS)."""
    expected = {
        "fs.hidden": ("yes", "yes", "no"),
        "fs.write_confined": ("yes", "partial", "yes"),
        "fs.protected": ("yes", "yes", "no"),
        "env.scrubbed": ("yes", "yes", "yes"),
        "seccomp": ("yes", "yes", "yes"),
        "pid.isolated": ("yes", "yes", "no"),
        "ipc.isolated": ("yes", "yes", "no"),
        "passwd.filtered": ("yes", "partial", "no"),
        "slurm.boundary": ("yes", "yes", "no"),
        "abstract_unix.scoped": ("yes", "yes", "yes"),
        "signals.scoped": ("yes", "yes", "yes"),
        "self.protected": ("yes", "yes", "yes"),
        "tty.safe": ("yes", "yes", "yes"),
        "fd.clean": ("yes", "yes", "yes"),
    }
    tables = {n: rows(plan_for(n, policy_for(home, backend=n))) for n in BACKENDS}
    for guarantee, states in expected.items():
        assert tuple(tables[n][guarantee] for n in BACKENDS) == states, guarantee


@pytest.mark.parametrize("name", BACKENDS)
def test_kept_descriptors_make_fd_clean_partial_and_reach_the_helper(home, name):
    policy = policy_for(home, backend=name)
    plan = plan_for(name, policy, abi=7, keep_fds=(9, 12))
    assert dict(plan.partial)["fd.clean"] == "kept by --keep-fd: 9 12"
    argv = [str(a) for a in plan.argv]
    if name == "bwrap":          # no helper inside: bwrap passes what the launcher kept
        assert "--keep-fd" not in argv
    else:
        assert argv[argv.index("--keep-fd"):argv.index("--keep-fd") + 4] == [
            "--keep-fd", "9", "--keep-fd", "12"]
    if name == "bwrap":          # a setuid bwrap: the helper runs inside and keeps them
        payloads = {"seccomp": SECCOMP, "marker": Payload(data=b"m")} | {
            f"etc-{n}": Payload(data=b"") for n in ("passwd", "group", "nsswitch.conf")}
        helper = bwrap.plan(policy, ["claude"], payloads,
                            context=PlanContext("bwrap", landlock_abi=7, program_setuid=True,
                                                keep_fds=(9, 12)))
        assert "--keep-fd" in [str(a) for a in helper.argv]


@pytest.mark.parametrize("name", BACKENDS)
def test_scoping_needs_abi_6_and_says_so(home, name):
    plan = plan_for(name, policy_for(home, backend=name), abi=5)
    why = dict(plan.cannot)
    assert "abstract_unix.scoped" in why and "ABI 6" in why["abstract_unix.scoped"]
    if name == "landlock":
        assert "signals.scoped" in why                      # no PID namespace to fall back on
    else:
        assert "signals.scoped" in plan.provides            # outside pids cannot be named


@pytest.mark.parametrize("name", ["bwrap", "firejail"])
def test_isolated_network_scopes_abstract_sockets_without_landlock(home, name):
    plan = plan_for(name, policy_for(home, "NETWORK_MODE=isolated\n", backend=name), abi=0)
    assert "abstract_unix.scoped" in plan.provides


# ---------------------------------------------------------------- bwrap + helper
def test_bwrap_scopes_the_spawning_thread_from_abi_6(home):
    plan = plan_for("bwrap", policy_for(home), abi=6)
    assert plan.spawn_ruleset == ll.ruleset(6, scoped=ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL)
    assert list(plan.argv)[-3:] == ["/usr/bin/env", "--", "claude"]
    assert "landlock" not in plan.payloads and "abstract_unix.scoped" in plan.provides
    old = plan_for("bwrap", policy_for(home), abi=5)
    assert old.spawn_ruleset is None and "abstract_unix.scoped" in dict(old.cannot)


def test_bwrap_can_scope_through_the_helper_instead(home):
    """For a setuid bwrap, which no_new_privs on the spawning thread would break."""
    policy = policy_for(home)
    payloads = {"seccomp": SECCOMP, "marker": Payload(data=b"m")}
    for item in ("etc-passwd", "etc-group", "etc-nsswitch.conf"):
        payloads[item] = Payload(data=b"root:x:0:0::/root:/bin/sh\n")
    plan = bwrap.plan(policy, ["claude"], payloads,
                      context=PlanContext("/usr/bin/bwrap", landlock_abi=6, program_setuid=True))
    argv = list(plan.argv)
    tail = argv[argv.index("--chdir") + 3:]
    assert tail[:5] == ["/usr/bin/python3", "-I", "-S", "-c", HELPER_BOOT]
    assert tail[6:] == ["--landlock", FdRef("landlock"), "--", "claude"]
    spec = marshal.loads(plan.payloads["landlock"].data)
    assert spec["fs"] == spec["net"] == 0 and spec["paths"] == ()
    assert spec["scoped"] == ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL
    assert "--seccomp" in argv and plan.spawn_ruleset is None   # bwrap loads seccomp itself


# ---------------------------------------------------------------- landlock
def landlock_rules(plan) -> dict[str, str]:
    return {path: report._rights(access) for _, access, path in plan.mounts}


def test_landlock_grants_by_allow_list(home):
    policy = policy_for(home, backend="landlock")
    plan = plan_for("landlock", policy)
    rules = landlock_rules(plan)
    assert rules["/usr"] == "ro"
    if policy.slurm_masks:
        # Slurm's configuration directories (slurm.key) are left out as bwrap
        # and firejail mask them: /etc is granted entry by entry around them.
        assert "/etc" not in rules and rules["/etc/passwd"] == "ro"
        assert not any(path == m or path.startswith(m + "/")
                       for path in rules for m in policy.slurm_masks), policy.slurm_masks
    else:
        assert rules["/etc"] == "ro"
    assert rules[str(home / "proj")] == "rw"
    assert rules[str(home / ".cache/tool")] == "rw"
    assert rules[str(home / ".bashrc")] == "ro" and rules[str(home / ".gitconfig")] == "ro"
    assert rules[str(home / ".config/agent-sandbox")] == "ro"
    assert rules["/dev/null"] == rules["/proc"] == "files"
    assert str(home) not in rules                            # tmpwrite: $HOME entry by entry
    # nothing hidden but the sandbox's own package cache, granted exactly
    assert rules[policy.package_cache] == "rw"
    for path in rules:
        assert path == policy.package_cache or not policy.is_hidden(path), path
    tmp = landlock_backend.scratch_tmp(policy)
    assert rules[tmp] == "rw" and "/tmp" not in rules
    assert plan.env["TMPDIR"] == tmp and plan.scratch_dirs == (tmp,)
    assert tmp == "/tmp/agent-sandbox.tmp-1000-sess01"
    argv = list(plan.argv)
    assert argv[argv.index("--cleanup") + 1] == tmp          # also after a killed launcher
    assert "GH_TOKEN" not in plan.env and plan.env["LD_LIBRARY_PATH"] == "/opt/lib"


@pytest.mark.parametrize("mode", ["read", "write"])
def test_landlock_carves_home_around_hidden_paths(home, mode):
    policy = policy_for(home, f"HOME_ACCESS={mode}\n", backend="landlock")
    rules = landlock_rules(plan_for("landlock", policy))
    assert str(home) not in rules and str(home / ".config") not in rules   # carved
    assert rules[str(home / "notes.txt")] == ("ro" if mode == "read" else "rw")
    assert rules[str(home / ".config/other")] == ("ro" if mode == "read" else "rw")
    assert rules[str(home / ".config/agent-sandbox")] == "ro"      # never writable
    for hidden in (".ssh", ".aws", ".netrc", ".config/gh", "keys"):
        assert not any(_is_within(p, str(home / hidden)) for p in rules), hidden
    assert not any(p.endswith("/keys") for p in rules)            # symlinks are not granted


def test_landlock_carves_protected_paths_out_of_a_declared_writable_directory(home):
    # opencode's writable state: its plugins (code it runs outside) stay
    # read-only (issue 27); the project's protected paths are not carved.
    state = home / ".config/opencode"
    (state / "plugins").mkdir(parents=True)
    (state / "log.txt").write_text("l")
    policy = policy_for(home, "HOME_WRITABLE+=(.config/opencode)\n"
                              "PROTECTED_PATHS+=(~/.config/opencode/plugins/)\n",
                        backend="landlock")
    rules = landlock_rules(plan_for("landlock", policy))
    assert str(state) not in rules                                   # carved
    assert rules[str(state / "plugins")] == "ro" and rules[str(state / "log.txt")] == "rw"
    assert rules[str(home / "proj")] == "rw"
    # A writable directory holding the project: the project is still not carved.
    policy = policy_for(home, "EXTRA_WRITABLE_PATHS=(~)\n", backend="landlock")
    assert landlock_rules(plan_for("landlock", policy))[str(home / "proj")] == "rw"


def test_landlock_home_write_keeps_the_agents_guarded_files_read_only(home):
    """Issue 31: HOME_ACCESS=write on landlock carves the protected paths of
    the home (a profile's guarded files) out read-only, as bwrap and firejail
    bind them; a missing one's directory is carved too, so it cannot be made."""
    claude = home / ".claude"
    (claude / "hooks").mkdir(parents=True)
    (claude / "settings.json").write_text("{}")
    (claude / "history.jsonl").write_text("")
    (home / ".claude.json").write_text("{}")
    policy = policy_for(home, "HOME_ACCESS=write\nPROTECTED_PATHS+=(~/.claude/settings.json "
                              "~/.claude/hooks/ ~/.claude.json ~/.claude/agents/)\n",
                        backend="landlock")
    rules = landlock_rules(plan_for("landlock", policy))
    assert str(home) not in rules and str(claude) not in rules          # carved
    for guarded in (claude / "settings.json", claude / "hooks", home / ".claude.json"):
        assert rules[str(guarded)] == "ro", guarded
    assert rules[str(claude / "history.jsonl")] == "rw"
    assert rules[str(home / "notes.txt")] == "rw" and rules[str(home / "proj")] == "rw"
    assert not any(_is_within(p, str(claude / "agents")) for p in rules)   # missing: not made
    assert not any(_is_within(p, str(home / ".ssh")) for p in rules)
    _, partial, cannot = landlock_backend.guarantees(policy)
    assert "HOME_ACCESS=write home stay" not in dict(cannot)["fs.protected"]


def test_landlock_grants_proc_with_truncate_and_dev_shm_for_files_only(home):
    """Issue 31: /proc with TRUNCATE (`echo 0 > /proc/self/oom_score_adj`,
    CUDA's cuInit); with PRIVATE_IPC (the default) /dev/shm for regular files
    only — no listing, no directories, links, sockets, fifos, nothing run."""
    spec = marshal.loads(plan_for("landlock", policy_for(home, backend="landlock"),
                                  abi=7).payloads["landlock"].data)
    granted = {path: access for access, path in spec["paths"]}
    assert granted["/proc"] == ll.READ_FILE | ll.READ_DIR | ll.WRITE_FILE | ll.TRUNCATE
    assert granted["/dev/shm"] == (ll.READ_FILE | ll.WRITE_FILE | ll.TRUNCATE | ll.MAKE_REG
                                   | ll.REMOVE_FILE)
    for right in (ll.READ_DIR, ll.MAKE_DIR, ll.MAKE_SYM, ll.MAKE_SOCK, ll.MAKE_FIFO,
                  ll.EXECUTE, ll.REFER, ll.MAKE_CHAR, ll.MAKE_BLOCK):
        assert not granted["/dev/shm"] & right, right
    assert spec["fs"] & ll.TRUNCATE              # handled, so the rule's right matters
    _, _, cannot = landlock_backend.guarantees(policy_for(home, backend="landlock"))
    assert "/dev/shm is the host's, granted for files but not listable" in \
        dict(cannot)["ipc.isolated"]


@pytest.mark.parametrize("name", BACKENDS)
def test_metadata_confined_follows_each_backends_view(home, name):
    provides, partial, cannot = TABLE[name].guarantees(policy_for(home, backend=name))
    rows_ = {**{g: "yes" for g in provides}, **{g: "partial" for g, _ in partial},
             **{g: "no" for g, _ in cannot}}
    assert rows_["metadata.confined"] == {"bwrap": "yes", "firejail": "partial",
                                          "landlock": "no"}[name]
    assert rows_["metadata.confined"] == rows_["fs.write_confined"] or name == "landlock"
    if name == "landlock":
        assert "chmod" in dict(cannot)["metadata.confined"]


def test_landlock_private_tmp_off_grants_the_shared_tmp(home):
    policy = policy_for(home, "PRIVATE_TMP=false\nPRIVATE_IPC=false\n", backend="landlock")
    plan = plan_for("landlock", policy)
    rules = landlock_rules(plan)
    assert rules["/var/tmp"] == "rw" and rules["/dev/shm"] == "rw"
    # /tmp itself, or (as here, where the test's $HOME lies below /tmp) carved
    assert rules.get("/tmp") == "rw" or any(p.startswith("/tmp/") for p in rules)
    assert plan.scratch_dirs == () and "TMPDIR" not in plan.env


def test_landlock_network_isolation_is_tcp_only_and_needs_abi_4(home):
    policy = policy_for(home, "NETWORK_MODE=isolated\n", backend="landlock")
    spec = marshal.loads(plan_for("landlock", policy, abi=4).payloads["landlock"].data)
    assert spec["net"] == ll.NET_BIND_TCP | ll.NET_CONNECT_TCP and spec["ports"] == ()
    assert any("partial" in n for n in plan_for("landlock", policy, abi=4).notes)
    assert landlock_backend.network_refusal(policy, landlock_abi=4) is None
    assert "ABI 4" in landlock_backend.network_refusal(policy, landlock_abi=3)


@pytest.mark.parametrize("abi,lost", [(1, "across directories (denied on ABI 1: EXDEV)"),
                                      (2, "truncation"), (3, "TCP"), (5, "scoping of signals")])
def test_what_a_lower_landlock_abi_lacks_is_in_the_notes_and_the_banner(home, abi, lost):
    """Landlock ABI 1 (Linux 5.13–5.18) denies renames across directories
    with EXDEV, < 3 cannot restrict truncate(2), < 4 has no TCP rules, < 6
    no scoping: --dry-run's notes and the banner say so (issue 30)."""
    from agent_sandbox.launch.report import banner

    policy = policy_for(home, backend="landlock")
    plan = plan_for("landlock", policy, abi=abi)
    note, = [n for n in plan.notes if n.startswith(f"Landlock ABI {abi} lacks: ")]
    assert lost in note
    assert f"; Landlock ABI {abi} lacks (see --dry-run)" in banner(policy, plan)
    partial = dict(plan.partial)
    assert ("fs.write_confined" in partial) == (abi < 3)
    latest = plan_for("landlock", policy, abi=ll.LATEST)
    assert not any(n.startswith("Landlock ABI") for n in latest.notes)
    assert "Landlock ABI" not in banner(policy, latest)


def test_landlock_plan_runs_the_helper_with_seccomp_session_and_lifeline(home):
    plan = plan_for("landlock", policy_for(home, backend="landlock"))
    argv = list(plan.argv)
    assert argv[:5] == ["/usr/bin/python3", "-I", "-S", "-c", HELPER_BOOT]
    for flag in ("--landlock", "--seccomp", "--lifeline", "--status"):
        assert argv[argv.index(flag) + 1] == FdRef(flag[2:])
    assert "--new-session" in argv and argv[-2:] == ["--", "claude"]
    assert plan.own_session and plan.started == "helper-exec"
    assert set(plan.payloads) == {"landlock", "seccomp"}
    spec = marshal.loads(plan.payloads["landlock"].data)
    assert spec["scoped"] == 3 and spec["fs"] == ll.fs_rights(7)


def test_a_landlock_jobs_shared_memory_directory_is_granted_by_descriptor(home):
    """jobs/shm.py: the directory the launcher checked reaches the helper
    as a descriptor (--landlock-dir), listed in the view, never in argv —
    granted to a compiled plan and to the plan cache's record of it alike."""
    from types import SimpleNamespace

    from agent_sandbox.jobs import shm as jobshm
    from agent_sandbox.plancache import plans as plancache

    shm = "/dev/shm/agent-sandbox-job-42-" + "ab" * 16
    held = SimpleNamespace(path=shm, rule_fd=7)
    policy = policy_for(home, backend="landlock")
    compiled = plan_for("landlock", policy)
    assert "--landlock-dir" not in compiled.argv        # never compiled in (cacheable)
    policy, plan = jobshm.with_job_shm(policy, compiled, held)
    argv = list(plan.argv)
    assert argv[argv.index("--landlock-dir") + 1] == FdRef("shm")
    assert argv[-2:] == list(compiled.argv[-2:])        # before `--` and the command
    assert plan.payloads["shm"] == Payload(fd=7)
    assert landlock_rules(plan)[shm] == "rw"
    assert not any(shm in str(a) for a in argv)
    assert plan.env[jobshm.SHM_ENV] == policy.env[jobshm.SHM_ENV] == shm
    assert not hasattr(policy, "job_shm")      # the launch's: lifecycle.Launch.job_shm
    spec = marshal.loads(plan.payloads["landlock"].data)
    assert shm not in [path for _, path in spec["paths"]]      # not looked up by name
    record = plancache.thaw(plancache.freeze(compiled), str, bytes, {})
    assert jobshm.with_job_shm(policy_for(home, backend="landlock"), record, held)[1] == plan
    with pytest.raises(PolicyError):
        jobshm.with_job_shm(policy, plan_for("bwrap", policy_for(home)), held)


def test_the_landlock_report_says_how_a_jobs_ranks_share_memory(home):
    policy = policy_for(home, backend="landlock")
    text = report.dry_run_report(policy, plan_for("landlock", policy), ())
    jobs = next(line for line in text.splitlines() if line.startswith("jobs:"))
    assert "per-job directory in /dev/shm" in jobs and "no single-copy/CMA" in jobs
    assert "TCP" not in jobs


def test_landlock_denies_ptrace_in_its_seccomp_list():
    from agent_sandbox.policy.seccomp import deny_list

    assert {"ptrace", "process_vm_readv", "process_vm_writev"} <= set(
        deny_list(no_pid_namespace=True))


@pytest.mark.parametrize("mode", ["tmpwrite", "restricted", "read", "write"])
def test_landlock_says_what_each_home_mode_means_there(home, mode):
    plan = plan_for("landlock", policy_for(home, f"HOME_ACCESS={mode}\n", backend="landlock"))
    assert any(note.startswith(f"HOME_ACCESS={mode}") for note in plan.notes)


# ---------------------------------------------------------------- firejail
def options(plan) -> list[str]:
    """The profile's lines, spelled as the equivalent command-line options."""
    return ["--" + op[1].replace(" ", "=", 1) for op in plan.mounts]


def test_firejail_options_in_load_bearing_order(home):
    policy = policy_for(home, backend="firejail")
    plan = plan_for("firejail", policy)
    opts = options(plan)
    kinds = [o.split("=", 1)[0] for o in opts if "=" in o]
    # blacklist (top level), whitelist, read-only, read-write, read-only, blacklist
    first = {k: kinds.index(k) for k in ("--blacklist", "--whitelist", "--read-only")}
    assert first["--blacklist"] < first["--whitelist"] < first["--read-only"]
    assert "--blacklist=/srv" in opts and "--blacklist=/data" in opts
    assert "--blacklist=/bin" in opts or "--read-only=/bin" not in opts
    for top in ("/usr", "/etc", "/tmp", "/proc"):      # (this test's $HOME is below /tmp)
        assert f"--blacklist={top}" not in opts
    assert f"--whitelist={home}/{firejail.SENTINEL}" in opts       # the tmpfs home, always
    assert f"--whitelist=/run/{firejail.SENTINEL}" in opts
    assert "--whitelist=/var/tmp" in opts
    assert f"--whitelist={home}/.profile" in opts and f"--read-only={home}/.profile" in opts
    assert f"--whitelist={home}/.cache/tool" in opts
    assert f"--read-only={home}/.cache/tool" not in opts
    ro_git = opts.index(f"--read-only={home}/proj/.git/config")
    assert ro_git > max(i for i, o in enumerate(opts) if o.startswith("--whitelist="))
    for hidden in (".ssh", ".aws", ".netrc", ".config/gh"):
        assert not any(o.startswith(f"--whitelist={home}/{hidden}") for o in opts)


def test_firejail_copies_the_shell_rc_file_instead_of_whitelisting_it(home):
    plan = plan_for("firejail", policy_for(home, backend="firejail"))
    argv = list(plan.argv)
    assert f"--whitelist={home}/.bashrc" not in argv
    seeds = [argv[i + 2] for i, a in enumerate(argv) if a == "--seed"]
    assert str(home / ".bashrc") in seeds and str(home / ".gitconfig") in seeds
    names = {argv[i + 1].name for i, a in enumerate(argv) if a == "--seed"}
    assert all(plan.payloads[n].path for n in names)


def test_firejail_restricted_home_is_read_only_but_the_rc_copy_is_writable(home):
    plan = plan_for("firejail", policy_for(home, "HOME_ACCESS=restricted\n", backend="firejail"))
    opts = options(plan)
    ro_home = opts.index(f"--read-only={home}")
    assert opts.index(f"--read-write={home}/.bashrc") > ro_home
    assert opts.index(f"--read-write={home}/proj") > ro_home
    assert opts.index(f"--read-write={home}/.cache/tool") > ro_home
    assert f"--whitelist={home}/.gitconfig" in opts      # restricted: the real file, read-only
    assert opts.index(f"--read-only={home}/proj/.git/config") > opts.index(
        f"--read-write={home}/proj")


@pytest.mark.parametrize("mode", ["read", "write"])
def test_firejail_read_and_write_modes_carve_home(home, mode):
    opts = options(plan_for("firejail", policy_for(home, f"HOME_ACCESS={mode}\n",
                                                     backend="firejail")))
    assert f"--whitelist={home}/notes.txt" in opts
    assert f"--whitelist={home}/.config/other" in opts
    assert f"--whitelist={home}/.config" not in opts       # carved around .config/gh
    assert f"--whitelist={home}/keys" not in opts          # symlinks are never whitelisted
    assert (f"--read-only={home}/notes.txt" in opts) == (mode == "read")
    assert f"--read-only={home}/.config/agent-sandbox" in opts


def test_firejail_hidden_path_under_a_system_tree_is_blacklisted_and_partial(home, tmp_path):
    secret = tmp_path / "etc-secret"
    secret.mkdir()
    policy = policy_for(home, f"EXTRA_BLOCKED_PATHS=({secret})\n", backend="firejail")
    policy = policy._replace(system_readonly=policy.system_readonly + (str(tmp_path),))
    plan = plan_for("firejail", policy)
    assert f"--blacklist={secret}" in options(plan)
    assert dict(plan.partial)["fs.hidden"].endswith(str(secret))


def test_firejail_environment_travels_on_a_descriptor(home):
    plan = plan_for("firejail", policy_for(home, backend="firejail"))
    env = dict(item.split("=", 1) for item in
               plan.payloads["env"].data.decode().split("\0"))
    assert env["LD_LIBRARY_PATH"] == "/opt/lib" and "GH_TOKEN" not in env
    assert set(plan.env) <= {"PATH", "TERM", "LANG", "LC_ALL"}   # firejail's own, no secrets
    assert "secret-value" not in " ".join(map(str, plan.argv))
    argv = list(plan.argv)
    assert "--pid-namespace" in argv and "--new-session" in argv
    assert argv.index("--") < argv.index("/usr/bin/python3")
    assert argv[-1] == "--" and "claude" not in argv         # the command is on --argv
    assert plan.payloads["argv"].data == b"claude"
    assert argv[argv.index("--quiet") - 1] == "/usr/bin/firejail"
    assert FdRef("profile", "--profile=/proc/self/fd/") in argv
    assert render_argv(plan.argv, {n: 9 for n in plan.payloads} | {"status": 9, "lifeline": 9}).count(
        "--profile=/proc/self/fd/9") == 1


def test_firejail_namespace_options_follow_the_policy(home):
    argv = list(plan_for("firejail", policy_for(home, backend="firejail")).argv)
    assert "--ipc-namespace" in argv and "--private-tmp" in argv and "--net=none" not in argv
    for fixed in firejail.FIXED:
        assert fixed in argv
    argv = list(plan_for("firejail", policy_for(
        home, "PRIVATE_IPC=false\nPRIVATE_TMP=false\nNETWORK_MODE=isolated\n",
        backend="firejail")).argv)
    assert "--keep-dev-shm" in argv and "--keep-var-tmp" in argv and "--net=none" in argv
    assert "--ipc-namespace" not in argv and "--private-tmp" not in argv


def test_firejail_device_classes(home, tmp_path):
    policy = policy_for(home, backend="firejail")._replace(devices=("/dev/nvidia0",))
    args, _, unavailable = firejail.device_args(policy)
    assert "--no3d" not in args and "--nosound" in args and unavailable == []
    policy = policy._replace(devices=("/dev/fuse",))
    args, _, unavailable = firejail.device_args(policy)
    assert "--no3d" in args and unavailable == ["/dev/fuse"]


def test_firejail_never_passes_a_path_it_would_interpret(home):
    (home / ".conf*").mkdir()            # a whitelist would glob: .config, .conf*, …
    (home / "$HOME").write_text("x")
    plan = plan_for("firejail", policy_for(home, "HOME_ACCESS=read\n", backend="firejail"))
    opts = options(plan)
    assert not any("*" in o or "$" in o for o in opts)
    assert any("not granted" in n and ".conf*" in n for n in plan.notes)
    policy = policy_for(home, f"EXTRA_BLOCKED_PATHS=({home.parent}/x*)\n", backend="firejail")
    policy = policy._replace(system_readonly=policy.system_readonly + (str(home.parent),))
    (home.parent / "x*").mkdir()
    with pytest.raises(PolicyError, match="contains a character firejail interprets"):
        plan_for("firejail", policy)


# ---------------------------------------------------------------- selection
def test_auto_takes_the_first_that_is_found_and_probes():
    probed = []

    def probe(name, path):
        probed.append(name)
        return name != "bwrap", "bwrap: setting up uid map: Permission denied"

    chosen = select("auto", BACKENDS, find=lambda n: f"/usr/bin/{n}", probe=probe)
    assert chosen.name == "firejail" and chosen.path == "/usr/bin/firejail"
    assert probed == ["bwrap", "firejail"]
    assert chosen.reason.startswith("auto: bwrap probe failed (bwrap: setting up uid map")
    assert chosen.reason.endswith("firejail passed its probe")
    first = select("auto", BACKENDS, find=lambda n: n, probe=lambda n, p: (True, ""))
    assert first.name == "bwrap" and "first of bwrap → firejail → landlock" in first.reason


def test_auto_skips_missing_and_disallowed_backends():
    chosen = select("auto", ("firejail", "landlock"),
                    find=lambda n: None if n == "firejail" else n, probe=lambda n, p: (True, ""))
    assert chosen.name == "landlock"
    assert dict(chosen.passed_over) == {"bwrap": "not in ALLOWED_BACKENDS",
                                        "firejail": "not found"}
    assert chosen.reason == ("auto: bwrap not in ALLOWED_BACKENDS; firejail not found; "
                             "landlock passed its probe")


def test_no_backend_at_all_names_each_cause_and_fix():
    with pytest.raises(Unavailable) as info:
        select("auto", BACKENDS, find=lambda n: None, probe=lambda n, p: (True, ""))
    text = str(info.value)
    assert "apt-get install bubblewrap" in text and "apt-get install firejail" in text
    assert "Landlock" in text and text.endswith("The command was not run.")


def test_an_explicit_backend_is_probed_too():
    with pytest.raises(Unavailable) as info:
        select("bwrap", BACKENDS, find=lambda n: "/usr/bin/bwrap",
               probe=lambda n, p: (False, "No permissions to creating new namespace"))
    assert "user namespaces" in str(info.value) and "--backend" in str(info.value)
    with pytest.raises(Unavailable, match="not allowed here"):
        select("firejail", ("bwrap",), find=lambda n: n, probe=lambda n, p: (True, ""))
    chosen = select("landlock", BACKENDS, find=lambda n: n, probe=lambda n, p: (True, ""),
                    origin="with --backend")
    assert chosen.reason == "requested with --backend"


# ---------------------------------------------------------------- REQUIRE
class FakeSettings:
    ALLOWED_BACKENDS = BACKENDS
    SANDBOX_BACKEND = "landlock"        # explicit: no implied requirement
    SLURM_BOUNDARY_OPTIONAL = False
    JOB_ALLOW_WEAKER_BACKEND = False

    def __init__(self, **changes):
        self.__dict__.update(changes)


SLURM_HOST = ("/usr/bin/sbatch", "/usr/bin/srun")


@pytest.mark.parametrize("agent, requested", [(True, "landlock"), (False, "auto"),
                                              (True, "auto")])
def test_a_slurm_host_refuses_landlock_for_agents_and_auto(home, agent, requested):
    """SPEC §5a: on a host with Slurm, agent profiles and auto never run
    without slurm.boundary (landlock: the real srun escapes); the refusal
    says why, what would give it and the admin's switch."""
    policy = policy_for(home, backend="landlock")._replace(slurm_binaries=SLURM_HOST)
    settings = FakeSettings(SANDBOX_BACKEND=requested)
    plan = plan_for("landlock", policy)._replace(chosen_because="auto: bwrap probe failed")
    assert launcher.implied_require(settings, policy, agent=agent) == ("slurm.boundary",)
    with pytest.raises(PolicyError) as info:
        launcher.check_required(plan, policy, settings, 7, agent=agent)
    text = str(info.value)
    assert info.value.reason == "requirement_unmet"
    assert "Slurm host" in text and "slurm.boundary" in text and "munge" in text
    assert "bwrap or firejail" in text and "SLURM_BOUNDARY_OPTIONAL=true" in text
    assert ("--backend landlock explicitly" in text) is (not agent)
    launcher.check_required(plan_for("bwrap", policy), policy, settings, 7, agent=agent)


@pytest.mark.parametrize("changes, slurm, agent, job", [
    ({}, (), True, False),                                    # no Slurm here
    ({}, SLURM_HOST, False, False),                           # explicit --backend, plain run
    ({"SLURM_BOUNDARY_OPTIONAL": True}, SLURM_HOST, True, False),     # the admin's word
    ({"JOB_ALLOW_WEAKER_BACKEND": True, "SANDBOX_BACKEND": "auto"}, SLURM_HOST, False, True),
])
def test_landlock_without_the_boundary_runs_where_nothing_requires_it(home, changes, slurm,
                                                                      agent, job):
    policy = policy_for(home, backend="landlock")._replace(slurm_binaries=slurm)
    settings = FakeSettings(**changes)
    assert launcher.implied_require(settings, policy, agent=agent, job=job) == ()
    launcher.check_required(plan_for("landlock", policy), policy, settings, 7, agent=agent,
                            job=job)


def test_require_refuses_and_names_a_backend_that_would_satisfy(home):
    policy = policy_for(home, "REQUIRE=(pid.isolated)\n", backend="landlock")
    plan = plan_for("landlock", policy)
    with pytest.raises(PolicyError) as info:
        launcher.check_required(plan, policy, FakeSettings(), 7)
    text = str(info.value)
    assert "pid.isolated" in text and "bwrap or firejail would give it" in text
    assert "--backend bwrap" in text
    launcher.check_required(plan_for("bwrap", policy), policy, FakeSettings(), 7)


def test_require_of_a_partial_guarantee_refuses(home):
    policy = policy_for(home, "REQUIRE=(passwd.filtered)\n", backend="firejail")
    with pytest.raises(PolicyError, match="bwrap would give it"):
        launcher.check_required(plan_for("firejail", policy), policy, FakeSettings(), 7)


def test_require_nobody_can_give_says_so(home):
    policy = policy_for(home, "REQUIRE=(ipc.isolated)\nPRIVATE_IPC=false\n", backend="bwrap")
    with pytest.raises(PolicyError, match="no allowed backend gives it"):
        launcher.check_required(plan_for("bwrap", policy), policy, FakeSettings(), 7)


# ---------------------------------------------------------------- report
def test_report_shows_the_choice_partial_rows_and_differences(home):
    policy = policy_for(home, backend="firejail")
    plan = plan_for("firejail", policy)._replace(chosen_because="auto: bwrap not found")
    text = report.dry_run_report(policy, plan, ("bpf",))
    assert "backend:   firejail (auto: bwrap not found)" in text
    assert any(line.split()[:2] == ["partial", "passwd.filtered"]
               for line in text.splitlines())
    assert "firejail profile (--profile), in order" in text and "how firejail differs" in text
    assert "<fd:argv>: claude" in text
    assert "secret-value" not in text
    line = report.banner(policy, plan)
    assert "(auto: bwrap not found)" in line
    assert "partly enforced: fs.write_confined, passwd.filtered" in line


def test_landlock_report_lists_rules_and_what_it_cannot(home):
    policy = policy_for(home, backend="landlock")
    plan = plan_for("landlock", policy)
    text = report.dry_run_report(policy, plan, ())
    assert "Landlock rules" in text and f"rw         {home}/proj" in text
    banner = report.banner(policy, plan)
    for missing in ("fs.hidden", "pid.isolated", "slurm.boundary", "fs.protected"):
        assert missing in banner


def test_module_lookup_matches_the_auto_order():
    assert [TABLE[n].name for n in BACKENDS] == list(BACKENDS) == list(TABLE)
    assert isinstance(Selection("bwrap", "/usr/bin/bwrap", "r"), tuple)


# ---------------------------------------------------------------- relayed terminal
@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("abi", [5, 7])
def test_a_relayed_terminal_is_taken_by_the_helper_in_a_new_session(home, name, abi):
    """PlanContext.terminal (a launch fact): every backend starts the command through the helper
    with --controlling-tty (setsid + TIOCSCTTY inside); without it, no helper
    option takes a terminal."""
    policy = policy_for(home, backend=name)
    plain = [str(a) for a in plan_for(name, policy, abi=abi).argv]
    assert "--controlling-tty" not in plain
    argv = [str(a) for a in plan_for(name, policy, abi=abi, terminal=True).argv]
    assert argv.count("--controlling-tty") == 1 and "--new-session" not in argv[
        argv.index(HELPER_BOOT):]
    assert argv[argv.index("--controlling-tty"):][-2:] == ["--", "claude"] or name == "firejail"
    if name == "bwrap":   # scoping stays on the spawning thread, seccomp with bwrap
        plan = plan_for(name, policy, abi=abi, terminal=True)
        assert (plan.spawn_ruleset is not None) == (abi >= 6)
        assert "landlock" not in plan.payloads and "/usr/bin/env" not in argv


def test_a_program_in_a_place_others_or_the_user_can_write_is_not_run_outside(tmp_path):
    """bwrap, firejail and git run outside the sandbox: one found where the
    user (so a sandbox of theirs) or anyone could have written it is passed
    over and the PATH search goes on (paths.runnable_outside)."""
    import shutil

    from agent_sandbox.backends.base import FunctionBackend
    from agent_sandbox.traits import TRAITS
    from agent_sandbox.paths import runnable_outside
    from agent_sandbox.policy.gitrepo import find_git

    planted = tmp_path / "bin"          # below /tmp: anyone can write there
    planted.mkdir()
    for name in ("env", "git"):
        shutil.copy(f"/usr/bin/{name}", planted / name)
    assert runnable_outside("/usr/bin/env") and not runnable_outside(str(planted / "env"))
    backend = FunctionBackend("x", "env", traits=TRAITS["firejail"], guarantees=None,
                              plan=None, probe_argv=None)
    assert backend.find(f"{planted}:/usr/bin") == "/usr/bin/env"
    assert backend.find(str(planted)) is None
    assert find_git(f"{planted}:/usr/bin:/bin") in ("/usr/bin/git", "/bin/git")


@pytest.mark.parametrize("mode", ["tmpwrite", "write"])
@pytest.mark.parametrize("name", BACKENDS)
def test_an_agents_session_copy_in_the_hidden_run_directory_is_granted_alone(home, name, mode):
    # agents/copy.py: the copy root lies in the always-hidden run
    # directory; only it is granted (writable), nothing else of the run
    # directory nor of the job staging root — whatever the home grants.
    policy = policy_for(home, f"HOME_ACCESS={mode}\nHOME_WRITABLE+=(.local .cache)\n",
                        backend=name)
    run = home / ".local/state/agent-sandbox-run"
    root = str(run / "agents/sess01")
    other = str(run / "agents/other")
    staging = home / ".local/share/agent-sandbox/jobs"
    for path in (root, other, str(staging / "someproject")):
        Path(path).mkdir(parents=True)
    assert policy.is_hidden(root) and policy.is_hidden(str(staging / "someproject"))
    policy = policy._replace(extra_writable=policy.extra_writable + (root,))
    plan = plan_for(name, policy)
    if name == "landlock":
        rules = landlock_rules(plan)
        granted = {p: r for p, r in rules.items() if _is_within(p, str(run))
                   or _is_within(p, str(staging))}
        assert granted == {root: "rw"}
    elif name == "bwrap":
        argv = list(plan.argv)
        pairs = {(argv[i], argv[i + 1], argv[i + 2]) for i in range(len(argv) - 2)
                 if argv[i] in ("--bind", "--ro-bind", "--bind-try", "--ro-bind-try")}
        granted = {(op, src) for op, src, _ in pairs if _is_within(src, str(run))
                   or _is_within(src, str(staging))}
        assert granted == {("--bind", root)}
    else:
        opts = options(plan)
        granted = [o for o in opts if str(run) in o or str(staging) in o]
        assert f"--whitelist={root}" in granted
        assert not any(other in o or "someproject" in o for o in granted), granted
