"""Process: the primitives that start, relay and end the sandbox's processes.

select.py picks the backend for a launch and probes it (a trivial sandbox,
the verdict cached); spawn.py turns a Plan's payloads into descriptors,
starts the backend, forwards signals and maps the outcome to an exit code;
terminal.py relays a pseudo-terminal for interactive sessions; reap.py makes
the launcher a landlock session's subreaper and ends what outlives the
command; nesting.py decides whether we already run inside a sandbox. They
know Plans and backends but nothing of one run's services, of the plan cache
or of agents: every room above builds on them (floor: above backends/).
Backend selection sits here, not in backends/: spawn forgets a failed probe,
and importing backends/__init__ (its table, base.py) would cost every warm
launch the ~4 ms that a cached launch no longer pays. Imports nothing.
"""
