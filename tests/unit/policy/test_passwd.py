"""Unit tests for agent_sandbox.policy.passwd (FILTER_PASSWD, SPEC §4)."""

from __future__ import annotations

import pytest

from agent_sandbox.policy.passwd import (
                                         filter_group,
                                         filter_nsswitch,
                                         filter_passwd,
                                         sys_id_max,
                                         )

# A Debian 12 login node: system accounts, two other local people, the
# caller (alice, 1000), nobody.  "carol" (uid 20417) exists only in LDAP.
DEBIAN_PASSWD = """\
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
sys:x:3:3:sys:/dev:/usr/sbin/nologin
sync:x:4:65534:sync:/bin:/bin/sync
man:x:6:12:man:/var/cache/man:/usr/sbin/nologin
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
_apt:x:42:65534::/nonexistent:/usr/sbin/nologin
systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin
messagebus:x:100:107::/nonexistent:/usr/sbin/nologin
sshd:x:101:65534::/run/sshd:/usr/sbin/nologin
slurm:x:64030:64030::/nonexistent:/usr/sbin/nologin
alice:x:1000:1000:Alice Example,,,:/home/alice:/bin/bash
bob:x:1001:1001:Bob Other,,,:/home/bob:/bin/bash
dave:x:1002:1002:Dave Third,Room 12,,:/home/dave:/bin/zsh
"""

SYSTEM_NAMES = [
    "root", "daemon", "bin", "sys", "sync", "man", "www-data", "nobody",
    "_apt", "systemd-network", "messagebus", "sshd",
]

CAROL_ENTRY = "carol:x:20417:20000:Carol LDAP:/home/carol:/bin/bash"

DEBIAN_GROUP = """\
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:syslog,bob
tty:x:5:
man:x:12:
sudo:x:27:bob,alice,dave
audio:x:29:dave
www-data:x:33:
users:x:100:alice,bob,dave
messagebus:x:107:
systemd-network:x:998:
nogroup:x:65534:
slurm:x:64030:
alice:x:1000:
bob:x:1001:
dave:x:1002:
project-x:x:5000:bob,alice
labshare:x:5001:bob,dave
"""


def names(text: str) -> list[str]:
    return [line.split(":")[0] for line in text.splitlines()]


def by_name(text: str) -> dict[str, str]:
    return {line.split(":")[0]: line for line in text.splitlines()}


# --------------------------------------------------------------------------
# filter_passwd


def test_passwd_local_user_keeps_system_nobody_and_self_only():
    out = filter_passwd(DEBIAN_PASSWD, uid=1000)
    assert names(out) == SYSTEM_NAMES + ["alice"]
    assert "bob" not in out and "dave" not in out


def test_passwd_lines_are_kept_verbatim_and_newline_terminated():
    out = filter_passwd(DEBIAN_PASSWD, uid=1000)
    src = set(DEBIAN_PASSWD.splitlines())
    assert all(line in src for line in out.splitlines())
    assert out.endswith("\n") and not out.endswith("\n\n")


def test_passwd_service_account_above_sys_max_is_removed():
    # slurm (64030) is neither system by login.defs nor nobody.
    assert "slurm" not in names(filter_passwd(DEBIAN_PASSWD, uid=1000))


def test_passwd_ldap_user_is_appended():
    out = filter_passwd(DEBIAN_PASSWD, uid=20417, user_entry=CAROL_ENTRY)
    assert names(out) == SYSTEM_NAMES + ["carol"]
    assert out.splitlines()[-1] == CAROL_ENTRY
    assert "alice" not in out and "bob" not in out


def test_passwd_ldap_user_without_entry_only_gets_system_accounts():
    assert names(filter_passwd(DEBIAN_PASSWD, uid=20417)) == SYSTEM_NAMES


def test_passwd_local_line_wins_over_user_entry():
    entry = "alice:x:1000:1000:Alice from LDAP:/home/alice:/bin/bash"
    out = filter_passwd(DEBIAN_PASSWD, uid=1000, user_entry=entry)
    assert by_name(out)["alice"] == "alice:x:1000:1000:Alice Example,,,:/home/alice:/bin/bash"
    assert names(out).count("alice") == 1


def test_passwd_user_entry_trailing_newline_is_stripped():
    out = filter_passwd(DEBIAN_PASSWD, uid=20417, user_entry=CAROL_ENTRY + "\n")
    assert out.endswith(CAROL_ENTRY + "\n")
    assert "\n\n" not in out


def test_passwd_user_entry_for_other_uid_is_rejected():
    with pytest.raises(ValueError):
        filter_passwd(DEBIAN_PASSWD, uid=1000, user_entry=CAROL_ENTRY)


@pytest.mark.parametrize(
    "entry",
    ["carol:x:20417:20000:Carol", "carol:x:abc:20000::/home/carol:/bin/sh", "", "+carol:x:20417:1::/:/bin/sh"],
)
def test_passwd_malformed_user_entry_is_rejected(entry):
    with pytest.raises(ValueError):
        filter_passwd(DEBIAN_PASSWD, uid=20417, user_entry=entry)


def test_passwd_comments_blank_and_malformed_lines_dropped():
    text = (
        "# /etc/passwd\n"
        "\n"
        "root:x:0:0:root:/root:/bin/bash\n"
        "   \n"
        "broken line without colons\n"
        "short:x:5:5\n"
        "toolong:x:6:6:a:b:c:d\n"
        "badid:x:12a:0::/:/bin/sh\n"
        "negative:x:-1:0::/:/bin/sh\n"
        "badgid:x:7::::/bin/sh\n"
        ":x:8:8::/:/bin/sh\n"
        "+::::::\n"
        "+@staff::::::\n"
        "-bob::::::\n"
        "alice:x:1000:1000::/home/alice:/bin/bash\n"
    )
    assert filter_passwd(text, uid=1000) == (
        "root:x:0:0:root:/root:/bin/bash\n"
        "alice:x:1000:1000::/home/alice:/bin/bash\n"
    )


def test_passwd_no_duplicate_names():
    text = (
        "root:x:0:0:root:/root:/bin/bash\n"
        "root:x:0:0:second root:/root:/bin/sh\n"
        "nobody:x:65534:65534::/:/sbin/nologin\n"
        "alice:x:1000:1000::/home/alice:/bin/bash\n"
        "alice:x:1000:1000:dup:/home/alice:/bin/bash\n"
    )
    out = filter_passwd(text, uid=1000)
    assert names(out) == ["root", "nobody", "alice"]
    assert "second root" not in out and "dup" not in out


def test_passwd_user_entry_name_clash_with_system_account():
    # An odd site where a system account shares the LDAP user's name: the
    # user's own entry must be the one that resolves.
    text = "root:x:0:0::/root:/bin/bash\ncarol:x:500:500::/:/sbin/nologin\n"
    out = filter_passwd(text, uid=20417, user_entry=CAROL_ENTRY)
    assert names(out) == ["root", "carol"]
    assert by_name(out)["carol"] == CAROL_ENTRY


def test_passwd_only_one_line_for_the_users_uid():
    text = (
        "root:x:0:0::/root:/bin/bash\n"
        "alias:x:1000:1000::/home/alias:/bin/bash\n"
        "alice:x:1000:1000::/home/alice:/bin/bash\n"
    )
    entry = "alice:x:1000:1000::/home/alice:/bin/bash"
    assert names(filter_passwd(text, uid=1000, user_entry=entry)) == ["root", "alice"]
    assert names(filter_passwd(text, uid=1000)) == ["root", "alias"]


def test_passwd_custom_sys_uid_max():
    out = filter_passwd(DEBIAN_PASSWD, uid=1000, sys_uid_max=99)
    assert names(out) == [
        "root", "daemon", "bin", "sys", "sync", "man", "www-data", "nobody", "_apt", "alice",
    ]


def test_passwd_root_caller():
    out = filter_passwd(DEBIAN_PASSWD, uid=0, user_entry="root:x:0:0:root:/root:/bin/bash")
    assert names(out) == SYSTEM_NAMES


def test_passwd_crlf_and_no_trailing_newline():
    text = "root:x:0:0::/root:/bin/bash\r\nbob:x:1001:1001::/home/bob:/bin/bash\r\nalice:x:1000:1000::/home/alice:/bin/bash"
    assert filter_passwd(text, uid=1000) == (
        "root:x:0:0::/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n"
    )


def test_passwd_empty_input():
    assert filter_passwd("", uid=1000) == ""
    assert filter_passwd("", uid=20417, user_entry=CAROL_ENTRY) == CAROL_ENTRY + "\n"


# --------------------------------------------------------------------------
# filter_group


def test_group_keeps_system_nogroup_and_users_groups():
    out = filter_group(DEBIAN_GROUP, user="alice", gids=[1000, 27, 100, 5000])
    assert names(out) == [
        "root", "daemon", "bin", "sys", "adm", "tty", "man", "sudo", "audio",
        "www-data", "users", "messagebus", "systemd-network", "nogroup",
        "alice", "project-x",
    ]
    for other in ("bob", "dave", "labshare", "slurm"):
        assert other not in names(out)


def test_group_members_reduced_to_user_in_every_line():
    out = by_name(filter_group(DEBIAN_GROUP, user="alice", gids=[1000, 27, 100, 5000]))
    assert out["sudo"] == "sudo:x:27:alice"
    assert out["users"] == "users:x:100:alice"
    assert out["project-x"] == "project-x:x:5000:alice"
    # groups the user is not in lose all their members
    assert out["adm"] == "adm:x:4:"
    assert out["audio"] == "audio:x:29:"
    assert out["alice"] == "alice:x:1000:"


def test_group_no_other_user_names_leak():
    out = filter_group(DEBIAN_GROUP, user="alice", gids=[1000, 27, 100, 5000])
    for other in ("bob", "dave", "syslog"):
        assert other not in out


def test_group_ldap_groups_from_extra_entries():
    extra = [
        "carol:x:20000:",
        "hpc-users:x:20001:bob,carol,dave",
        "not-mine:x:30000:carol",  # gid not in gids: ignored
    ]
    out = filter_group(DEBIAN_GROUP, user="carol", gids=[20000, 20001], extra_entries=extra)
    lines = out.splitlines()
    assert lines[-2:] == ["carol:x:20000:", "hpc-users:x:20001:carol"]
    assert "not-mine" not in out
    assert "bob" not in out and "dave" not in out and "alice" not in out


def test_group_extra_entry_not_used_when_gid_present_in_file():
    extra = ["project-x-ldap:x:5000:alice,bob"]
    out = filter_group(DEBIAN_GROUP, user="alice", gids=[1000, 5000], extra_entries=extra)
    assert "project-x-ldap" not in out
    assert by_name(out)["project-x"] == "project-x:x:5000:alice"


def test_group_extra_entry_name_clash_and_duplicates_ignored():
    extra = ["sudo:x:20001:carol", "hpc:x:20002:", "hpc-again:x:20002:carol"]
    out = filter_group(DEBIAN_GROUP, user="carol", gids=[20001, 20002], extra_entries=extra)
    assert names(out).count("sudo") == 1
    assert by_name(out)["sudo"] == "sudo:x:27:"
    assert "hpc:x:20002:" in out.splitlines()
    assert "hpc-again" not in out


def test_group_missing_gid_without_extra_entry_is_skipped():
    out = filter_group(DEBIAN_GROUP, user="carol", gids=[20000])
    assert "20000" not in out


def test_group_malformed_extra_entry_rejected():
    with pytest.raises(ValueError):
        filter_group(DEBIAN_GROUP, user="carol", gids=[20000], extra_entries=["carol:x:20000"])


def test_group_comments_malformed_and_duplicates_dropped():
    text = (
        "# local groups\n"
        "\n"
        "root:x:0:\n"
        "root:x:0:bob\n"
        "bad:x:abc:\n"
        "toolong:x:1:a:b\n"
        "+:::\n"
        "+@netgrp:::\n"
        "staff:x:50: bob , alice ,\n"
    )
    assert filter_group(text, user="alice", gids=[1000]) == "root:x:0:\nstaff:x:50:alice\n"


def test_group_spaces_in_sssd_group_names_allowed():
    extra = ["domain users:x:20513:carol"]
    out = filter_group("", user="carol", gids=[20513], extra_entries=extra)
    assert out == "domain users:x:20513:carol\n"


def test_group_custom_sys_gid_max_and_gid_set_types():
    out = filter_group(DEBIAN_GROUP, user="alice", gids={1000}, sys_gid_max=9)
    assert names(out) == ["root", "daemon", "bin", "sys", "adm", "tty", "nogroup", "alice"]
    out2 = filter_group(DEBIAN_GROUP, user="alice", gids=frozenset({1000}), sys_gid_max=9)
    assert out == out2


def test_group_member_substring_is_not_membership():
    text = "dev:x:5000:alice2,malice\n"
    assert filter_group(text, user="alice", gids=[5000]) == "dev:x:5000:\n"


# --------------------------------------------------------------------------
# filter_nsswitch

DEBIAN_NSSWITCH = """\
# /etc/nsswitch.conf
#
# Example configuration of GNU Name Service Switch functionality.

passwd:         files systemd sss
group:          files systemd sss
shadow:         files sss
gshadow:        files

hosts:          files mdns4_minimal [NOTFOUND=return] dns myhostname
networks:       files

protocols:      db files
services:       db files sss
ethers:         db files
rpc:            db files

netgroup:       nis sss
automount:      sss
sudoers:        files sss
"""


def test_nsswitch_debian_sssd_rewritten():
    out = filter_nsswitch(DEBIAN_NSSWITCH)
    lines = out.splitlines()
    assert "passwd:         files" in lines
    assert "group:          files" in lines
    assert "shadow:         files" in lines
    assert "gshadow:        files" in lines
    assert "netgroup:       files" in lines
    for gone in ("systemd", "nis"):
        assert gone not in out


def test_nsswitch_other_lines_and_comments_unchanged():
    out = filter_nsswitch(DEBIAN_NSSWITCH).splitlines()
    src = DEBIAN_NSSWITCH.splitlines()
    assert len(out) == len(src)  # nothing added: passwd and group present
    for before, after in zip(src, out):
        db = before.split(":")[0].strip()
        if db not in {"passwd", "group", "shadow", "gshadow", "netgroup"}:
            assert before == after
    assert "# /etc/nsswitch.conf" in out
    assert "hosts:          files mdns4_minimal [NOTFOUND=return] dns myhostname" in out
    assert "services:       db files sss" in out
    assert "automount:      sss" in out
    assert "" in out


def test_nsswitch_compat_without_space():
    text = "passwd:compat\ngroup:compat\nshadow:compat\nhosts: files dns\n"
    assert filter_nsswitch(text) == "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"


def test_nsswitch_rhel_sssd_with_actions_and_comments():
    text = (
        "# Generated by authselect\n"
        "passwd:     sss files systemd   # managed by authselect\n"
        "group:      sss files systemd\n"
        "initgroups: sss [SUCCESS=merge] files\n"
        "netgroup:   sss files\n"
        "hosts:      files dns myhostname\n"
    )
    assert filter_nsswitch(text) == (
        "# Generated by authselect\n"
        "passwd:     files\n"
        "group:      files\n"
        "initgroups: files\n"
        "netgroup:   files\n"
        "hosts:      files dns myhostname\n"
    )


@pytest.mark.parametrize("source", ["ldap", "nis", "winbind", "sss", "systemd", "compat", "altfiles"])
def test_nsswitch_every_remote_source_dropped(source):
    out = filter_nsswitch(f"passwd: {source} files\ngroup: files {source}\n")
    assert out == "passwd: files\ngroup: files\n"


def test_nsswitch_missing_passwd_and_group_added():
    text = "# minimal\nhosts: files dns\n"
    assert filter_nsswitch(text) == "# minimal\nhosts: files dns\npasswd: files\ngroup: files\n"


def test_nsswitch_only_group_missing():
    assert filter_nsswitch("passwd: ldap\n") == "passwd: files\ngroup: files\n"


def test_nsswitch_empty_file():
    assert filter_nsswitch("") == "passwd: files\ngroup: files\n"


def test_nsswitch_commented_out_database_is_not_counted_as_present():
    text = "#passwd: sss\nhosts: files\n"
    assert filter_nsswitch(text) == "#passwd: sss\nhosts: files\npasswd: files\ngroup: files\n"


def test_nsswitch_indented_uppercase_duplicate_and_empty_entries():
    text = "  passwd : sss\nPASSWD: ldap\ngroup:\npasswd_compat: ldap\n"
    assert filter_nsswitch(text) == (
        "  passwd : files\nPASSWD: files\ngroup: files\npasswd_compat: ldap\n"
    )


def test_nsswitch_is_idempotent():
    once = filter_nsswitch(DEBIAN_NSSWITCH)
    assert filter_nsswitch(once) == once


# --------------------------------------------------------------------------
# sys_id_max

DEBIAN_LOGIN_DEFS = """\
#
# /etc/login.defs - Configuration control definitions for the login package.
#
MAIL_DIR        /var/mail
#
# Min/max values for automatic uid selection in useradd(8)
#
UID_MIN                  1000
UID_MAX                 60000
# System accounts
#SYS_UID_MIN              101
#SYS_UID_MAX              999
#
# Min/max values for automatic gid selection in groupadd(8)
#
GID_MIN                  1000
GID_MAX                 60000
# System accounts
#SYS_GID_MIN              101
#SYS_GID_MAX              999
ENCRYPT_METHOD SHA512
"""


def test_login_defs_debian_derives_from_min():
    assert sys_id_max(DEBIAN_LOGIN_DEFS) == (999, 999)


def test_login_defs_explicit_sys_max_wins():
    text = "UID_MIN 1000\nSYS_UID_MAX 499\nGID_MIN 1000\nSYS_GID_MAX 599\n"
    assert sys_id_max(text) == (499, 599)


def test_login_defs_old_rhel_min_500():
    text = "UID_MIN\t\t\t  500\nGID_MIN\t\t\t  500\n"
    assert sys_id_max(text) == (499, 499)


def test_login_defs_empty_defaults():
    assert sys_id_max("") == (999, 999)
    assert sys_id_max("# nothing\n\n") == (999, 999)


def test_login_defs_invalid_values_ignored_and_last_wins():
    text = (
        "SYS_UID_MAX abc\n"
        "UID_MIN -5\n"
        "SYS_GID_MAX 1_000\n"
        "GID_MIN 2000\n"
        "GID_MIN 1500\n"
        "UID_MIN\n"
    )
    assert sys_id_max(text) == (999, 1499)


def test_login_defs_hex_octal_and_quotes():
    assert sys_id_max('SYS_UID_MAX 0x1f3\nSYS_GID_MAX "0777"\n') == (499, 511)


def test_login_defs_uid_min_zero_falls_back_to_default():
    assert sys_id_max("UID_MIN 0\nGID_MIN 0\n") == (999, 999)


def test_end_to_end_with_login_defs():
    uid_max, gid_max = sys_id_max("SYS_UID_MAX 99\nSYS_GID_MAX 99\n")
    pw = filter_passwd(DEBIAN_PASSWD, uid=20417, sys_uid_max=uid_max, user_entry=CAROL_ENTRY)
    assert names(pw) == [
        "root", "daemon", "bin", "sys", "sync", "man", "www-data", "nobody", "_apt", "carol",
    ]
    gr = filter_group(
        DEBIAN_GROUP, user="carol", gids=[20000], sys_gid_max=gid_max,
        extra_entries=["carol:x:20000:"],
    )
    assert names(gr) == [
        "root", "daemon", "bin", "sys", "adm", "tty", "man", "sudo", "audio", "www-data",
        "nogroup", "carol",
    ]
