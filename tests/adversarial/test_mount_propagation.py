"""The attack: make the host mount something writable below a read-only path
after the sandbox started, and write there.

bubblewrap makes the sandbox's mounts slaves of the host's, and on a host
whose / is shared (every systemd host) a mount made later propagates in with
the host's flags. The agent does not even need the host's help: looking below
an autofs directory under READONLY_MOUNTS (/apps, /sw, /cvmfs, ... — the
shipped list) makes the automounter mount it, writable if the share is (seen
by hand with autofs: a group's software tree was written from inside). With
PRIVATE_MOUNTS (the default) bwrap runs in a mount namespace of its own whose
mounts are private: nothing the host mounts later appears inside. Landlock
confines writes by path whatever is mounted there; firejail cannot be kept
from it and says so (fs.write_confined partial), as does bwrap with
PRIVATE_MOUNTS=false — where the write goes through, which shows that the
test reproduces the propagation.

The launcher runs in a mount namespace of the test's own whose / is made
shared (this machine's is private), the real backends, as the unprivileged
test user, the installed copy. Fails on the code before PRIVATE_MOUNTS.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.install import INSTALLED

# Inside: say "ready", wait for the test's go (bounded), then write below the
# path the host mounted meanwhile.
SCRIPT = """
touch "$1/ready"
i=0
while [ ! -e "$1/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
if echo planted > "$2/sub/planted" 2>/dev/null; then echo written; else echo refused; fi
"""


def _wait_for(path: Path, process) -> None:
    for _ in range(600):
        if path.exists() or process.poll() is not None:
            return
        time.sleep(0.05)


@pytest.mark.parametrize("backend,config,outcome", [
    ("bwrap", "", "refused"),
    ("landlock", "", "refused"),
    ("bwrap", "PRIVATE_MOUNTS=false\n", "written"),
    ("firejail", "", "written"),
    # issue 30: bubblewrap 0.4.1 under util-linux 2.32's unshare (no
    # --map-current-user): the helper makes the private namespace itself
    ("bwrap", "old", "refused"),
])
def test_a_mount_the_host_makes_after_the_start_is_not_writable_inside(
        user, project, backend, config, outcome, request):
    if config == "old":
        request.getfixturevalue("admin")(
            f"BWRAP_PATH={request.getfixturevalue('old_bwrap')}\n"
            f"UNSHARE_PATH={request.getfixturevalue('old_unshare')}\n")
        config = ""
    user.set_config(config)
    target = Path(f"/opt/as-propagation-{os.getpid()}")
    target.mkdir(mode=0o755)
    launcher = ["unshare", "-m", "--propagation", "unchanged", "--", "/bin/sh", "-c",
                'uid=$0 gid=$1 && shift && mount --make-rshared / && '
                'exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"',
                str(user.uid), str(user.gid),
                INSTALLED, "run", "--backend", backend, "--",
                "/bin/sh", "-c", SCRIPT, "sh", str(project), str(target)]
    env = user.env(SANDBOX_QUIET="0")
    process = subprocess.Popen(launcher, env=env, cwd=str(project), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(project / "ready", process)
        assert (project / "ready").exists(), process.communicate(timeout=30)
        # The host (the launcher's namespace) mounts a writable file system
        # below /opt, which every backend shows read-only.
        subprocess.run(["nsenter", "-t", str(process.pid), "-m", "/bin/sh", "-c",
                        'mount -t tmpfs -o mode=0755 tmpfs "$0" && mkdir -m 0777 "$0/sub"',
                        str(target)], check=True)
        (project / "go").touch()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        target.rmdir()       # the mount went with the test's namespace
    assert process.returncode == 0, err
    assert out.strip() == outcome, (out, err)
    if outcome == "written":
        # Where the write goes through, the banner says so.
        assert "partly enforced: fs.write_confined" in err, err
    else:
        assert "fs.write_confined" not in err.partition("not enforced")[0], err
