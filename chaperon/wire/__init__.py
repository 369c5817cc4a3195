"""What the stubs and the chaperon share, and nothing else: the CHAPERON/1
protocol (protocol.py, no I/O) and the session directory's names and limits
(session.py). Imported by the stub on every Slurm call inside the jail:
standard library only (tests/unit/test_structure_chaperon.py), nothing
heavy, and this file imports nothing.
"""
