"""Unit tests for agent_sandbox.config.load (+ confmodel validation): the layers of
SPEC §4, environment and flag overrides, origins, errors, the admin file check
and the validated-settings cache."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agent_sandbox.config import load as confload
from agent_sandbox.config.model import SandboxConfig, validate
from agent_sandbox.config.syntax import parse_config
from agent_sandbox.errors import ConfigError

USER = "alice"
# The `home` fixture (tests/support/homes.py): an empty home but for the config directory.
pytestmark = pytest.mark.home(files={}, dirs=(".config/agent-sandbox",), user=USER)
DEFAULTS = Path(confload.defaults_path())


@pytest.fixture
def no_admin(tmp_path) -> str:
    return str(tmp_path / "no-such-dir" / "sandbox.conf")


def user_file(home: Path) -> Path:
    return home / ".config" / "agent-sandbox" / "sandbox.conf"


def write_user(home: Path, text: str) -> Path:
    path = user_file(home)
    path.write_text(text)
    return path


def load(home: Path, admin: str, *, environ=None, flags=None, cache=False):
    return confload.load_settings(home=str(home), user=USER, environ=environ or {},
                                  flags=flags, admin_path=admin, cache=cache)


def defaults_line(key: str) -> int:
    for number, line in enumerate(DEFAULTS.read_text().splitlines(), 1):
        if line.startswith(f"{key}=") or line.startswith(f"{key}+="):
            return number
    raise AssertionError(f"{key} not assigned in {DEFAULTS}")


# ---------------------------------------------------------------- defaults
def test_shipped_defaults_assign_exactly_the_model_fields():
    assignments = parse_config(DEFAULTS.read_text(), file=str(DEFAULTS),
                               variables={"HOME": "/home/x", "USER": "x"})
    keys = [a.key for a in assignments]
    assert set(keys) == set(SandboxConfig.model_fields)
    assert len(keys) == len(set(keys)), "a key is assigned twice in the shipped defaults"
    assert not any(a.append for a in assignments)


def test_defaults_load_with_typed_values_and_origins(home, no_admin):
    settings = load(home, no_admin)
    assert settings.HOME_ACCESS == "tmpwrite"
    assert settings.SANDBOX_BACKEND == "auto"
    assert settings.PRIVATE_TMP is True
    assert settings.PRIVATE_IPC is True
    assert settings.FILTER_PASSWD is True
    assert settings.SECCOMP is True
    assert settings.SANDBOX_QUIET is False
    assert settings.NETWORK_MODE == "open"
    assert settings.SLURM_SCOPE == "project"
    assert settings.CHAPERON_LOG_RETAIN_DAYS == 7
    assert settings.SLURM_MAX_JOBS == 0
    assert settings.REQUIRE == ()
    assert settings.ALLOWED_PROJECT_PARENTS == (str(home),)      # "$HOME" expanded
    assert isinstance(settings.HOME_READONLY, tuple)
    assert ".bashrc" in settings.HOME_READONLY
    assert ".pgpass" in settings.BLOCKED_FILES
    assert "ANTHROPIC_API_KEY" in settings.ALLOWED_ENV_VARS
    assert set(settings.values) == set(SandboxConfig.model_fields)
    assert settings.files == (str(DEFAULTS),)
    for key in ("HOME_ACCESS", "PRIVATE_TMP", "BLOCKED_ENV_VARS", "SANDBOX_QUIET"):
        assert settings.origins[key] == f"{DEFAULTS}:{defaults_line(key)}"


def test_unknown_attribute_is_an_attribute_error(home, no_admin):
    settings = load(home, no_admin)
    with pytest.raises(AttributeError):
        settings.NOT_A_KEY


# ---------------------------------------------------------------- user file
def test_user_file_overrides_scalar_and_appends_to_list(home, no_admin):
    base = load(home, no_admin)
    path = write_user(home, "# mine\nHOME_ACCESS=read\n\nHOME_WRITABLE+=(.claude '.cache/my tool')\n"
                            "BLOCKED_ENV_VARS=(ONLY_THIS)\n")
    settings = load(home, no_admin)
    assert base.HOME_WRITABLE == ()
    assert settings.HOME_ACCESS == "read"
    assert settings.HOME_WRITABLE == base.HOME_WRITABLE + (".claude", ".cache/my tool")
    assert settings.BLOCKED_ENV_VARS == ("ONLY_THIS",)     # plain = replaces the list
    assert settings.origins["HOME_ACCESS"] == f"{path}:2"
    assert settings.origins["HOME_WRITABLE"] == f"{path}:4"
    assert settings.origins["BLOCKED_ENV_VARS"] == f"{path}:5"
    assert settings.origins["PRIVATE_TMP"] == base.origins["PRIVATE_TMP"]
    assert settings.origins["PRIVATE_TMP"].startswith(f"{DEFAULTS}:")
    assert settings.files == (str(DEFAULTS), str(path))


def test_user_file_expands_home_and_user(home, no_admin):
    write_user(home, 'EXTRA_WRITABLE_PATHS=("$HOME/scratch" ~/data "/scratch/${USER}/x")\n')
    settings = load(home, no_admin)
    assert settings.EXTRA_WRITABLE_PATHS == (f"{home}/scratch", f"{home}/data",
                                             f"/scratch/{USER}/x")


def test_append_to_empty_default_list(home, no_admin):
    write_user(home, "REQUIRE+=(seccomp fs.hidden)\nREQUIRE+=(tty.safe)\n")
    assert load(home, no_admin).REQUIRE == ("seccomp", "fs.hidden", "tty.safe")


def test_scalar_given_to_list_key_becomes_one_element_list(home, no_admin):
    write_user(home, "ENABLED_AGENTS=claude\nDEVICES=\n")
    settings = load(home, no_admin)
    assert settings.ENABLED_AGENTS == ("claude",)
    assert settings.DEVICES == ()


@pytest.mark.parametrize("value,expected", [("true", True), ("false", False), ("yes", True),
                                            ("0", False), ("TRUE", True), ("Off", False)])
def test_boolean_spellings(home, no_admin, value, expected):
    write_user(home, f"PRIVATE_TMP={value}\n")
    assert load(home, no_admin).PRIVATE_TMP is expected


# ---------------------------------------------------------------- env and flags
ENV_VALUES = {
    "SANDBOX_BACKEND": ("bwrap", "bwrap"),
    "HOME_ACCESS": ("restricted", "restricted"),
    "SLURM_SCOPE": ("session", "session"),
    "PRIVATE_TMP": ("false", False),
    "PRIVATE_IPC": ("false", False),
    "FILTER_PASSWD": ("false", False),
    "NETWORK_MODE": ("isolated", "isolated"),
    "SANDBOX_QUIET": ("1", True),
    "PRIVATE_MOUNTS": ("false", False),     # issue 30: it was ignored in the environment
}


def test_env_override_list_is_the_spec_list():
    assert set(confload.ENV_OVERRIDES) == set(ENV_VALUES)


@pytest.mark.parametrize("key", sorted(ENV_VALUES))
def test_env_overrides_each_listed_key(home, no_admin, key):
    raw, typed = ENV_VALUES[key]
    settings = load(home, no_admin, environ={key: raw})
    assert settings.values[key] == typed
    assert settings.origins[key] == "env"


@pytest.mark.parametrize("key,value", [
    ("BLOCKED_ENV_VARS", "NOTHING"), ("BLOCKED_ENV_PATTERNS", "NOPE"),
    ("ALLOWED_ENV_VARS", "GH_TOKEN"), ("ALLOWED_PROJECT_PARENTS", "/"), ("SECCOMP", "false"),
    ("EXTRA_WRITABLE_PATHS", "/"), ("DENIED_WRITABLE_PATHS", ""), ("REQUIRE", "bogus"),
    ("SANDBOX_ENV", "LD_PRELOAD=/x.so"), ("ALLOWED_BACKENDS", "landlock"),
])
def test_env_cannot_override_other_keys(home, no_admin, key, value):
    base = load(home, no_admin)
    settings = load(home, no_admin, environ={key: value, "HOME": "/elsewhere"})
    assert settings.values[key] == base.values[key]
    assert settings.origins[key] == base.origins[key] != "env"
    assert settings.values == base.values


def test_env_beats_user_file_and_flag_beats_env(home, no_admin):
    path = write_user(home, "SANDBOX_BACKEND=firejail\nHOME_ACCESS=read\n")
    settings = load(home, no_admin, environ={"SANDBOX_BACKEND": "landlock", "HOME_ACCESS": "write"},
                    flags={"SANDBOX_BACKEND": "bwrap"})
    assert settings.SANDBOX_BACKEND == "bwrap"
    assert settings.origins["SANDBOX_BACKEND"] == "flag"
    assert settings.HOME_ACCESS == "write"
    assert settings.origins["HOME_ACCESS"] == "env"
    only_file = load(home, no_admin)
    assert only_file.SANDBOX_BACKEND == "firejail"
    assert only_file.origins["SANDBOX_BACKEND"] == f"{path}:1"


def test_validate_directly_types_values_and_fills_model_defaults():
    raw = {"HOME_ACCESS": "read", "HOME_WRITABLE": ("a", "b"), "PRIVATE_TMP": "false",
           "SLURM_MAX_JOBS": "3", "ENABLED_AGENTS": "claude"}
    origins = {key: "/u.conf:1" for key in raw}
    values = validate(raw, origins)
    assert values["HOME_ACCESS"] == "read"
    assert values["PRIVATE_TMP"] is False
    assert values["SLURM_MAX_JOBS"] == 3
    assert values["HOME_WRITABLE"] == ("a", "b")
    assert values["ENABLED_AGENTS"] == ("claude",)
    assert values["SECCOMP"] is True                  # model default for unassigned keys
    assert set(values) == set(SandboxConfig.model_fields)


def test_validate_error_names_origin_key_and_value():
    with pytest.raises(ConfigError) as info:
        validate({"NETWORK_MODE": "closed"}, {"NETWORK_MODE": "/etc/x.conf:12"})
    message = str(info.value)
    assert message.startswith("/etc/x.conf:12:")
    assert "NETWORK_MODE" in message and "closed" in message
    assert "'open'" in message and "'isolated'" in message      # what is allowed


def test_validate_refuses_unknown_keys():
    with pytest.raises(ConfigError) as info:
        validate({"NOT_A_KEY": "1"}, {})
    assert "NOT_A_KEY" in str(info.value)


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("text,key,value", [
    ("HOME_ACCESS=everything\n", "HOME_ACCESS", "everything"),
    ("\n\nPRIVATE_TMP=maybe\n", "PRIVATE_TMP", "maybe"),
    ("# c\nREQUIRE=(bogus)\n", "REQUIRE", "bogus"),
    ("REQUIRE+=(seccomp not.a.guarantee)\n", "REQUIRE", "not.a.guarantee"),
    ("NETWORK_MODE=closed\n", "NETWORK_MODE", "closed"),
    ("ALLOWED_PROJECT_PARENTS=(relative/dir)\n", "ALLOWED_PROJECT_PARENTS", "relative/dir"),
    ("HOME_WRITABLE+=(../escape)\n", "HOME_WRITABLE", "../escape"),
    ("SLURM_MAX_JOBS=-3\n", "SLURM_MAX_JOBS", "-3"),
    ("CHAPERON_LOG_RETAIN_DAYS=week\n", "CHAPERON_LOG_RETAIN_DAYS", "week"),
    ("SANDBOX_BACKEND=(bwrap firejail)\n", "SANDBOX_BACKEND", "bwrap"),
    ("DEVICES=(/tmp/nvidia0)\n", "DEVICES", "/tmp/nvidia0"),
    ("SANDBOX_ENV=(NOEQUALS)\n", "SANDBOX_ENV", "NOEQUALS"),
    ("BLOCKED_ENV_VARS+=('BAD NAME')\n", "BLOCKED_ENV_VARS", "BAD NAME"),
])
def test_invalid_values_name_file_line_key_and_value(home, no_admin, text, key, value):
    path = write_user(home, text)
    line = text.count("\n", 0, text.index(key)) + 1
    with pytest.raises(ConfigError) as info:
        load(home, no_admin)
    message = str(info.value)
    assert f"{path}:{line}" in message
    assert key in message
    assert value in message
    assert info.value.reason == "bad_config"


@pytest.mark.parametrize("text,line", [
    ("HOME_ACCESS=$(id -u)\n", 1),
    ("# ok\nPRIVATE_TMP=true; rm -rf ~\n", 2),
    ("\nsource /etc/profile\n", 2),
    ("HOME_ACCESS=`whoami`\n", 1),
    ("HOME_READONLY=(a b\n", 1),
    ("NOT_A_KEY=1\n", 1),
])
def test_syntax_errors_name_file_and_line(home, no_admin, text, line):
    path = write_user(home, text)
    with pytest.raises(ConfigError) as info:
        load(home, no_admin)
    assert f"{path}:{line}:" in str(info.value)
    assert info.value.reason == "bad_config_syntax"


def test_unknown_key_error_names_the_key(home, no_admin):
    write_user(home, "HOME_ACESS=read\n")
    with pytest.raises(ConfigError) as info:
        load(home, no_admin)
    assert "HOME_ACESS" in str(info.value)


@pytest.mark.parametrize("key,value", [("HOME_ACCESS", "everything"), ("PRIVATE_TMP", "maybe"),
                                       ("SANDBOX_BACKEND", "docker")])
def test_invalid_env_value_names_env_key_and_value(home, no_admin, key, value):
    with pytest.raises(ConfigError) as info:
        load(home, no_admin, environ={key: value})
    message = str(info.value)
    assert message.startswith("env:")
    assert key in message and value in message


def test_invalid_flag_value_names_flag(home, no_admin):
    with pytest.raises(ConfigError) as info:
        load(home, no_admin, flags={"SANDBOX_BACKEND": "docker"})
    assert str(info.value).startswith("flag:")
    assert "docker" in str(info.value)


def test_unreadable_user_file_is_a_config_error(home, no_admin):
    path = user_file(home)
    path.write_bytes(b"HOME_ACCESS=\xff\xfe\n")
    with pytest.raises(ConfigError) as info:
        load(home, no_admin)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------- admin file
@pytest.fixture
def admin_dir(tmp_path) -> Path:
    directory = tmp_path / "etc" / "agent-sandbox"
    directory.mkdir(parents=True)
    directory.chmod(0o755)
    os.chown(directory, 0, 0)
    return directory


def make_admin(admin_dir: Path, text: str, *, mode=0o644, uid=0, gid=0) -> Path:
    path = admin_dir / "sandbox.conf"
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, uid, gid)
    return path


def test_root_owned_admin_file_is_applied_in_layer_order(home, admin_dir):
    assert os.geteuid() == 0, "the admin-file tests create root-owned files: run as root"
    admin = make_admin(admin_dir, "ENABLED_AGENTS=(claude)\nSLURM_MAX_JOBS=5\n"
                                  "BLOCKED_ENV_VARS+=(SITE_SECRET)\n")
    settings = load(home, str(admin))
    assert settings.ENABLED_AGENTS == ("claude",)
    assert settings.SLURM_MAX_JOBS == 5
    assert settings.BLOCKED_ENV_VARS[-1] == "SITE_SECRET"
    assert "KUBECONFIG" in settings.BLOCKED_ENV_VARS
    assert settings.origins["SLURM_MAX_JOBS"] == f"{admin}:2"
    assert settings.files == (str(DEFAULTS), str(admin))
    # the user file is a later layer (ENABLED_AGENTS is not security-relevant: no lock)
    path = write_user(home, "ENABLED_AGENTS=(codex)\n")
    settings = load(home, str(admin))
    assert settings.ENABLED_AGENTS == ("codex",)
    assert settings.origins["ENABLED_AGENTS"] == f"{path}:1"
    assert settings.files == (str(DEFAULTS), str(admin), str(path))


@pytest.mark.parametrize("uid,mode", [(1000, 0o644), (0, 0o664), (0, 0o646), (0, 0o666),
                                      (65534, 0o600)])
def test_unsafe_admin_file_refuses(home, admin_dir, uid, mode):
    admin = make_admin(admin_dir, "HOME_ACCESS=tmpwrite\n", mode=mode, uid=uid)
    with pytest.raises(ConfigError) as info:
        load(home, str(admin))
    assert info.value.reason == "unsafe_admin_config"
    assert str(admin) in str(info.value)
    assert "chown root" in str(info.value)


def test_admin_directory_writable_by_others_refuses(home, admin_dir):
    admin = make_admin(admin_dir, "HOME_ACCESS=tmpwrite\n")
    admin_dir.chmod(0o775)
    with pytest.raises(ConfigError) as info:
        load(home, str(admin))
    assert info.value.reason == "unsafe_admin_config"
    assert str(admin_dir) in str(info.value)


def test_admin_directory_not_owned_by_root_refuses(home, admin_dir):
    admin = make_admin(admin_dir, "HOME_ACCESS=tmpwrite\n")
    os.chown(admin_dir, 1000, 1000)
    with pytest.raises(ConfigError) as info:
        load(home, str(admin))
    assert info.value.reason == "unsafe_admin_config"


def test_admin_file_that_is_a_symlink_refuses(home, admin_dir, tmp_path):
    real = tmp_path / "real.conf"
    real.write_text("HOME_ACCESS=read\n")
    os.chown(real, 0, 0)
    link = admin_dir / "sandbox.conf"
    link.symlink_to(real)
    with pytest.raises(ConfigError) as info:
        load(home, str(link))
    assert str(link) in str(info.value)


@pytest.mark.parametrize("text", ["HOME_ACCESS=$(id)\n", "HOME_ACCESS=nowhere\n", "BOGUS=1\n"])
def test_malformed_admin_file_is_fatal(home, admin_dir, text):
    admin = make_admin(admin_dir, text)
    with pytest.raises(ConfigError) as info:
        load(home, str(admin))
    assert str(admin) in str(info.value)


def test_missing_admin_file_is_fine(home, admin_dir):
    settings = load(home, str(admin_dir / "sandbox.conf"))
    assert settings.files == (str(DEFAULTS),)


# ---------------------------------------------------------------- cache
def cache_files(home: Path) -> list[Path]:
    directory = home / ".local" / "state" / "agent-sandbox" / "cache"
    return sorted(p for p in directory.glob("*") if p.is_file()) if directory.is_dir() else []


@pytest.fixture
def no_validation(monkeypatch):
    """Make a cache miss fail loudly: validation must not run."""
    import agent_sandbox.config.model as confmodel

    def refuse(raw, origins):
        raise AssertionError("validated again although the inputs did not change")

    def arm():
        monkeypatch.setattr(confmodel, "validate", refuse)
    return arm


def test_cache_returns_equal_values_and_origins(home, no_admin, no_validation):
    write_user(home, "HOME_ACCESS=read\nHOME_WRITABLE+=(.claude)\n")
    first = load(home, no_admin, cache=True)
    files = cache_files(home)
    assert files, "a cache=True load stores its result in the state directory"
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(files[0].parent.stat().st_mode) == 0o700
    no_validation()
    second = load(home, no_admin, cache=True)
    assert second.values == first.values
    assert second.origins == first.origins
    assert second.files == first.files
    assert type(second.HOME_WRITABLE) is tuple
    assert second.HOME_WRITABLE[-1] == ".claude"
    assert second.PRIVATE_TMP is True and second.CHAPERON_LOG_RETAIN_DAYS == 7


def test_cache_false_neither_reads_nor_writes(home, no_admin):
    load(home, no_admin, cache=False)
    assert cache_files(home) == []


def test_changed_user_file_is_never_served_from_a_stale_cache(home, no_admin):
    write_user(home, "HOME_ACCESS=read\n")
    assert load(home, no_admin, cache=True).HOME_ACCESS == "read"
    write_user(home, "HOME_ACCESS=write\n")
    assert load(home, no_admin, cache=True).HOME_ACCESS == "write"
    write_user(home, "HOME_ACCESS=write\nHOME_WRITABLE+=(.x)\n")
    assert load(home, no_admin, cache=True).HOME_WRITABLE[-1] == ".x"
    user_file(home).unlink()
    settings = load(home, no_admin, cache=True)
    assert settings.HOME_ACCESS == "tmpwrite"
    assert settings.files == (str(DEFAULTS),)


def test_changed_admin_file_is_never_served_from_a_stale_cache(home, tmp_path):
    directory = tmp_path / "etc"
    directory.mkdir()
    directory.chmod(0o755)
    admin = directory / "sandbox.conf"
    admin.write_text("SLURM_MAX_JOBS=3\n")
    admin.chmod(0o644)
    assert load(home, str(admin), cache=True).SLURM_MAX_JOBS == 3
    admin.write_text("SLURM_MAX_JOBS=4\n")
    assert load(home, str(admin), cache=True).SLURM_MAX_JOBS == 4
    admin.chmod(0o666)                      # the ownership check runs before the cache
    with pytest.raises(ConfigError):
        load(home, str(admin), cache=True)


def test_changed_env_or_flags_are_never_served_from_a_stale_cache(home, no_admin, no_validation):
    assert load(home, no_admin, cache=True, environ={"HOME_ACCESS": "read"}).HOME_ACCESS == "read"
    assert load(home, no_admin, cache=True).HOME_ACCESS == "tmpwrite"
    assert load(home, no_admin, cache=True, flags={"HOME_ACCESS": "write"}).HOME_ACCESS == "write"
    assert load(home, no_admin, cache=True).HOME_ACCESS == "tmpwrite"
    # variables outside the override list are not inputs: still a cache hit
    no_validation()
    settings = load(home, no_admin, cache=True, environ={"BLOCKED_ENV_VARS": "X", "PATH": "/b"})
    assert settings.HOME_ACCESS == "tmpwrite"


def test_other_home_or_user_is_never_served_from_the_cache(home, no_admin):
    first = load(home, no_admin, cache=True)
    other = confload.load_settings(home=str(home), user="bob", environ={}, admin_path=no_admin,
                                   cache=True)
    assert first.ALLOWED_PROJECT_PARENTS == (str(home),)
    write_user(home, 'EXTRA_BLOCKED_PATHS=("/scratch/$USER")\n')
    assert confload.load_settings(home=str(home), user="bob", environ={}, admin_path=no_admin,
                                  cache=True).EXTRA_BLOCKED_PATHS == ("/scratch/bob",)
    assert load(home, no_admin, cache=True).EXTRA_BLOCKED_PATHS == (f"/scratch/{USER}",)
    assert other.values == first.values


def test_invalid_config_is_not_cached(home, no_admin):
    write_user(home, "HOME_ACCESS=everything\n")
    with pytest.raises(ConfigError):
        load(home, no_admin, cache=True)
    with pytest.raises(ConfigError):
        load(home, no_admin, cache=True)
    assert cache_files(home) == []


@pytest.mark.parametrize("content", [b"not json", b"", b"[1, 2]", b"{}", b"\x00" * 64,
                                     b'{"values": {}}', b"null", b")\x02\xe9\x01"])
def test_corrupt_cache_falls_back_to_validation(home, no_admin, content):
    """The cache is best effort: a damaged entry must mean a fresh validation,
    never a crash (a traceback instead of the 125 path)."""
    write_user(home, "HOME_ACCESS=read\n")
    load(home, no_admin, cache=True)
    files = cache_files(home)
    assert files
    for path in files:
        path.write_bytes(content)
    settings = load(home, no_admin, cache=True)
    assert settings.HOME_ACCESS == "read"
    assert set(settings.values) == set(SandboxConfig.model_fields)


def test_unwritable_state_dir_does_not_break_loading(home, no_admin):
    (home / ".local").mkdir()
    (home / ".local" / "state").write_text("not a directory")
    settings = load(home, no_admin, cache=True)
    assert settings.HOME_ACCESS == "tmpwrite"


# ---------------------------------------------------------------- admin-only keys
def test_mail_can_be_allowed_by_the_admin_only(home, tmp_path, no_admin):
    write_user(home, "SLURM_ALLOW_MAIL=true\n")
    settings = load(home, no_admin)
    assert settings.SLURM_ALLOW_MAIL is False
    assert any(w.startswith("SLURM_ALLOW_MAIL=true from ") and "only the site admin" in w
               for w in settings.warnings), settings.warnings
    admin = tmp_path / "admin.conf"
    admin.write_text("SLURM_ALLOW_MAIL=true\n")
    write_user(home, "SLURM_ALLOW_MAIL=false\n")     # a user may still switch it off
    assert load(home, str(admin)).SLURM_ALLOW_MAIL is False
    write_user(home, "")
    assert load(home, str(admin)).SLURM_ALLOW_MAIL is True


def test_weaker_backends_for_jobs_can_be_allowed_by_the_admin_only(home, tmp_path, no_admin):
    write_user(home, "JOB_ALLOW_WEAKER_BACKEND=true\n")
    settings = load(home, no_admin)
    assert settings.JOB_ALLOW_WEAKER_BACKEND is False
    assert any(w.startswith("JOB_ALLOW_WEAKER_BACKEND=true from ") for w in settings.warnings)
    admin = tmp_path / "admin.conf"
    admin.write_text("JOB_ALLOW_WEAKER_BACKEND=true\n")
    write_user(home, "")
    assert load(home, str(admin)).JOB_ALLOW_WEAKER_BACKEND is True


def test_a_backend_without_the_slurm_boundary_is_accepted_by_the_admin_only(home, tmp_path,
                                                                          no_admin):
    # Issue 31: a user cannot let agents and auto run where the real srun escapes.
    write_user(home, "SLURM_BOUNDARY_OPTIONAL=true\n")
    settings = load(home, no_admin)
    assert settings.SLURM_BOUNDARY_OPTIONAL is False
    assert any(w.startswith("SLURM_BOUNDARY_OPTIONAL=true from ") for w in settings.warnings)
    admin = tmp_path / "admin.conf"
    admin.write_text("SLURM_BOUNDARY_OPTIONAL=true\n")
    write_user(home, "")
    assert load(home, str(admin)).SLURM_BOUNDARY_OPTIONAL is True


def test_the_slurm_config_path_is_set_by_the_admin_only(home, tmp_path, no_admin):
    write_user(home, "SLURM_CONF_PATH=/home/x/slurm.conf\n")
    settings = load(home, no_admin)
    assert settings.SLURM_CONF_PATH == ""
    assert any(w.startswith("SLURM_CONF_PATH=/home/x/slurm.conf from ") and "ignored" in w
               for w in settings.warnings)
    admin = tmp_path / "admin.conf"
    admin.write_text("SLURM_CONF_PATH=/site/slurm//slurm.conf\n")
    assert load(home, str(admin)).SLURM_CONF_PATH == "/site/slurm/slurm.conf"
    admin.write_text("SLURM_CONF_PATH=relative.conf\n")
    with pytest.raises(Exception, match="not an absolute path"):
        load(home, str(admin))


@pytest.mark.parametrize("value, accepted", [
    ('"[sbx] "', True), ('""', True), ("'$(id)'", False), ("'a`b'", False),
    ("'back\\slash'", False), ("'bell\x07'", False)])
def test_sandbox_prompt_is_plain_text(tmp_path, value, accepted):
    """SANDBOX_PROMPT becomes part of PS1, which bash expands."""
    from agent_sandbox.errors import ConfigError

    home = tmp_path / "home"
    conf = home / ".config/agent-sandbox/sandbox.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"SANDBOX_PROMPT={value}\n")
    load = lambda: confload.load_settings(home=str(home), user="alice", environ={},  # noqa: E731
                                          admin_path=str(tmp_path / "none"), cache=False)
    if accepted:
        assert load().SANDBOX_PROMPT == value.strip('"')
    else:
        with pytest.raises(ConfigError, match="SANDBOX_PROMPT"):
            load()


def test_a_derived_cache_file_is_used_only_when_it_is_the_users_own(tmp_path):
    """load_cache (config, seccomp, bound-file and probe caches) obeys the
    plan cache's rule: not a symlink, owned by this user, writable by no one
    else, in a directory with the same property; store_cache makes that
    directory private again if a umask-002 makedirs left it group-writable."""
    state = tmp_path / "state"
    (state / "cache").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    path = state / "cache" / "x.marshal"
    confload.store_cache(str(path), ("in",), "out")
    assert confload.load_cache(str(path), ("in",)) == "out"
    assert confload.load_cache(str(path), ("other",)) is None
    path.chmod(0o666)
    assert confload.load_cache(str(path), ("in",)) is None
    path.chmod(0o600)
    (state / "cache").chmod(0o777)
    assert confload.load_cache(str(path), ("in",)) is None
    confload.store_cache(str(path), ("in",), "out")
    assert (state / "cache").stat().st_mode & 0o777 == 0o700
    assert confload.load_cache(str(path), ("in",)) == "out"
    link = state / "cache" / "link.marshal"
    link.symlink_to(path)
    assert confload.load_cache(str(link), ("in",)) is None
    os.chown(path, 12345, 12345)
    assert confload.load_cache(str(path), ("in",)) is None


def test_the_cached_configuration_is_per_real_project_not_per_spelling(home, no_admin, tmp_path,
                                                                       monkeypatch):
    """PROJECT_MATCH decides on the real path: `--project-dir .` in two
    projects must not share one cached configuration."""
    trusted, other = tmp_path / "trusted", tmp_path / "other"
    trusted.mkdir()
    other.mkdir()
    conf_d = home / ".config" / "agent-sandbox" / "conf.d"
    conf_d.mkdir()
    (conf_d / "t.conf").write_text(f"PROJECT_MATCH=({trusted})\nHOME_ACCESS=read\n")
    state = home / ".local" / "state"
    state.mkdir(parents=True)
    for path in (home, home / ".local", state):
        path.chmod(0o755)
    results = []
    for project in (trusted, other):
        monkeypatch.chdir(project)
        results.append(confload.load_settings(home=str(home), user=USER, environ={},
                                               admin_path=no_admin, project_dir=".",
                                               cache=True).HOME_ACCESS)
    assert results == ["read", "tmpwrite"]
