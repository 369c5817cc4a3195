"""Issue 30, on the real programs: Debian 11's bubblewrap 0.4.1 (no
--disable-userns, no --perms) and firejail 0.9.64 (no --restrict-namespaces,
--keep-fd, --tab), named by the admin keys BWRAP_PATH / FIREJAIL_PATH, run
as the unprivileged test user. The sandbox works on them with its
guarantees: a nested user namespace — what --disable-userns and
--restrict-namespaces refuse on newer versions — is refused by the seccomp
filter instead. On the code before issue 30 the probe failed on the first
unknown option (`bwrap: Unknown option --disable-userns`) and no launch ran.
"""
from __future__ import annotations

import os
import re

import pytest

from tests.support.install import ADMIN_FILE

NESTED = "unshare -U true && echo NESTED-USERNS-MADE || echo nested-refused"


@pytest.fixture
def old_admin(admin, old_bwrap, old_firejail):
    admin(f"BWRAP_PATH={old_bwrap}\nFIREJAIL_PATH={old_firejail}\n")
    return old_bwrap, old_firejail


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_nested_user_namespace_is_refused_on_the_old_programs(user, old_admin, backend):
    result = user.sandbox("sh", "-c", f"{NESTED}; exit 3", options=("--backend", backend))
    assert result.returncode == 3, result.stderr
    assert "nested-refused" in result.stdout and "NESTED-USERNS-MADE" not in result.stdout
    assert "Operation not permitted" in result.stderr


def test_bwrap_0_4_1_runs_the_sandbox_with_its_guarantees(user, old_admin):
    """Hidden paths stay hidden, the project is writable and the rest read-only,
    the Slurm stub (an executable file bwrap 0.4 cannot give a mode) runs."""
    user.write(".ssh/id_test", "secret\n", mode=0o600)
    script = ("test ! -e ~/.ssh/id_test && echo hidden; "
              "touch ./made-inside && echo project-writable; "
              "touch /usr/x 2>/dev/null || echo usr-readonly; "
              "touch /tmp/t && echo tmp-writable; "
              "test -x /run/agent-sandbox/bin/.stub && echo stub-executable")
    result = user.sandbox("sh", "-c", script, options=("--backend", "bwrap"))
    assert result.returncode == 0, result.stderr
    for word in ("hidden", "project-writable", "usr-readonly", "tmp-writable",
                 "stub-executable"):
        assert word in result.stdout, (word, result.stdout, result.stderr)
    dry = user.run([user_installed(), "run", "--backend", "bwrap",
                    "--dry-run", "--", "true"])
    assert dry.returncode == 0, dry.stderr
    argv = dry.stdout.split("\nargv:", 1)[1]
    assert old_admin[0] in argv and "--disable-userns" not in argv and "--perms" not in argv
    assert "bubblewrap 0.4.1 has no --perms (0.5.0)" in dry.stdout
    assert "clone" in dry.stdout and "unshare" in dry.stdout     # the filter's userns rules


def test_firejail_0_9_64_leaves_out_what_it_does_not_have(user, old_admin):
    dry = user.run([user_installed(), "run", "--backend", "firejail", "--dry-run", "--", "true"])
    assert dry.returncode == 0, dry.stderr
    argv = dry.stdout.split("\nargv:", 1)[1]
    assert old_admin[1] in argv
    for option in ("--restrict-namespaces", "--keep-fd", "--tab "):
        assert option not in argv


def test_doctor_names_a_bwrap_the_user_can_write(user, admin, old_bwrap):
    """Issue 30: a bwrap in ~/.local/bin was skipped silently and doctor said
    "not found on PATH"; an admin key naming a writable program is refused
    with the reason."""
    mine = user.write(".local/bin/bwrap", "#!/bin/sh\nexec /usr/bin/bwrap \"$@\"\n", mode=0o755)
    admin(f"BWRAP_PATH={mine}\n")
    result = user.run([user_installed(), "doctor"])
    assert f"BWRAP_PATH={mine} is writable by you" in result.stdout, result.stdout
    refused = user.sandbox("true", options=("--backend", "bwrap"))
    assert refused.returncode == 125
    assert f"BWRAP_PATH={mine} is writable by you" in refused.stderr
    ADMIN_FILE.unlink()
    result = user.run([user_installed(), "doctor"],
                      env=user.env(PATH=f"{user.home}/.local/bin:/nowhere"))
    assert f"{mine}, skipped: you can write it" in result.stdout, result.stdout


def user_installed() -> str:
    from tests.support.install import INSTALLED

    return INSTALLED


def test_private_mounts_without_map_current_user_goes_through_the_helper(user, admin,
                                                                         old_bwrap, old_unshare):
    """util-linux 2.32 (RHEL 8) has no `unshare --map-current-user`: every
    bwrap launch was refused, naming only unshare's last line ("Try 'unshare
    --help'"). The helper makes the private user and mount namespace itself
    (helper/privmounts.py) and fs.write_confined stays whole; PRIVATE_MOUNTS=
    false in the environment (ignored before) leaves both out."""
    admin(f"UNSHARE_PATH={old_unshare}\nBWRAP_PATH={old_bwrap}\nCHAPERON=false\n")
    ran = user.sandbox("sh", "-c", "echo ran", options=("--backend", "bwrap"))
    assert ran.returncode == 0 and "ran" in ran.stdout, ran.stderr
    dry = user.run([user_installed(), "run", "--backend", "bwrap", "--dry-run", "--", "true"])
    argv = dry.stdout.split("\nargv:", 1)[1]
    assert "privmounts.py -- " + old_bwrap in argv and old_unshare not in argv
    assert re.search(r"^\s+yes\s+fs\.write_confined", dry.stdout, re.M), dry.stdout
    off = user.run([user_installed(), "run", "--backend", "bwrap", "--dry-run", "--", "true"],
                   env=user.env(PRIVATE_MOUNTS="false"))
    argv = off.stdout.split("\nargv:", 1)[1]
    assert "privmounts.py" not in argv and "unshare" not in argv.split(old_bwrap)[0]
    assert "PRIVATE_MOUNTS=false" in off.stdout


DENIED = """#!/bin/sh
echo "unshare: unshare failed: Operation not permitted" >&2
exit 1
"""


def test_a_private_mounts_refusal_names_the_cause_and_auto_falls_back(user, admin):
    """An unshare that may not make the namespace (an AppArmor profile for
    bwrap but not unshare): --backend bwrap is refused with the cause and the
    fixes, auto goes on to the next backend and says why; once the cause is
    gone (the admin names a working unshare) the next launch works — the
    failure was not remembered (issue 30: refused until `doctor` ran)."""
    from tests.support.oldprimitives import CACHE

    denied = CACHE / "unshare-denied" / "unshare"
    denied.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    denied.write_text(DENIED)
    denied.chmod(0o755)
    admin(f"UNSHARE_PATH={denied}\nCHAPERON=false\n")
    refused = user.sandbox("true", options=("--backend", "bwrap"))
    assert refused.returncode == 125
    assert "PRIVATE_MOUNTS=true, but" in refused.stderr
    assert "may not make a user namespace here (unshare: unshare failed: Operation not " \
        "permitted)" in refused.stderr, refused.stderr
    auto = user.run([user_installed(), "run", "--dry-run", "--", "true"])
    assert auto.returncode == 0, auto.stderr
    assert "bwrap probe failed (PRIVATE_MOUNTS=true, but" in auto.stdout, auto.stdout
    ADMIN_FILE.unlink()
    admin("UNSHARE_PATH=/usr/bin/unshare\nCHAPERON=false\n")
    fixed = user.sandbox("sh", "-c", "echo ran", options=("--backend", "bwrap"))
    assert fixed.returncode == 0 and "ran" in fixed.stdout, fixed.stderr


def test_a_cached_plan_is_compiled_again_for_another_bwrap_at_the_same_path(user, admin,
                                                                            old_bwrap):
    """The plan cache keys on the program's identity (its stat, taken where
    its features are read): a plan compiled for bubblewrap 0.4.1 (the filter
    refusing user namespaces itself) is not reused once the site replaces it
    with 0.8.0 at the same path (--disable-userns, which answers ENOSPC)."""
    import shutil

    from tests.support.oldprimitives import CACHE

    directory = str(CACHE / "replaced-bwrap")
    shutil.rmtree(directory, ignore_errors=True)
    os.mkdir(directory, 0o755)
    program = os.path.join(directory, "bwrap")
    try:
        shutil.copy2(old_bwrap, program)
        admin(f"BWRAP_PATH={program}\nCHAPERON=false\n")
        runs = [user.sandbox("sh", "-c", "unshare -U true", options=("--backend", "bwrap"))
                for _ in range(2)]
        for result in runs:
            assert "Operation not permitted" in result.stderr, result.stderr
        dry = user.run([user_installed(), "run", "--backend", "bwrap", "--dry-run", "--", "true"])
        assert "from the compiled plan cache" in dry.stdout
        replacement = program + ".new"
        shutil.copy2("/usr/bin/bwrap", replacement)
        os.rename(replacement, program)
        fresh = user.sandbox("sh", "-c", "unshare -U true", options=("--backend", "bwrap"))
        assert "No space left on device" in fresh.stderr, fresh.stderr
    finally:
        shutil.rmtree(directory, ignore_errors=True)
