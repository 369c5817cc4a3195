"""/proc/self/mountinfo read the one way (proc(5)), and the questions the
bwrap plan asks of it.

`doctor` (the file system under each path, tools/checks.py) and the bwrap
plan's mount costs (policy/mountcost.py) parse it here. The plan asks only
two questions of the host's mount points — is there one between a path and
a parent of it, does a path carry any below it — and `MountPoints` keeps the
questions it was asked: the plan cache (plancache/plans.py) stores them
with their answers and a later launch asks them again, instead of keying
the plan on the whole table. A login node's table changes all the time (an
automounted home appears for whoever logs in, expires when idle) while the
answers that shaped a plan almost never do. Pure but for read_mount_points;
the standard library only (a cached launch imports it).
"""
from __future__ import annotations

MOUNTINFO = "/proc/self/mountinfo"


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        octal = field[i + 1:i + 4]
        if field[i] == "\\" and len(octal) == 3 and set(octal) <= set("01234567"):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[str, str, str, str]]:
    """(mount point, fs type, source, per-mount options) in mount order."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 6 or len(rest) < 2:
            continue
        mounts.append((_unescape(fields[4]), rest[0], _unescape(rest[1]), fields[5]))
    return mounts


def read_mount_points(path: str = MOUNTINFO) -> frozenset[str] | None:
    """The mount points of the caller's namespace (None: unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            text = handle.read()
    except OSError:
        return None
    # Only the fifth field: a cached launch asks this at every hit, and a
    # login node's table has hundreds of lines.
    points = set()
    for line in text.splitlines():
        fields = line.split(" ", 5)
        if len(fields) == 6 and " - " in fields[5]:
            point = fields[4]
            points.add(_unescape(point) if "\\" in point else point)
    return frozenset(points)


def _within(path: str, parent: str) -> bool:
    # paths.is_within for absolute normalised paths (this module imports
    # nothing of the package: the cache's hit path asks it too).
    return path == parent or parent == "/" or path.startswith(parent + "/")


def between(points, parent: str, path: str) -> bool:
    """A mount point below `parent`, at `path` or between the two: the
    path's files (or an automount) are not those of the parent's mount."""
    return any(m != parent and _within(m, parent) and _within(path, m) for m in points)


def carries(points, path: str) -> bool:
    """A mount point strictly below `path`."""
    return any(m != path and _within(m, path) for m in points)


_QUESTIONS = {"between": between, "carries": carries}


def answers(points, questions) -> tuple:
    """Each question's answer for `points` (None for all: an unreadable table)."""
    if points is None:
        return None
    return tuple(_QUESTIONS[name](points, *args) for name, *args in questions)


class MountPoints:
    """The host's mount points, answering the plan's two questions and
    keeping each question asked, in order, once."""
    __slots__ = ("points", "asked")

    def __init__(self, points):
        self.points = frozenset(points)
        self.asked: dict[tuple, bool] = {}

    def _ask(self, *question) -> bool:
        if question not in self.asked:
            self.asked[question] = _QUESTIONS[question[0]](self.points, *question[1:])
        return self.asked[question]

    def between(self, parent: str, path: str) -> bool:
        return self._ask("between", parent, path)

    def carries(self, path: str) -> bool:
        return self._ask("carries", path)
