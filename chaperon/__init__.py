"""The chaperon: the Slurm proxy that runs outside the sandbox (SPEC §9,
docs/chaperon.md). A request travels

    stubs/client.py ──wire/──▶ server.py ──▶ handlers/<command>.py ──▶ the real Slurm

- wire/      CHAPERON/1 and the session directory's names: all the stubs
             share with the chaperon (stdlib only, imported on every call)
- server.py  the transport: FIFOs, threads, heartbeats, limits
- handlers/  one module per Slurm command, found through a lazy table;
             one Refusal type (refusal.py), caught once by dispatch
- slurm/     Slurm's own grammar: the option engine and its tables, #SBATCH
             directives, job ids
- scope.py, untag.py, selection.py, others.py   what a sandbox may see of
             the queue, and Slurm's output without the tag or other users
- submit.py, beneath.py, environment.py, jobwrap.py   what sbatch and srun
             share: files opened beneath the project, the job's environment,
             the wrapper Slurm starts
- ledger.py, audit.py, paths.py   the trusted job ledger, the audit log

Never imports the launcher (agent_sandbox); the launcher starts it as
`python -I -m chaperon.server`.
"""
