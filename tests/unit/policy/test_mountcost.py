"""The cheaper bwrap mount list (policy/mountcost.py) builds the same view.

Two kinds of test: the rules on small literal lists (what is dropped or
moved, and every case where it must not be), and an oracle that replays a
list the way bwrap stacks mounts (the last mount on a path or a parent
decides what it shows; a later --remount-ro on that mount makes it
read-only) to check, for random lists and for the plans of every home mode,
that each path shows the same host file, tmpfs or payload, read-only or not.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from agent_sandbox.mountinfo import read_mount_points
from agent_sandbox.paths import is_within
from agent_sandbox.policy import mountcost
from agent_sandbox.policy.mountcost import (defer_heavy, drop_covered, drop_redundant,
                                            economize)
from agent_sandbox.policy.resolve import resolve_policy
from agent_sandbox.policy.view import (Bind, Data, Proc, RemountRo, RoBind, Symlink, Tmpfs,
                                       mount_ops)
from tests.support.homes import HOME_MODES, context, make_home, settings_for

SYS = frozenset({"/", "/sys", "/sys/fs/cgroup", "/sys/fs/cgroup/memory"})


def same(path: str) -> str:
    return path


# ---------------------------------------------------------------- the oracle
def shows(ops, path: str):
    """What `path` shows inside: (what, read-only)."""
    found = None
    for index, op in enumerate(ops):
        if is_within(path, op.dest) and not isinstance(op, RemountRo):
            found = index
    if found is None:
        return ("nothing", True)
    op = ops[found]
    rest = path[len(op.dest):] if op.dest != "/" else path
    if isinstance(op, (RoBind, Bind)):
        what = ("host", op.src.rstrip("/") + rest)
    elif isinstance(op, Tmpfs):
        what = ("tmpfs", op.dest, op.mode, rest)
    else:
        what = (op.kind, tuple(op[1:]), rest)
    readonly = (not isinstance(op, (Bind, Tmpfs, Symlink)) or
                any(later == RemountRo(op.dest) for later in ops[found + 1:]))
    return what, readonly


def probes(ops) -> set:
    paths = {"/", "/elsewhere"}
    for op in ops:
        paths |= {op.dest, os.path.join(op.dest, "child"), os.path.dirname(op.dest)}
    return paths


def remount_points(ops) -> list:
    """For each --remount-ro, whether a mount sits exactly on its path then
    (bwrap fails on a path that is not a mount point)."""
    return [any(o.dest == op.dest for o in ops[:i] if not isinstance(o, RemountRo))
            for i, op in enumerate(ops) if isinstance(op, RemountRo)]


def assert_same_view(before, after):
    assert remount_points(after) == remount_points(before)
    for path in sorted(probes(before) | probes(after)):
        assert shows(after, path) == shows(before, path), path


# ---------------------------------------------------------------- dropping
def test_an_install_dir_below_a_read_only_tree_is_not_bound_again():
    ops = [RoBind("/usr", "/usr"), RoBind("/opt", "/opt"), Tmpfs("/home/u", 0o755),
           Bind("/home/u/p", "/home/u/p"), RoBind("/opt/as/venv/lib", "/opt/as/venv/lib"),
           RoBind("/opt/as/venv", "/opt/as/venv"), RemountRo("/")]
    kept = drop_redundant(ops, frozenset({"/"}), resolve=same)
    assert kept == [op for op in ops if "/opt/as" not in op.dest]
    assert_same_view(ops, kept)


def test_a_path_granted_twice_is_bound_once():
    ops = [Tmpfs("/home/u", 0o755), RoBind("/home/u/.local/bin", "/home/u/.local/bin"),
           RoBind("/home/u/.local/bin", "/home/u/.local/bin")]
    assert drop_redundant(ops, frozenset({"/"}), resolve=same) == ops[:2]


@pytest.mark.parametrize("between", [
    Bind("/opt/as/venv/p", "/opt/as/venv/p"),   # writable below: the re-bind covers it
    Tmpfs("/opt/as", 0o755),                    # a carve on the path itself
    Tmpfs("/opt", 0o755),                       # a tmpfs over the parent
    Data("note", "/opt/as/venv/NOTE", 0o444),   # a payload below
    RoBind("/dev/null", "/opt/as/venv/bin/x"),  # a mask below: the re-bind unmasks it
])
def test_a_re_bind_is_kept_when_something_between_touches_its_line(between):
    ops = [RoBind("/opt", "/opt"), between, RoBind("/opt/as/venv", "/opt/as/venv")]
    assert drop_redundant(ops, frozenset({"/"}), resolve=same) == ops


def test_a_re_bind_a_remount_names_is_kept():
    ops = [RoBind("/opt", "/opt"), RoBind("/opt/as", "/opt/as"), RemountRo("/opt/as")]
    assert drop_redundant(ops, frozenset({"/"}), resolve=same) == ops


def test_a_re_bind_below_a_writable_or_foreign_bind_is_kept():
    for parent in (Bind("/opt", "/opt"), RoBind("/srv/opt", "/opt")):
        ops = [parent, RoBind("/opt/as", "/opt/as")]
        assert drop_redundant(ops, frozenset({"/"}), resolve=same) == ops


@pytest.mark.parametrize("mount", ["/opt/as", "/opt/as/venv"])
def test_a_re_bind_across_a_host_mount_point_is_kept(mount):
    """An automount or a later host mount there would not get the parent's
    flags: only bwrap's own bind at the path makes it read-only."""
    ops = [RoBind("/opt", "/opt"), RoBind("/opt/as/venv", "/opt/as/venv")]
    assert drop_redundant(ops, frozenset({"/", "/opt", mount}), resolve=same) == ops
    assert drop_redundant(ops, frozenset({"/", "/opt"}), resolve=same) == ops[:1]


def test_a_re_bind_through_a_symlink_is_kept():
    ops = [RoBind("/opt", "/opt"), RoBind("/opt/link/venv", "/opt/link/venv")]
    resolve = lambda p: p.replace("/opt/link", "/srv/real")   # noqa: E731
    assert drop_redundant(ops, frozenset({"/"}), resolve=resolve) == ops


def test_a_mask_reached_through_a_symlink_counts_as_touching():
    """/bin/x lands on /usr/bin/x inside: a later /usr/bin re-bind would undo it."""
    ops = [RoBind("/usr", "/usr"), RoBind("/dev/null", "/bin/x"), RoBind("/usr/bin", "/usr/bin")]
    resolve = lambda p: p.replace("/bin", "/usr/bin", 1) if p.startswith("/bin") else p  # noqa
    assert drop_redundant(ops, frozenset({"/"}), resolve=resolve) == ops


# ---------------------------------------------------------------- covered
CLAUDE_MD = "/home/u/.claude/CLAUDE.md"


def test_a_grant_the_note_covers_is_left_out():
    """The agent's own CLAUDE.md granted read-only with ~/.claude's entries,
    then the note (its text plus the sandbox's) bound over it."""
    ops = [Tmpfs("/home/u", 0o755), RoBind(CLAUDE_MD, CLAUDE_MD),
           RoBind("/home/u/.claude/agents", "/home/u/.claude/agents"),
           Bind("/home/u/p", "/home/u/p"), Tmpfs("/etc/slurm", 0o755),
           Data("note-0", CLAUDE_MD, 0o444), RemountRo("/etc/slurm"), RemountRo("/")]
    kept = drop_covered(ops, resolve=same)
    assert kept == ops[:1] + ops[2:]
    assert_same_view(ops, kept)


@pytest.mark.parametrize("between", [
    RemountRo(CLAUDE_MD),                          # the remount is the first one's
    RoBind("/dev/null", CLAUDE_MD + "/x"),         # a mount below it: made inside it
    Tmpfs("/home/u/.cache", 0o700),                # a parent it made would be 0700
    Data("x", "/home/u/.x", 0o600),
])
def test_a_covered_grant_is_kept_when_something_between_depends_on_it(between):
    ops = [RoBind(CLAUDE_MD, CLAUDE_MD), between, Data("note-0", CLAUDE_MD, 0o444)]
    assert drop_covered(ops, resolve=same) == ops


@pytest.mark.parametrize("later", [
    Data("note-0", CLAUDE_MD, 0o400),              # its missing parents would be 0700
    Tmpfs(CLAUDE_MD, 0o755),                       # not a cover this rule knows
    Symlink("x", CLAUDE_MD),
    RoBind("/h", "/home/u/.claude/CLAUDE.md/x"),   # below it, not over it
])
def test_only_a_bind_or_payload_on_the_same_path_covers(later):
    ops = [RoBind(CLAUDE_MD, CLAUDE_MD), later]
    assert drop_covered(ops, resolve=same) == ops


def test_a_cover_reached_through_a_symlink_is_not_taken_for_the_same_path():
    ops = [RoBind(CLAUDE_MD, CLAUDE_MD), Data("note-0", "/home/u/link/CLAUDE.md", 0o444)]
    resolve = lambda p: p.replace("/home/u/link", "/home/u/.claude")   # noqa: E731
    assert drop_covered(ops, resolve=resolve) == ops
    assert drop_covered(ops[::-1], resolve=resolve) == ops[::-1]


# ---------------------------------------------------------------- deferring
def test_a_bind_carrying_submounts_moves_before_the_remounts():
    ops = [RoBind("/usr", "/usr"), RoBind("/sys", "/sys"), RoBind("/dev/null", "/usr/bin/srun"),
           Proc("/proc"), Tmpfs("/etc/slurm", 0o755), RemountRo("/etc/slurm"), RemountRo("/")]
    moved = defer_heavy(ops, SYS, resolve=same)
    assert moved == ops[:1] + ops[2:5] + [ops[1]] + ops[5:]
    assert_same_view(ops, moved)


def test_without_submounts_nothing_moves():
    ops = [RoBind("/sys", "/sys"), RoBind("/usr", "/usr"), RemountRo("/")]
    assert defer_heavy(ops, frozenset({"/", "/sys"}), resolve=same) == ops


@pytest.mark.parametrize("later", [
    RoBind("/dev/null", "/sys/kernel/x"),   # below it
    Tmpfs("/sys", 0o755),                   # on it
    RoBind("/x", "/"),                      # above it (a parent)
])
def test_a_bind_does_not_move_past_an_operation_on_its_line(later):
    ops = [RoBind("/sys", "/sys"), later, RemountRo("/")]
    assert defer_heavy(ops, SYS, resolve=same) == ops


def test_a_bind_does_not_move_past_one_that_reaches_it_through_a_symlink():
    ops = [RoBind("/sys", "/sys"), RoBind("/dev/null", "/s/x"), RemountRo("/")]
    resolve = lambda p: p.replace("/s/", "/sys/") if p.startswith("/s/") else p  # noqa: E731
    assert defer_heavy(ops, SYS, resolve=resolve) == ops


def test_only_top_level_binds_move():
    """Their parent (/) exists: bwrap makes no directory with other modes."""
    mounts = frozenset({"/", "/opt/x", "/opt/x/y"})
    ops = [RoBind("/opt/x", "/opt/x"), RoBind("/usr", "/usr"), RemountRo("/")]
    assert defer_heavy(ops, mounts, resolve=same) == ops


def test_an_unreadable_mount_table_changes_nothing(tmp_path, monkeypatch):
    ops = [RoBind("/opt", "/opt"), RoBind("/opt/as", "/opt/as")]
    assert read_mount_points(str(tmp_path / "missing")) is None
    monkeypatch.setattr(mountcost, "read_mount_points", lambda: None)
    assert economize(ops, None, resolve=same) == ops
    assert economize(ops, frozenset({"/"}), resolve=same) == ops[:1]


# ---------------------------------------------------------------- the same view
PATHS = ["/", "/a", "/a/b", "/a/b/c", "/a/d", "/s", "/s/x", "/s/x/y"]
OPS = st.one_of(
    st.builds(lambda p: RoBind(p, p), st.sampled_from(PATHS[1:])),
    st.builds(lambda p: Bind(p, p), st.sampled_from(PATHS[1:])),
    st.builds(lambda p: RoBind("/dev/null", p), st.sampled_from(PATHS[1:])),
    st.builds(lambda p: Tmpfs(p, 0o755), st.sampled_from(PATHS[1:])),
    st.builds(lambda s, p: RoBind(s, p), st.sampled_from(["/h1", "/h2"]),
              st.sampled_from(PATHS[1:])),
)


# Payloads and covers on the same few paths, so that drop_covered has work.
COVERING = st.one_of(
    OPS,
    st.builds(lambda n, p, m: Data(n, p, m), st.sampled_from(["n1", "n2"]),
              st.sampled_from(PATHS[1:]), st.sampled_from([0o444, 0o644, 0o400])),
    st.builds(lambda p: RemountRo(p), st.sampled_from(PATHS[1:])),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(COVERING, max_size=14), st.lists(st.sampled_from(PATHS[1:]), max_size=3),
       st.sets(st.sampled_from(PATHS[1:] + ["/a/b/c/d", "/s/x/y/z"]), max_size=4))
def test_random_lists_keep_their_view(ops, remounts, mounts):
    ops = ops + [RemountRo(p) for p in remounts] + [RemountRo("/")]
    cheaper = economize(ops, frozenset(mounts) | {"/"}, resolve=same)
    assert len(cheaper) <= len(ops)
    assert_same_view(ops, cheaper)


@pytest.mark.parametrize("mode", HOME_MODES)
def test_every_home_mode_keeps_its_view(tmp_path, mode):
    home = make_home(tmp_path, symlinks=True)
    opt = tmp_path / "opt"
    install = opt / "agent-sandbox" / "venv"
    install.mkdir(parents=True)
    (home / ".config" / "agent-sandbox").mkdir()
    settings_ = settings_for(home, f"HOME_ACCESS={mode}").replace(
        READONLY_MOUNTS=("/usr", "/etc", "/sys", str(opt)))
    policy = resolve_policy(settings_, context(home, install_paths=(install,)), backend="bwrap")
    ops = mount_ops(policy)
    cheaper = economize(ops, SYS)
    config = str(home / ".config" / "agent-sandbox")
    if mode == "read":     # granted with the home, then as the user config tree
        assert ops.count(RoBind(config, config)) == 2 and RoBind(config, config) in cheaper
        assert cheaper.count(RoBind(config, config)) == 1
    assert cheaper.index(RoBind("/sys", "/sys")) == max(
        i for i, op in enumerate(cheaper) if not isinstance(op, RemountRo))
    assert_same_view(ops, cheaper)


def test_the_prefix_resolver_is_realpath(tmp_path):
    """economize's memoised resolver answers exactly what os.path.realpath does."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "to-real").symlink_to("real")                  # relative
    (tmp_path / "chain").symlink_to(tmp_path / "to-real")       # a link to a link
    (real / "up").symlink_to("..")                              # back up the tree
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    resolve = mountcost._prefix_resolver()
    for name in ("real/sub", "to-real/sub/x", "chain/sub", "chain/up/chain/sub", "dangling/x",
                 "missing/a/b", "to-real/up/to-real"):
        path = str(tmp_path / name)
        assert resolve(path) == os.path.realpath(path), name
