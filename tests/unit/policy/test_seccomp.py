"""Tests of agent_sandbox.policy.seccomp: the deny list, the compiled BPF, and a real
run of the filter under bwrap as an unprivileged user (SPEC §7)."""

from __future__ import annotations

import errno
import json
import os
import platform
import pwd
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_sandbox.policy import seccomp
from agent_sandbox.policy.seccomp import DEFAULT_DENY, LANDLOCK_EXTRA_DENY, compile_filter, deny_list

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "tests" / "probes" / "syscalls.py"
BWRAP = "/usr/bin/bwrap"
SYS_PYTHON = "/usr/bin/python3"

SPEC_NAMES = {
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
    "kexec_load", "kexec_file_load", "bpf", "mount", "umount2", "fsopen",
    "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    "pivot_root", "reboot", "swapon", "swapoff", "personality", "acct",
    "quotactl", "kcmp", "ioctl",
}  # fmt: skip


# --------------------------------------------------------------------------
# deny_list (pure)
# --------------------------------------------------------------------------


def test_default_deny_matches_spec():
    assert set(DEFAULT_DENY) == SPEC_NAMES
    assert len(DEFAULT_DENY) == len(set(DEFAULT_DENY))
    assert LANDLOCK_EXTRA_DENY == ("ptrace", "process_vm_readv", "process_vm_writev")
    assert set(seccomp.CONDITIONAL) == {"personality", "ioctl"} | set(seccomp.USERNS_DENY)
    assert not set(seccomp.USERNS_DENY) & set(deny_list())      # only where asked for
    assert set(seccomp.USERNS_DENY) <= set(deny_list(no_user_namespaces=True))


def test_deny_list_default_is_sorted_and_unique():
    d = deny_list()
    assert d == tuple(sorted(SPEC_NAMES))
    assert isinstance(d, tuple)
    assert not set(LANDLOCK_EXTRA_DENY) & set(d)


def test_deny_list_extras_added_sorted_and_deduplicated():
    d = deny_list(["setns", "mount", "chroot", "setns"])
    assert d == tuple(sorted(SPEC_NAMES | {"setns", "chroot"}))
    assert len(d) == len(set(d))


def test_deny_list_landlock_extras():
    d = deny_list(no_pid_namespace=True)
    assert set(LANDLOCK_EXTRA_DENY) <= set(d)
    assert list(d) == sorted(d)
    assert deny_list(["ptrace"], no_pid_namespace=True) == d


def test_deny_list_accepts_name_of_other_arch():
    # socketcall does not exist on x86_64 but does on i386: a valid name.
    assert "socketcall" in deny_list(["socketcall"])


@pytest.mark.parametrize("bad", ["no_such_syscall", "MOUNT", "", "mount;reboot", "io_uring_setup\0x", " mount"])
def test_deny_list_unknown_name_refused(bad):
    with pytest.raises(ValueError) as exc:
        deny_list(["chroot", bad])
    assert repr(bad) in str(exc.value)


def test_deny_list_rejects_single_string():
    with pytest.raises(TypeError):
        deny_list("mount")


VALID_EXTRAS = ["chroot", "setns", "unshare", "ptrace", "mount", "kcmp", "socketcall", "init_module", "delete_module"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(VALID_EXTRAS)), st.booleans())
def test_deny_list_properties(extra, no_pid):
    d = deny_list(extra, no_pid_namespace=no_pid)
    assert list(d) == sorted(set(d))
    assert set(d) == set(DEFAULT_DENY) | set(extra) | (set(LANDLOCK_EXTRA_DENY) if no_pid else set())


def test_module_import_does_not_load_pyseccomp():
    code = (
        "import sys; import agent_sandbox.policy.seccomp as s; s.deny_list(); "
        "assert 'pyseccomp' not in sys.modules, 'pyseccomp imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


# --------------------------------------------------------------------------
# compile_filter
# --------------------------------------------------------------------------


def _insns(bpf: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack_from("=HBBI", bpf, i) for i in range(0, len(bpf), 8)]


def test_compile_filter_returns_bpf():
    bpf = compile_filter(deny_list())
    assert isinstance(bpf, bytes)
    assert len(bpf) > 0 and len(bpf) % 8 == 0
    assert len(bpf) // 8 <= 4096  # BPF_MAXINSNS


def test_compile_filter_deterministic_and_order_independent():
    d = deny_list(no_pid_namespace=True)
    a = compile_filter(d)
    assert compile_filter(d) == a
    assert compile_filter(tuple(reversed(d))) == a
    assert compile_filter(list(d) + list(d)) == a


def test_compile_filter_differs_with_deny_list():
    assert compile_filter(deny_list()) != compile_filter(deny_list(no_pid_namespace=True))
    assert compile_filter(deny_list()) != compile_filter(deny_list(["chroot"]))
    assert compile_filter(["mount"]) != compile_filter(["umount2"])


def test_compile_filter_empty_list_is_valid():
    bpf = compile_filter([])
    assert bpf and len(bpf) % 8 == 0


def test_compile_filter_refuses_unknown_name():
    with pytest.raises(ValueError, match="no_such_syscall"):
        compile_filter(["mount", "no_such_syscall"])


@pytest.mark.skipif(platform.machine() != "x86_64", reason="architecture constants are x86_64-specific")
def test_compile_filter_covers_compat_abis():
    # The program must compare seccomp_data.arch with both AUDIT_ARCH_X86_64
    # and AUDIT_ARCH_I386; x32 shares the x86_64 token and is told apart by
    # __X32_SYSCALL_BIT (0x40000000) in the syscall number.
    ks = {k for _code, _jt, _jf, k in _insns(compile_filter(deny_list()))}
    assert 0xC000003E in ks  # AUDIT_ARCH_X86_64
    assert 0x40000003 in ks  # AUDIT_ARCH_I386
    assert 0x40000000 | 425 in ks  # x32 io_uring_setup
    # syscall numbers: i386 personality (136) and x86_64 personality (135)
    assert {135, 136, 0x5412, 0x541C, 0xFFFFFFFF} <= ks


# --------------------------------------------------------------------------
# The real thing: bwrap --seccomp, unprivileged user, native + int 0x80
# --------------------------------------------------------------------------

EPERM = errno.EPERM


def _unprivileged() -> dict:
    """subprocess kwargs that run the child as an unprivileged user."""
    if os.geteuid() != 0:
        return {}
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        pytest.fail(
            "running as root and there is no 'nobody' user to drop to: "
            "cannot run the seccomp probe unprivileged"
        )
    if pw.pw_uid == 0:
        pytest.fail("'nobody' has uid 0: cannot run the seccomp probe unprivileged")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


@pytest.fixture(scope="module")
def probe_dir():
    if platform.machine() != "x86_64":
        pytest.fail(f"the seccomp probe is x86_64-only; this machine is {platform.machine()}")
    for exe in (BWRAP, SYS_PYTHON):
        if not os.access(exe, os.X_OK):
            pytest.fail(f"{exe} is required for the real seccomp test")
    d = tempfile.mkdtemp(prefix="seccomp-probe-")
    try:
        os.chmod(d, 0o755)  # reachable by the unprivileged user
        shutil.copyfile(PROBE, os.path.join(d, "syscalls.py"))
        os.chmod(os.path.join(d, "syscalls.py"), 0o644)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_probe(probe_dir: str, bpf: bytes | None, *args: str) -> dict:
    argv = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent"]
    fds: tuple[int, ...] = ()
    fd = None
    if bpf is not None:
        fd = os.memfd_create("seccomp-test", 0)
        os.write(fd, bpf)
        os.lseek(fd, 0, os.SEEK_SET)
        argv += ["--seccomp", str(fd)]
        fds = (fd,)
    argv += [SYS_PYTHON, os.path.join(probe_dir, "syscalls.py"), *args]
    try:
        proc = subprocess.run(
            argv,
            pass_fds=fds,
            cwd=probe_dir,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            **_unprivileged(),
        )
    finally:
        if fd is not None:
            os.close(fd)
    if proc.returncode != 0:
        pytest.fail(
            f"probe under bwrap failed (rc={proc.returncode}):\n"
            f"argv={argv}\nstderr={proc.stderr}\nstdout={proc.stdout}"
        )
    out = json.loads(proc.stdout)
    assert out["uid"] != 0 and out["euid"] != 0, "probe must run unprivileged"
    return out


@pytest.fixture(scope="module")
def filtered(probe_dir):
    return run_probe(probe_dir, compile_filter(deny_list()), "--landlock")


@pytest.fixture(scope="module")
def unfiltered(probe_dir):
    return run_probe(probe_dir, None, "--landlock")


def test_filter_denies_every_call_native_and_i386(filtered):
    native, i386 = filtered["native"], filtered["i386"]
    # every denied syscall was probed natively (ioctl as its TIOCSTI/TIOCLINUX variants)
    assert set(DEFAULT_DENY) - {"ioctl"} <= set(native)
    assert {"ioctl_TIOCSTI", "ioctl_TIOCSTI_highbits", "ioctl_TIOCLINUX"} <= set(native)
    assert {"io_uring_setup", "personality", "mount", "kcmp", "bpf", "ioctl_TIOCSTI"} <= set(i386)
    not_denied = {f"native.{k}": v for k, v in native.items() if v != EPERM}
    not_denied |= {f"i386.{k}": v for k, v in i386.items() if v != EPERM}
    assert not not_denied, f"calls not refused with EPERM: {not_denied}"


def test_filter_lets_harmless_variants_through(filtered):
    # personality(0xffffffff) query and an ordinary tty ioctl still work
    assert filtered["allowed"] == {"personality_query": 0, "ioctl_TIOCGWINSZ": 0}


def test_without_filter_results_differ(unfiltered):
    """Proves that the filter, not the environment, causes the EPERMs."""
    native, i386 = unfiltered["native"], unfiltered["i386"]
    for name in ("io_uring_setup", "personality", "kcmp", "bpf"):
        assert native[name] != EPERM, f"native {name} is EPERM without the filter"
        assert i386[name] != EPERM, f"i386 {name} is EPERM without the filter"
    # the truncation tricks work in the kernel, so the filter must catch them
    assert native["personality_highbits"] == 0
    assert native["ioctl_TIOCSTI"] != EPERM
    assert native["ioctl_TIOCSTI_highbits"] == native["ioctl_TIOCSTI"]
    assert i386["ioctl_TIOCSTI"] != EPERM
    assert unfiltered["allowed"] == {"personality_query": 0, "ioctl_TIOCGWINSZ": 0}


def test_landlock_extras_only_with_no_pid_namespace(probe_dir, filtered, unfiltered):
    # default filter: ptrace & process_vm_* are left alone (PID namespace isolates)
    for name in LANDLOCK_EXTRA_DENY:
        assert filtered["landlock"][name] != EPERM
        assert unfiltered["landlock"][name] != EPERM
    out = run_probe(probe_dir, compile_filter(deny_list(no_pid_namespace=True)), "--landlock")
    assert out["landlock"] == {name: EPERM for name in LANDLOCK_EXTRA_DENY}
    assert all(v == EPERM for v in out["native"].values())
    assert all(v == EPERM for v in out["i386"].values())
