"""Launch: Plan → running process (the pipeline's last stage, the thin shell).

run.py's prepare() is the one sequence resolve → chaperon → payloads → plan,
used by `run`, `--dry-run`, `explain` and the outside submission; process/select.py
picks and probes the backend; payloads.py reads what the plan binds;
process/spawn.py turns payloads into descriptors, starts the backend, forwards
signals and maps the outcome to an exit code. Around the run: the chaperon's
session (services/chaperon.py), read-only placeholders and the per-project lock
(services/placeholders.py), the session registry (services/registry.py), the git check
(services/gitcheck.py). This is the only stage that changes the system.
"""
