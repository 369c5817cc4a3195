"""#SBATCH directives (chaperon/slurm/directives.py): read as sbatch 22.05 reads them
(the rules were checked against the real binary), validated by the sbatch
table with --wrap refused, removed from the body line for line."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaperon.slurm.directives import parse_script
from chaperon.refusal import Refusal
from chaperon.slurm.sbatch_options import SBATCH

from tests.support.slurmopts import MESSAGE, SBATCH_FOREIGN, spellings


def script(*lines: str) -> str:
    return "\n".join(["#!/bin/bash", *lines, "echo done"]) + "\n"


def refused(text, **kw) -> Refusal:
    with pytest.raises(Refusal) as info:
        parse_script(text, **kw)
    assert MESSAGE.match(info.value.message), info.value.message
    return info.value


# --- what counts as a directive ---------------------------------------------------

def test_directives_are_read_until_the_first_command():
    text = script("#SBATCH -p a", "# SBATCH -J no1", "#sbatch -J no2", "  #SBATCH -J no3", "",
                  "   \t", "# a comment", "#SBATCH --comment=\"x y\" # trailing comment") \
        + "#SBATCH -J late\n"
    found = parse_script(text)
    assert found.parsed.canonical == ["--partition=a", "--comment=x y"]
    assert found.lines == (2, 9)
    assert found.words == ("-p", "a", "--comment=x y")
    assert found.word_lines == (2, 2, 9)


def test_body_keeps_its_lines_with_directives_blanked():
    text = script("#SBATCH -p a", "# keep me", "#SBATCH -t 5") + "#SBATCH -J late\n"
    found = parse_script(text)
    assert found.body == "#!/bin/bash\n\n# keep me\n\necho done\n#SBATCH -J late\n"
    assert found.body.count("\n") == text.count("\n")


def test_bytes_in_bytes_out_with_undecodable_bytes_kept():
    text = b"#!/bin/sh\n#SBATCH -J caf\xc3\xa9\necho \xff\xfe\n"
    found = parse_script(text)
    assert found.parsed.canonical == ["--job-name=café"]
    assert found.body == b"#!/bin/sh\n\necho \xff\xfe\n"


def test_a_value_may_sit_on_the_next_directive_line():
    found = parse_script(script("#SBATCH --partition", "#SBATCH b"))
    assert found.parsed.canonical == ["--partition=b"]


@pytest.mark.parametrize("line,canonical", [
    ("#SBATCH-J y", ["--job-name=y"]),                     # no blank needed after the word
    ("#SBATCH\t-J tabbed", ["--job-name=tabbed"]),
    ("#SBATCH -J x\t-p q", ["--job-name=x", "--partition=q"]),
    ("#SBATCH -J a\v-p x", ["--job-name=a", "--partition=x"]),   # C isspace
    ("#SLURM -J legacy", ["--job-name=legacy"]),           # still read by 22.05
    ("#SBATCH -J 'a b'", ["--job-name=a b"]),
    ('#SBATCH "--part"=q --exp\'ort\'=NONE', ["--partition=q", "--export=NONE"]),
    ("#SBATCH -J a\\#b", ["--job-name=a#b"]),
    ("#SBATCH -J x#y", ["--job-name=x"]),                  # unquoted # starts a comment
    ('#SBATCH -J "x#y"', ["--job-name=x#y"]),
    ('#SBATCH -J a\\"b', ['--job-name=a"b']),
    ("#SBATCH -J a:b", ["--job-name=a:b"]),
    ("#SBATCH -J=x", ["--job-name==x"]),
    ("#SBATCH --job=x --part y", ["--job-name=x", "--partition=y"]),
    ("#SBATCH -J myhetjob", ["--job-name=myhetjob"]),
    ("#SBATCH", []),
    ("#SBATCH   # only a comment", []),
    ("#SBATCH --", []),
    ('#SBATCH -J ""', None),                                # empty word: -J has no value
])
def test_word_splitting_as_sbatch_does(line, canonical):
    if canonical is None:
        assert refused(script(line)).reason == "missing_value"
    else:
        assert parse_script(script(line)).parsed.canonical == canonical


def test_early_pass_options_are_ignored_inside_the_script():
    # sbatch only reads --verbose/--quiet/--help/--usage/--version in its early
    # pass over the command line; in a script they do nothing.
    found = parse_script(script("#SBATCH -v --help --quiet --usage -V -p a"))
    assert found.parsed.canonical == ["--partition=a"]
    assert found.parsed.has("help")


# --- refusals -----------------------------------------------------------------

def test_the_briefs_example_is_refused_naming_the_line():
    error = refused(script("#SBATCH -p a", "#SBATCH --export=ALL --prolog=/x"))
    assert error.line == 3 and error.reason == "host_program"
    assert "#SBATCH --prolog=/x on script line 3 is refused" in error.message


def test_wrap_refused_inside_a_script():
    for line in ("#SBATCH --wrap=hostname", "#SBATCH --wrap hostname", "#SBATCH --wr=x"):
        error = refused(script(line))
        assert (error.reason, error.line, error.option) == ("wrap_in_script", 2, "wrap")


def directive_cases():
    for option in SBATCH.options:
        if option.denial is None:
            continue
        for form, argv in spellings(SBATCH, option).items():
            yield pytest.param(option, argv, id=f"{option.name}:{form}")


@pytest.mark.parametrize("option,argv", list(directive_cases()))
def test_denied_option_refused_in_a_directive_in_every_spelling(option, argv):
    words = " ".join(argv)
    for text, line in ((script(f"#SBATCH {words}"), 2),
                       (script("#SBATCH -t 5", f"#SBATCH --export=ALL {words} -p x"), 3),
                       (script("#SBATCH -p a", "# comment", f"#SBATCH\t{words}"), 4)):
        error = refused(text)
        assert (error.option, error.reason, error.line) == (option.name, option.denial.reason,
                                                            line)


@pytest.mark.parametrize("name", SBATCH_FOREIGN)
def test_srun_only_options_refused_in_directives(name):
    error = refused(script(f"#SBATCH --export=ALL --{name}=/x"))
    assert error.line == 2 and error.reason in ("host_program", "bcast")


def test_refusal_names_the_line_of_the_option_not_of_its_value():
    error = refused(script("#SBATCH -p a", "#SBATCH --chdir", "#SBATCH /tmp"))
    assert (error.reason, error.line) == ("chdir", 3)


def test_mail_in_directives_follows_the_admin_switch():
    assert refused(script("#SBATCH --mail-type=END")).reason == "mail"
    found = parse_script(script("#SBATCH --mail-type=END"), allow_mail=True)
    assert found.parsed.canonical == ["--mail-type=END"]


@pytest.mark.parametrize("line,reason", [
    ("#SBATCHX -J y", "invalid_directive"),
    ("#SBATCH foo -J y", "invalid_directive"),
    ("#SBATCH -- -J y", "invalid_directive"),
    ("#SBATCH -J a\\ b", "invalid_directive"),      # a backslash does not join words
    ("#SBATCH -J x  :y", "directive_syntax"),
    ("#SBATCH :", "directive_syntax"),
    ('#SBATCH -J "a', "directive_syntax"),
    ('#SBATCH -J "" -p x', "directive_syntax"),      # sbatch would drop "-p x" silently
    ("#SBATCH hetjob", "het_job"),
    ("#SBATCH -J a PACKJOB", "het_job"),
    ("#SBATCH --hold=1", "unexpected_value"),
    ("#SBATCH --pro=x", "ambiguous_option"),
    ("#SBATCH --frob", "unknown_option"),
    ("#SBATCH --export=ALL,SANDBOX_CONF=/x", "bad_value"),
    ("#SBATCH -w /etc/shadow", "bad_value"),
])
def test_bad_directives(line, reason):
    error = refused(script("#SBATCH -t 5", line))
    assert (error.reason, error.line) == (reason, 3)


@pytest.mark.parametrize("text,line", [
    ("", 1), ("echo hi\n", 1), ("\n#!/bin/sh\n", 1), ("#!/bin/sh\r\necho\r\n", 1),
    ("#!/bin/sh\necho a\necho b\r\n", 3), ("#!/bin/sh\necho\x00\n", 2),
])
def test_scripts_sbatch_refuses(text, line):
    error = refused(text)
    assert (error.reason, error.line) == ("not_a_batch_script", line)
    assert error.message.startswith("agent-sandbox: sbatch: the job script is refused — ")


def test_lone_carriage_return_is_a_blank():
    assert parse_script("#!/bin/sh\n#SBATCH -J a\r \necho b\rc\n").parsed.canonical == [
        "--job-name=a"]
    assert refused("#!/bin/sh\n#SBATCH -J a\recho\n").reason == "invalid_directive"


def test_pbs_directives_refused_unless_ignored():
    text = script("#SBATCH -p a") + "#PBS -N late\n"     # sbatch reads #PBS anywhere
    error = refused(text)
    assert (error.reason, error.line) == ("pbs_directives", 4)
    assert parse_script(text, ignore_pbs=True).parsed.canonical == ["--partition=a"]
    text = script("#SBATCH --ignore-pbs", "#BSUB -J x")
    assert parse_script(text).parsed.canonical == ["--ignore-pbs"]


# --- property ---------------------------------------------------------------------

WORDS = st.one_of(
    st.sampled_from(["--prolog=/x", "-D", "/tmp", "--ch=/x", "--wrap=x", "--uid=0", "-p",
                     "debug", "--export=ALL", "--get", "--pro", "-H", "-HD", "'--chdir'",
                     '"-D"/x', "\\-D", "#", "--mail-type=END", "-J", "x y", "--", ":x",
                     "hetjob", '""', "-v", "--nodefile=/etc/passwd", "-Hv"]),
    st.text(alphabet=st.characters(blacklist_characters="\n\x00"), max_size=10))
LINES = st.one_of(
    st.lists(WORDS, max_size=4).map(lambda ws: "#SBATCH " + " ".join(ws)),
    st.sampled_from(["", "# comment", "  #SBATCH -D /tmp", "#sbatch --uid=0", "echo x",
                     "#SBATCH --prolog=/x", "#SLURM -D /x"]))


@settings(max_examples=400, deadline=None)
@given(st.lists(LINES, max_size=6))
def test_no_accepted_script_yields_a_refused_option(lines):
    text = "#!/bin/sh\n" + "\n".join(lines) + "\n"
    allowed = {o.name for o in SBATCH.allowed()}
    try:
        found = parse_script(text)
    except Refusal as error:
        assert MESSAGE.match(error.message)
        return
    for item in found.parsed.items:
        assert item.name in allowed and item.name != "wrap"
    for word in found.parsed.canonical:
        assert word.split("=", 1)[0][2:] in allowed
    assert found.body.count("\n") == text.count("\n")
    for number in found.lines:
        assert found.body.split("\n")[number - 1] == ""
