"""Launch: Plan → running process (the pipeline's last stage, the thin shell).

run.py's prepare() is the one sequence resolve → payloads → plan (the
template), used by `run`, `--dry-run`, `explain` and the outside
submission; lifecycle.py opens the session's services around it, in
declared order on one undo stack, and spawns the sandbox; payloads.py reads
what the plan binds (boundfiles.py the bound files' verdicts); report.py
writes --dry-run's report and the banner. What a run uses lives in rooms
below it: process/ (select, spawn, terminal, reap, nesting), plancache/,
services/ (chaperon, egress, registry, placeholders, the checks), agents/
and jobs/. This is the only stage that changes the system. Imports nothing.
"""
