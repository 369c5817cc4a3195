"""policy/executable.py: the agent executable's resolution, decided over a
table of injected reads (no filesystem): the cases tests/integration/
test_agents.py runs for real — an install under ~/tools/bin with a
`#!/usr/bin/env` runtime, an install that would be the home, ~/.npmrc's
prefix — and the refusals (a relative PATH entry, a writable tree, a hidden
path)."""
from __future__ import annotations

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.policy import executable
from agent_sandbox.policy.executable import Reads
from tests.support.policies import sample_policy as make_policy

HOME = "/h/u"


def reads(executables=(), links=None, shebangs=None, prefixes=(), native=(), dirs=()):
    """A filesystem as a table: `links` maps a path to its real path (a
    prefix of a path is resolved too, like a linked directory)."""
    links = dict(links or {})

    def realpath(path: str) -> str:
        for link, target in sorted(links.items(), key=lambda kv: -len(kv[0])):
            if path == link or path.startswith(link + "/"):
                return target + path[len(link):]
        return path

    return Reads(is_executable=lambda p: p in executables, realpath=realpath,
                 shebang=lambda p: list((shebangs or {}).get(p, ())),
                 is_prefix=lambda d: d in prefixes, is_native=lambda p: p in native,
                 isdir=lambda p: p in dirs)


def policy(**changes):
    return make_policy(**{"system_readonly": ("/usr", "/bin"), **changes})


@pytest.mark.parametrize("real,root", [
    ("/opt/x/lib/node_modules/pkg/bin/cli.js", "/opt/x/lib/node_modules"),
    ("/h/u/tools/lib/node_modules/fake/bin/codex.js", "/h/u/tools/lib/node_modules"),
    ("/opt/venv/bin/agent", "/opt/venv"),                # a prefix (pyvenv.cfg)
    ("/opt/plain/bin/agent", "/opt/plain/bin"),           # a bin/ that is no prefix
    ("/h/u/Downloads/claude", "/h/u/Downloads/claude"),   # a native file alone
    ("/h/u/work/scripts/agent.py", "/h/u/work/scripts"),
    ("/h/u/agent", None),                                 # would be the home
    ("/agent", None),                                     # would be /
    ("/h/agent", None),                                   # an ancestor of the home
])
def test_install_root(real, root):
    fs = reads(prefixes=("/opt/venv",), native=("/h/u/Downloads/claude",))
    assert executable.install_root(real, HOME, fs) == root


def test_the_prefix_above_bin_is_never_the_home_or_above_it():
    fs = reads(prefixes=(HOME, "/h"))
    assert executable.install_root("/h/u/bin/agent", HOME, fs) == "/h/u/bin"
    # /h holds the home: not taken as the prefix, the bin/ directory alone is.
    assert executable.install_root("/h/bin/agent", HOME, fs) == "/h/bin"


def test_which_takes_the_first_executable_on_path():
    fs = reads(executables=("/usr/bin/claude", "/opt/b/claude"))
    assert executable.which(policy(), "claude", "/opt/a:/opt/b:/usr/bin", "claude", "the",
                            fs) == "/opt/b/claude"
    assert executable.which(policy(), "nope", "/usr/bin", "claude", "the", fs) is None
    assert executable.which(policy(), "/abs/claude", "", "claude", "the", fs) == "/abs/claude"


@pytest.mark.parametrize("path_env", ["node_modules/.bin:/usr/bin", ":/usr/bin", ".:/usr/bin"])
def test_a_relative_path_entry_is_refused(path_env):
    entry = path_env.split(":")[0]
    fs = reads(executables=(f"{entry or '.'}/claude", "/usr/bin/claude"))
    with pytest.raises(PolicyError, match="relative PATH entry") as refused:
        executable.which(policy(), "claude", path_env, "claude", "the", fs)
    assert refused.value.reason == "agent_untrusted_path"


@pytest.mark.parametrize("found,tree", [
    ("/h/u/proj/node_modules/.bin/claude", "/h/u/proj"),       # the project
    ("/h/u/.claude/bin/claude", "/h/u/.claude"),               # a writable home entry
    ("/scratch/u/bin/claude", "/scratch/u"),                   # EXTRA_WRITABLE_PATHS
])
def test_a_candidate_in_a_writable_tree_is_refused_naming_the_tree(found, tree):
    fs = reads(executables=(found,))
    directory = found.rsplit("/", 1)[0]
    with pytest.raises(PolicyError, match=f"lies in {tree}, which the sandbox can write"):
        executable.which(policy(), "claude", directory, "claude", "the", fs)


def test_a_link_into_a_writable_tree_is_refused_and_a_writable_home_is_one():
    # ~/tools/bin/claude -> ~/proj/claude: the real path is in the project.
    fs = reads(executables=("/h/u/tools/bin/claude",),
               links={"/h/u/tools/bin/claude": "/h/u/proj/claude"})
    with pytest.raises(PolicyError, match="lies in /h/u/proj"):
        executable.which(policy(), "claude", "/h/u/tools/bin", "claude", "the", fs)
    fs = reads(executables=("/h/u/tools/bin/claude",))
    assert executable.which(policy(), "claude", "/h/u/tools/bin", "claude", "the", fs)
    with pytest.raises(PolicyError, match="lies in /h/u,"):
        executable.which(policy(home_access="write"), "claude", "/h/u/tools/bin", "claude",
                         "the", fs)


def test_an_install_under_tools_bin_runs_with_its_env_runtime():
    # tests/integration/test_agents.py: ~/tools/bin/codex -> a node_modules
    # script run by `#!/usr/bin/env mynode`, mynode in ~/rt/bin; neither is
    # visible in a tmpfs home; the real paths run, both installs shown.
    script = "/h/u/tools/lib/node_modules/fake/bin/codex.js"
    fs = reads(executables=("/h/u/tools/bin/codex", "/h/u/.local/bin/codex", "/h/u/rt/bin/mynode"),
               links={"/h/u/tools/bin/codex": script},
               shebangs={script: ("/usr/bin/env", "mynode")})
    path_env = "/h/u/tools/bin:/h/u/.local/bin:/h/u/rt/bin:/usr/bin:/bin"
    resolved, command = executable.resolve(policy(), ["codex", "--version"], path_env, "codex",
                                           fs)
    assert command == ["/h/u/rt/bin/mynode", script, "--version"]
    assert resolved.home_readonly == ("/h/u/.gitconfig", "/h/u/tools/lib/node_modules",
                                      "/h/u/rt/bin")
    assert resolved.system_readonly == policy().system_readonly


def test_env_options_are_skipped_and_a_missing_runtime_is_refused():
    fs = reads(executables=("/opt/a/agent", "/opt/rt/node"),
               shebangs={"/opt/a/agent": ("/usr/bin/env", "-S", "node", "--flag")})
    _, command = executable.resolve(policy(), ["agent", "x"], "/opt/a:/opt/rt", "agent", fs)
    assert command == ["/opt/rt/node", "--flag", "/opt/a/agent", "x"]
    with pytest.raises(PolicyError, match="runs with node") as refused:
        executable.resolve(policy(), ["agent"], "/opt/a", "agent", fs)
    assert refused.value.reason == "agent_runtime_missing"


def test_another_interpreter_is_shown_and_a_shown_file_changes_nothing():
    fs = reads(executables=("/opt/a/agent", "/usr/bin/tool"),
               shebangs={"/opt/a/agent": ("/opt/py/bin/python3", "-u")},
               prefixes=("/opt/py",))
    resolved, command = executable.resolve(policy(), ["agent"], "/opt/a", "agent", fs)
    assert command == ["/opt/a/agent"]
    assert resolved.system_readonly == ("/usr", "/bin", "/opt/a", "/opt/py")
    same, command = executable.resolve(policy(), ["tool", "-v"], "/usr/bin", "tool", fs)
    assert same == policy() and command == ["/usr/bin/tool", "-v"]
    # Not installed: left as it is (run_profile says so).
    assert executable.resolve(policy(), ["none"], "/usr/bin", "none", fs) == (policy(), ["none"])


def test_an_install_that_would_be_the_home_is_refused_naming_the_setting():
    fs = reads(executables=("/h/u/codex",))
    with pytest.raises(PolicyError, match="add /h/u to HOME_READONLY") as refused:
        executable.resolve(policy(), ["codex"], "/h/u:/usr/bin", "codex", fs)
    assert refused.value.reason == "agent_not_visible"
    fs = reads(executables=("/codex",))
    with pytest.raises(PolicyError, match="add / to READONLY_MOUNTS"):
        executable.resolve(policy(), ["codex"], "/", "codex", fs)


def test_a_file_under_a_hidden_path_is_refused():
    fs = reads(executables=("/h/u/tools/bin/claude",),
               links={"/h/u/tools/bin/claude": "/nfs/keys/claude"})
    with pytest.raises(PolicyError, match="lies under a hidden path"):
        executable.resolve(policy(home_access="read"), ["claude"], "/h/u/tools/bin", "claude",
                           fs)


NPMRC = b"prefix=${HOME}/npm-global\n//registry.npmjs.org/:_authToken=npm_SECRET\n"


def test_the_npmrc_prefix_is_named_inside_and_its_tree_shown():
    fs = reads(dirs=("/h/u/npm-global",))
    shown = executable.npm_prefix(policy(), HOME, NPMRC, fs)
    assert shown.env["npm_config_prefix"] == "/h/u/npm-global"
    assert "npm_SECRET" not in repr(shown.env)
    assert shown.home_readonly[-1] == "/h/u/npm-global"
    for prefix in (b"prefix=~/npm-global\n", b'prefix="$HOME/npm-global"\n'):
        assert executable.npm_prefix(policy(), HOME, prefix, fs).env["npm_config_prefix"] \
            == "/h/u/npm-global"


@pytest.mark.parametrize("npmrc,env", [
    (None, {}),                                   # no ~/.npmrc
    (b"//registry/:_authToken=x\n", {}),          # no prefix
    (b"prefix=relative/dir\n", {}),               # not absolute
    (NPMRC, {"NPM_CONFIG_PREFIX": "/opt/npm"}),   # the environment names one
])
def test_no_usable_prefix_changes_nothing(npmrc, env):
    p = policy(env=env)
    assert executable.npm_prefix(p, HOME, npmrc, reads(dirs=("/h/u/npm-global",))) == p


def test_a_prefix_outside_the_home_or_missing_is_named_but_not_shown():
    fs = reads(dirs=("/opt/npm",))
    shown = executable.npm_prefix(policy(), HOME, b"prefix=/opt/npm\n", fs)
    assert shown.env["npm_config_prefix"] == "/opt/npm" and shown.home_readonly == ("/h/u/.gitconfig",)
    shown = executable.npm_prefix(policy(), HOME, NPMRC, reads())
    assert shown.env["npm_config_prefix"] == "/h/u/npm-global"
    assert shown.home_readonly == ("/h/u/.gitconfig",)
