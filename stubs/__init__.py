"""The PATH stubs for the Slurm commands inside the sandbox (SPEC §9): one
entry point (client.py), installed under every Slurm name. They know only
the wire (chaperon/wire); standard library only, started with `python3 -IS`.
"""
