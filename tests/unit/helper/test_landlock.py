"""Landlock: the ABI table and field-by-field degradation (pure), the helper's
argument parsing, and one real ruleset applied in a child process."""
from __future__ import annotations

import marshal
import os
import subprocess
import sys

import pytest

from agent_sandbox.backends.base import helper_command
from agent_sandbox.paths import helper_module
ll = helper_module("landlock")
sandbox_exec = helper_module("sandbox_exec")


def full(abi: int) -> dict:
    return ll.ruleset(abi, fs=ll.fs_rights(abi), net=ll.NET_BIND_TCP | ll.NET_CONNECT_TCP,
                      scoped=ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL,
                      paths=[(ll.READ | ll.WRITE | ll.IOCTL_DEV, "/tmp"), (ll.READ, "/usr")],
                      ports=[(ll.NET_CONNECT_TCP, 443)])


def test_rights_grow_with_the_abi():
    assert ll.fs_rights(0) == 0
    assert ll.fs_rights(1) == (1 << 13) - 1
    assert ll.fs_rights(2) == ll.fs_rights(1) | ll.REFER
    assert ll.fs_rights(3) == ll.fs_rights(2) | ll.TRUNCATE
    assert ll.fs_rights(4) == ll.fs_rights(3)
    assert ll.fs_rights(5) == ll.fs_rights(3) | ll.IOCTL_DEV
    assert ll.fs_rights(7) == ll.fs_rights(5)
    assert ll.WRITE & ll.EXECUTE == 0 and ll.READ & ll.WRITE == 0


def test_downgrade_to_the_same_abi_loses_nothing():
    spec = full(7)
    applied, lost = ll.downgrade(spec, 7)
    assert lost == [] and applied == spec


@pytest.mark.parametrize("abi, lost_words", [
    (6, []),
    (5, ["abstract unix", "signals"]),
    (4, ["ioctl", "abstract unix", "signals"]),
    (3, ["TCP", "ioctl", "abstract unix", "signals"]),
    (2, ["truncation", "TCP", "ioctl", "abstract unix", "signals"]),
    (1, ["renaming", "truncation", "TCP", "ioctl", "abstract unix", "signals"]),
])
def test_downgrade_field_by_field(abi, lost_words):
    applied, lost = ll.downgrade(full(7), abi)
    assert len(lost) == len(lost_words)
    for line, word in zip(lost, lost_words):
        assert word in line
    assert applied["fs"] == ll.fs_rights(abi)
    assert applied["net"] == (3 if abi >= 4 else 0)
    assert applied["ports"] == (((ll.NET_CONNECT_TCP, 443),) if abi >= 4 else ())
    assert applied["scoped"] == (3 if abi >= 6 else 0)
    for access, _ in applied["paths"]:
        assert access & ~ll.fs_rights(abi) == 0     # no right the ABI does not know
    assert applied["abi"] == min(7, abi)


def test_downgrade_without_landlock_says_everything_is_lost():
    applied, lost = ll.downgrade(full(7), 0)
    assert "no Landlock" in lost[0]
    assert applied["fs"] == applied["net"] == applied["scoped"] == 0
    assert applied["paths"] == ()


def test_a_ruleset_that_only_scopes_loses_only_scoping():
    spec = ll.ruleset(6, scoped=ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL)
    _, lost = ll.downgrade(spec, 5)
    assert len(lost) == 2 and all("scoping" in line for line in lost)
    assert ll.downgrade(spec, 3)[1] == lost


def test_kernel_abi_is_known():
    abi = ll.abi_version()
    assert abi >= 6, f"this kernel offers Landlock ABI {abi}; the tests need 6 (Linux 6.12+)"


def test_restrict_self_in_a_child(tmp_path):
    """A real ruleset: reads under /usr allowed, writes only in tmp_path, a
    symlink in the rule list is not followed."""
    allowed = tmp_path / "rw"
    allowed.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    link = tmp_path / "link"
    link.symlink_to(outside)
    abi = ll.abi_version()
    spec = ll.ruleset(abi, fs=ll.fs_rights(abi),
                      paths=[(ll.READ, "/usr"), (ll.READ | ll.WRITE, str(allowed)),
                             (ll.READ | ll.WRITE, str(link))])
    code = f"""
import marshal, os, sys
sys.path.insert(0, {os.path.dirname(ll.__file__)!r})
import landlock
landlock.no_new_privs()
print(landlock.restrict_self(marshal.loads({marshal.dumps(spec)!r})))
for path in ({str(allowed / 'f')!r}, {str(outside / 'f')!r}, {str(link / 'g')!r}):
    try:
        open(path, 'wb').close()   # binary: 3.9's text mode imports _bootlocale (a read)
        print('ok')
    except OSError as exc:
        print(exc.errno)
"""
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    added, *outcomes = result.stdout.split()
    assert int(added) == 2                      # the symlink's rule was skipped
    import errno

    assert outcomes == ["ok", str(errno.EACCES), str(errno.EACCES)]


def test_the_helper_grants_a_directory_by_the_descriptor_it_was_given(tmp_path):
    """--landlock-dir FD (a landlock job's shared-memory directory,
    jobs/shm.py): the directory the launcher opened is the one granted,
    even when its name now points elsewhere, and the command never gets FD."""
    shm, swapped = tmp_path / "shm", tmp_path / "swapped"
    shm.mkdir()
    fd = os.open(shm, os.O_PATH | os.O_DIRECTORY)
    shm.rename(swapped)
    (tmp_path / "shm").mkdir()                   # a new entry under the old name
    abi = ll.abi_version()
    spec = ll.ruleset(abi, fs=ll.fs_rights(abi), paths=[(ll.READ, "/")])
    r, w = os.pipe()
    os.write(w, marshal.dumps(spec))
    os.close(w)
    try:
        result = run_helper(
            "--landlock", str(r), "--landlock-dir", str(fd), "--", "/bin/sh", "-c",
            f"touch {swapped}/a && echo granted; touch {tmp_path}/shm/b || echo denied; "
            f"ls /proc/self/fd | wc -l", pass_fds=(r, fd))
    finally:
        os.close(r)
        os.close(fd)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["granted", "denied", "4"]   # 0-2 and ls's own
    assert (swapped / "a").exists() and not (tmp_path / "shm" / "b").exists()


# ---------------------------------------------------------------- helper arguments
def test_helper_parses_its_options():
    opts = sandbox_exec.parse(["--env", "3", "--landlock", "4", "--seccomp", "5", "--seed", "6",
                               "/h/.bashrc", "--chdir", "/p", "--new-session", "--lifeline",
                               "7", "--status", "8", "--pid-namespace", "--max-abi", "3",
                               "--degrade", "--cleanup", "/tmp/t", "--landlock-dir", "9",
                               "--landlock-dir", "10", "--", "cmd", "--", "-x"])
    assert opts["env"] == 3 and opts["landlock"] == 4 and opts["seccomp"] == 5
    assert opts["seeds"] == [(6, "/h/.bashrc")]
    assert opts["chdir"] == "/p" and opts["new_session"] and opts["pid_namespace"]
    assert opts["lifeline"] == 7 and opts["status"] == 8
    assert opts["max_abi"] == 3 and opts["degrade"] and opts["cleanup"] == "/tmp/t"
    assert opts["landlock_dirs"] == [9, 10]
    assert opts["command"] == ["cmd", "--", "-x"]


@pytest.mark.parametrize("argv", [["--bogus", "--", "x"], ["--env"], ["--env", "x", "--", "y"],
                                  ["--chdir", "/p"], []])
def test_helper_refuses_bad_options(argv):
    with pytest.raises(sandbox_exec.SetupError):
        sandbox_exec.parse(argv)


def run_helper(*args, input_fd=None, pass_fds=(), **kwargs):
    fds = ((input_fd,) if input_fd is not None else ()) + tuple(pass_fds)
    return subprocess.run(helper_command(sys.executable) + list(args), pass_fds=fds,
                          capture_output=True, text=True, **kwargs)


def test_helper_gives_the_shells_exit_codes(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("echo no\n")
    plain.chmod(0o644)
    assert run_helper("--", "no-such-command-x").returncode == 127
    assert run_helper("--", str(plain)).returncode == 126
    result = run_helper("--", "/bin/sh", "-c", "exit 42")
    assert result.returncode == 42


def test_helper_setup_failure_is_125_and_runs_nothing(tmp_path):
    result = run_helper("--chdir", str(tmp_path / "missing"), "--", "/bin/sh", "-c",
                        f"touch {tmp_path}/ran")
    assert result.returncode == 125
    assert "could not set up" in result.stderr and "not run" in result.stderr
    assert not (tmp_path / "ran").exists()


def test_helper_environment_comes_from_its_descriptor():
    r, w = os.pipe()
    os.write(w, b"A=1\0B=two words\0PATH=/usr/bin:/bin")
    os.close(w)
    result = run_helper("--env", str(r), "--", "/usr/bin/env", input_fd=r,
                        env={"SECRET": "x", "PATH": "/usr/bin:/bin"})
    os.close(r)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["A=1", "B=two words", "PATH=/usr/bin:/bin"]


def test_helper_refuses_an_older_abi_than_planned_unless_told_to_degrade():
    spec = ll.ruleset(6, scoped=ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL)

    def attempt(*extra):
        r, w = os.pipe()
        os.write(w, marshal.dumps(spec))
        os.close(w)
        try:
            return run_helper("--landlock", str(r), "--max-abi", "5", *extra, "--", "/bin/true",
                              input_fd=r)
        finally:
            os.close(r)

    refused = attempt()
    assert refused.returncode == 125
    assert "ABI 6" in refused.stderr and "ABI 5" in refused.stderr
    assert "scoping of abstract unix sockets" in refused.stderr
    degraded = attempt("--degrade")
    assert degraded.returncode == 0, degraded.stderr
    assert "Landlock ABI 5 (planned 6) — not enforced: scoping of abstract unix sockets" \
        in degraded.stderr


def test_the_helper_parses_controlling_tty_and_fails_closed_without_a_terminal():
    """--controlling-tty: setsid + TIOCSCTTY on stdin; when stdin is no
    terminal the command does not run (125), whatever the backend did."""
    import subprocess
    import sys

    from agent_sandbox.backends.base import helper_command
    from agent_sandbox.paths import helper_module

    exec_helper = helper_module("sandbox_exec")
    assert exec_helper.parse(["--controlling-tty", "--", "sh"])["controlling_tty"] is True
    result = subprocess.run(helper_command(sys.executable) + ["--controlling-tty", "--", "echo",
                                                            "ran"],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert result.returncode == 125 and "ran" not in result.stdout
    assert "cannot take the session's terminal" in result.stderr
