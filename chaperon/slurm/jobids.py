"""Slurm's job-id grammar: the references a caller may write (jobid,
jobid_task, jobid_[range], jobid+offset, any of them .step) and the id
range Slurm allows. Pure functions of text; the scope decides what an id
may see (chaperon/scope.py).
"""
from __future__ import annotations

import re

from ..refusal import Refusal

# jobid, jobid_task, jobid_[range], jobid+offset, and any of them .step
JOB_REF = re.compile(r"(\d{1,10})((?:_(?:\d+|\[[0-9,\-:%]*\]|\*)|\+\d+)?"
                     r"(?:\.(?:\d+|batch|extern|interactive)(?:\+\d+)?)?)", re.ASCII)
PLACEHOLDER_TOP = 0x3FFFFFF          # 67108863: the largest local job id Slurm allows


def ref_base(text: str) -> str | None:
    """The job id a job reference names ("123_4.0" -> "123"), or None."""
    match = JOB_REF.fullmatch(text)
    return match.group(1) if match else None


def job_refs(values) -> list[str]:
    """Job references from comma lists (-j 1,2 3 …), in order."""
    return [ref for value in values for ref in (value or "").split(",") if ref]


def bad_refs(refs: list[str]) -> list[str]:
    return [r for r in refs if ref_base(r) is None]


def check_refs(refs: list[str], examples: str) -> None:
    """Refuse the first reference that is not a job id (`examples`: the
    forms the command takes, for the message)."""
    wrong = bad_refs(refs)
    if wrong:
        raise Refusal("bad_job_id", f"the job id {wrong[0]!r} is refused",
                      "it is not a job id the sandbox can check",
                      f"Give job ids such as {examples}")
