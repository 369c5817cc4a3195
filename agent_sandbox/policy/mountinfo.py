"""/proc/self/mountinfo read the one way (proc(5)): `doctor` (the file
system under each path, tools/checks.py) and the bwrap plan's mount costs
(policy/mountcost.py) both parse it here. Pure: text in, tuples out."""
from __future__ import annotations


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
