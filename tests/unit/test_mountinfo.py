"""mountinfo.py: the mount table parsed, and the plan's two questions asked
of it, kept and asked again (the plan cache's fingerprint of the table)."""
from __future__ import annotations

from hypothesis import given, strategies as st

from agent_sandbox.mountinfo import MountPoints, answers, between, carries, read_mount_points
from agent_sandbox.paths import is_within

PATHS = ["/", "/a", "/a/b", "/a/b/c", "/ab", "/opt", "/opt/x", "/home/u"]


def test_the_questions_are_those_of_the_mount_points():
    points = frozenset({"/", "/opt/x", "/sys", "/sys/fs/cgroup"})
    assert carries(points, "/sys") and carries(points, "/opt") and not carries(points, "/usr")
    assert not carries(points, "/opt/x")           # the path itself is no submount
    assert between(points, "/opt", "/opt/x/y") and between(points, "/opt", "/opt/x")
    assert not between(points, "/opt/x", "/opt/x/y")   # the parent's own mount is no break
    assert not between(points, "/", "/usr/bin") and not between(points, "/op", "/opt/x")


@given(st.frozensets(st.sampled_from(PATHS)), st.sampled_from(PATHS), st.sampled_from(PATHS))
def test_between_and_carries_agree_with_is_within(points, parent, path):
    assert between(points, parent, path) == any(
        m != parent and is_within(m, parent) and is_within(path, m) for m in points)
    assert carries(points, path) == any(m != path and is_within(m, path) for m in points)


def test_the_questions_asked_are_kept_in_order_once_and_answer_again():
    points = MountPoints({"/", "/sys", "/sys/fs/cgroup", "/home/alice"})
    assert points.carries("/sys") and not points.carries("/opt")
    assert not points.between("/opt", "/opt/as")
    assert points.carries("/sys")
    questions = tuple(points.asked)
    assert questions == (("carries", "/sys"), ("carries", "/opt"), ("between", "/opt", "/opt/as"))
    assert answers(points.points, questions) == tuple(points.asked.values())
    # An automounted home that comes or goes answers nothing differently...
    assert answers(points.points | {"/home/bob"}, questions) == (True, False, False)
    # ...a mount below /opt does, and an unreadable table answers nothing.
    assert answers(points.points | {"/opt/apps"}, questions) == (True, True, False)
    assert answers(None, questions) is None


def test_the_mount_table_is_read_with_its_escapes(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                     "23 22 0:5 / /mnt/with\\040space rw - tmpfs tmpfs rw\n")
    assert read_mount_points(str(table)) == {"/", "/mnt/with space"}
    assert read_mount_points(str(tmp_path / "missing")) is None
