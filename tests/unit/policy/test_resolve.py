"""Unit tests for agent_sandbox.policy.resolve: Settings + LaunchContext → Policy.

Every test builds a real directory tree under tmp_path (a fake $HOME with
credentials, dotfiles and a project) and real Settings from the shipped
defaults, so the rules are checked against the configuration users get."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.policy.resolve import CREDENTIAL_DIRS, resolve_policy
from tests.support.homes import HOME_MODES, USER, context, settings_for

def policy_for(home: Path, settings=None, **ctx_kwargs):
    settings = settings if settings is not None else settings_for(home)
    return resolve_policy(settings, context(home, **ctx_kwargs), backend="bwrap")


# ---------------------------------------------------------------- hidden paths
ALWAYS_HIDDEN = (".ssh", ".aws", ".gnupg", ".kube", ".docker", ".local/state/agent-sandbox")


@pytest.mark.parametrize("mode", HOME_MODES)
def test_credential_dirs_are_hidden_in_every_home_mode(home, mode):
    policy = policy_for(home, settings_for(home, f"HOME_ACCESS={mode}\n"))
    assert policy.home_access == mode
    for entry in ALWAYS_HIDDEN + (".netrc", ".config/gh", ".git-credentials"):
        assert str(home / entry) in policy.hidden, entry
        assert policy.is_hidden(str(home / entry / "deeper"))
    assert not policy.is_hidden(str(home / ".config"))
    assert not policy.is_hidden(str(home / ".config" / "other"))
    assert not policy.is_hidden(str(home / ".sshfoo"))          # prefix, not a path parent


def test_credential_dirs_cannot_be_configured_away(home):
    conf = "BLOCKED_FILES=(.only_this)\nEXTRA_BLOCKED_PATHS=()\nHOME_ACCESS=write\n"
    policy = policy_for(home, settings_for(home, conf))
    for entry in CREDENTIAL_DIRS:
        assert str(home / entry) in policy.hidden
    assert str(home / ".only_this") in policy.hidden


def test_netrc_and_gh_stay_hidden_when_the_user_replaces_blocked_files(home):
    """SPEC §4: credential paths are hidden in every mode — `.ssh`, `.aws`,
    `.gnupg`, *plus `.netrc`, `.config/gh`* (the latter unless a profile grants
    it; no profile does here). A user who writes BLOCKED_FILES=(…) instead of
    BLOCKED_FILES+=(…) must not silently un-hide them."""
    policy = policy_for(home, settings_for(home, "BLOCKED_FILES=(.my_private_notes)\n"))
    assert policy.is_hidden(str(home / ".netrc"))
    assert policy.is_hidden(str(home / ".config" / "gh" / "hosts.yml"))


def test_hidden_includes_realpath_of_symlinked_credential_dir(home, tmp_path):
    store = tmp_path / "nfs" / "keys" / USER
    store.mkdir(parents=True)
    (store / "id_ed25519").write_text("KEY")
    real_ssh = home / ".ssh"
    for child in real_ssh.iterdir():
        child.unlink()
    real_ssh.rmdir()
    real_ssh.symlink_to(store)
    policy = policy_for(home)
    assert str(home / ".ssh") in policy.hidden
    assert str(store) in policy.hidden
    assert policy.is_hidden(str(store / "id_ed25519"))
    assert not policy.is_hidden(str(store.parent))


def test_hidden_includes_realpath_when_a_parent_is_a_symlink(home, tmp_path):
    elsewhere = tmp_path / "data" / "config"
    (elsewhere / "gh").mkdir(parents=True)
    (elsewhere / "gh" / "hosts.yml").write_text("token")
    (elsewhere / "other").mkdir()
    config = home / ".config"
    import shutil

    shutil.rmtree(config)
    config.symlink_to(elsewhere)
    policy = policy_for(home)
    assert policy.is_hidden(str(elsewhere / "gh" / "hosts.yml"))
    assert not policy.is_hidden(str(elsewhere / "other"))


def test_extra_blocked_paths_are_hidden_anywhere(home, tmp_path):
    secret = tmp_path / "lab" / "secrets"
    secret.mkdir(parents=True)
    policy = policy_for(home, settings_for(home, f"EXTRA_BLOCKED_PATHS=({secret})\n"))
    assert policy.is_hidden(str(secret / "x"))
    assert not policy.is_hidden(str(tmp_path / "lab"))


# ---------------------------------------------------------------- project dir
def refused(home, settings=None, **ctx_kwargs) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        policy_for(home, settings, **ctx_kwargs)
    assert info.value.reason == "bad_project_dir"
    return info.value


def test_project_is_realpath_of_cwd_by_default(home, tmp_path):
    link = tmp_path / "home" / "link-to-proj"
    link.symlink_to(home / "proj")
    policy = policy_for(home, cwd=link)
    assert policy.project_dir == str(home / "proj")
    assert policy.workdir == str(home / "proj")


def test_project_may_not_be_home(home):
    error = refused(home, cwd=home)
    message = str(error)
    assert str(home) in message
    assert "home directory itself" in message
    assert "--project-dir" in message


def test_project_may_not_be_home_through_a_symlink(home, tmp_path):
    link = tmp_path / "homelink"
    link.symlink_to(home)
    assert "home directory itself" in str(refused(home, project_dir=link))


def test_project_may_not_be_root(home):
    settings = settings_for(home, "ALLOWED_PROJECT_PARENTS=(/)\n")
    error = refused(home, settings, project_dir="/")
    assert "it is /" in str(error)
    assert "--project-dir" in str(error)


def test_project_may_not_lie_inside_a_hidden_path(home):
    inside = home / ".ssh" / "sub"
    inside.mkdir()
    message = str(refused(home, project_dir=inside))
    assert "inside the hidden path" in message
    assert str(home / ".ssh") in message


def test_project_may_not_be_a_symlink_into_a_hidden_path(home):
    link = home / "proj" / "keys"
    link.symlink_to(home / ".ssh")
    message = str(refused(home, project_dir=link))
    assert "inside the hidden path" in message


def test_project_may_not_contain_a_hidden_path(home):
    message = str(refused(home, project_dir=home / ".config"))
    assert f"contains the hidden path {home / '.config'}/" in message


def test_project_may_not_be_a_parent_of_home(home, tmp_path):
    settings = settings_for(home, f"ALLOWED_PROJECT_PARENTS=({tmp_path})\n")
    message = str(refused(home, settings, project_dir=tmp_path / "home"))
    assert "contains the hidden path" in message


def test_project_may_not_contain_the_realpath_of_a_hidden_path(home, tmp_path):
    store = tmp_path / "scratch" / "keys"
    store.mkdir(parents=True)
    import shutil

    shutil.rmtree(home / ".ssh")
    (home / ".ssh").symlink_to(store)
    settings = settings_for(home, f"ALLOWED_PROJECT_PARENTS+=({tmp_path / 'scratch'})\n")
    (tmp_path / "scratch" / "ok").mkdir()
    assert policy_for(home, settings, project_dir=tmp_path / "scratch" / "ok")
    message = str(refused(home, settings, project_dir=tmp_path / "scratch"))
    assert "contains the hidden path" in message
    assert str(store) in message


def test_project_outside_allowed_parents_is_refused(home, tmp_path):
    outside = tmp_path / "elsewhere" / "proj"
    outside.mkdir(parents=True)
    message = str(refused(home, project_dir=outside))
    assert "not under an allowed project parent" in message
    assert str(home) in message                         # names the configured parents
    assert "ALLOWED_PROJECT_PARENTS" in message
    # The line to paste (issue 36 item 8).
    assert f"`ALLOWED_PROJECT_PARENTS+=({outside.parent})` to " \
        "~/.config/agent-sandbox/sandbox.conf" in message


def test_the_project_parent_itself_is_refused_without_contradiction(home, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    settings = settings_for(home, f"ALLOWED_PROJECT_PARENTS+=({scratch})\n")
    message = str(refused(home, settings, project_dir=scratch))
    assert f"it is the project parent {scratch} itself" in message
    assert "not under an allowed project parent" not in message
    assert f"a project below it ({scratch}/NAME)" in message


def test_allowed_parent_added_by_the_user_admits_a_project(home, tmp_path):
    outside = tmp_path / "scratch" / "proj"
    outside.mkdir(parents=True)
    settings = settings_for(home, f"ALLOWED_PROJECT_PARENTS+=({tmp_path / 'scratch'})\n")
    policy = policy_for(home, settings, project_dir=outside, cwd=outside)
    assert policy.project_dir == str(outside)


def test_allowed_parent_prefix_is_not_a_parent(home, tmp_path):
    sibling = tmp_path / "home" / (USER + "2")
    sibling.mkdir()
    assert "not under an allowed project parent" in str(refused(home, project_dir=sibling))


def test_project_under_denied_writable_path_is_refused(home):
    settings = settings_for(home, f"DENIED_WRITABLE_PATHS=({home / 'proj'})\n")
    message = str(refused(home, settings))
    assert "DENIED_WRITABLE_PATHS" in message
    assert str(home / "proj") in message
    assert "elsewhere" in message


def test_missing_project_is_refused_with_a_fix(home):
    message = str(refused(home, project_dir=home / "nope"))
    assert "does not exist" in message
    assert "--project-dir" in message


def test_project_that_is_a_file_is_refused(home):
    message = str(refused(home, project_dir=home / "proj" / "src" / "main.py"))
    assert "not a directory" in message


# ---------------------------------------------------------------- workdir
def test_workdir_is_cwd_inside_the_project(home):
    policy = policy_for(home, cwd=home / "proj" / "src", project_dir=home / "proj")
    assert policy.project_dir == str(home / "proj")
    assert policy.workdir == str(home / "proj" / "src")
    assert policy.env["PWD"] == policy.workdir


def test_workdir_is_the_project_when_cwd_is_outside(home, tmp_path):
    policy = policy_for(home, cwd=tmp_path, project_dir=home / "proj")
    assert policy.workdir == str(home / "proj")
    assert policy.env["PWD"] == str(home / "proj")


def test_workdir_is_the_project_when_cwd_is_a_prefix_sibling(home):
    (home / "proj2").mkdir()
    policy = policy_for(home, cwd=home / "proj2", project_dir=home / "proj")
    assert policy.workdir == str(home / "proj")


# ---------------------------------------------------------------- writable entries
def warnings_for(policy, key):
    return [w for w in policy.warnings if w.startswith(f"{key}:")]


def test_no_home_entry_is_writable_by_default_but_the_sandboxs_own_cache(home):
    policy = policy_for(home)
    assert policy.home_writable == ()
    assert policy.extra_writable == (policy.package_cache,)
    assert policy.package_cache.startswith(str(home / ".local/state/agent-sandbox-caches/proj-"))
    assert policy.env["UV_CACHE_DIR"] == policy.package_cache + "/uv"
    assert policy.warnings == ()


def test_missing_writable_entries_are_skipped_silently(home):
    policy = policy_for(home, settings_for(home, "HOME_WRITABLE+=(.not-there)\n"))
    assert str(home / ".not-there") not in policy.home_writable
    assert policy.warnings == ()


def test_home_writable_symlink_is_dropped_with_warning(home):
    (home / "proj" / "out").mkdir()
    (home / ".cache" / "link").symlink_to(home / "proj" / "out")
    policy = policy_for(home, settings_for(home, "HOME_WRITABLE+=(.cache/link)\n"))
    assert str(home / ".cache/link") not in policy.home_writable
    (warning,) = warnings_for(policy, "HOME_WRITABLE")
    assert str(home / ".cache/link") in warning and "symlink" in warning


def test_home_writable_under_hidden_path_is_dropped_with_warning(home):
    (home / ".ssh" / "agent").mkdir()
    policy = policy_for(home, settings_for(home, "HOME_WRITABLE+=(.cache/tool .ssh/agent .config/gh)\n"))
    assert policy.home_writable == (str(home / ".cache/tool"),)
    warnings = warnings_for(policy, "HOME_WRITABLE")
    assert len(warnings) == 2
    assert all("hidden" in w for w in warnings)


def test_home_writable_reaching_hidden_path_through_symlinked_parent_is_dropped(home):
    (home / ".ssh" / "sockets").mkdir()
    (home / "dots").symlink_to(home / ".ssh")
    policy = policy_for(home, settings_for(home, "HOME_WRITABLE+=(dots/sockets)\n"))
    assert str(home / "dots/sockets") not in policy.home_writable
    (warning,) = warnings_for(policy, "HOME_WRITABLE")
    assert "hidden" in warning


def test_extra_writable_checks(home, tmp_path):
    ok = tmp_path / "scratch" / "ok"
    denied_root = tmp_path / "shared"
    denied_child = denied_root / "results"
    link = tmp_path / "scratch" / "link"
    for path in (ok, denied_child):
        path.mkdir(parents=True)
    link.symlink_to(ok)
    (home / ".aws" / "cache").mkdir()
    conf = (f"EXTRA_WRITABLE_PATHS=({ok} {denied_child} {link} {home / '.aws/cache'})\n"
            f"DENIED_WRITABLE_PATHS=({denied_root})\n")
    policy = policy_for(home, settings_for(home, conf))
    assert policy.extra_writable == (str(ok), policy.package_cache)
    warnings = warnings_for(policy, "EXTRA_WRITABLE_PATHS")
    assert len(warnings) == 3
    by_path = {path: next(w for w in warnings if f"dropped {path} " in w)
               for path in (str(denied_child), str(link), str(home / ".aws/cache"))}
    assert "DENIED_WRITABLE_PATHS" in by_path[str(denied_child)]
    assert "symlink" in by_path[str(link)]
    assert "hidden" in by_path[str(home / ".aws/cache")]


def test_denied_path_given_through_a_symlink_still_denies(home, tmp_path):
    real = tmp_path / "shared"
    (real / "data").mkdir(parents=True)
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    conf = f"EXTRA_WRITABLE_PATHS=({real / 'data'})\nDENIED_WRITABLE_PATHS=({alias})\n"
    policy = policy_for(home, settings_for(home, conf))
    assert policy.extra_writable == (policy.package_cache,)
    assert warnings_for(policy, "EXTRA_WRITABLE_PATHS")


def test_home_writable_under_denied_path_is_dropped(home):
    conf = f"HOME_WRITABLE=(.cache/tool .local/share)\nDENIED_WRITABLE_PATHS=({home / '.cache'} {home / '.local'})\n"
    policy = policy_for(home, settings_for(home, conf))
    assert policy.home_writable == ()
    warnings = warnings_for(policy, "HOME_WRITABLE")
    assert len(warnings) == 2
    assert all("DENIED_WRITABLE_PATHS" in w for w in warnings)


# ---------------------------------------------------------------- read-only / seeded
def test_home_readonly_keeps_existing_non_hidden_entries_only(home):
    (home / "sshlink").symlink_to(home / ".ssh")
    conf = "HOME_READONLY=(.bashrc .local/bin .missing .ssh .config/gh sshlink .config/other)\n"
    policy = policy_for(home, settings_for(home, conf))
    assert policy.home_readonly == (str(home / ".bashrc"), str(home / ".local/bin"),
                                    str(home / ".config/other"))


def test_seeded_files_are_regular_non_hidden_files(home):
    (home / ".seed-link").symlink_to(home / ".ssh" / "config")
    (home / ".seeddir").mkdir()
    conf = "HOME_SEEDED_FILES=(.gitconfig .seed-link .seeddir .missing .netrc)\n"
    policy = policy_for(home, settings_for(home, conf))
    assert policy.home_seeded == (str(home / ".gitconfig"),)


# ---------------------------------------------------------------- environment
CALLER_ENV = {
    "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
    "HOME": "/home/forged", "USER": "mallory", "LOGNAME": "mallory",
    "AGENT_SANDBOX": "0", "SANDBOX_BACKEND": "none", "SANDBOX_PROJECT_DIR": "/",
    "PWD": "/elsewhere",
    "GH_TOKEN": "ghp_x", "SSH_AUTH_SOCK": "/tmp/agent", "AWS_SECRET_ACCESS_KEY": "a",
    "ANTHROPIC_API_KEY": "sk-ant-kept", "KUBECONFIG": "/k",
}


def test_env_forced_values_and_scrub(home):
    policy = policy_for(home, environ=CALLER_ENV, cwd=home / "proj" / "src",
                        project_dir=home / "proj")
    env = policy.env
    assert env["HOME"] == str(home)
    assert env["USER"] == USER and env["LOGNAME"] == USER
    assert env["AGENT_SANDBOX"] == "1"
    assert env["SANDBOX_BACKEND"] == "bwrap"
    assert env["SANDBOX_PROJECT_DIR"] == str(home / "proj")
    assert env["AGENT_SANDBOX_SESSION"] == "sess-0001"
    assert env["PWD"] == str(home / "proj" / "src")
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-kept"
    assert env["PATH"] == "/usr/bin:/bin" and env["LANG"] == "C.UTF-8"
    assert policy.env_removed == ("AWS_SECRET_ACCESS_KEY", "GH_TOKEN", "KUBECONFIG",
                                  "SSH_AUTH_SOCK")
    for name in policy.env_removed:
        assert name not in env


def test_sandbox_env_is_added_but_cannot_forge_identity(home):
    conf = "SANDBOX_ENV=(EDITOR=vi HOME=/tmp/x AGENT_SANDBOX=0)\n"
    policy = policy_for(home, settings_for(home, conf), environ={"PATH": "/bin"})
    assert policy.env["EDITOR"] == "vi"
    assert policy.env["HOME"] == str(home)
    assert policy.env["AGENT_SANDBOX"] == "1"


def test_tmpdir_is_reset_with_private_tmp(home, tmp_path):
    policy = policy_for(home, environ={"TMPDIR": str(tmp_path / "mytmp")})
    assert policy.env["TMPDIR"] == "/tmp"


def test_tmpdir_inside_project_is_kept(home):
    tmpdir = str(home / "proj" / "tmp")
    policy = policy_for(home, environ={"TMPDIR": tmpdir})
    assert policy.env["TMPDIR"] == tmpdir


def test_tmpdir_kept_without_private_tmp(home):
    policy = policy_for(home, settings_for(home, "PRIVATE_TMP=false\n"),
                        environ={"TMPDIR": "/var/tmp/alice"})
    assert policy.env["TMPDIR"] == "/var/tmp/alice"
    assert policy.private_tmp is False


def test_no_tmpdir_is_not_invented(home):
    assert "TMPDIR" not in policy_for(home, environ={"PATH": "/bin"}).env


def test_policy_repr_does_not_leak_env(home):
    policy = policy_for(home, environ=CALLER_ENV)
    assert "sk-ant-kept" not in repr(policy)


# ---------------------------------------------------------------- misc mapping
def test_settings_map_to_policy_flags(home):
    conf = ("PRIVATE_TMP=false\nPRIVATE_IPC=false\nFILTER_PASSWD=false\nNETWORK_MODE=isolated\n"
            "SECCOMP=false\nSECCOMP_EXTRA_DENY=(ptrace)\nREQUIRE=(fs.hidden)\nSANDBOX_QUIET=true\n")
    default = policy_for(home)
    assert (default.private_tmp, default.private_ipc, default.filter_passwd) == (True, True, True)
    assert default.network_isolated is False and default.seccomp is True
    assert default.quiet is False and default.require == ()
    policy = policy_for(home, settings_for(home, conf))
    assert (policy.private_tmp, policy.private_ipc, policy.filter_passwd) == (False, False, False)
    assert policy.network_isolated is True
    assert policy.seccomp is False
    assert policy.seccomp_extra == ("ptrace",)
    assert policy.require == ("fs.hidden",)
    assert policy.quiet is True


def test_readonly_overlays_are_existing_install_paths_and_config_tree(home, tmp_path):
    install = tmp_path / "opt" / "agent-sandbox"
    install.mkdir(parents=True)
    (home / ".config" / "agent-sandbox").mkdir()
    policy = policy_for(home, install_paths=(install, tmp_path / "missing"))
    assert policy.readonly_overlays == (str(install), str(home / ".config" / "agent-sandbox"))


def test_protected_paths_resolve_against_the_project(home):
    (home / "proj" / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    (home / "proj" / ".git" / "config").write_text("[core]")
    policy = policy_for(home)
    by_path = {p.path: p for p in policy.protected}
    hooks = by_path[str(home / "proj/.git/hooks")]
    assert hooks.is_dir and hooks.exists
    config = by_path[str(home / "proj/.git/config")]
    assert not config.is_dir and config.exists
    mcp = by_path[str(home / "proj/.mcp.json")]
    assert not mcp.exists and mcp.placeholder.startswith(b"{")
    assert not by_path[str(home / "proj/.envrc")].exists


def test_protected_symlink_is_warned(home):
    (home / "proj" / "envrc.real").write_text("")
    (home / "proj" / ".envrc").symlink_to("envrc.real")
    policy = policy_for(home)
    (warning,) = warnings_for(policy, "PROTECTED_PATHS")
    assert str(home / "proj/.envrc") in warning


# ---------------------------------------------------------------- the site's Slurm config
def test_the_site_slurm_config_comes_from_the_launcher_then_the_admin_key(home, tmp_path,
                                                                         monkeypatch):
    from agent_sandbox.policy import siteconf

    monkeypatch.setattr(siteconf, "SHARED_TMP", ())   # the test's trees lie in /tmp
    site = tmp_path / "site" / "slurm"
    site.mkdir(parents=True)
    (site / "slurm.conf").write_text("ClusterName=x\n")
    conf = str(site / "slurm.conf")
    settings = settings_for(home, READONLY_MOUNTS=(str(tmp_path),))
    policy = policy_for(home, settings, environ={"PATH": "/usr/bin", "SLURM_CONF": conf})
    assert policy.slurm_conf == conf
    assert str(site) in policy.slurm_masks            # unreachable inside, as /etc/slurm
    assert "SLURM_CONF" not in policy.env             # removed by the policy
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "slurm.conf").write_text("ClusterName=y\n")
    elsewhere = str(tmp_path / "elsewhere" / "slurm.conf")
    admin = settings_for(home, SLURM_CONF_PATH=elsewhere)
    assert policy_for(home, admin).slurm_conf == elsewhere
    assert policy_for(home, admin, environ={"SLURM_CONF": conf}).slurm_conf == conf
    assert policy_for(home).slurm_conf is None
    # A slurm.conf directly in a top-level tree does not mask that tree (a
    # root-owned file there stands in for it).
    top = settings_for(home, READONLY_MOUNTS=("/etc",))
    assert "/etc" not in policy_for(home, top, environ={"SLURM_CONF": "/etc/hostname"}
                                    ).slurm_masks


# ---------------------------------------------------------------- pinned parents
def test_the_parents_of_nested_protected_paths_are_pinned_parents_first(home):
    """`.claude` for `.claude/settings.json`: renamed away, a new one's hooks
    would run outside (tests/adversarial/test_protected_parent_rename.py)."""
    settings = settings_for(home, "PROTECTED_PATHS+=(.claude/settings.json .a/b/c.json)\n")
    policy = policy_for(home, settings)
    proj = str(home / "proj")
    # .agents and .claude: names.PROJECT_CONFIGS, protected whatever the settings say
    assert policy.pinned == (f"{proj}/.git", f"{proj}/.a", f"{proj}/.agents", f"{proj}/.claude",
                             f"{proj}/.a/b")
    assert f"{proj}/.vscode" not in policy.pinned      # its parent is the project: bound


def test_a_writable_root_and_a_symlinked_parent_are_not_pinned(home, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (home / "proj" / ".cfg").symlink_to(tmp_path / "elsewhere")
    settings = settings_for(home, "HOME_ACCESS=write\n"
                            "PROTECTED_PATHS+=(.cfg/x.json ~/.config/git/config)\n"
                            "HOME_WRITABLE+=(.config)\n")
    policy = policy_for(home, settings)
    assert str(home / "proj" / ".cfg") not in policy.pinned
    assert str(home / ".config" / "git") in policy.pinned
    assert str(home / ".config") not in policy.pinned and str(home) not in policy.pinned
