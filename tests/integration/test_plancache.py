"""The compiled plan cache (launch/plancache.py): a launch after any input
changed equals a fresh compile, and a cache file that is not the user's own
(or that others can write) is never used."""
from __future__ import annotations

import os
import re
import shutil

from tests.conftest import INSTALLED


def dry_run(user, project, *options, env=None):
    result = user.run([INSTALLED, "run", "--dry-run", *options, "--", "true"],
                      cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    text, source = result.stdout.rsplit("plan: ", 1)
    return re.sub(r"[0-9a-f]{12}", "<id>", text), source.strip()


def cache_dir(user):
    return user.home / ".local/state/agent-sandbox/cache"


def fresh(user, project, *options, env=None):
    """A compile with every stored plan removed."""
    for entry in cache_dir(user).glob("plan-*"):
        entry.unlink()
    return dry_run(user, project, *options, env=env)


def test_every_input_changed_in_turn_gives_a_fresh_compile(user, project, admin):
    other = project.parent / (project.name + "-other")
    other.mkdir()
    os.chown(other, user.uid, user.gid)

    def warm(*options, env=None):
        dry_run(user, project, *options, env=env)
        assert dry_run(user, project, *options, env=env)[1].startswith("loaded")

    changes = [
        ("user config", lambda: user.set_config("SECRETS_IN_BOUND_FILES=off\n"), (), None),
        ("admin config", lambda: admin("SECRETS_IN_BOUND_FILES=warn\n"), (), None),
        ("environment", lambda: None, (), user.env(SECRETS_IN_BOUND_FILES="off")),
        ("project", lambda: None, ("--project-dir", str(other)), None),
        ("a new protected path", lambda: (project / ".envrc").write_text("x\n"), (), None),
        ("a bound file's secret", lambda: user.write(
            ".bashrc", "export GITHUB_TOKEN=ghp_" + "a" * 36 + "\n"), (), None),
        ("the probe verdict", lambda: (cache_dir(user) / "probe-bwrap.marshal").write_bytes(
            b"garbage"), (), None),
        ("the backend flag", lambda: None, ("--backend", "landlock"), None),
    ]
    for name, change, options, env in changes:
        warm()
        change()
        after = dry_run(user, project, *options, env=env)
        assert after[1].startswith("compiled"), name
        assert after[0] == fresh(user, project, *options, env=env)[0], name
        assert dry_run(user, project, *options, env=env)[0] == after[0], name


def test_a_foreign_or_writable_cache_file_is_ignored(user, project, other_user):
    dry_run(user, project)
    assert dry_run(user, project)[1].startswith("loaded")
    (entry,) = [p for p in cache_dir(user).glob("plan-*")
                if p.stat().st_mtime == max(q.stat().st_mtime for q in
                                            cache_dir(user).glob("plan-*"))]
    entry.chmod(0o622)
    assert dry_run(user, project)[1].startswith("compiled")
    assert dry_run(user, project)[1].startswith("loaded")
    for e in cache_dir(user).glob("plan-*"):
        os.chown(e, other_user.pw_uid, other_user.pw_gid)
        e.chmod(0o644)
    assert dry_run(user, project)[1].startswith("compiled")
    shutil.rmtree(cache_dir(user))
