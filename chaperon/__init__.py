"""The Slurm proxy that runs outside the sandbox (SPEC §9). Not built yet:
see the chaperon issue. Inside a sandbox today the real Slurm binaries,
/etc/slurm and the munge socket are simply unreachable."""
