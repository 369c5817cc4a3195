"""The one refusal of the chaperon: `Refusal`, raised by the option parser
(chaperon/slurm), the submission checks (chaperon/submit.py) and every
handler alike, and caught once, by `handlers.dispatch`, which logs it and
prints it in the house format (SPEC §9)

    agent-sandbox: <command>: <what> — <why>. <how to do it instead>

and answers with EXIT_REFUSED.

A refusal carries a stable `reason` code (audit log, --json), `what` was
refused ("--chdir=/tmp is refused"), `why`, and what to do `instead`. A
refusal of an argument the user wrote (raised while parsing options or
#SBATCH lines, `Refusal.argument`) also knows the command, the words as
written, the option they resolved to, their position in the argument list
and the script line, and derives `what` from them.

Imports only the wire's constants: the parser and every handler share it.
"""
from __future__ import annotations

from .wire.session import EXIT_REFUSED

__all__ = ["EXIT_REFUSED", "Refusal"]


class Refusal(Exception):
    """What was refused and why; see the module docstring."""

    def __init__(self, reason: str, what: str | None, why: str, instead: str, *,
                 command: str | None = None, written: str = "", option: str | None = None,
                 index: int | None = None, line: int | None = None,
                 subject: str | None = None):
        self.reason = reason
        self._what = what
        self.why = why
        self.instead = instead
        self.command = command
        self.written = written      # the option as the user wrote it (`-D /tmp`, `--ch=/tmp`)
        self.option = option        # its canonical name when it resolved
        self.index = index          # position in the argv that was parsed
        self.line = line            # the script line of an #SBATCH directive
        self.subject = subject      # what is refused when it is not an option
        super().__init__(self.what)

    @classmethod
    def argument(cls, command: str, written: str, reason: str, why: str, instead: str,
                 **where) -> "Refusal":
        """A refused argument (`where`: option, index, line, subject)."""
        return cls(reason, None, why, instead, command=command, written=written, **where)

    @property
    def what(self) -> str:
        if self._what is not None:
            return self._what
        if self.subject:
            return f"{self.subject} is refused"
        shown = self.written
        if self.option and not shown.startswith(f"--{self.option}"):
            shown += f" (--{self.option})"
        if self.line is not None:
            if not shown.startswith("#"):
                shown = f"#SBATCH {shown}"
            return f"{shown} on script line {self.line} is refused"
        return f"{shown} is refused"

    @property
    def message(self) -> str:
        """The line the stub prints (without the final full stop dispatch
        adds when `instead` has none)."""
        return f"agent-sandbox: {self.command}: {self.what} — {self.why}. {self.instead}"

    def at_line(self, line: int) -> "Refusal":
        return Refusal(self.reason, self._what, self.why, self.instead, command=self.command,
                       written=self.written, option=self.option, index=self.index,
                       line=line, subject=self.subject)

    def __str__(self) -> str:
        return self.message if self.command else self.what
