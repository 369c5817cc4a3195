"""Which jobs a scoped command runs on: the one place that turns the job ids
a caller named (or did not name) into the real command's selection.

Strategy: an empty selection must never reach a real command, because Slurm
reads "no jobs given" as "every job" (`squeue --jobs` with an empty or bare
list, `scancel --me`, `sprio` with no ids). So `select` answers with one of
three things and nothing else:

- `ids`: a non-empty list — the caller's ids with every out-of-scope one
  replaced by a placeholder no job has (scope.Placeholders), or, when the
  caller named none (absent, `-j ''`, a bare `-j`, `-j ,`), the in-scope ids;
- `mine`: user/none scope and nothing named — every job of the caller is in
  scope, the command's own `--me`;
- `nothing`: nothing named and nothing in scope — the handler prints the
  command's own empty answer.

`jobs_option` renders `ids` as one `--jobs=` argument and refuses to render
an empty list. One argument is capped by the kernel at 128 KiB
(MAX_ARG_STRLEN); a list longer than JOBS_ARG_MAX does not fit, and the
handler takes its wide path (squeue: see `IdColumn`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .slurm.jobids import PLACEHOLDER_TOP, ref_base

JOBS_ARG_MAX = 120 * 1024     # bytes of one --jobs=… argument; MAX_ARG_STRLEN is 128 KiB
ID_START, ID_END = b"\x03", b"\x04"   # around the added id column (scope.py uses \x01 \x02)


@dataclass(frozen=True)
class Selection:
    ids: tuple[str, ...] = ()     # never empty unless `mine` or `nothing`
    mine: bool = False            # every job of the caller (user/none scope)
    named: bool = False           # the caller named the ids

    @property
    def nothing(self) -> bool:
        return not self.ids and not self.mine

    def fits(self, option: str = "--jobs") -> bool:
        """Does `jobs_option` fit in one argument?"""
        return len(option) + 1 + sum(len(i) + 1 for i in self.ids) <= JOBS_ARG_MAX

    def jobs_option(self, option: str = "--jobs") -> str:
        """`--jobs=a,b`; a single id is paired with an id no job has, which
        keeps squeue and sprio on their list path (one id makes squeue load
        that one job, finished or not)."""
        if not self.ids:
            raise ValueError("an empty job selection must never reach Slurm")
        ids = list(self.ids)
        if len(ids) == 1 and not self.named:
            ids.append(str(PLACEHOLDER_TOP))
        return f"{option}={','.join(ids)}"


def select(scope, named: list[str] | None, placeholders) -> Selection:
    """The selection for the ids the caller named (None or []: none named,
    so the scope)."""
    refs = [r for r in (named or []) if r]
    if refs:
        return Selection(ids=tuple(scope.substitute(refs, placeholders)), named=True)
    if scope.by_user:
        return Selection(mine=True)
    return Selection(ids=tuple(scope.live_ids()))


# --------------------------------------------------------------------------- the wide path
class IdColumn:
    """A scope too large for one `--jobs=` argument, listed with one real call
    and the output of that call cut to the scope (squeue).

    The rule: run the real squeue with `--me --all` instead of `--jobs=<ids>`
    (`--all`: a job list shows jobs on hidden partitions, so the wide call
    must too; the state filter, sort order and header are the same in both)
    and with the job reference (`%i`) prepended to the caller's format
    between ID_START and ID_END. A row is kept when that reference's job id
    (an array or het job's own id for its tasks and components) is in scope;
    a line without the column (the header, `-i`'s time stamp) is kept as it
    is; the column is removed from every line. Without a format of the
    caller's, squeue's own default for the flags is given explicitly."""

    DEFAULTS = {   # squeue 22.05 (opts.c, squeue.c): the format when none is given
        "steps": "%.15i %.8j %.9P %.8u %.9M %N",
        "start": "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R",
        "long": "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R",
        "plain": "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R",
    }

    def __init__(self, ids, *, steps: bool):
        self.ids = frozenset(ids)
        self.steps = steps

    def default(self, *, long: bool, start: bool) -> str:
        if self.steps:
            return self.DEFAULTS["steps"]
        return self.DEFAULTS["start" if start else "long" if long else "plain"]

    def short(self, fmt: str) -> str:
        """An -o format with the id column in front."""
        return f"{ID_START.decode()}%i{ID_END.decode()}{fmt}"

    def long(self, fmt: str) -> str:
        """An -O format with the id column in front (-O has no prefix text,
        so the column is the line's start up to ID_END)."""
        return f"{'StepId' if self.steps else 'JobArrayID'}:0{ID_END.decode()},{fmt}"

    def line(self, line: bytes) -> bytes | None:
        """One line of the wide call: None to drop it, else without the column."""
        end = line.find(ID_END)
        if end < 0:
            return line                   # not a row (-i's time stamp)
        ref = line[:end].lstrip(ID_START).decode(errors="replace").strip()
        rest = line[end + 1:]
        if not ref[:1].isascii() or not ref[:1].isdigit():
            return rest                   # the header (JOBID, STEPID, …)
        return rest if ref_base(ref) in self.ids else None
