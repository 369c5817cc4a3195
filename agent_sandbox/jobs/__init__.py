"""Jobs: one sandbox per node per Slurm job (SPEC §9, docs/design.md "Jobs:
one sandbox per node").

share.py finds or starts the job's sandbox on a node and hands a joiner its
namespaces (peer.py pins who is at the other end of the socket by pidfd);
join.py is a task's launch that joins it (`run --job-shared`); shm.py the
shared-memory directory of a landlock job on a node. They stand on the
process primitives (floor: with services/ and agents/, below launch/; the
joining task's seccomp filter comes from launch/payloads.py, the one allowed
upward import). The job's plan cache is plancache/jobs.py. Imports nothing.
"""
