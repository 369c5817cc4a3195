"""The compiled plan cache (docs/design.md, "The warm launch").

plans.py records every file a compile reads (the Recorder), stores the plan
with those fingerprints, and serves an equal later launch from it, re-asking
only the recorded questions; jobs.py is the same for a Slurm job's batch
script and steps on compute nodes (per-task values substituted). A room of
its own because the launch, an agent's launch (agents/launch.py), the bound
files' reads (launch/payloads.py) and the link check (services/linkcheck.py)
all build on it, and it builds on the process primitives only (floor: above
process/, below services/, agents/ and jobs/). Imports nothing: a cache hit
imports only what it uses.
"""
