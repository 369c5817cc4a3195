"""PATH stubs for the Slurm commands inside the sandbox (SPEC §9). Not built
yet: they arrive with the chaperon."""
