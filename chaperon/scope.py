"""Scope: which jobs exist for a sandbox, and how the real Slurm commands are
made to show and touch only those while their output stays Slurm's own
(SPEC §9 "scope").

Every scoped handler uses the same four tools:

1. The in-scope set. SLURM_SCOPE=session or project: the ledger names the
   jobs (chaperon/ledger.py); an array task or a het component that Slurm
   gave an id of its own is in scope when its array (het) job is, which one
   `squeue` call tells. SLURM_SCOPE=user or none: every job of the user.
2. Listings run the real command restricted to the in-scope jobs
   (`--jobs=…` together with `--me`) with the caller's own format options,
   so every byte of the answer is Slurm's. The ledger keeps every job ever
   submitted from the project, so ids Slurm has forgotten are pruned once
   the list grows long (one `squeue --me` tells which ids still exist), and
   written down in the ledger, so no later session prunes them again.
3. Ids the caller names: an out-of-scope id is replaced, before the real
   command runs, by a placeholder no job can have (counting down from
   0x3FFFFFF, above any MaxJobId a site may set for its own ids), and the
   placeholder is turned back into the caller's id in the answer. So a job
   out of scope behaves exactly like a job that does not exist: Slurm's own
   wording, Slurm's own exit code, for every command and every message.
4. Untagging. The comment tag `chaperon:sid=…,proj=…[,user=…]:END` never
   leaves the chaperon (chaperon/untag.py).

Job references are read with Slurm's grammar (chaperon/slurm/jobids.py).
"""
from __future__ import annotations
from __future__ import annotations

import os
import re
import subprocess
import time

from .environment import command_env
from .refusal import Refusal
from .slurm.jobids import PLACEHOLDER_TOP, ref_base
from .wire.session import EXIT_NOT_FOUND

PRUNE_ABOVE = 256                    # ledger ids before forgotten ones are pruned
PRUNE_EVERY = 10.0                   # seconds between prunes: each costs a squeue call


class Placeholders:
    """Out-of-scope ids replaced by ids no job has, and turned back in the
    answer (see the module docstring, point 3)."""

    def __init__(self):
        self.next = PLACEHOLDER_TOP
        self.back: dict[bytes, bytes] = {}
        self._pattern = None

    def replace(self, ref: str) -> str:
        base = ref_base(ref) or ""
        placeholder = str(self.next)
        self.next -= 1
        self.back[placeholder.encode()] = base.encode()
        self._pattern = None
        return placeholder + ref[len(base):]

    def restore(self, data: bytes) -> bytes:
        if not self.back:
            return data
        if self._pattern is None:
            alternatives = b"|".join(re.escape(k) for k in self.back)
            self._pattern = re.compile(rb"(?<![0-9])(" + alternatives + rb")(?![0-9])")
        return self._pattern.sub(lambda m: self.back[m.group(1)], data)


# --------------------------------------------------------------------------- the set
class Scope:
    """The jobs one request may see and touch."""

    def __init__(self, ctx, request):
        self.ctx = ctx
        self.kind = ctx.scope if ctx.scope in ("session", "project", "user", "none") else "project"
        self.env = command_env(request.env)
        self.uid = os.getuid()

    @property
    def by_user(self) -> bool:
        """user and none: every job of the user is in scope (squeue --me)."""
        return self.kind in ("user", "none")

    def capture(self, command: str, args: list[str]) -> tuple[int, bytes]:
        """Run a real Slurm command for the chaperon's own use (not shown)."""
        binary = self.ctx.binary(command)
        if binary is None:
            return EXIT_NOT_FOUND, b""
        try:
            result = subprocess.run([command, *args], executable=binary, env=self.env,
                                    cwd="/", stdin=subprocess.DEVNULL,
                                    capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return 1, b""
        return result.returncode, result.stdout

    def ledger_ids(self) -> set[str]:
        return set(self.ctx.ledger.jobs(self.kind))

    def live_ids(self) -> list[str]:
        """The in-scope ids to hand to a listing (session/project scope),
        oldest first; ids Slurm has forgotten are pruned when there are many."""
        ctx = self.ctx
        records = ctx.ledger.records(self.kind)
        with ctx.lock:
            ids = list(dict.fromkeys(r.job for r in records if r.job not in ctx.gone))
        if len(ids) <= PRUNE_ABOVE or time.monotonic() - ctx.pruned_at < PRUNE_EVERY:
            return ids   # a forgotten id in the list is harmless, only a little slower
        ctx.pruned_at = time.monotonic()
        asked = time.time()
        code, out = self.capture("squeue", ["--me", "--noheader", "--states=all",
                                            "--format=%F"])
        if code != 0:
            return ids
        known = set(out.decode(errors="replace").split())
        recorded = {r.job: r.get("time", 0) for r in records}
        with ctx.lock:
            # A job recorded after squeue answered may not be in its answer yet.
            forgotten = {job for job in ids
                         if job not in known and recorded.get(job, asked) < asked - 1}
            ctx.gone |= forgotten
            live = [j for j in ids if j not in ctx.gone]
        ctx.ledger.forget(forgotten)   # persisted: no later session prunes them again
        return live

    def related(self, bases: set[str], *, active: bool = False) -> dict[str, set[str]]:
        """For ids of this user's jobs that Slurm still knows (`active`: that
        have not ended): the ids they belong to (own id, array job id, het job
        id). One squeue call."""
        bases = {b for b in bases if b.isascii() and b.isdigit()}
        if not bases:
            return {}
        ids = sorted(bases, key=int)
        if len(ids) == 1:
            ids.append(str(PLACEHOLDER_TOP))   # keep squeue on its list path (no error)
        code, out = self.capture("squeue", [
            "--me", "--noheader", *([] if active else ["--states=all"]),
            "--Format=JobID:0|,ArrayJobID:0|,HetJobID:0|", f"--jobs={','.join(ids)}"])
        found: dict[str, set[str]] = {}
        for line in out.decode(errors="replace").splitlines():
            parts = [p for p in line.split("|") if p.isdigit()]
            if parts:
                found.setdefault(parts[0], set()).update(parts)
        return found

    def in_scope(self, refs: list[str]) -> list[bool]:
        """For each job reference the caller named: is it in scope?"""
        bases = [ref_base(r) for r in refs]
        if self.by_user:
            related = self.related({b for b in bases if b})
            return [bool(b) and b in related for b in bases]
        known = self.ledger_ids()
        unknown = {b for b in bases if b and b not in known}
        related = self.related(unknown)
        return [bool(b) and (b in known or bool(related.get(b, set()) & known))
                for b in bases]

    def substitute(self, refs: list[str], placeholders: Placeholders) -> list[str]:
        """The references with every out-of-scope one replaced by a placeholder."""
        flags = self.in_scope(refs)
        return [ref if ok else placeholders.replace(ref) for ref, ok in zip(refs, flags)]

    def owns(self, job: dict) -> bool:
        """Is a job record from Slurm's JSON/YAML (job_id, array_job_id,
        het_job_id, user_id) in scope?"""
        if self.by_user:
            return str(job.get("user_id")) == str(self.uid)
        known = getattr(self, "_known", None)
        if known is None:
            known = self._known = self.ledger_ids()
        return str(job.get("user_id")) == str(self.uid) and any(
            str(job.get(k)) in known for k in ("job_id", "array_job_id", "het_job_id"))

def self_names(ctx) -> set[str]:
    """How the caller may name itself: user name and uid."""
    import pwd

    names = {str(os.getuid())}
    try:
        names.add(pwd.getpwuid(os.getuid()).pw_name)
    except KeyError:
        pass
    if ctx.user:
        names.add(ctx.user)
    return names


def foreign_users(ctx, parsed, options=("user",)) -> list[str]:
    """Users named by the options that are not the caller (self-references
    are no-ops: every scope is a subset of the caller's own jobs)."""
    mine = self_names(ctx)
    return [u for name in options for value in parsed.values.get(name, [])
            for u in (value or "").split(",") if u and u not in mine]


def refuse_foreign_users(ctx, parsed, why: str, instead: str, *, option: str = "user") -> None:
    """Refuse users named by --`option` that are not the caller."""
    others = foreign_users(ctx, parsed)
    if others:
        raise Refusal("foreign_jobs", f"--{option}={','.join(others)} is refused", why, instead)


# --------------------------------------------------------------------------- ledger help
def known_job(ctx, request, job: str, kind: str = "project") -> bool:
    """Was `job` (an id from the job's own environment) submitted from a
    sandbox of this project (kind "project") — directly, or as a task of an
    array / a component of a het job that was?"""
    base = ref_base(job)
    if base is None:
        return False
    known = set(ctx.ledger.jobs(kind))
    if base in known:
        return True
    scope = Scope(ctx, request)
    return bool(scope.related({base}).get(base, set()) & known)


class AllocationWatcher:
    """srun in allocation mode prints no job id, so the chaperon finds the
    job by its comment tag (which srun got from the handler) among this
    user's jobs, and records it in the ledger the moment Slurm has it: while
    srun waits, after 50 ms, then backing off (doubling) to one call every
    POLL_MAX seconds — a queued allocation costs slurmctld one squeue a
    second, not twenty — and once more when srun ends. Every job carrying this session's tag that the
    ledger does not have yet is recorded (two sruns of one session may find
    each other's job first; the ledger is a set)."""

    def __init__(self, ctx, request, tag: str, token: str):
        import threading

        self.ctx, self.tag, self.token = ctx, tag.encode(), token
        self.scope = Scope(ctx, request)
        self.found = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "AllocationWatcher":
        self.thread.start()
        return self

    def _check(self) -> None:
        code, data = self.scope.capture("squeue", ["--me", "--noheader", "--states=all",
                                                   "--format=%A|%k"])
        if code != 0:
            return
        recorded = set(self.ctx.ledger.jobs("session"))
        for line in data.split(b"\n"):
            job, _, comment = line.partition(b"|")
            if comment == self.tag and job.isdigit() and job.decode() not in recorded:
                try:
                    self.ctx.ledger.record(job.decode(), self.token, kind="allocation")
                except OSError:
                    return
                self.found.set()

    POLL_FIRST, POLL_MAX = 0.05, 1.0

    def pauses(self):
        """The waits between checks: 0.05, 0.1, 0.2, 0.4, 0.8, then 1 s."""
        pause = self.POLL_FIRST
        while True:
            yield pause
            pause = min(pause * 2, self.POLL_MAX)

    def _run(self) -> None:
        for pause in self.pauses():
            if self.done.wait(pause) or self.found.is_set():
                break
            self._check()
            if self.found.is_set():
                break

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)
        self._check()
