"""chaperon/beneath.py on the real kernel: openat2 and the component walk
(forced, as on kernels without openat2) give the same answers, and a file
swapped with a symlink to a secret by renameat2(RENAME_EXCHANGE) from
another thread never yields the secret."""
from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading

import pytest

from chaperon import beneath


@pytest.fixture(params=["openat2", "walk"])
def mode(request, monkeypatch):
    if request.param == "walk":
        monkeypatch.setattr(beneath, "FORCE_WALK", True)
    else:
        assert beneath.have_openat2(), "this kernel has openat2 (Linux >= 5.6)"
    return request.param


@pytest.fixture
def tree(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("PRIVATE KEY")
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    (project / "sub" / "file").write_text("data")
    (project / "link").symlink_to(secret)
    (project / "dirlink").symlink_to(project / "sub")
    (project / "outside").symlink_to(tmp_path)
    os.mkfifo(project / "fifo")
    return project


def test_regular_files_below_the_project_are_read(tree, mode):
    with beneath.Project(str(tree)) as project:
        assert project.read_regular("sub/file", 100) == b"data"
        assert project.read_regular(project.rel(str(tree / "sub"), "../sub/file"), 100) == b"data"


@pytest.mark.parametrize("name,code", [("link", errno.ELOOP), ("dirlink/file", errno.ELOOP),
                                       ("outside/secret", errno.ELOOP),
                                       ("sub", None), ("fifo", None), ("nothing", errno.ENOENT)])
def test_symlinks_directories_and_fifos_are_refused(tree, mode, name, code):
    with beneath.Project(str(tree)) as project:
        with pytest.raises(beneath.Unusable) as refused:
            project.read_regular(name, 100)
    if code is not None:
        assert refused.value.errno == code, refused.value.why


def test_names_outside_the_project_are_refused_lexically(tree):
    assert beneath.relative_to(str(tree), str(tree / "sub"), "../../secret") is None
    assert beneath.relative_to(str(tree), str(tree), "/etc/passwd") is None
    assert beneath.relative_to(str(tree), str(tree / "sub"), "..") == ""
    with beneath.Project(str(tree)) as project:
        with pytest.raises(beneath.Unusable) as refused:
            project.rel(str(tree), "../secret")
    assert refused.value.errno == errno.EXDEV


def test_a_project_path_through_a_symlink_is_refused(tree, tmp_path):
    (tmp_path / "alias").symlink_to(tree)
    with pytest.raises(beneath.Unusable):
        beneath.Project(str(tmp_path / "alias"))


def test_writes_create_regular_files_and_refuse_the_rest(tree, mode):
    with beneath.Project(str(tree)) as project:
        fd = project.write_regular("sub/new.out")
        os.write(fd, b"x")
        os.close(fd)
        assert (tree / "sub" / "new.out").read_text() == "x"
        for name in ("link", "fifo", "dirlink/new.out"):
            with pytest.raises(beneath.Unusable):
                os.close(project.write_regular(name))
    assert (tree.parent / "secret").read_text() == "PRIVATE KEY"


def test_without_openat2_the_walk_is_used(monkeypatch, tree):
    def no_openat2(*args):
        raise OSError(errno.ENOSYS, "no openat2")
    monkeypatch.setattr(beneath, "_openat2", no_openat2)
    monkeypatch.setattr(beneath, "_HAVE_OPENAT2", None)
    assert not beneath.have_openat2()
    with beneath.Project(str(tree)) as project:
        assert project.read_regular("sub/file", 100) == b"data"
        with pytest.raises(beneath.Unusable):
            project.read_regular("link", 100)
    monkeypatch.setattr(beneath, "_HAVE_OPENAT2", None)


def test_a_racing_swap_never_yields_the_secret(tree, mode):
    libc = ctypes.CDLL(None, use_errno=True)
    (tree / "a").write_text("harmless")
    (tree / "b").symlink_to(tree.parent / "secret")
    stop, swaps = threading.Event(), [0]

    def swap():
        while not stop.is_set():
            if libc.renameat2(-100, bytes(tree / "a"), -100, bytes(tree / "b"), 2) == 0:
                swaps[0] += 1

    thread = threading.Thread(target=swap)
    thread.start()
    seen = {"read": 0, "refused": 0}
    # Until the race has been run both ways (a loaded machine may give the
    # swapping thread few turns in a fixed number of reads: it once did).
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        with beneath.Project(str(tree)) as project:
            for done in range(300_000):
                try:
                    assert project.read_regular("a", 100) == b"harmless"
                    seen["read"] += 1
                except beneath.Unusable:
                    seen["refused"] += 1
                if done >= 3000 and swaps[0] > 100 and seen["read"] and seen["refused"]:
                    break
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        thread.join()
    assert swaps[0] > 100 and seen["read"] and seen["refused"], (swaps, seen)
