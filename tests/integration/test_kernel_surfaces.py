"""Older kernels' syscall surfaces on this kernel (issue 30, item 5): the
launcher runs as the test user under a seccomp filter, installed by root
without no_new_privs (so the setuid firejail runs under it too;
tests/probes/oldkernel.py), that answers every syscall newer than Linux 4.18
(RHEL 8) or 5.14 (RHEL 9) with ENOSYS — pidfd_open, clone3, openat2,
close_range, faccessat2, Landlock… — getsockopt(SO_PEERPIDFD) with
ENOPROTOOPT, and, with a lower Landlock ABI, the ABI query with that ABI.
A non-interactive run, a session on a terminal, an allowlist session and a
Slurm call each work or refuse with 125 and the reason; what a lower
Landlock ABI takes away is in the banner and `--dry-run`.
"""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.install import INSTALLED, PREFIX
from tests.support.waiting import settle

OLDKERNEL = Path(__file__).resolve().parents[1] / "probes" / "oldkernel.py"
PYTHON = f"{PREFIX}/venv/bin/python"
KERNELS = ("4.18", "5.14")
BACKENDS = ("bwrap", "firejail", "landlock")
NO_LANDLOCK = "this kernel has no Landlock"


def old_kernel(user, kernel, argv, *, landlock_abi=None, env=None, cwd=None, **kwargs):
    """argv (a launch) as `user` under `kernel`'s syscall surface."""
    settle()
    extra = ["--landlock-abi", str(landlock_abi)] if landlock_abi else []
    return [PYTHON, "-I", str(OLDKERNEL), "--kernel", kernel, *extra,
            "--uid", str(user.uid), "--gid", str(user.gid), "--", *map(str, argv)]


def run_old(user, kernel, argv, *, landlock_abi=None, env=None, cwd=None, timeout=90):
    return subprocess.run(old_kernel(user, kernel, argv, landlock_abi=landlock_abi),
                          env=env or user.env(), cwd=str(cwd or user.project),
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def refused_without_landlock(result_text: str) -> bool:
    return result_text.startswith("agent-sandbox: the landlock backend cannot be used") \
        and NO_LANDLOCK in result_text


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run(user, project, kernel, backend):
    result = run_old(user, kernel, [INSTALLED, "run", "--backend", backend, "--", "/bin/sh",
                                    "-c", "echo inside > note && cat note; exit 7"])
    if backend == "landlock" and kernel == "4.18":
        assert result.returncode == 125 and refused_without_landlock(result.stderr), result
        return
    assert result.returncode == 7, result
    assert result.stdout == "inside\n"
    assert "Traceback" not in result.stderr


def terminal_session(user, kernel, backend, project) -> tuple[int, str]:
    """`agent-sandbox run` on a pty (the launcher's relay): the sandboxed
    shell sees a terminal, reads a typed line, exits 3."""
    argv = old_kernel(user, kernel, [INSTALLED, "run", "--backend", backend, "--", "/bin/sh",
                                     "-c", 'test -t 0 && echo tty=yes; read l; echo "got:$l"; '
                                           "exit 3"])
    env = user.env(TERM="xterm")
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.chdir(project)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    screen, typed = b"", False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not typed and (b"tty=yes" in screen or b"agent-sandbox:" in screen):
            os.write(master, b"hello\r")
            typed = True
        if select.select([master], [], [], 0.5)[0]:
            try:
                data = os.read(master, 4096)
            except OSError:
                break
            if not data:
                break
            screen += data
    _, status = os.waitpid(pid, 0)
    os.close(master)
    return os.waitstatus_to_exitcode(status), screen.decode(errors="replace")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_on_a_terminal(user, project, kernel, backend):
    """Without pidfd_open (4.18) the relay crashed: OSError [Errno 38], exit 1."""
    settle()
    rc, screen = terminal_session(user, kernel, backend, project)
    if backend == "landlock" and kernel == "4.18":
        assert rc == 125 and NO_LANDLOCK in screen, screen
        return
    assert "Traceback" not in screen and "Errno" not in screen, screen
    assert rc == 3, screen
    assert "tty=yes" in screen and "got:hello" in screen, screen


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def listed_server(tmp_path_factory):
    www = tmp_path_factory.mktemp("www")
    (www / "hello.txt").write_text("hello through the proxy\n")
    www.chmod(0o755)
    server = ThreadingHTTPServer(("127.0.0.2", 0), partial(Quiet, directory=str(www)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


PROBE = ("import urllib.request, sys\n"
         "def fetch(url):\n"
         "    try:\n"
         "        return urllib.request.urlopen(url, timeout=10).read().decode().strip()\n"
         "    except Exception as exc:\n"
         "        return 'refused:' + type(exc).__name__\n"
         "print('listed=' + fetch(sys.argv[1]))\n"
         "print('unlisted=' + fetch(sys.argv[2]))\n")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backend", ("bwrap", "firejail"))
def test_an_allowlist_session(user, project, listed_server, kernel, backend):
    port = listed_server
    user.set_config(f"NETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2/32:{port})\n")
    try:
        result = run_old(user, kernel, [INSTALLED, "run", "--backend", backend, "--",
                                        "/usr/bin/python3", "-c", PROBE,
                                        f"http://127.0.0.2:{port}/hello.txt",
                                        f"http://127.0.0.3:{port}/hello.txt"])
    finally:
        user.set_config("")
    assert result.returncode == 0, result
    assert "listed=hello through the proxy" in result.stdout, result
    assert "unlisted=refused:" in result.stdout, result


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slurm_call(user, project, slurm_cluster, kernel, backend):
    """sinfo inside: the stub, the chaperon outside (openat2's fallback,
    SO_PEERPIDFD's), the real Slurm."""
    result = run_old(user, kernel, [INSTALLED, "run", "--backend", backend, "--",
                                    "sinfo", "-h", "-o", "%P"])
    if backend == "landlock" and kernel == "4.18":
        assert result.returncode == 125 and refused_without_landlock(result.stderr), result
        return
    assert result.returncode == 0, result
    assert slurm_cluster.partitions[0] in result.stdout, result


@pytest.mark.parametrize("abi,lost", [
    (1, ("across directories", "EXDEV")),
    (2, ("truncat",)),
    (3, ("TCP",)),
    (5, ("abstract_unix.scoped", "signals.scoped")),
])
def test_what_a_lower_landlock_abi_takes_away_is_reported(user, project, abi, lost):
    """Landlock ABI 1 (5.13–5.18): renames across directories fail with
    EXDEV; < 3: truncate(2) is not restricted; < 4: no TCP rules; < 6: no
    scoping — each in --dry-run, and in the banner."""
    report = run_old(user, "5.14", [INSTALLED, "run", "--backend", "landlock", "--dry-run",
                                    "--", "true"], landlock_abi=abi)
    assert report.returncode == 0, report
    for word in lost:
        assert word in report.stdout, (word, report.stdout)
    ran = run_old(user, "5.14", [INSTALLED, "run", "--backend", "landlock", "--", "true"],
                  landlock_abi=abi, env=user.env(SANDBOX_QUIET=None))
    assert ran.returncode == 125 and STACKED in ran.stderr, ran
    assert "Traceback" not in ran.stderr


# The simulation answers the Landlock ABI query through a seccomp user
# notification; Linux allows one listener per filter chain, so the landlock
# supervisor's own cannot be loaded under it: a real launch under the
# simulated ABI is refused with this reason (the same a container runtime's
# supervisor gives). The reports above come from --dry-run, which loads no
# filter; what ABI 1 does to a rename is the helper's degradation table.
STACKED = "another seccomp supervisor already watches this process"


def test_landlock_abi_1_denies_a_cross_directory_rename_as_reported(user, project):
    script = ("import os; os.makedirs('a', exist_ok=True); os.makedirs('b', exist_ok=True); "
              "open('a/f', 'w').close()\n"
              "try:\n    os.rename('a/f', 'b/f'); print('renamed')\n"
              "except OSError as e:\n    print('errno', e.errno)\n")
    result = run_old(user, "5.14", [INSTALLED, "run", "--backend", "landlock", "--",
                                    "/usr/bin/python3", "-c", script], landlock_abi=1)
    # Refused under the simulation (STACKED, above): nothing ran, nothing renamed.
    assert result.returncode == 125 and STACKED in result.stderr, result
    assert "renamed" not in result.stdout
    assert sys.platform == "linux"
