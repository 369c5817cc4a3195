"""The shared option parser and the sbatch/srun tables (chaperon/slurm/options.py).

The parsing rules mirror getopt_long as Slurm 22.05 calls it (optstring "+…",
every option of the command in the long table); the tables were checked
against the real sbatch/srun 22.05.8 binaries. Here: every refused option in
every spelling, canonical re-emission, the positional boundary, value
checks, and two properties — a round trip over random spellings of allowed
options, and "no accepted input yields a refused option".
"""
from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaperon.slurm import sbatch_options, srun_options
from chaperon.slurm.options import NONE, OPT, REQ, merge, parse
from chaperon.refusal import Refusal
from chaperon.slurm.sbatch_options import SBATCH
from chaperon.slurm.srun_options import SRUN_ALLOCATION, SRUN_STEP
from tests.support.slurmopts import MESSAGE, SBATCH_FOREIGN, spellings

SPECS = {"sbatch": SBATCH, "srun-allocation": SRUN_ALLOCATION, "srun-step": SRUN_STEP}

# The brief's denied lists, checked by name so that flipping a table row to
# "allowed" fails here, not only in the generated cases.
MUST_DENY = {
    "sbatch": ["chdir", "uid", "gid", "get-user-env", "propagate", "container", "bb", "bbf",
               "mail-user", "mail-type", "export-file", "clusters", "nodefile", "priority"],
    "srun-allocation": ["pty", "jobid", "uid", "gid", "chdir", "propagate", "prolog", "epilog",
                        "task-prolog", "task-epilog", "bcast", "container", "network",
                        "multi-prog", "mail-user", "x11", "het-group"],
}
MUST_DENY["srun-step"] = MUST_DENY["srun-allocation"] + ["partition", "account", "qos",
                                                         "begin", "dependency"]


def refused(spec, argv, **kw) -> Refusal:
    with pytest.raises(Refusal) as info:
        parse(spec, argv, **kw)
    assert MESSAGE.match(info.value.message), info.value.message
    return info.value


def denied_cases():
    for label, spec in SPECS.items():
        for option in spec.options:
            if option.denial is None:
                continue
            for form, argv in spellings(spec, option).items():
                yield pytest.param(label, option.name, argv, id=f"{label}:{option.name}:{form}")


# --- refused options, every spelling ------------------------------------------

@pytest.mark.parametrize("label,name,argv", list(denied_cases()))
def test_denied_option_refused_in_every_spelling(label, name, argv):
    spec = SPECS[label]
    error = refused(spec, [*argv, "job.sh"])
    assert error.option == name
    assert error.reason == spec.by_long[name].denial.reason
    assert error.written.startswith("-") and error.written[1:2] in argv[0]


@pytest.mark.parametrize("label", list(MUST_DENY))
def test_briefs_denied_list_is_denied(label):
    spec = SPECS[label]
    for name in MUST_DENY[label]:
        assert spec.by_long[name].denial is not None, name


@pytest.mark.parametrize("name", SBATCH_FOREIGN)
def test_srun_only_options_refused_by_sbatch_with_a_reason(name):
    error = refused(SBATCH, [f"--{name}=/x", "job.sh"])
    assert error.reason in ("host_program", "bcast")
    assert f"--{name} is not an option of sbatch" in error.why


def test_denied_option_without_value_reports_the_denial_not_the_missing_value():
    assert refused(SBATCH, ["--uid"]).reason == "identity"
    assert refused(SBATCH, ["-D"]).reason == "chdir"
    assert refused(SBATCH, ["--reboot=1"]).reason == "admin_only"


def test_refused_inside_a_cluster():
    error = refused(SBATCH, ["-HD/tmp", "job.sh"])
    assert (error.option, error.written) == ("chdir", "-D/tmp")
    assert "-D/tmp (--chdir) is refused" in error.message


def test_message_names_what_was_written_and_the_option():
    error = refused(SBATCH, ["--ch=/tmp"])
    assert error.message.startswith("agent-sandbox: sbatch: --ch=/tmp (--chdir) is refused — ")
    assert error.message.endswith("run sbatch from there")


def test_mail_only_with_the_admin_unlock():
    assert refused(SBATCH, ["--mail-type=END"]).reason == "mail"
    parsed = sbatch_options.parse(["--mail-type=END,FAIL", "--mail-user=me@x.org", "j.sh"],
                                  allow_mail=True)
    assert parsed.canonical == ["--mail-type=END,FAIL", "--mail-user=me@x.org"]
    with pytest.raises(Refusal) as info:
        sbatch_options.parse(["--mail-type=SOMETIMES"], allow_mail=True)
    assert info.value.reason == "bad_value"
    # In step mode mail is a job option: refused even when mail is allowed.
    with pytest.raises(Refusal):
        srun_options.parse(["--mail-type=END", "true"], step=True, allow_mail=True)


# --- parse errors ---------------------------------------------------------------

@pytest.mark.parametrize("argv,reason", [
    (["--pro=x"], "ambiguous_option"),          # profile, propagate
    (["--exp=ALL"], "ambiguous_option"),        # export, export-file
    (["--=x"], "ambiguous_option"),
    (["--frobnicate"], "unknown_option"),
    (["---x"], "unknown_option"),
    (["-y"], "unknown_option"),
    (["-Hy"], "unknown_option"),
    (["--partition"], "missing_value"),
    (["-p"], "missing_value"),
    (["--hold=yes"], "unexpected_value"),
    (["--parsable=1"], "unexpected_value"),
])
def test_parse_errors(argv, reason):
    assert refused(SBATCH, argv).reason == reason


def test_ambiguity_lists_the_candidates():
    error = refused(SBATCH, ["--pro=x"])
    assert "--profile" in error.why and "--propagate" in error.why


def test_unique_prefix_of_a_refused_option_is_refused():
    assert refused(SBATCH, ["--get=1"]).reason == "login_env"     # --get-user-env
    assert refused(SRUN_ALLOCATION, ["--pt", "bash"]).reason == "pty"
    assert refused(SRUN_ALLOCATION, ["--mul", "x"]).reason == "multi_prog"
    assert refused(SRUN_ALLOCATION, ["--task-p=/x", "a"]).reason == "host_program"


# --- canonical re-emission and the positional boundary --------------------------

@pytest.mark.parametrize("argv,canonical,rest", [
    (["-p", "debug", "job.sh"], ["--partition=debug"], ["job.sh"]),
    (["-pdebug", "job.sh"], ["--partition=debug"], ["job.sh"]),
    (["--partition", "debug", "job.sh"], ["--partition=debug"], ["job.sh"]),
    (["--partition=debug", "job.sh"], ["--partition=debug"], ["job.sh"]),
    (["--part=debug", "job.sh"], ["--partition=debug"], ["job.sh"]),
    (["--j", "x"], ["--job-name=x"], []),                    # unique prefix of job-name
    (["--tasks-per-node=2"], ["--ntasks-per-node=2"], []),   # alias → canonical
    (["--task=2"], ["--ntasks-per-node=2"], []),             # prefix of the alias
    (["-Hv", "job.sh"], ["--hold", "--verbose"], ["job.sh"]),
    (["-vvv"], ["--verbose", "--verbose", "--verbose"], []),
    (["-Hpdebug"], ["--hold", "--partition=debug"], []),
    (["-HJ", "x y"], ["--hold", "--job-name=x y"], []),
    (["-J", "--hold", "job.sh"], ["--job-name=--hold"], ["job.sh"]),   # value taken as is
    (["-J=x"], ["--job-name==x"], []),
    (["--comment=a=b"], ["--comment=a=b"], []),
    (["--job-name="], ["--job-name="], []),
    (["--nice", "job.sh"], ["--nice"], ["job.sh"]),          # optional value: only attached
    (["--nice", "5"], ["--nice"], ["5"]),
    (["--nice=5"], ["--nice=5"], []),
    (["-k", "job.sh"], ["--no-kill"], ["job.sh"]),
    (["-koff"], ["--no-kill=off"], []),
    (["--exclusive", "job.sh"], ["--exclusive"], ["job.sh"]),
    (["--exclusive=user"], ["--exclusive=user"], []),
    (["--", "-D", "/tmp"], [], ["-D", "/tmp"]),
    (["-H", "--", "--hold"], ["--hold"], ["--hold"]),
    (["-", "-D"], [], ["-", "-D"]),
    (["job.sh", "-D", "/tmp", "--chdir=/", "--uid=0"], [], ["job.sh", "-D", "/tmp",
                                                            "--chdir=/", "--uid=0"]),
    (["-p", "x", "job.sh", "-p", "y"], ["--partition=x"], ["job.sh", "-p", "y"]),
    (["", "-D"], [], ["", "-D"]),
    (["job.sh", ":", "x"], [], ["job.sh", ":", "x"]),        # ':' after the script: an argument
    ([], [], []),
])
def test_sbatch_canonical_and_rest(argv, canonical, rest):
    parsed = parse(SBATCH, argv)
    assert parsed.canonical == canonical
    assert list(parsed.rest) == rest
    assert all(s.startswith("--") for s in parsed.canonical)


def test_rest_index_and_values():
    parsed = parse(SBATCH, ["-p", "a", "--partition=b", "-H", "job.sh", "x"])
    assert parsed.rest_index == 4
    assert parsed.values == {"partition": ["a", "b"], "hold": [None]}
    assert parsed.last("partition") == "b" and parsed.has("hold")
    assert parsed.argv(skip={"partition"}) == ["--hold"]


def test_wrap_is_handed_to_the_handler_and_not_reemitted():
    parsed = sbatch_options.parse(["--wrap", "echo a\necho b", "-H"])
    assert parsed.last("wrap") == "echo a\necho b"
    assert parsed.canonical == ["--hold"]
    assert parse(SBATCH, ["--wr=true"]).last("wrap") == "true"


def test_path_options_are_marked_with_their_kind_and_patterns_kept():
    parsed = parse(SBATCH, ["-o", "logs/%x-%j.out", "--error=/abs/%A_%a.err", "-i", "in.txt",
                            "--out=%%literal"])
    assert [(i.name, i.path, i.value) for i in parsed.paths] == [
        ("output", "output", "logs/%x-%j.out"), ("error", "error", "/abs/%A_%a.err"),
        ("input", "input", "in.txt"), ("output", "output", "%%literal")]
    assert parsed.canonical[0] == "--output=logs/%x-%j.out"
    srun = parse(SRUN_STEP, ["-o", "o-%t.txt", "-e", "e.txt", "-i", "none", "true"])
    assert [i.path for i in srun.paths] == ["output", "error", "input"]


def test_merge_puts_the_command_line_after_the_directives():
    merged = merge(parse(SBATCH, ["-p", "a", "-t", "5"], in_script=True),
                   parse(SBATCH, ["-p", "b", "job.sh"]))
    assert merged.canonical == ["--partition=a", "--time=5", "--partition=b"]
    assert merged.last("partition") == "b" and merged.rest == ("job.sh",)


def test_heterogeneous_jobs_refused():
    assert refused(SBATCH, ["-n1", ":", "-n2", "job.sh"]).reason == "het_job"
    # srun splits at ':' anywhere, even among the command's arguments.
    assert refused(SRUN_ALLOCATION, ["-n1", "echo", "a", ":", "hostname"]).reason == "het_job"
    assert refused(SRUN_STEP, ["echo", ":"]).reason == "het_job"


def test_srun_modes():
    alloc = srun_options.parse(["-p", "gpu", "-n", "4", "-l", "hostname", "-p"], step=False)
    assert alloc.canonical == ["--partition=gpu", "--ntasks=4", "--label"]
    assert alloc.rest == ("hostname", "-p")
    error = refused(SRUN_STEP, ["-p", "gpu", "hostname"])
    assert (error.reason, error.option) == ("allocation_option", "partition")
    step = srun_options.parse(["-n2", "--cpu_bind=cores", "-K", "--overlap", "./a.out"],
                              step=True)
    assert step.canonical == ["--ntasks=2", "--cpu-bind=cores", "--kill-on-bad-exit",
                              "--overlap"]
    # srun -W takes a number; sbatch -W is a flag.
    assert parse(SRUN_STEP, ["-W", "30", "true"]).canonical == ["--wait=30"]
    assert parse(SBATCH, ["-W", "job.sh"]).canonical == ["--wait"]


# --- value checks -----------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["--export=ALL,SANDBOX_CONF=/x"], ["--export=ALL,TMPDIR=/x"], ["--export=HOME=/x"],
    ["--export=HOME_ACCESS=write"], ["--export=SLURM_CONF=/x"], ["--export=slurm_conf=/x"],
    ["--export=ALL,1X=2"], ["--export=ALL,A-B=1"], ["--export="], ["--export=ALL,NONE"],
    ["--export=ALL,X=a\nb"], ["--export=XDG_CONFIG_HOME=/tmp"], ["--export=ALL,BASH_FUNC_f%%=()"],
    ["--nice=-5"], ["--nice=x"], ["-w", "/etc/passwd"], ["--exclude=../x"], ["--time=abc"],
    ["--mem=lots"], ["-n", "-1"], ["-J", "a\nb"], ["--comment=x\x00"], ["-o", ""],
    ["--open-mode=x"], ["-J", "../../.ssh/x"], ["--kill-on-invalid-dep=maybe"], ["--array=x"],
    ["--begin=now; rm"], ["--exclusive=everything"], ["-p", ""], ["-p", "a b"],
])
def test_bad_values_refused(argv):
    error = refused(SBATCH, argv)
    assert error.reason == "bad_value"


@pytest.mark.parametrize("argv", [
    ["--export=ALL"], ["--export=NONE"], ["--export=ALL,OMP_NUM_THREADS=4,MY_VAR"],
    ["--export=A=x=y,B="], ["--nice=0"], ["--nice"], ["-w", "node[01-04,07]"],
    # Loader and interpreter variables, as with the real sbatch: they are set
    # only inside the job's sandbox (staged, never handed to Slurm).
    ["--export=ALL,LD_PRELOAD=/tmp/x.so"], ["--export=BASH_ENV=/x"], ["--export=ENV"],
    ["--export=ALL,PYTHONPATH=/x"], ["--export=PATH=/tmp"], ["--export=ALL,LD_LIBRARY_PATH=/x"],
    ["--time=1-00:30:00"], ["-t", "UNLIMITED"], ["--mem=4G"], ["--mem-per-cpu=500"],
    ["--array=0-15%4"], ["--begin=now+1hour"], ["--signal=B:USR1@60"], ["-B", "2:8:1"],
    ["--gres=gpu:a100:2"], ["-C", "a100&ib"], ["--dependency=afterok:12:13"],
    ["--open-mode=append"], ["--exclusive=user"], ["--job-name=my job"],
])
def test_good_values_accepted(argv):
    assert parse(SBATCH, argv).canonical


# --- properties -------------------------------------------------------------------

def allowed_options(spec):
    return [o for o in spec.allowed() if o.emit]


def value_for(option):
    if option.check is None:
        return st.none()
    examples = st.sampled_from(option.check.examples)
    if option.name == "comment":
        examples = examples | st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF,
                                                    blacklist_characters="\x7f"), max_size=8)
    return examples


@st.composite
def spelled(draw, spec):
    """(argv words, expected canonical) for one allowed option in a random
    valid spelling."""
    option = draw(st.sampled_from(allowed_options(spec)))
    value = None
    if option.arg is REQ or (option.arg is OPT and draw(st.booleans())):
        value = draw(value_for(option))
    if option.arg is OPT and value == "":
        value = None
    expected = f"--{option.name}" if value is None else f"--{option.name}={value}"
    names = [option.name, *option.aliases]
    name = draw(st.sampled_from(names))
    prefixes = [name[:k] for k in range(1, len(name) + 1) if spec.resolve(name[:k]) is option]
    long_name = draw(st.sampled_from(prefixes))
    forms = []
    if option.arg is NONE:
        forms.append([f"--{long_name}"])
        if option.short:
            forms.append([f"-{option.short}"])
    elif value is None:                                     # optional, no value
        forms.append([f"--{long_name}"])
        if option.short:
            forms.append([f"-{option.short}"])
    else:
        forms.append([f"--{long_name}={value}"])
        if option.arg is REQ:
            forms.append([f"--{long_name}", value])
            if option.short:
                forms.append([f"-{option.short}", value])
        if option.short and value != "":
            forms.append([f"-{option.short}{value}"])
    return draw(st.sampled_from(forms)), expected, option


@st.composite
def command_lines(draw, spec):
    argv, expected = [], []
    pieces = draw(st.lists(spelled(spec), max_size=6))
    i = 0
    while i < len(pieces):
        words, canonical, option = pieces[i]
        # Sometimes glue value-less short flags into one cluster (-Hv, -Hpdebug).
        if (words[0].startswith("-") and not words[0].startswith("--") and len(words) == 1
                and option.arg is NONE and i + 1 < len(pieces) and draw(st.booleans())):
            nxt_words, nxt_canonical, _ = pieces[i + 1]
            if nxt_words[0].startswith("-") and not nxt_words[0].startswith("--"):
                argv += [words[0] + nxt_words[0][1:], *nxt_words[1:]]
                expected += [canonical, nxt_canonical]
                i += 2
                continue
        argv += words
        expected.append(canonical)
        i += 1
    rest = draw(st.lists(st.text(max_size=6).filter(lambda w: w != ":"), max_size=3))
    if rest:
        if rest[0].startswith("-") or draw(st.booleans()):
            argv.append("--")
        argv += rest
    return argv, expected, rest


FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("label", list(SPECS))
def test_round_trip_of_random_spellings(label):
    spec = SPECS[label]

    @FAST
    @given(command_lines(spec))
    def check(case):
        argv, expected, rest = case
        parsed = parse(spec, argv)
        assert parsed.canonical == expected
        assert list(parsed.rest) == rest
        assert parse(spec, parsed.canonical).canonical == expected   # idempotent

    check()


TRICKY = ["--pro", "--prolog", "--prolog=/x", "-D", "-D/tmp", "--ch=..", "--chdir", "--uid=0",
          "--get-user-env", "--get", "--propagate", "--mail-type=ALL", "--pty", "--jobid=1",
          "--bcast", "--container=/c", "--bb=x", "--bbf=f", "--export-file=/f", "-M", "x",
          "--wrap", "echo", "-H", "-Hv", "-HD", "-pdebug", "--", "-", ":", "=", "--=", "-k",
          "--nice=-1", "--export=ALL,LD_PRELOAD=/x", "--multi-prog", "--network=x", "-F",
          "--nodefile=/etc/passwd", "--task-prolog=/x", "--epilog", "-J", "--job-name"]
ARGV = st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=12)), max_size=8)


@pytest.mark.parametrize("label", list(SPECS))
def test_no_accepted_input_yields_a_refused_option(label):
    spec = SPECS[label]
    allowed = {o.name for o in spec.allowed()}
    refused_names = {o.name for o in spec.options if o.denial is not None}
    refused_names |= {name for o in spec.options if o.denial is not None for name in o.aliases}
    refused_names |= set(spec.foreign)

    @settings(max_examples=500, deadline=None)
    @given(ARGV)
    def check(argv):
        try:
            parsed = parse(spec, argv)
        except Refusal as error:
            assert MESSAGE.match(error.message)
            return
        for item in parsed.items:
            assert item.name in allowed and item.name not in refused_names
        for word in parsed.canonical:
            name = re.fullmatch(r"--([a-z0-9_-]+)(?:=.*)?", word, re.S).group(1)
            assert name in allowed and name not in refused_names
        assert parse(spec, parsed.canonical).canonical == parsed.canonical
        assert list(parsed.rest) == argv[parsed.rest_index:]

    check()


def test_tables_are_consistent():
    for spec in SPECS.values():
        for option in spec.options:
            assert re.fullmatch(r"[a-z][a-z0-9-]*", option.name), option.name
            if option.denial is None:
                assert option.arg is NONE or option.check is not None, option.name
                for example in (option.check.examples if option.check else ()):
                    assert option.check.test(example) is None, (option.name, example)
    assert SBATCH.by_short["W"].arg is NONE and SRUN_STEP.by_short["W"].arg is REQ


# ---------------------------------------------------------------- sbatch input variables
def test_sbatch_input_variables_become_options_as_sbatch_reads_them():
    from chaperon.slurm.sbatch_options import INPUT_ENV, SBATCH, env_words

    assert all(SBATCH.by_long.get(name) for name in INPUT_ENV.values())   # all real options
    env = {"SBATCH_TIMELIMIT": "10", "SBATCH_REQUEUE": "", "SBATCH_OVERCOMMIT": "no",
           "SBATCH_SPREAD_JOB": "yes", "SBATCH_USE_MIN_NODES": "2", "SBATCH_WAIT": "0",
           "SBATCH_EXCLUSIVE": "", "SBATCH_NO_KILL": "off", "SBATCH_DEBUG": "1",
           "SBATCH_OTHER": "x", "PATH": "/usr/bin"}
    assert dict(env_words(env)) == {
        "SBATCH_TIMELIMIT": "--time=10", "SBATCH_REQUEUE": "--requeue",
        "SBATCH_SPREAD_JOB": "--spread-job", "SBATCH_USE_MIN_NODES": "--use-min-nodes",
        "SBATCH_EXCLUSIVE": "--exclusive", "SBATCH_NO_KILL": "--no-kill=off"}


@pytest.mark.parametrize("variable,value", [
    ("SBATCH_GET_USER_ENV", "1"), ("SBATCH_EXPORT", "ALL,SLURM_CONF=/x"),
    ("SBATCH_CONTAINER", "/img"), ("SBATCH_BURST_BUFFER", "x"), ("SBATCH_CLUSTERS", "other")])
def test_a_refused_input_variable_is_named(variable, value):
    from chaperon.refusal import Refusal
    from chaperon.slurm.sbatch_options import parse_env

    with pytest.raises(Refusal) as caught:
        parse_env({"SBATCH_TIMELIMIT": "5", variable: value})
    assert caught.value.what.startswith(f"{variable} (read by sbatch as --")
    assert caught.value.instead.startswith(f"Unset {variable}, or: ")
