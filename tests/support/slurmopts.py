"""What the tests of the chaperon's Slurm option parsing share: the shape of
a refusal's message, the sbatch options that run code outside the job
(SBATCH_FOREIGN), and every spelling getopt_long accepts for an option."""
from __future__ import annotations

import re

from chaperon.slurm.options import NONE, REQ

MESSAGE = re.compile(r"^agent-sandbox: (sbatch|srun): .+ is refused — .+\. .+$", re.S)
SBATCH_FOREIGN = ["prolog", "epilog", "task-prolog", "task-epilog", "bcast"]


def shortest_prefix(spec, option):
    """The shortest abbreviation that resolves to `option` (not its full name)."""
    for size in range(1, len(option.name)):
        if spec.resolve(option.name[:size]) is option:
            return option.name[:size]
    return None


def spellings(spec, option, value="v"):
    """Every way to write `option` with `value` that getopt_long accepts."""
    name, short = option.name, option.short
    out = {}
    if option.arg is NONE:
        out["long"] = [f"--{name}"]
        if short:
            out["short"] = [f"-{short}"]
            out["short-cluster"] = [f"-v{short}"] if spec.by_short.get("v") else [f"-{short}"]
    else:
        out["long="] = [f"--{name}={value}"]
        if option.arg is REQ:
            out["long"] = [f"--{name}", value]
        if short:
            out["short-attached"] = [f"-{short}{value}"]
            if option.arg is REQ:
                out["short"] = [f"-{short}", value]
    prefix = shortest_prefix(spec, option)
    if prefix:
        out["prefix"] = [f"--{prefix}"] if option.arg is NONE else [f"--{prefix}={value}"]
        if option.arg is REQ:
            out["prefix-separate"] = [f"--{prefix}", value]
    for alias in option.aliases:
        out[f"alias {alias}"] = [f"--{alias}"] if option.arg is NONE else [f"--{alias}={value}"]
    return out
