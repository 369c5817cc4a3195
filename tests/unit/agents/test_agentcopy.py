"""The agent launch pieces that touch little: which install tree is bound for
an executable (agentexe.install_root), the profile's guarded files
(agentcopy.spec_for), and a session copy built, changed and merged back in a
temporary home (agentcopy.start / finish) — the guard's IO shell around
policy/agentmerge.py."""
from __future__ import annotations

import json
import os

import pytest

from agent_sandbox.agents import copy as agentcopy
from agent_sandbox.agents import exe as agentexe
from agent_sandbox.agents.exe import install_root
from agent_sandbox.errors import PolicyError
from tests.support.agents import profile
from tests.support.policies import claude_session_policy, policy_of


@pytest.mark.parametrize("real, root", [
    ("/h/u/tools/lib/node_modules/@openai/codex/bin/codex.js", "/h/u/tools/lib/node_modules"),
    ("/h/u/bin/claude", "/h/u/bin"),                  # the prefix above bin/ would be the home
    ("/h/u/work/bin/claude", "/h/u/work/bin"),        # not a prefix: not all of ~/work
    ("/h/u/.local/share/claude/versions/2.1", "/h/u/.local/share/claude/versions"),
    ("/h/u/claude", None),                            # the home itself: refused
    ("/claude", None),
])
def test_install_root(real, root):
    assert install_root(real, "/h/u") == root


def test_install_root_is_a_prefix_only_when_it_is_one(tmp_path):
    home = "/h/u"
    for marker in ("pyvenv.cfg", "conda-meta/", "lib/node_modules/"):
        prefix = tmp_path / marker.split("/")[0].replace(".", "-")
        os.makedirs(prefix / "bin")
        if marker.endswith("/"):
            os.makedirs(prefix / marker)
        else:
            (prefix / marker).write_text("")
        assert install_root(str(prefix / "bin/tool"), home) == str(prefix)
    os.makedirs(tmp_path / "Downloads")
    (tmp_path / "Downloads/claude").write_bytes(b"\x7fELF" + b"\0" * 60)
    assert install_root(str(tmp_path / "Downloads/claude"), home) == \
        str(tmp_path / "Downloads/claude")                 # a native binary: itself only


def path_policy(home: str, **keys):
    return policy_of(home, **{"home_writable": (f"{home}/.claude",), **keys})


def test_an_agent_from_a_relative_or_writable_path_entry_is_refused(tmp_path):
    # A session could plant `claude` (or a symlink aiming the next launch's
    # bind at ~/anything) in the project or in node_modules/.bin.
    from agent_sandbox.errors import PolicyError

    home = str(tmp_path)
    for directory in ("proj/node_modules/.bin", "proj/bin", "tools/bin", ".claude/bin"):
        os.makedirs(f"{home}/{directory}")
        with open(f"{home}/{directory}/claude", "w") as handle:
            handle.write("#!/bin/sh\n")
        os.chmod(f"{home}/{directory}/claude", 0o755)
    policy = path_policy(home)
    cwd = os.getcwd()
    os.chdir(f"{home}/proj")
    try:
        with pytest.raises(PolicyError, match="relative PATH entry 'node_modules/.bin'"):
            agentexe.which(policy, "claude", f"node_modules/.bin:{home}/tools/bin", "claude", "the")
    finally:
        os.chdir(cwd)
    for directory in ("proj/bin", ".claude/bin"):
        with pytest.raises(PolicyError, match="which the sandbox can write"):
            agentexe.which(policy, "claude", f"{home}/{directory}:{home}/tools/bin", "claude",
                           "the")
    os.symlink(f"{home}/proj/bin/claude", f"{home}/tools/bin/link")
    with pytest.raises(PolicyError, match="which the sandbox can write"):
        agentexe.which(policy, "link", f"{home}/tools/bin", "claude", "the")
    assert agentexe.which(policy, "claude", f"/nonexistent:{home}/tools/bin", "claude", "the") \
        == f"{home}/tools/bin/claude"
    with pytest.raises(PolicyError, match="which the sandbox can write"):   # HOME_ACCESS=write
        agentexe.which(path_policy(home, home_access="write"), "claude", f"{home}/tools/bin",
                       "claude", "the")


def claude_copy(home: str, keep: str = "model"):
    """(spec, policy, record, copy root) of a Claude session copy whose
    settings.json keeps `keep`."""
    spec = agentcopy.spec_for(profile(
        config_dir=("CLAUDE_CONFIG_DIR", ".claude"),
        settings=("settings.json=.claude/settings.json",),
        settings_keep=(f"settings.json:{keep}",)), home)
    policy, record = agentcopy.start(spec, claude_session_policy(home))
    return spec, policy, record, policy.env["CLAUDE_CONFIG_DIR"]


def test_spec_pairs_each_file_with_its_patterns():
    spec = agentcopy.spec_for(profile(
        config_dir=("CLAUDE_CONFIG_DIR", ".claude"),
        settings=("settings.json=.claude/settings.json", ".claude.json=.claude.json",
                  "../escape=.bashrc"),
        settings_keep=("settings.json:model", ".claude.json:projects.*.allowedTools",
                       "other:x")), "/h/u")
    assert spec.variable == "CLAUDE_CONFIG_DIR" and spec.real_dir == "/h/u/.claude"
    assert spec.files == (
        agentcopy.Guarded("settings.json", "/h/u/.claude/settings.json", ("model",)),
        agentcopy.Guarded(".claude.json", "/h/u/.claude.json", ("projects.*.allowedTools",)))
    assert agentcopy.spec_for(profile(), "/h/u") is None


def test_a_session_copy_round_trip(tmp_path, capsys):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude/projects")
    os.makedirs(f"{home}/.claude/shell-snapshots")
    with open(f"{home}/.claude/settings.json", "w") as handle:
        json.dump({"model": "a"}, handle)
    with open(f"{home}/.claude/statusline.sh", "w") as handle:
        handle.write("echo mine\n")
    spec = agentcopy.spec_for(profile(
        config_dir=("CLAUDE_CONFIG_DIR", ".claude"),
        settings=("settings.json=.claude/settings.json",),
        settings_keep=("settings.json:model",),
        config_keep=("projects/", "history.jsonl"),
        config_scratch=("shell-snapshots/",)), home)
    policy, record = agentcopy.start(spec, claude_session_policy(home))
    root = policy.env["CLAUDE_CONFIG_DIR"]
    assert policy.extra_writable == (root,)
    # The real directory is writable entry by entry — only the entries the
    # allow-list names —, its settings and everything else read-only but a
    # scratch entry: the copy has its own, so it is not granted at all (on
    # bwrap each grant is a mount).
    assert policy.home_writable == (f"{home}/.cache/claude", f"{home}/.claude/projects")
    assert policy.home_readonly == (f"{home}/.claude/settings.json",
                                    f"{home}/.claude/statusline.sh")
    assert not os.path.lexists(f"{root}/shell-snapshots")           # per session, empty
    assert os.readlink(f"{root}/projects") == f"{home}/.claude/projects"
    assert os.readlink(f"{root}/hooks") == f"{home}/.claude/hooks"   # its placeholder's path
    assert not os.path.islink(f"{root}/settings.json")
    # The session: a choice, a hook, a new history file, a hooks/ of its own.
    with open(f"{root}/settings.json", "w") as handle:
        json.dump({"model": "b", "hooks": {"Stop": "sh"}}, handle)
    with open(f"{root}/history.jsonl", "w") as handle:
        handle.write("{}\n")
    os.unlink(f"{root}/hooks")
    os.mkdir(f"{root}/hooks")
    with open(f"{home}/.claude/settings.json") as handle:
        assert json.load(handle) == {"model": "a"}                   # nothing live meanwhile
    agentcopy.finish(record)
    with open(f"{home}/.claude/settings.json") as handle:
        assert json.load(handle) == {"model": "b"}
    assert os.path.isfile(f"{home}/.claude/history.jsonl")
    assert not os.path.exists(f"{home}/.claude/hooks")
    assert not os.path.exists(root) and not os.path.exists(record)
    err = capsys.readouterr().err
    # What was kept goes to the session's log only (issue 36: the end of a
    # session names only the drops that matter).
    assert "kept the session's choices" not in err
    assert "dropped the session's changes" in err and "hooks" in err
    logged = _logged(home)
    assert {"file": "~/.claude/settings.json", "kept": ["model"], "dropped": ["hooks"],
            "dropped_inert": []}.items() <= logged[0].items()
    assert f"{home}/.claude/hooks" in err or "~/.claude/hooks" in err


def test_a_settings_file_swapped_for_a_symlink_is_not_read(tmp_path):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    spec, policy, record, root = claude_copy(home, "*")
    with open(f"{home}/elsewhere.json", "w") as handle:
        json.dump({"model": "from-a-link"}, handle)
    os.symlink(f"{home}/elsewhere.json", f"{root}/settings.json")
    agentcopy.finish(record)
    assert not os.path.exists(f"{home}/.claude/settings.json")


def test_a_variable_set_to_another_directory_is_refused(tmp_path):
    from agent_sandbox.errors import PolicyError

    home = str(tmp_path)
    spec = agentcopy.spec_for(profile(config_dir=("CODEX_HOME", ".codex")), home)
    policy = claude_session_policy(home)
    policy.env["CODEX_HOME"] = "/elsewhere"
    with pytest.raises(PolicyError, match="CODEX_HOME=/elsewhere"):
        agentcopy.start(spec, policy)


def test_the_users_own_symlinked_settings_are_read_and_written_through(tmp_path):
    # A dotfiles repository: ~/.claude/settings.json -> ~/dotfiles/claude.json.
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    os.makedirs(f"{home}/dotfiles")
    with open(f"{home}/dotfiles/claude.json", "w") as handle:
        json.dump({"model": "a", "hooks": {"mine": 1}}, handle)
    os.symlink(f"{home}/dotfiles/claude.json", f"{home}/.claude/settings.json")
    spec, policy, record, root = claude_copy(home, "model")
    with open(f"{root}/settings.json") as handle:
        seen = json.load(handle)
    assert seen == {"model": "a", "hooks": {"mine": 1}}
    with open(f"{root}/settings.json", "w") as handle:
        json.dump(dict(seen, model="b"), handle)
    agentcopy.finish(record)
    assert os.path.islink(f"{home}/.claude/settings.json")
    with open(f"{home}/dotfiles/claude.json") as handle:
        assert json.load(handle) == {"model": "b", "hooks": {"mine": 1}}


def project_spec(home: str):
    return agentcopy.spec_for(profile(
        config_dir=("CLAUDE_CONFIG_DIR", ".claude"), settings=(),
        settings_keep=(".claude/settings.local.json:permissions.allow=+Read",),
        project_settings=(".claude/settings.local.json",)), home)


def test_a_project_settings_file_is_edited_on_a_copy_bound_in_its_place(tmp_path, capsys):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    os.makedirs(f"{home}/proj/.claude")
    real = f"{home}/proj/.claude/settings.local.json"
    policy, record = agentcopy.start(project_spec(home), claude_session_policy(home))
    ((copy, dest),) = policy.session_files
    assert dest == real and copy.startswith(f"{home}/.local/state/agent-sandbox-run/agents/")
    with open(copy, "w") as handle:   # "allow … in this project", and a hook
        json.dump({"permissions": {"allow": ["Read(./**)"]}, "hooks": {"Stop": "sh"}}, handle)
    assert not os.path.exists(real)                                  # nothing live meanwhile
    agentcopy.finish(record)
    with open(real) as handle:
        assert json.load(handle) == {"permissions": {"allow": ["Read(./**)"]}}
    assert "hooks" in capsys.readouterr().err
    assert not os.path.exists(copy)


def test_a_project_settings_symlink_is_neither_copied_nor_bound(tmp_path):
    # A session made the project's file a link to a credential: the next
    # launch must not copy what it points to into a file readable inside.
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    os.makedirs(f"{home}/proj/.claude")
    os.makedirs(f"{home}/.ssh")
    with open(f"{home}/.ssh/id_rsa", "w") as handle:
        handle.write("SECRET")
    os.symlink(f"{home}/.ssh/id_rsa", f"{home}/proj/.claude/settings.local.json")
    policy, record = agentcopy.start(project_spec(home), claude_session_policy(home))
    assert policy.session_files == ()
    for directory, _, names in os.walk(f"{home}/.cache"):
        for name in names:
            if os.path.islink(os.path.join(directory, name)):
                continue                  # the copy's links to the real directory
            with open(os.path.join(directory, name), "rb") as handle:
                assert b"SECRET" not in handle.read()
    agentcopy.finish(record)


def test_project_settings_copies_are_for_bwrap_only(tmp_path):
    home = str(tmp_path)
    os.makedirs(f"{home}/proj/.claude")
    policy, record = agentcopy.start(project_spec(home), claude_session_policy(home, "landlock"))
    assert policy.session_files == ()
    agentcopy.finish(record)


def claude_spec(home: str):
    return agentcopy.spec_for(profile(
        config_dir=("CLAUDE_CONFIG_DIR", ".claude"),
        settings=("settings.json=.claude/settings.json",),
        settings_keep=("settings.json:model=str",),
        config_keep=("projects/", "history.jsonl", ".credentials.json"),
        config_scratch=("shell-snapshots/",)), home)


def test_only_allow_listed_new_entries_go_back_and_both_are_reported(tmp_path, capsys):
    # Claude Code reads <config dir>/.config.json as its global config (MCP
    # servers), Codex loads $CODEX_HOME/.env: names off the list never go back.
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    policy, record = agentcopy.start(claude_spec(home), claude_session_policy(home))
    root = policy.env["CLAUDE_CONFIG_DIR"]
    for name in (".config.json", ".env", "history.jsonl"):
        with open(f"{root}/{name}", "w") as handle:
            handle.write("{}\n")
    os.makedirs(f"{root}/rules")
    os.makedirs(f"{root}/shell-snapshots")
    os.symlink(f"{home}/.ssh", f"{root}/projects")        # a kept name, but a symlink
    agentcopy.finish(record)
    assert sorted(os.listdir(f"{home}/.claude")) == ["history.jsonl"]
    err = capsys.readouterr().err
    assert "kept what the session made" not in err          # in the log (issue 36)
    assert any(r.get("moved") == ["~/.claude/history.jsonl"] for r in _logged(home))
    dropped = err[err.index("dropped what the session made"):]
    assert dropped.count("\n") == 1                         # one line, the rest logged
    refused = next(r["refused"] for r in _logged(home) if "refused" in r)
    for name in (".config.json", ".env", "rules", "projects"):
        assert f"~/.claude/{name}" in refused
    assert "shell-snapshots" not in err                    # scratch: dropped quietly


def test_a_symlink_or_unlisted_file_of_the_user_is_never_replaced(tmp_path):
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude/projects")
    os.makedirs(f"{home}/dotfiles")
    with open(f"{home}/dotfiles/statusline.sh", "w") as handle:
        handle.write("echo status\n")
    os.symlink(f"{home}/dotfiles/statusline.sh", f"{home}/.claude/statusline.sh")
    os.symlink(f"{home}/dotfiles/statusline.sh", f"{home}/.claude/history.jsonl")
    with open(f"{home}/.claude/notify.py", "w") as handle:
        handle.write("mine\n")
    policy, record = agentcopy.start(claude_spec(home), claude_session_policy(home))
    root = policy.env["CLAUDE_CONFIG_DIR"]
    assert {f"{home}/.claude/statusline.sh", f"{home}/.claude/history.jsonl",
            f"{home}/.claude/notify.py"} <= set(policy.home_readonly)
    assert f"{home}/.claude/notify.py" not in policy.home_writable
    for name in ("statusline.sh", "history.jsonl", "notify.py"):
        os.unlink(f"{root}/{name}")
        with open(f"{root}/{name}", "w") as handle:
            handle.write("touch ~/planted\n")
    with open(f"{root}/projects/t.jsonl", "w") as handle:   # through the link: allowed
        handle.write("{}\n")
    agentcopy.finish(record)
    assert os.path.islink(f"{home}/.claude/statusline.sh")
    assert os.path.islink(f"{home}/.claude/history.jsonl")
    with open(f"{home}/.claude/notify.py") as handle:
        assert handle.read() == "mine\n"
    with open(f"{home}/dotfiles/statusline.sh") as handle:
        assert handle.read() == "echo status\n"
    assert os.path.isfile(f"{home}/.claude/projects/t.jsonl")


def test_a_copy_whose_directory_became_a_link_is_neither_merged_nor_removed(tmp_path, capsys):
    # Were the copies directory reachable from a sandbox, it could swap the copy roots
    # directory for a link to one of its making: the merge would read a copy
    # of its choosing and the removal would follow the link.
    home = str(tmp_path)
    os.makedirs(f"{home}/.claude")
    with open(f"{home}/.claude/settings.json", "w") as handle:
        json.dump({"model": "a"}, handle)
    spec, policy, record, root = claude_copy(home, "model")
    copies = os.path.dirname(root)
    os.rename(copies, copies + ".old")
    os.makedirs(f"{home}/decoy/s1")
    with open(f"{home}/decoy/s1/settings.json", "w") as handle:
        json.dump({"model": "planted"}, handle)
    os.symlink(f"{home}/decoy", copies)
    agentcopy.finish(record)
    with open(f"{home}/.claude/settings.json") as handle:
        assert json.load(handle) == {"model": "a"}
    assert os.path.isfile(f"{home}/decoy/s1/settings.json")     # not removed through it
    assert not os.path.exists(record)
    assert "NOT merged back" in capsys.readouterr().err
    # and the next launch refuses to make its copy through it
    with pytest.raises(PolicyError, match=r"agent-sandbox-run/agents is a symlink"):
        agentcopy.start(spec, claude_session_policy(home)._replace(session_id="s2"))



def _logged(home: str) -> list:
    """The agent-settings records of the sessions' logs under `home`."""
    import glob

    records = []
    for path in sorted(glob.glob(f"{home}/.local/state/agent-sandbox/chaperon/agent_*.log")):
        with open(path) as handle:
            records += [json.loads(line) for line in handle if line.strip()]
    return records
