"""Services: what one run opens around its sandbox, and sweeps after it.

chaperon.py starts and stops the Slurm chaperon of a session; egress.py the
egress proxy of NETWORK_MODE=allowlist; registry.py records the session (and
holds the lock the sandbox keeps) so that others know it runs; placeholders.py
makes the read-only placeholders of missing protected paths under the
project's lock; gitcheck.py, configcheck.py and linkcheck.py report what a
session changed in git, in agents' configuration, or files with a second
name. Each is used by the run (launch/run.py) and the subcommands (tools/),
never the other way; they stand on the process primitives and the plan
cache (floor: with agents/ and jobs/, above plancache/). Imports nothing.
"""
