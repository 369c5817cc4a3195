"""Slurm's own grammar, as the real commands read it: the option engine
(options.py, getopt_long as Slurm builds it), the vocabulary tables are
written in (values.py), the sbatch and srun tables (sbatch_options.py,
srun_options.py), #SBATCH directives (directives.py) and job references
(jobids.py). Pure: text in, a `Parsed` or a `Refusal` out; nothing here
runs a command, touches a file or knows a session.
"""
