"""The smoke set's driver INSIDE a platform root (scripts/platform-root.sh;
tests/integration/test_platform_roots.py drives it from the host). Runs as
root under the root's own python3 (stdlib only, Python 3.9+): `setup` makes
the unprivileged user in the root's own /etc/passwd and installs the product
as that user would; every other case runs as that user and prints one JSON
object {"rc", "stdout", "stderr"} (the pty case: "screen", what its terminal
showed).

    platform_smoke.py setup WHEELHOUSE
    platform_smoke.py doctor
    platform_smoke.py run BACKEND
    platform_smoke.py dry-run BACKEND
    platform_smoke.py pty BACKEND
    platform_smoke.py allowlist BACKEND
    platform_smoke.py shell SCRIPT
    platform_smoke.py sandbox BACKEND SCRIPT
"""
import json
import os
import pty
import pwd
import select
import socket
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

USER = "smoke"
UID = 2345
HOME = "/home/" + USER
VENV = HOME + "/venv"
PROJECT = HOME + "/project"
LAUNCHER = VENV + "/bin/agent-sandbox"


def as_user():
    account = pwd.getpwnam(USER)
    os.setgroups([])
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)


def environment():
    return {"HOME": HOME, "USER": USER, "LOGNAME": USER, "TERM": "xterm", "LANG": "C.UTF-8",
            "PATH": VENV + "/bin:/usr/local/bin:/usr/bin:/bin"}


def user_run(argv, timeout=120, **kwargs):
    result = subprocess.run(argv, preexec_fn=as_user, env=environment(), cwd=PROJECT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=timeout, **kwargs)
    return {"rc": result.returncode, "stdout": result.stdout.decode(errors="replace"),
            "stderr": result.stderr.decode(errors="replace")}


def set_config(text):
    directory = HOME + "/.config/agent-sandbox"
    subprocess.run(["install", "-d", "-o", USER, "-g", USER, HOME + "/.config", directory],
                   check=True)
    path = directory + "/sandbox.conf"
    with open(path, "w") as handle:
        handle.write(text)
    os.chown(path, UID, UID)


def setup(wheelhouse):
    subprocess.run(["useradd", "-m", "-u", str(UID), "-U", "-s", "/bin/bash", USER], check=True)
    os.makedirs(PROJECT)
    os.chown(PROJECT, UID, UID)
    steps = [["/usr/bin/python3", "-m", "venv", VENV],
             [VENV + "/bin/python", "-m", "pip", "install", "--quiet", "--no-index",
              "--disable-pip-version-check", "--find-links", wheelhouse, "agent-sandbox"],
             # What a user install adds (docs/install.md): the -IS entry
             # script, the man page, the join interpreter.
             [VENV + "/bin/python", "-I", "-m", "agent_sandbox.cli.userinstall"]]
    for argv in steps:
        result = user_run(argv, timeout=600)
        if result["rc"] != 0:
            return dict(result, step=argv)
    return user_run([LAUNCHER, "version"])


def run(backend):
    # Inside: the project writable; a file made in the home (HOME_ACCESS=
    # tmpwrite: a tmpfs home on bwrap and firejail, EACCES on landlock) never
    # reaches the real home; the command's exit code passed through.
    script = "echo inside > note && cat note; touch $HOME/outside 2>/dev/null; exit 7"
    result = user_run([LAUNCHER, "run", "--backend", backend, "--", "/bin/sh", "-c", script])
    result["home_file_outside"] = os.path.exists(HOME + "/outside")
    if result["home_file_outside"]:
        os.unlink(HOME + "/outside")
    return result


def dry_run(backend):
    return user_run([LAUNCHER, "run", "--backend", backend, "--dry-run", "--", "true"])


def pty_session(backend):
    """An interactive session on a terminal: the sandboxed shell sees a tty,
    reads a line typed at it, and exits with a code of its own."""
    script = 'test -t 0 && echo "tty=yes"; read line; echo "got:$line"; exit 3'
    pid, master = pty.fork()
    if pid == 0:
        try:
            as_user()
            os.chdir(PROJECT)
            os.execve(LAUNCHER, [LAUNCHER, "run", "--backend", backend, "--",
                                 "/bin/sh", "-c", script], environment())
        finally:
            os._exit(127)
    screen = b""
    deadline = time.monotonic() + 60
    typed = False
    while time.monotonic() < deadline:
        if not typed and (b"tty=yes" in screen or b"agent-sandbox:" in screen):
            os.write(master, b"hello\r")
            typed = True
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 4096)
            except OSError:          # EIO: the terminal's last holder closed it
                break
            if not data:
                break
            screen += data
        elif not typed and time.monotonic() > deadline - 50:
            os.write(master, b"hello\r")
            typed = True
    _, status = os.waitpid(pid, 0)
    os.close(master)
    rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else \
        (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
    return {"rc": rc, "screen": screen.decode(errors="replace")}


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def allowlist(backend):
    """NETWORK_MODE=allowlist: the egress proxy lets the sandbox reach the one
    listed server (127.0.0.2:PORT) and nothing else."""
    www = "/tmp/www"
    os.makedirs(www, exist_ok=True)
    with open(www + "/hello.txt", "w") as handle:
        handle.write("hello through the proxy\n")
    server = ThreadingHTTPServer(("127.0.0.2", 0), lambda *a: Quiet(*a, directory=www))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    set_config("NETWORK_MODE=allowlist\nALLOWED_HOSTS+=(127.0.0.2/32:%d)\n" % port)
    probe = ("import sys, urllib.request\n"
             "def fetch(url):\n"
             "    try:\n"
             "        return urllib.request.urlopen(url, timeout=10).read().decode().strip()\n"
             "    except Exception as exc:\n"
             "        return 'refused:' + type(exc).__name__\n"
             "print('listed=' + fetch('http://127.0.0.2:%d/hello.txt'))\n"
             "print('unlisted=' + fetch('http://127.0.0.3:%d/hello.txt'))\n" % (port, port))
    try:
        return user_run([LAUNCHER, "run", "--backend", backend, "--",
                         "/usr/bin/python3", "-c", probe])
    finally:
        set_config("")
        server.shutdown()


def main(argv):
    case = argv[1]
    if case == "setup":
        result = setup(argv[2])
    elif case == "doctor":
        result = user_run([LAUNCHER, "doctor"])
    elif case == "run":
        result = run(argv[2])
    elif case == "dry-run":
        result = dry_run(argv[2])
    elif case == "pty":
        result = pty_session(argv[2])
    elif case == "allowlist":
        result = allowlist(argv[2])
    elif case == "shell":
        # A shell script as the user in the project, outside the sandbox
        # (the control of tests/integration/test_slurm_root.py).
        result = user_run(["/bin/sh", "-c", argv[2]], timeout=240)
    elif case == "sandbox":
        # A shell script as the user through `agent-sandbox run` (issue 32:
        # the chaperon against the root's own Slurm).
        result = user_run([LAUNCHER, "run", "--backend", argv[2], "--", "/bin/sh", "-c",
                           argv[3]], timeout=240)
    else:
        raise SystemExit("platform_smoke.py: unknown case " + case)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    main(sys.argv)
