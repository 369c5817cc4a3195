"""Admin-locked site configuration, for real: a root-owned
/etc/agent-sandbox/sandbox.conf, a user (and conf.d, env, flags) trying to
weaken each lockable key, checked in `config show --json` and inside the jail."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.install import ADMIN_FILE, INSTALLED


def show(user, project, env=None, extra=()):
    result = user.run([INSTALLED, "config", "show", "--json", "--origin", *extra],
                      cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


LOCKED = [  # key, admin value, user's weaker value, effective value
    ("HOME_ACCESS", "tmpwrite", "write", "tmpwrite"),
    ("SLURM_SCOPE", "project", "none", "project"),
    ("NETWORK_MODE", "isolated", "open", "isolated"),
    ("PRIVATE_TMP", "true", "false", True),
    ("PRIVATE_IPC", "true", "false", True),
    ("FILTER_PASSWD", "true", "false", True),
    ("SECCOMP", "true", "false", True),
    ("SLURM_MAX_JOBS", "10", "0", 10),
    ("BLOCKED_FILES", "(.site-secret)", "()", [".site-secret"]),
    ("DENIED_WRITABLE_PATHS", "(/srv/shared)", "()", ["/srv/shared"]),
    ("REQUIRE", "(seccomp)", "()", ["seccomp"]),
    ("BLOCKED_ENV_VARS", "(SITE_KEY)", "()", ["SITE_KEY"]),
    ("ALLOWED_BACKENDS", "(bwrap)", "(bwrap landlock)", ["bwrap"]),
]


@pytest.mark.parametrize("key,admin_value,weaker,effective", LOCKED)
def test_user_file_cannot_weaken_a_locked_key(user, project, admin, key, admin_value, weaker,
                                              effective):
    admin(f"# site policy\n{key}={admin_value}\n")
    user.set_config(f"{key}={weaker}\n")
    config, stderr = show(user, project)
    assert config[key]["value"] == effective
    assert config[key]["locked_by"] == f"{ADMIN_FILE}:2"
    assert f"{key}:" in stderr and f"{ADMIN_FILE}:2" in stderr and "ignored" in stderr


@pytest.mark.parametrize("key,weaker", [("HOME_ACCESS", "write"), ("PRIVATE_TMP", "false"),
                                        ("SLURM_SCOPE", "none"), ("NETWORK_MODE", "open"),
                                        ("FILTER_PASSWD", "false")])
def test_environment_cannot_weaken_a_locked_key(user, project, admin, key, weaker):
    admin("HOME_ACCESS=tmpwrite\nPRIVATE_TMP=true\nSLURM_SCOPE=project\nNETWORK_MODE=isolated\n"
          "FILTER_PASSWD=true\n")
    config, stderr = show(user, project, env=user.env(**{key: weaker}))
    assert str(config[key]["value"]).lower() != weaker
    assert "env ignored" in stderr


def test_stricter_user_values_are_kept(user, project, admin):
    admin("HOME_ACCESS=tmpwrite\nSLURM_SCOPE=project\n")
    user.set_config("HOME_ACCESS=restricted\nSLURM_SCOPE=session\n")
    config, stderr = show(user, project)
    assert config["HOME_ACCESS"]["value"] == "restricted"
    assert config["SLURM_SCOPE"]["value"] == "session"
    assert "ignored" not in stderr


def test_flag_cannot_pick_a_backend_the_admin_disallows(user, project, admin):
    admin("ALLOWED_BACKENDS=(firejail)\n")
    result = user.run([INSTALLED, "run", "--backend", "bwrap", "--", "true"], cwd=project)
    assert result.returncode == 125
    assert "bwrap is not allowed here" in result.stderr


def test_conf_d_applies_by_project_match_and_cannot_weaken(user, project, admin):
    admin("PRIVATE_IPC=true\n")
    user.write(".config/agent-sandbox/conf.d/10-this.conf",
               f"PROJECT_MATCH=({project})\nPRIVATE_IPC=false\nSANDBOX_ENV=(FROM_CONF_D=yes)\n")
    user.write(".config/agent-sandbox/conf.d/20-other.conf",
               "PROJECT_MATCH=(/nowhere/*)\nHOME_ACCESS=restricted\n")
    try:
        config, stderr = show(user, project)
    finally:
        for name in ("10-this.conf", "20-other.conf"):
            (user.home / ".config/agent-sandbox/conf.d" / name).unlink()
    assert config["SANDBOX_ENV"]["value"] == ["FROM_CONF_D=yes"]
    assert config["SANDBOX_ENV"]["origin"].endswith("10-this.conf:3")
    assert config["PRIVATE_IPC"]["value"] is True and "10-this.conf:2 ignored" in stderr
    assert config["HOME_ACCESS"]["value"] == "tmpwrite"   # 20-other did not match


def test_no_configuration_is_read_from_the_project(user, project):
    (project / "sandbox.conf").write_text("HOME_ACCESS=write\n")
    (project / ".agent-sandbox.conf").write_text("HOME_ACCESS=write\n")
    config, _ = show(user, project)
    assert config["HOME_ACCESS"]["value"] == "tmpwrite"


def test_private_tmp_holds_inside_the_jail(user, project, admin):
    admin("PRIVATE_TMP=true\n")
    user.set_config("PRIVATE_TMP=false\n")
    marker = Path("/tmp/agent-sandbox-admin-test")
    marker.write_text("host")
    try:
        result = user.sandbox("ls", str(marker), cwd=project)
    finally:
        marker.unlink()
    assert result.returncode != 0 and "No such file" in result.stderr
    assert "PRIVATE_TMP" in result.stderr and str(ADMIN_FILE) in result.stderr


def test_writable_entry_under_a_denied_path_stays_read_only(user, project, admin):
    shared = user.home / "shared"
    (shared / "tool").mkdir(parents=True, exist_ok=True)
    for path in (shared, shared / "tool"):
        os.chown(path, user.uid, user.gid)
    admin(f"DENIED_WRITABLE_PATHS=({shared})\n")
    user.set_config(f"EXTRA_WRITABLE_PATHS=({shared}/tool/../tool)\nHOME_READONLY+=(shared)\n")
    result = user.sandbox("/bin/sh", "-c", f"touch {shared}/tool/planted", cwd=project)
    assert result.returncode != 0
    assert "Read-only file system" in result.stderr
    assert "EXTRA_WRITABLE_PATHS: dropped" in result.stderr and str(ADMIN_FILE) in result.stderr
    assert not (shared / "tool" / "planted").exists()


def test_admin_blocked_file_stays_hidden_when_the_user_empties_the_list(user, project, admin):
    user.write(".site-secret", "site secret")
    admin("BLOCKED_FILES+=(.site-secret)\n")
    user.set_config("BLOCKED_FILES=()\nHOME_READONLY+=(.site-secret)\n")
    result = user.sandbox("cat", str(user.home / ".site-secret"), cwd=project)
    assert result.returncode != 0 and "site secret" not in result.stdout


def test_admin_required_guarantee_refuses_when_the_user_disables_it(user, project, admin):
    admin("REQUIRE=(ipc.isolated)\n")
    user.set_config("PRIVATE_IPC=false\n")
    result = user.sandbox("true", cwd=project)
    assert result.returncode == 125
    assert "ipc.isolated" in result.stderr


@pytest.mark.parametrize("mode,uid", [(0o664, 0), (0o646, 0), (0o644, 1)])
def test_admin_file_writable_by_others_refuses_to_start(user, project, admin, mode, uid):
    admin("HOME_ACCESS=tmpwrite\n", mode=mode, uid=uid)
    result = user.sandbox("/bin/sh", "-c", "touch ran", cwd=project)
    assert result.returncode == 125
    assert "not owned by root or is writable by others" in result.stderr
    assert not (project / "ran").exists()


def test_malformed_admin_file_is_fatal(user, project, admin):
    admin("HOME_ACCESS=tmpwrite\nPRIVATE_TMP=$(id)\n")
    result = user.sandbox("/bin/sh", "-c", "touch ran", cwd=project)
    assert result.returncode == 125
    assert f"{ADMIN_FILE}:2:" in result.stderr
    assert not (project / "ran").exists()


def test_config_show_origin_text_names_locks(user, project, admin):
    admin("# site\nSECCOMP=true\n")
    result = user.run([INSTALLED, "config", "show", "--origin"], cwd=project)
    assert result.returncode == 0
    line = next(l for l in result.stdout.splitlines() if l.startswith("SECCOMP="))
    assert line == f"SECCOMP=true  # {ADMIN_FILE}:2; locked by the admin at {ADMIN_FILE}:2"


def test_explain_paths_and_variables(user, project, admin):
    admin("EXTRA_BLOCKED_PATHS=(/opt/site-secret)\n")
    def explain(target):
        result = user.run([INSTALLED, "explain", target], cwd=project)
        assert result.returncode == 0, result.stderr
        return result.stdout
    assert "hidden" in explain(str(user.home / ".ssh/id_rsa"))
    assert "~/.ssh" in explain(str(user.home / ".ssh/id_rsa"))
    assert f"EXTRA_BLOCKED_PATHS entry /opt/site-secret ({ADMIN_FILE}:1)" in explain(
        "/opt/site-secret/x")
    assert "writable" in explain(str(project / "file.txt"))
    assert "read-only" in explain("/usr/bin/python3")
    assert "absent" in explain("/var/lib")
    gh = explain("GH_TOKEN")
    assert "removed" in gh and "BLOCKED_ENV_PATTERNS" in gh
    assert "kept" in explain("ANTHROPIC_API_KEY")


def test_mail_options_need_the_admin(user, project, admin, slurm_cluster):
    """--mail-type is refused until the admin file sets SLURM_ALLOW_MAIL=true;
    a user's own SLURM_ALLOW_MAIL=true does not count."""
    argv = ("sbatch", "--parsable", "--hold", "--mail-type=END", "--wrap", "true")
    user.set_config("SLURM_ALLOW_MAIL=true\n")
    try:
        refused = user.sandbox(*argv, cwd=project)
        assert refused.returncode == 1
        assert "--mail-type=END is refused" in refused.stderr
        assert "SLURM_ALLOW_MAIL=true in /etc/agent-sandbox/sandbox.conf" in refused.stderr
        admin("SLURM_ALLOW_MAIL=true\n")
        user.set_config("")
        accepted = user.sandbox(*argv, cwd=project)
        assert accepted.returncode == 0, accepted.stderr
        job = accepted.stdout.strip()
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                               text=True).stdout
        subprocess.run(["scancel", job])
        assert "MailType=END" in shown
    finally:
        user.set_config("")
