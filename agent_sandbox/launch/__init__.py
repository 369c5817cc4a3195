"""Launch: Plan → running process (the pipeline's last stage, the thin shell).

run.py's prepare() is the one sequence resolve → payloads → plan (the
template), used by `run`, `--dry-run`, `explain` and the outside
submission; lifecycle.py opens the session's services around it, in
declared order on one undo stack, and spawns the sandbox; select.py
picks and probes the backend; payloads.py reads what the plan binds;
spawn.py turns payloads into descriptors, starts the backend, forwards
signals and maps the outcome to an exit code. Around the run: the chaperon's
session (chaperon.py), read-only placeholders and the per-project lock
(placeholders.py), the session registry (registry.py), the git check
(gitcheck.py). This is the only stage that changes the system.
"""
