"""Unit tests for secrets in bound files: the pure scan (secretscan), the
policy step (boundfiles.apply) and what bwrap's view makes of it."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_sandbox.launch import boundfiles
from agent_sandbox.config import load as confload
from agent_sandbox.backends import BACKENDS, bwrap
from agent_sandbox.backends.base import Payload, PlanContext
from agent_sandbox.policy.envfilter import removal_rule
from agent_sandbox.policy.view import mount_ops
from agent_sandbox.policy.resolve import LaunchContext, resolve_policy
from agent_sandbox.policy.secrets import CREDENTIAL_SHAPES, Finding, blank, scan

# The shipped defaults' rule (ALLOWED_ENV_VARS keeps ANTHROPIC_API_KEY).
DEFAULTS = confload.load_settings(home="/nonexistent", user="u", environ={},
                                  admin_path="/nonexistent/admin.conf", cache=False)
REMOVED = removal_rule(blocked=DEFAULTS.BLOCKED_ENV_VARS,
                       patterns=DEFAULTS.BLOCKED_ENV_PATTERNS,
                       allowed=DEFAULTS.ALLOWED_ENV_VARS)
GHP = "ghp_" + "A1b2C3d4E5" * 4
TOKENS = {
    "GitHub token": [GHP, "gho_" + "x" * 36, "github_pat_" + "11ABC_" * 10],
    "GitLab token": ["glpat-" + "aB3_-" * 5],
    "AWS access key id": ["AKIAIOSFODNN7EXAMPLE", "ASIA" + "Z" * 16],
    "Slack token": ["xoxb-1234567890-abcdefghij", "xoxp-" + "1" * 20],
    "OpenAI/Anthropic API key": ["sk-" + "a" * 40, "sk-ant-api03-" + "Q" * 40,
                                 "sk-proj-" + "z9" * 20],
    "JWT": ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig_nature-x"],
}


def lines_of(findings):
    return [(f.first_line, f.last_line) for f in findings]


# ---------------------------------------------------------------- shapes
@pytest.mark.parametrize("what,token", [(w, t) for w, ts in TOKENS.items() for t in ts])
def test_each_credential_shape_is_found_on_its_line(what, token):
    text = f"# config\nalias x='y'\nvalue: {token}\n"
    assert scan(text, REMOVED) == (Finding(3, 3, what),)


@pytest.mark.parametrize("text", [
    "export PATH=$PATH:$HOME/.local/bin\n", "alias ll='ls -l'\n",
    "pip install scikit-learn task-runner-for-disk-usage-report\n",   # no sk- token
    "export ANTHROPIC_API_KEY\n",                      # kept by ALLOWED_ENV_VARS, no value
    "ANTHROPIC_API_KEY=placeholder\n",                 # kept: not a removed variable
    "[ \"$GH_TOKEN\" = x ] && echo\n",                 # a test, not an assignment
    "git --config-token=abc\n", "ghp_short\n", "AKIA1234\n",
    "[user]\n\tname = Test User\n",
    # Near the bearer and credential-assignment shapes, and not secrets.
    "# uses Bearer token authentication against the API\n",
    'curl -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com\n',
    "curl -H \"Authorization: Bearer ${TOKEN}\"\n",
    "export PASSWORD_STORE_DIR=$HOME/.password-store2024\n",
    "password_file=/home/u/.config/secret2024.txt\n", "token=$(pass show gh/token)\n",
    "max_tokens=4096000000000000000\n", "tokenizer=bert-base-uncased-2024\n",
    "secret=~/.config/secrets/app2024.key\n", "api_key: placeholder-value-here\n",
    "password=correcthorse\n",                         # short
    "echo done \\\\\nGH_TOKEN\n",                   # an escaped backslash ends the line
])
def test_ordinary_lines_are_not_findings(text):
    assert scan(text, REMOVED) == ()


def test_the_one_table_names_every_shape_the_spec_lists():
    names = [name for name, _ in CREDENTIAL_SHAPES]
    assert names == ["private key block", "GitHub token", "GitLab token", "AWS access key id",
                     "Slack token", "OpenAI/Anthropic API key", "JWT", "bearer token",
                     "credential assignment"]


# ---------------------------------------------------------------- assignments
@pytest.mark.parametrize("line,name", [
    ("export GH_TOKEN=abc", "GH_TOKEN"), ("GH_TOKEN=abc", "GH_TOKEN"),
    ("  export  VAULT_TOKEN='x'", "VAULT_TOKEN"), ("declare -x AWS_SECRET_ACCESS_KEY=1", "AWS_SECRET_ACCESS_KEY"),
    ("export A=1 DB_PASSWORD=hunter2", "DB_PASSWORD"), ("PGPASSWORD=x psql", "PGPASSWORD"),
    ("setenv GITLAB_TOKEN abc", "GITLAB_TOKEN"), ("set -gx my_api_key abc", "my_api_key"),
    ("typeset -x SLURM_JWT=a", "SLURM_JWT"), ("if true; then export CI_JOB_TOKEN=x; fi", "CI_JOB_TOKEN"),
    # Every builtin that assigns (review finding 3).
    ("readonly GH_TOKEN=abc", "GH_TOKEN"), ("local GH_TOKEN=abc", "GH_TOKEN"),
    ("declare -r GH_TOKEN=abc", "GH_TOKEN"), ("export -n GH_TOKEN=abc", "GH_TOKEN"),
    ("typeset -gx GH_TOKEN=abc", "GH_TOKEN"), ("set --export GH_TOKEN abc", "GH_TOKEN"),
    ("set -Ux GH_TOKEN abc", "GH_TOKEN"), ("printf -v GH_TOKEN '%s' abc", "GH_TOKEN"),
    ("read -r GH_TOKEN <<< abc", "GH_TOKEN"), ('declare -x "GH_TOKEN=abc"', "GH_TOKEN"),
])
def test_assignments_of_removed_variables_are_found(line, name):
    found = scan(f"# rc\n{line}\n", REMOVED)
    assert found == (Finding(2, 2, f"{name} (a variable the policy removes)"),)


def test_a_value_over_several_lines_is_covered_whole():
    text = ("export GH_TOKEN=\"first\nsecond\nthird\"\nok=1\n"
            "VAULT_TOKEN=abc\\\ndef\nfine\n"
            "export PGPASSWORD='a # it\nb'\nlast\n")
    assert lines_of(scan(text, REMOVED)) == [(1, 3), (5, 6), (8, 9)]
    assert blank(text, scan(text, REMOVED)) == "\n\n\nok=1\n\n\nfine\n\n\nlast\n"


def test_a_private_key_block_is_one_finding_and_blanked_whole():
    text = ("before\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\nAAAA\n"
            "-----END OPENSSH PRIVATE KEY-----\nafter\n")
    assert scan(text, REMOVED) == (Finding(2, 5, "private key block"),)
    assert blank(text, scan(text, REMOVED)) == "before\n\n\n\n\nafter\n"


def test_a_private_key_without_end_is_blanked_to_the_end():
    text = "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nmore\n"
    assert lines_of(scan(text, REMOVED)) == [(2, 5)]
    assert blank(text, scan(text, REMOVED)) == "a\n\n\n\n"


VALUE = "Zq8Rm2Lk5Np7Vt4Wx1Yc"     # no known shape: only the assignment gives it away


@pytest.mark.parametrize("text,first,last,what", [
    # A name split by a backslash-newline is one name to the shell; both
    # physical lines are blanked.
    (f"export GH_TOK\\\nEN={VALUE}\n", 1, 2, "GH_TOKEN (a variable the policy removes)"),
    (f"export \\\nGH_TOKEN\\\n={VALUE}\n", 2, 3, "GH_TOKEN (a variable the policy removes)"),
    (f"readonly OPENAI_API_KEY={VALUE}\n", 1, 1, "credential assignment"),
    (f"typeset -x ANTHROPIC_API_KEY={VALUE}\n", 1, 1, "credential assignment"),
    (f"alias api='curl -H \"Authorization: Bearer {VALUE}\"'\n", 1, 1, "bearer token"),
    (f"curl -H 'authorization: bearer ab.{VALUE}_x-y'\n", 1, 1, "bearer token"),
    (f"  password = \"{VALUE}\"\n", 1, 1, "credential assignment"),
    (f'{{"api_key": "{VALUE}"}}\n', 1, 1, "credential assignment"),
    (f"curl -d token={VALUE} https://x\n", 1, 1, "credential assignment"),
    (f"alias api='curl -H \"Authorization: Bea\\\nrer {VALUE}\"'\n", 1, 2, "bearer token"),
])
def test_shell_forms_found_in_review_are_findings(text, first, last, what):
    found = scan("# rc\n" + text, REMOVED)
    assert Finding(first + 1, last + 1, what) in found, found
    blanked = blank("# rc\n" + text, found)
    assert VALUE not in blanked and blanked.startswith("# rc\n")
    assert blanked.count("\n") == text.count("\n") + 1


def test_continuations_keep_later_line_numbers():
    text = f"a=1 \\\nb=2\nx=\\\n3\nexport GH_TOKEN={VALUE}\n"
    assert scan(text, REMOVED) == (Finding(5, 5, "GH_TOKEN (a variable the policy removes)"),)


def test_one_line_with_two_findings_names_both():
    (finding,) = scan(f"export GH_TOKEN={GHP}\n", REMOVED)
    assert finding.what == "GitHub token; GH_TOKEN (a variable the policy removes)"


def test_findings_never_carry_the_secret():
    text = f"export GH_TOKEN={GHP}\n-----BEGIN PRIVATE KEY-----\nSECRETBODY\n"
    assert all(GHP not in f.what and "SECRETBODY" not in f.what for f in scan(text, REMOVED))


# ---------------------------------------------------------------- the property
FRAGMENTS = st.sampled_from([
    "export ", "GH_TOKEN", "PATH", "=", "+=", " ", "\t", "\n", "\n", "'", '"', "\\", ";", "#",
    "$", "setenv ", "set -gx ", "x", "value", GHP, "glpat-" + "a" * 20, "AKIAIOSFODNN7EXAMPLE",
    "xoxb-1234567890", "sk-ant-" + "b" * 24, "eyJabcdefgh.eyJabcdefgh.sig",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "\r", "é",
    "\\\n", "Bearer ", "token=", "Zq8Rm2Lk5Np7Vt4Wx1Yc", "read ",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(FRAGMENTS, max_size=40).map("".join))
def test_a_blanked_text_never_holds_a_table_match(text):
    findings = scan(text, REMOVED)
    blanked = blank(text, findings)
    assert scan(blanked, REMOVED) == ()
    for _, pattern in CREDENTIAL_SHAPES:
        assert pattern.search(blanked) is None
    assert blanked.count("\n") == text.count("\n")          # line numbers still hold
    kept = [line for number, line in enumerate(text.split("\n"), 1)
            if not any(f.first_line <= number <= f.last_line for f in findings)]
    assert [line for line in blanked.split("\n") if line] == [line for line in kept if line]


# ---------------------------------------------------------------- boundfiles
# The `home` fixture (tests/support/homes.py): dotfiles that hold a token.
pytestmark = pytest.mark.home(user="u", dirs=("proj", ".config/agent-sandbox"), files={
    ".bashrc": f"# rc\nexport GH_TOKEN={GHP}\nalias ll='ls -l'\n",
    ".profile": "export PATH=$PATH:/x\n",
    ".gitconfig": "[user]\n\tname = U\n[github]\n\ttoken = " + GHP + "\n"})


def policy_for(home, conf: str = "", backend: str = "bwrap"):
    (home / ".config/agent-sandbox/sandbox.conf").write_text(conf)
    settings_ = confload.load_settings(home=str(home), user="u", environ={},
                                       admin_path=str(home.parent / "none.conf"), cache=False)
    settings_ = settings_.replace(READONLY_MOUNTS=("/usr",))
    ctx = LaunchContext(uid=1000, gid=1000, user="u", home=str(home), environ={},
                        cwd=str(home / "proj"), project_dir=None, install_paths=(),
                        session_id="s1")
    return settings_, resolve_policy(settings_, ctx, backend=backend)


def check(home, conf="", backend="bwrap"):
    settings_, policy = policy_for(home, conf, backend)
    contents = {path: open(source, "rb").read()
                for path, source in boundfiles.bound_files(policy)}
    return boundfiles.apply(policy, mode=settings_.SECRETS_IN_BOUND_FILES,
                            can_generate=BACKENDS[backend].binds_generated_files,
                            contents=contents,
                            removed=REMOVED)


def test_bound_files_are_the_single_home_files_not_trees(home):
    (home / ".local/bin").mkdir(parents=True)
    os.symlink(".profile", home / ".zshrc")
    _, policy = policy_for(home)
    paths = [p for p, _ in boundfiles.bound_files(policy)]
    assert paths == [str(home / ".bashrc"), str(home / ".profile"), str(home / ".gitconfig")]
    _, policy = policy_for(home, "HOME_ACCESS=read\nHOME_READONLY=()\nHOME_SEEDED_FILES=()\n")
    assert [p for p, _ in boundfiles.bound_files(policy)] == [str(home / ".profile"),
                                                              str(home / ".bashrc")]


def test_blank_on_bwrap_binds_a_blanked_copy_and_reports_file_and_line(home):
    policy, payloads = check(home)
    bashrc, gitconfig = str(home / ".bashrc"), str(home / ".gitconfig")
    assert [(f.path, f.lines, f.action) for f in policy.bound_file_report.findings] == [
        (bashrc, "line 2", "blanked"), (gitconfig, "line 4", "blanked")]
    assert payloads["bound-0"] == b"# rc\n\nalias ll='ls -l'\n"
    assert GHP.encode() not in payloads["bound-1"] and b"name = U" in payloads["bound-1"]
    ops = mount_ops(policy)
    assert ("ro-data", "bound-0", bashrc, 0o444) in ops
    assert ("file", "bound-1", gitconfig, 0o644) in ops           # the seeded copy
    assert not any(op[0] in ("ro-bind", "bind") and op[1] == bashrc for op in ops)
    plan = bwrap.plan(policy, ["true"], {"marker": Payload(data=b"m"),
                                         "seccomp": Payload(data=b"\0" * 8),
                                         **{k: Payload(data=v) for k, v in payloads.items()}},
                      context=PlanContext("bwrap"))
    assert {"bound-0", "bound-1"} <= set(plan.payloads)


@pytest.mark.parametrize("mode", ["read", "write"])
def test_blank_covers_home_files_in_read_and_write_mode(home, mode):
    policy, _ = check(home, f"HOME_ACCESS={mode}\n")
    assert ("ro-data", "bound-0", str(home / ".bashrc"), 0o444) in mount_ops(policy)


@pytest.mark.parametrize("backend", ["firejail", "landlock"])
def test_blank_where_no_copy_can_be_bound_leaves_the_file_out(home, backend):
    policy, payloads = check(home, backend=backend)
    assert payloads == {} and policy.generated_files == ()
    assert {f.action for f in policy.bound_file_report.findings} == {"not bound"}
    assert str(home / ".bashrc") in policy.hidden and str(home / ".gitconfig") in policy.hidden
    assert str(home / ".bashrc") not in policy.home_readonly
    assert str(home / ".profile") in policy.home_readonly       # no secret: bound as it is


def test_skip_leaves_the_file_out_on_bwrap_too(home):
    policy, payloads = check(home, "SECRETS_IN_BOUND_FILES=skip\n")
    assert payloads == {} and str(home / ".bashrc") in policy.hidden
    assert not any(str(home / ".bashrc") in op for op in mount_ops(policy))


def test_off_checks_nothing(home):
    policy, payloads = check(home, "SECRETS_IN_BOUND_FILES=off\n")
    assert payloads == {} and policy.bound_file_report == boundfiles.BoundFileReport("off", 0)
    assert ("ro-bind", str(home / ".bashrc"), str(home / ".bashrc")) in mount_ops(policy)


def test_a_file_too_large_to_check_is_not_bound(home):
    _, policy = policy_for(home)
    contents = {p: boundfiles.TOO_LARGE for p, _ in boundfiles.bound_files(policy)}
    policy, _ = boundfiles.apply(policy, mode="blank", can_generate=True, contents=contents,
                                 removed=REMOVED)
    assert str(home / ".profile") in policy.hidden
    assert policy.bound_file_report.findings[0].what == "larger than 1 MiB, too large to check"
    from agent_sandbox.launch.report import bound_file_banner

    assert bound_file_banner(policy, "bwrap").startswith(
        f"agent-sandbox: {home / '.bashrc'} is larger than 1 MiB, too large to check for "
        "secrets — not bound into the sandbox. ")


def test_the_admin_floor_orders_skip_blank_off():
    from agent_sandbox.config import locks

    assert locks.ORDER["SECRETS_IN_BOUND_FILES"] == boundfiles.MODES
    value, warning = locks.enforce("SECRETS_IN_BOUND_FILES", "blank", "off",
                                   admin_origin="/etc/x:1", origin="user")
    assert value == "blank" and "weaker" in warning
    assert locks.enforce("SECRETS_IN_BOUND_FILES", "blank", "skip", admin_origin="a",
                         origin="b") == ("skip", None)


def test_the_clean_verdict_equals_a_scan_that_finds_nothing(home):
    """The launcher keeps "no secret in any bound file" keyed by the files'
    stat and then uses boundfiles.clean instead of reading and scanning: it
    must be exactly what apply gives for clean files."""
    (home / ".gitconfig").write_text("[user]\n\tname = U\n")
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    settings_, policy = policy_for(home)
    files = boundfiles.bound_files(policy)
    scanned, payloads = check(home)
    assert scanned.bound_file_report.findings == () and payloads == {}
    cached, none = boundfiles.clean(policy, mode=settings_.SECRETS_IN_BOUND_FILES,
                                    checked=len(files))
    assert (cached, none) == (scanned, {})


def test_the_clean_verdict_is_dropped_when_a_file_changes(home, monkeypatch):
    from agent_sandbox.launch import payloads as launch_payloads

    (home / ".gitconfig").write_text("[user]\n\tname = U\n")
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    # Files just written are racy (tests/unit/launch/test_payloads.py): this
    # test is about the stat the verdict is kept by.
    monkeypatch.setattr(launch_payloads, "_settled", lambda files: True)
    settings_, policy = policy_for(home)
    first, _ = launch_payloads.check_bound_files(settings_, policy, "bwrap")
    assert first.bound_file_report.findings == ()
    scans = []
    real_apply = boundfiles.apply
    monkeypatch.setattr(boundfiles, "apply", lambda *a, **k: scans.append(1) or real_apply(*a, **k))
    again, _ = launch_payloads.check_bound_files(settings_, policy, "bwrap")
    assert scans == [] and again == first                      # from the cached verdict
    with open(home / ".bashrc", "a") as handle:
        handle.write(f"export GH_TOKEN={GHP}\n")
    changed, payloads = launch_payloads.check_bound_files(settings_, policy, "bwrap")
    assert scans == [1]
    assert [f.path for f in changed.bound_file_report.findings] == [str(home / ".bashrc")]
    assert GHP.encode() not in b"".join(p.data for p in payloads.values())
