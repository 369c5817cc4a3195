#!/usr/bin/env python3
"""Generate chaperon/slurm/versions.json: the options and input variables of
sbatch and srun for each Slurm release series, read from Slurm's own sources.

Run by hand when a Slurm release is added (docs/chaperon.md, "Slurm versions"):

    git clone --bare https://github.com/SchedMD/slurm /tmp/slurm.git   # or any clone
    python3 scripts/slurm-tables.py /tmp/slurm.git > chaperon/slurm/versions.json
    python3 scripts/slurm-tables.py /tmp/slurm.git --help-dir tests/data/slurm-help

The second form writes the help texts the unit tests check the tables
against (tests/unit/chaperon/test_versions.py), from each tag's _usage() and
_help(), except where tests/data/slurm-help/<series>/<cmd>.txt was captured
from a real binary (22.05: `sbatch --usage; sbatch --help` on the host; 24.11:
scripts/slurm-help-capture.sh in a Debian 13 root).

For each series it takes the newest tag `slurm-YY-MM-N-1` and reads, with
`git show TAG:PATH` (nothing is built or run):

- src/common/slurm_opt.c: every `static slurm_cli_opt_t` (.name, .has_arg,
  .val, and which of .set_func / .set_func_sbatch / .set_func_srun it has)
  and the `common_options[]` array, exactly as slurm_option_table_create()
  builds getopt_long's table for sbatch (sbatch_opt) and srun (srun_opt);
- src/sbatch/opt.c and src/srun/opt.c: the `env_vars[]` (and sbatch's
  `early_env_vars[]`) tables: input variable -> the option it sets;
- the names in `getenv("...")` calls under src/sbatch, src/srun and
  src/slurmd/slurmstepd (what those programs read from their environment).

Output: {"versions": {"22.05": {"tag": ..., "sbatch": ["name:arg:short", …],
"srun": […], "env": {"sbatch": {VAR: option}, "srun": {…}},
"getenv": {"sbatch": […], "srun": […], "slurmstepd": […]}}}}; arg is n
(no_argument), r (required) or o (optional); short is the letter or "".
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

SERIES = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
ARG = {"no_argument": "n", "required_argument": "r", "optional_argument": "o"}
_BLOCK = re.compile(r"static slurm_cli_opt_t (\w+) = \{(.*?)\n\};", re.S)
_FIELD = re.compile(r"\.(\w+)\s*=\s*([^,\n]+),?")
_ENV_ROW = re.compile(r'\{\s*"([A-Z0-9_]+)"\s*,\s*([\w\']+)')
_GETENV = re.compile(r'getenv\(\s*"([A-Za-z0-9_]+)"\s*\)')


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True,
                          capture_output=True, text=True).stdout


def newest_tag(repo: str, series: str) -> str:
    prefix = "slurm-" + series.replace(".", "-") + "-"
    tags = [t for t in git(repo, "tag", "--list", prefix + "*").split()
            if re.fullmatch(re.escape(prefix) + r"\d+-1", t)]
    if not tags:
        raise SystemExit(f"no tag {prefix}N-1 in {repo}")
    return max(tags, key=lambda t: int(t[len(prefix):].split("-")[0]))


def options(source: str) -> dict[str, list[str]]:
    blocks = {}
    for ident, body in _BLOCK.findall(source):
        fields = {k: v.strip() for k, v in _FIELD.findall(body)}
        blocks[ident] = fields
    order = re.search(r"common_options\[\]\s*=\s*\{(.*?)\};", source, re.S).group(1)
    table: dict[str, list[str]] = {"sbatch": [], "srun": []}
    for ident in re.findall(r"&(\w+)", order):
        fields = blocks[ident]
        name = fields.get("name", "NULL")
        if name == "NULL":
            continue                       # environment-only options
        name = name.strip('"')
        val = fields.get("val", "0")
        short = val[1] if re.fullmatch(r"'.'", val) else ""
        arg = ARG[fields.get("has_arg", "no_argument")]
        for cmd in ("sbatch", "srun"):
            if "set_func" in fields or f"set_func_{cmd}" in fields:
                table[cmd].append(f"{name}:{arg}:{short}:{val.strip(chr(39))}")
    return table


def env_table(source: str, vals: dict[str, str]) -> dict[str, str]:
    out = {}
    for block in re.findall(r"env_vars_t (?:early_)?env_vars\[\]\s*=\s*\{(.*?)\n\};", source,
                            re.S):
        for var, val in _ENV_ROW.findall(block):
            val = val.strip("'")
            if val in vals:
                out[var] = vals[val]
    return out


def getenvs(repo: str, tag: str, directory: str) -> list[str]:
    names = set()
    for path in git(repo, "ls-tree", "-r", "--name-only", tag, directory).split():
        if path.endswith((".c", ".h")):
            names.update(_GETENV.findall(git(repo, "show", f"{tag}:{path}")))
    return sorted(names)


_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def help_text(source: str) -> str:
    """The text of opt.c's _help() (and _usage()): its C string literals,
    concatenated (what `CMD --help` prints, %s and all)."""
    out = []
    for function in ("_usage", "_help"):
        found = re.search(r"\nstatic void %s\(void\)\n\{(.*?)\n\}" % function, source, re.S)
        if found:
            for literal in _LITERAL.findall(found.group(1)):
                out.append(literal.encode().decode("unicode_escape"))
    return "".join(out)


def write_help(repo: str, directory: str) -> None:
    """tests/data/slurm-help/<series>/<cmd>.txt from the sources, for the
    series whose binaries no root here has (22.05 comes from the host)."""
    import os
    for series in SERIES:
        tag = newest_tag(repo, series)
        for cmd in ("sbatch", "srun"):
            target = os.path.join(directory, series, f"{cmd}.txt")
            if os.path.exists(target) and not open(target).read().startswith("# from "):
                continue                       # captured from a real binary: kept
            opt_c = f"src/{cmd}/opt.c"
            if cmd == "srun" and opt_c not in git(repo, "ls-tree", "-r", "--name-only", tag,
                                                  "src/srun"):
                opt_c = "src/srun/libsrun/opt.c"
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as handle:
                handle.write(f"# from {tag}:{opt_c} (_usage, _help)\n")
                handle.write(help_text(git(repo, "show", f"{tag}:{opt_c}")))


def main(repo: str) -> None:
    versions = {}
    for series in SERIES:
        tag = newest_tag(repo, series)
        table = options(git(repo, "show", f"{tag}:src/common/slurm_opt.c"))
        entry = {"tag": tag, "env": {}, "getenv": {}}
        for cmd in ("sbatch", "srun"):
            rows = table[cmd]
            vals = {}
            for row in rows:
                name, _, _, val = row.split(":", 3)
                vals.setdefault(val, name)
            entry[cmd] = sorted(":".join(r.split(":")[:3]) for r in rows)
            opt_c = f"src/{cmd}/opt.c"
            if cmd == "srun" and opt_c not in git(repo, "ls-tree", "-r", "--name-only", tag,
                                                  "src/srun"):
                opt_c = "src/srun/libsrun/opt.c"      # until 23.x
            entry["env"][cmd] = dict(sorted(env_table(
                git(repo, "show", f"{tag}:{opt_c}"), vals).items()))
            entry["getenv"][cmd] = getenvs(repo, tag, f"src/{cmd}")
        entry["getenv"]["slurmstepd"] = getenvs(repo, tag, "src/slurmd/slurmstepd")
        versions[series] = entry
    json.dump({"generator": "scripts/slurm-tables.py", "versions": versions}, sys.stdout,
              indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--help-dir":
        write_help(sys.argv[1], sys.argv[3])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else ".")
