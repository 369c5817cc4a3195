"""Pathname unix sockets in shown trees (policy/sockets.py) and the user
configuration tree's trust rule (config/load.py check_user_tree): the pure
parts. The sandboxes themselves: tests/adversarial/test_shared_sockets.py."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from agent_sandbox.backends import bwrap, firejail, landlock
from agent_sandbox.config.load import check_user_tree
from agent_sandbox.errors import ConfigError
from agent_sandbox.plancache import plans as plancache
from agent_sandbox.policy import resolve
from agent_sandbox.policy.resolve import resolve_policy
from agent_sandbox.policy.sockets import find_sockets, unsearched
from agent_sandbox.policy.view import mount_ops
from tests.support.homes import context, settings_for

pytestmark = pytest.mark.home(symlinks=True)


def listen(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    return server


@pytest.fixture
def home(home):
    """The shared fake home (links to hidden places too) with listening sockets."""
    servers = [listen(home / ".cache" / "sock" / "t"), listen(home / "top.sock"),
               listen(home / "proj" / "own.sock"), listen(home / ".ssh" / "agent.sock")]
    (home / "to-sock").symlink_to(home / ".cache" / "sock" / "t")
    yield home
    for server in servers:
        server.close()


def policy_for(home, conf="", backend="bwrap", **changes):
    return resolve_policy(settings_for(home, conf, **changes), context(home), backend=backend)


# ---------------------------------------------------------------- the walk
def test_the_walk_finds_sockets_at_any_depth_but_not_where_pruned(home):
    found = find_sockets([str(home)], prune=(str(home / ".ssh"), str(home / "proj")))
    assert found == (str(home / ".cache/sock/t"), str(home / "top.sock"))
    # a link is not followed (the view recreates it; the walker drops one to a socket)
    assert str(home / "to-sock") not in found
    assert find_sockets([str(home / "top.sock")]) == (str(home / "top.sock"),)
    assert find_sockets([str(home / "missing")]) == ()


def test_a_cached_plan_yields_to_a_socket_made_after_its_compile(home):
    """A socket made after a compile must not be reachable on a cached
    launch: the compile's walk is one derived fact a hit rechecks. Files and
    directories without a socket (an agent's session writes) keep the plan."""
    deep = home / "d"          # (a socket path is at most 107 bytes)
    deep.mkdir()
    with plancache.Recorder() as recorder:
        walk = plancache.socket_walker(recorder)
        found = walk([str(home)], (str(home / "proj"), str(home / ".ssh")))
    assert found == (str(home / ".cache/sock/t"), str(home / "top.sock"))
    # the walk itself is not recorded path by path (its times change with any file)
    assert (str(deep), plancache.CONTENT) not in recorder.seen
    [(key, answer)] = [(k, v) for k, v in recorder.seen.items() if k[0] == "sockets"]

    def holds() -> bool:
        return plancache.fingerprint(*key) == answer

    assert holds()
    (deep / "f.jsonl").write_text("{}")
    (deep / "n").mkdir()
    (deep / "n" / "file").write_text("x")
    assert holds()
    late = listen(deep / "n" / "s")           # in a directory new since
    assert not holds()
    late.close()
    (deep / "n" / "s").unlink()
    assert holds()
    late = listen(deep / "s")                        # in a listed one
    assert not holds()
    late.close()


# ---------------------------------------------------------------- the views
@pytest.mark.parametrize("access", ["read", "write"])
def test_bwrap_carves_sockets_out_of_the_shown_home(home, access):
    policy = policy_for(home, f"HOME_ACCESS={access}\n")
    sock, top = str(home / ".cache/sock/t"), str(home / "top.sock")
    assert set(policy.sockets) == {sock, top}          # not the project's, not a hidden one
    dests = {op.dest for op in mount_ops(policy) if hasattr(op, "dest")}
    assert sock not in dests and top not in dests and str(home / "to-sock") not in dests
    assert str(home / ".cache" / "uv") in dests        # the socket's neighbours stay
    assert not any(d.startswith(sock) for d in dests)


def test_bwrap_carves_sockets_out_of_granted_home_entries(home):
    policy = policy_for(home, "HOME_WRITABLE+=(.cache)\n")
    assert policy.sockets == (str(home / ".cache/sock/t"),)
    dests = {op.dest for op in mount_ops(policy) if hasattr(op, "dest")}
    assert str(home / ".cache/sock/t") not in dests and str(home / ".cache/uv") in dests


@pytest.mark.parametrize("access", ["read", "write"])
def test_firejail_does_not_whitelist_sockets(home, access):
    policy = policy_for(home, f"HOME_ACCESS={access}\n", backend="firejail")
    lines = firejail.View(policy, ()).build()
    whitelisted = {line.split(" ", 1)[1] for line in lines if line.startswith("whitelist ")}
    assert str(home / ".cache/sock/t") not in whitelisted
    assert str(home / "top.sock") not in whitelisted
    assert str(home / ".cache" / "uv") in whitelisted


# ---------------------------------------------------------------- the resolver
@pytest.fixture
def resolver(tmp_path, monkeypatch):
    """Stand-ins for /run/systemd/resolve (a socket and a resolv.conf) and /run/nscd."""
    run = tmp_path / "run"
    server = listen(run / "resolve" / "io.systemd.Resolve")
    (run / "resolve" / "stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    nscd = listen(run / "nscd" / "socket")
    monkeypatch.setattr(resolve, "RUN_DNS_PATHS", (str(run / "resolve"),))
    monkeypatch.setattr(resolve, "RUN_NSCD", str(run / "nscd"))
    yield run
    server.close()
    nscd.close()


@pytest.mark.parametrize("mode", ["allowlist", "isolated"])
def test_no_resolver_or_name_service_socket_where_no_name_may_resolve(home, resolver, mode):
    policy = policy_for(home, f"NETWORK_MODE={mode}\nFILTER_PASSWD=false\n")
    assert str(resolver / "nscd") not in policy.run_binds
    assert str(resolver / "resolve" / "io.systemd.Resolve") in policy.sockets
    dests = {op.dest for op in mount_ops(policy) if hasattr(op, "dest")}
    assert str(resolver / "resolve" / "io.systemd.Resolve") not in dests
    assert str(resolver / "resolve" / "stub-resolv.conf") in dests
    lines = firejail.View(policy._replace(backend="firejail"), ()).build()
    assert f"whitelist {resolver}/resolve/stub-resolv.conf" in lines
    assert not any("io.systemd.Resolve" in line or "nscd" in line for line in lines)


def test_open_keeps_the_name_service_and_says_so(home, resolver):
    policy = policy_for(home, "FILTER_PASSWD=false\n")
    assert str(resolver / "nscd") in policy.run_binds
    assert not any(s.startswith(str(resolver)) for s in policy.sockets)
    assert any("NETWORK_MODE=open" in part and "nscd" in part for part in unsearched(policy))


# ---------------------------------------------------------------- the report
def test_the_report_names_every_tree_not_searched(home, tmp_path):
    scratch, data = tmp_path / "scratch", tmp_path / "data"
    scratch.mkdir()
    data.mkdir()
    policy = policy_for(home, "PRIVATE_TMP=false\nPRIVATE_IPC=false\n"
                        f"EXTRA_WRITABLE_PATHS=({data})\n",
                        READONLY_MOUNTS=("/usr", "/etc", str(scratch), "/sys"))
    provides, partial, cannot = bwrap.guarantees(policy)
    why = dict(partial)["unix_sockets.confined"]
    for named in (f"READONLY_MOUNTS /usr /etc {scratch}", f"EXTRA_WRITABLE_PATHS {data}",
                  "/tmp", "/dev/shm"):
        assert named in why
    assert "/sys" not in why
    assert "unix_sockets.confined" in dict(firejail.guarantees(policy)[1])
    assert "/dev/log" in dict(firejail.guarantees(policy)[1])["unix_sockets.confined"]
    assert "connect()" in dict(landlock.guarantees(policy)[2])["unix_sockets.confined"]


def test_with_nothing_unsearched_only_late_sockets_are_left(home):
    """A bind shows the host's later entries: a socket made after the launch
    in a shown directory is reachable, so never more than partial."""
    policy = policy_for(home, READONLY_MOUNTS=("/sys",))
    why = dict(bwrap.guarantees(policy)[1])["unix_sockets.confined"]
    assert "later" in why and "without being searched" not in why
    # Issue 31: one in the project (a writable grant, never searched) is said.
    assert "a socket a program outside made in it" in why


# ---------------------------------------------------------------- the config tree
@pytest.fixture
def tree(tmp_path):
    top = tmp_path / "agent-sandbox"
    (top / "conf.d").mkdir(parents=True)
    (top / "agents").mkdir()
    (top / "sandbox.conf").write_text("")
    (top / "conf.d" / "a.conf").write_text("")
    for path in (top, top / "conf.d", top / "agents"):
        path.chmod(0o755)
    for path in (top / "sandbox.conf", top / "conf.d" / "a.conf"):
        path.chmod(0o644)
    return top


def test_a_tree_only_the_user_can_write_is_trusted(tree, tmp_path):
    (tree / "agents" / "loop").symlink_to(tree)
    check_user_tree(str(tree))
    check_user_tree(str(tmp_path / "missing"))


@pytest.mark.parametrize("relative, mode, who", [
    ("", 0o777, "others"), ("sandbox.conf", 0o646, "others"),
    ("conf.d/a.conf", 0o664, "its group"), ("agents", 0o775, "its group")])
def test_a_tree_others_can_write_is_refused_with_the_chmod(tree, relative, mode, who):
    path = tree / relative if relative else tree
    path.chmod(mode)
    with pytest.raises(ConfigError, match=f"writable by {who}") as caught:
        check_user_tree(str(tree))
    assert f"chmod go-w {path}" in str(caught.value)
    assert caught.value.exit_code == 125


def test_a_tree_of_another_owner_is_refused(tree):
    if os.geteuid() != 0:
        pytest.fail("this test runs as root (it gives a file to another uid)")
    os.chown(tree / "conf.d" / "a.conf", 4242, 4242)
    with pytest.raises(ConfigError, match="owned by uid 4242"):
        check_user_tree(str(tree), uid=1000)
    os.chown(tree / "conf.d" / "a.conf", 0, 0)          # root's own: trusted
    check_user_tree(str(tree), uid=1000)
