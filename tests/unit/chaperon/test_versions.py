"""The option tables per Slurm release series (issue 32): chaperon/slurm/versions.py
built from versions.json (scripts/slurm-tables.py), checked against each
series' help text in tests/data/slurm-help/<series>/<cmd>.txt (22.05 from the
host's binaries, the others from each tag's _usage/_help — regenerate with
`python3 scripts/slurm-tables.py SLURM_GIT_DIR --help-dir tests/data/slurm-help`)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from chaperon import slurmversion
from chaperon.handlers.sbatch import only_info
from chaperon.refusal import Refusal
from chaperon.slurm import options as engine
from chaperon.slurm import sbatch_options, srun_options, versions

HELP = Path(__file__).resolve().parents[2] / "data" / "slurm-help"
CASES = [(s, c) for s in versions.SERIES for c in ("sbatch", "srun")]
# Words of Slurm's own help text that are not options getopt_long knows (stale
# upstream: the real 22.05 srun answers "unrecognized option '--mpi-combine=no'";
# --power left slurm_opt.c in 24.05 but not the help text).
HELP_ONLY = {"slurmd_debug", "cpu_bind", "pack-group", "debugger-test", "ctrl-comm-ifhn",
             "mpi-combine", "power"}


def spec_of(series: str, cmd: str):
    return versions.sbatch(series) if cmd == "sbatch" else versions.srun(series)[0]


def table(series: str, cmd: str) -> dict[str, str]:
    return {r.split(":")[0]: r.split(":")[1] for r in versions.data()[series][cmd]}


def test_every_series_has_a_table_and_a_help_text():
    assert set(versions.data()) == set(versions.SERIES)
    for series, cmd in CASES:
        assert (HELP / series / f"{cmd}.txt").is_file(), (series, cmd)
        assert len(table(series, cmd)) > 100


@pytest.mark.parametrize("series,cmd", CASES)
def test_every_option_of_the_help_text_is_in_that_series_table(series, cmd):
    text = (HELP / series / f"{cmd}.txt").read_text()
    named = set(re.findall(r"--([a-z][a-z0-9_-]*[a-z0-9])", text))
    assert len(named) > 60
    spec, raw = spec_of(series, cmd), table(series, cmd)
    missing = sorted(n for n in named - HELP_ONLY if n not in raw)
    assert not missing, f"{cmd} {series}: in --help, not in versions.json: {missing}"
    unknown = sorted(n for n in named - HELP_ONLY if n not in spec.by_long)
    assert not unknown, f"{cmd} {series}: not in the chaperon's table: {unknown}"


def _reference(raw: dict[str, str], aliases: dict[str, str], prefix: str):
    """getopt_long's choice for `--prefix`: exact, else the one option (aliases
    count once) it abbreviates; a set when ambiguous, None when unknown."""
    if prefix in raw:
        return aliases.get(prefix, prefix)
    found = {aliases.get(n, n) for n in raw if n.startswith(prefix)}
    return found.pop() if len(found) == 1 else (found or None)


@pytest.mark.parametrize("series,cmd", CASES)
def test_every_abbreviation_expands_as_that_series_getopt_long_would(series, cmd):
    spec, raw = spec_of(series, cmd), table(series, cmd)
    aliases = {a: o.name for o in spec.options for a in o.aliases}
    for name in raw:
        for end in range(1, len(name) + 1):
            prefix = name[:end]
            want = _reference(raw, aliases, prefix)
            got = spec.resolve(prefix)
            if isinstance(want, set):
                assert isinstance(got, list) and {o.name for o in got} == want, prefix
            else:
                assert not isinstance(got, list) and got is not None, (series, prefix)
                assert got.name == want, (series, cmd, prefix, got.name, want)
    # Argument kinds are the series' own.
    kinds = {"n": engine.NONE, "r": engine.REQ, "o": engine.OPT}
    for name, kind in raw.items():
        assert spec.by_long[name].arg is kinds[kind], (series, cmd, name)


@pytest.mark.parametrize("series,expanded", [("22.05", "extra-node-info"), ("23.02", "extra"),
                                             ("24.11", "extra"), ("26.05", "extra")])
def test_extra_is_never_rewritten_to_another_option(series, expanded):
    parsed = sbatch_options.parse(["--extra=2", "job.sh"], spec=versions.sbatch(series))
    assert parsed.canonical == [f"--{expanded}=2"]
    parsed = srun_options.parse(["--extra=2", "true"], step=False, specs=versions.srun(series))
    assert parsed.canonical == [f"--{expanded}=2"]


def _refused(fn) -> Refusal:
    with pytest.raises(Refusal) as caught:
        fn()
    return caught.value


@pytest.mark.parametrize("series,cmd", CASES)
def test_options_new_since_22_05_are_allowed_with_a_grammar_or_refused_with_the_reason(series,
                                                                                       cmd):
    spec, new = spec_of(series, cmd), set(table(series, cmd)) - set(table("22.05", cmd))
    for name in new:
        option = spec.by_long[name]
        if option.denial is None:
            assert name in versions._REVIEWED and option.check is not None or \
                option.arg is engine.NONE, name
            continue
        refusal = _refused(lambda: engine.parse(spec, [f"--{name}=x" if option.arg is not
                                                       engine.NONE else f"--{name}", "x"]))
        assert refusal.option == name or f"--{name}" in refusal.why, (name, refusal.why)
        assert "Check the spelling" not in refusal.instead
        if refusal.reason == "unreviewed_option":
            assert re.search(r"new in Slurm \d\d\.\d\d", refusal.why), refusal.why


def test_the_reviewed_decisions():
    allowed = {"sbatch": ["--tres-per-task=gres/gpu:1", "--tres-bind=gres/gpu:closest",
                          "--segment=2", "--stepmgr", "--oom-kill-step=1", "--resv-ports",
                          "--exclusive=topo", "--extra=feature"],
               "srun": ["--treewidth=4", "--wait-for-children", "--oom-kill-step"]}
    for word in allowed["sbatch"]:
        engine.parse(versions.sbatch("24.11"), [word, "x"])
    for word in allowed["srun"]:
        engine.parse(versions.srun("25.05")[1], [word, "x"])
    for series, word, reason in [("24.11", "--container-id=c", "container"),
                                 ("24.11", "--export-file=/etc/x", "file_read"),
                                 ("25.05", "--external", "external_job"),
                                 ("25.11", "--resources=x", "unreviewed_option")]:
        assert _refused(lambda: engine.parse(versions.sbatch(series), [word, "x"])
                        ).reason == reason
    step = versions.srun("26.05")[1]
    assert _refused(lambda: engine.parse(step, ["--async", "x"])).reason == "async_step"
    assert "26.05" in _refused(lambda: engine.parse(step, ["--async", "x"])).why
    # An MPI launcher's daemon step: a step like any other, through the wrapper.
    engine.parse(versions.srun("24.11")[1], ["--external-launcher", "x"])
    # topo arrived in 24.05; older series refuse it as the real sbatch would.
    assert _refused(lambda: engine.parse(versions.sbatch("23.11"), ["--exclusive=topo", "x"])
                    ).reason == "bad_value"
    # srun --uid/--gid left srun in 23.02: unknown there, as for the real srun.
    assert _refused(lambda: engine.parse(versions.srun("23.02")[0], ["--uid=0", "x"])
                    ).reason == "unknown_option"


def test_new_input_variables_pass_through_the_same_allow_list():
    table = versions.input_env("sbatch", "24.11")
    assert table["SBATCH_TRES_PER_TASK"] == "tres-per-task"
    parsed = sbatch_options.parse_env({"SBATCH_TRES_PER_TASK": "gres/gpu:1"},
                                      spec=versions.sbatch("24.11"), table=table)
    assert parsed.canonical == ["--tres-per-task=gres/gpu:1"]
    srun_table = versions.input_env("srun", "24.11")
    refusal = _refused(lambda: srun_options.parse_env(
        {"SRUN_CONTAINER_ID": "c"}, specs=versions.srun("24.11"), table=srun_table))
    assert "SRUN_CONTAINER_ID" in refusal.instead and refusal.reason == "container"
    # 22.05's table does not read them at all (the 22.05 srun does not either).
    assert "SBATCH_TRES_PER_TASK" not in versions.input_env("sbatch", "22.05")
    # A variable the generated table has but whose option the series lacks is not read.
    for series in versions.SERIES:
        for cmd in ("sbatch", "srun"):
            spec = spec_of(series, cmd)
            assert all(o in spec.by_long for o in versions.input_env(cmd, series).values())


def test_step_mode_reads_only_allowed_input_variables_of_the_series():
    from chaperon.handlers.srun import step_variables
    env = {"SLURM_TRES_PER_TASK": "gres/gpu:1", "SLURM_EXTERNAL_LAUNCHER": "1",
           "SLURM_OOM_KILL_STEP": "1"}
    with pytest.raises(Refusal):      # a denied option's variable is refused, by its name
        step_variables(dict(env, SLURM_CONTAINER="c"), "7", "24.11")
    validated, _ = step_variables(env, "7", "24.11")
    assert validated["SLURM_TRES_PER_TASK"] == "gres/gpu:1" and "SLURM_OOM_KILL_STEP" in validated
    validated, _ = step_variables(env, "7", "22.05")       # unknown to 22.05: never passed
    assert "SLURM_TRES_PER_TASK" not in validated and "SLURM_OOM_KILL_STEP" not in validated


@pytest.mark.parametrize("version,series,noted", [
    ("22.05.8", "22.05", False), ("24.11.5", "24.11", False), ("26.05.5", "26.05", False),
    ("25.08.1", "25.05", True), ("27.11.0", "26.05", True), ("21.08.8", "22.05", True),
    (None, "22.05", True), ("garbage", "22.05", True)])
def test_an_unknown_version_uses_the_nearest_older_table_and_says_so(version, series, noted):
    got, note = versions.series_for(version)
    assert got == series and bool(note) is noted
    if noted and version and version[0].isdigit():
        assert version in note and series in note


def test_the_version_is_read_from_the_library_and_cached_with_its_identity(tmp_path):
    libdir = tmp_path / "lib" / "slurm"
    libdir.mkdir(parents=True)
    library = libdir / "libslurmfull.so"
    library.write_bytes(b"\x7fELF....\x00slurm\x0024.11.5\x00more\x00")
    binary = tmp_path / "bin" / "sbatch"
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF\x00" + str(libdir).encode() + b"\x00libslurmfull.so\x00")
    assert slurmversion.libraries(str(binary))[0] == str(library)
    assert slurmversion.detect(str(binary))[0] == "24.11.5"
    library.write_bytes(b"\x7fELF\x00\x0025.05.2\x00")       # an upgrade of the library alone
    os.utime(library, ns=(1, 1))
    assert slurmversion.detect(str(binary))[0] == "25.05.2"


def test_the_hosts_slurm_is_read_without_running_it():
    version, how = slurmversion.detect("/usr/bin/sbatch")
    assert version and version.startswith("22.05."), (version, how)
    assert "libslurm" in how


def test_help_usage_and_version_are_recognised_as_print_only():
    spec = versions.sbatch("24.11")
    assert only_info(engine.parse(spec, ["--help"]))
    assert only_info(engine.parse(spec, ["-V"]))
    assert only_info(engine.parse(spec, ["--usage"]))
    assert not only_info(engine.parse(spec, ["--help", "job.sh"]))
    assert not only_info(engine.parse(spec, ["-p", "x", "--version"]))
    assert only_info(engine.parse(versions.srun("24.11")[1], ["--version"]))


def test_no_variable_any_series_reads_passes_unreviewed():
    """Every name srun, sbatch or slurmstepd of any series reads — their
    env_vars[] tables and their getenv() calls — is either a Slurm name (never
    carried in the caller's environment: environment.allowed_name) or
    reviewed here. A new series that reads a name outside both fails here."""
    from chaperon.environment import allowed_name
    reviewed = {
        # slurmstepd reads it from its own environment (slurmd's), not the job's.
        "SLURMSTEPD_OOM_ADJ",
    }
    seen = set()
    for entry in versions.data().values():
        for names in entry["getenv"].values():
            seen.update(names)
        for table in entry["env"].values():
            seen.update(table)
    assert len(seen) > 150
    # Input variables the chaperon reads through the option allow-list (SLURMD_DEBUG
    # is --slurmd-debug, refused) count as reviewed.
    read = {n for s in versions.SERIES for c in ("sbatch", "srun")
            for n in versions.input_env(c, s)}
    assert {n for n in seen if allowed_name(n)} - read == reviewed
