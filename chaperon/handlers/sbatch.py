"""sbatch (placeholder until the option validator lands)."""
from . import refuse


def handle(ctx, request, out) -> int:
    return refuse(ctx, out, "sbatch", "not_ready", "sbatch is refused",
                  "job submission from the sandbox is not finished yet", "Submit from outside")
