"""`python -m agent_sandbox.cli.userinstall [--mandir DIR] [--no-join]`:
what scripts/install.sh adds to a plain install, added to the install this
interpreter runs (a venv, pipx or uv tool install, or a site's venv).

Strategy: three files, each written beside a temporary name and renamed
into place, each one the user could have made by hand:

- the entry script `<prefix>/bin/agent-sandbox`, in place of pip's: the
  interpreter in isolated mode without `site` (`-IS`), the package's
  site-packages named explicitly — PYTHON* variables (PYTHONPATH, which HPC
  modules set) and the user site never reach the launcher, and a warm launch
  pays neither for site's .pth files nor for pip's script (issue 19). pipx's
  and uv's links in ~/.local/bin point at this file, so they follow;
- the man page, generated from the command tree (cli/manpage.py), into
  `<prefix>/share/man/man1` (man-db finds it from a bin/ on PATH) or --mandir;
- the join interpreter `<prefix>/libexec/python3-join`: a copy of the
  helper's interpreter that the user it runs as cannot read — root's with
  mode 0711 when root runs this (install.sh), else the user's own with mode
  0100. `firejail --join` execs the helper with it inside a job's sandbox,
  and the kernel makes a process that execs a file it cannot read
  non-dumpable from the start, so no member of the sandbox can ptrace it or
  write its memory before it loads its seccomp filter (jobs/join.py
  join_python). The user's copy is as good against the sandbox: the install
  is read-only inside (self.protected), so nothing inside can chmod it.
  It is checked to run; a Python that cannot run from another directory
  (a shared libpython found relative to its own path) is not kept.

Run again after every upgrade (pip, pipx and uv rewrite the entry script).
Not done at first use: a launch that rewrites its own install would race
with a concurrent upgrade and pay for it on every launch path.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig


def entry_script(venv: str, site_packages: str) -> str:
    """The `-IS` entry script's text (pure)."""
    return (f"#!{venv}/bin/python -IS\n"
            "# Written by agent_sandbox/cli/userinstall.py: isolated, without site;\n"
            "# what site does for a virtual environment, done here.\n"
            "import sys\n"
            f"sys.prefix = sys.exec_prefix = {venv!r}\n"
            f"sys.path.append({site_packages!r})\n"
            "from agent_sandbox.cli import exit_now, main\n"
            "exit_now(main())\n")


def join_mode(uid: int) -> int:
    """Execute-only for whoever runs it: root's 0711, a user's own 0100."""
    return 0o711 if uid == 0 else 0o100


def _replace(path: str, data: bytes, mode: int) -> None:
    temporary = f"{path}.tmp{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def write_entry(venv: str) -> str:
    # The "venv" scheme is Python 3.11's; before, a venv's is posix_prefix.
    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    site_packages = sysconfig.get_path("purelib", scheme, vars={"base": venv, "platbase": venv})
    path = os.path.join(venv, "bin", "agent-sandbox")
    _replace(path, entry_script(venv, site_packages).encode(), 0o755)
    return path


def write_man_page(mandir: str) -> str:
    import datetime

    import typer

    from agent_sandbox import __version__
    from agent_sandbox.cli.app import app
    from agent_sandbox.cli.manpage import render

    os.makedirs(mandir, exist_ok=True)
    path = os.path.join(mandir, "agent-sandbox.1")
    text = render(typer.main.get_command(app), version=__version__,
                  date=datetime.date.today().isoformat())
    _replace(path, text.encode(), 0o644)
    return path


def write_join(venv: str) -> tuple[str | None, str]:
    """(path, "") or (None, why not)."""
    from agent_sandbox.process.select import helper_python

    source = os.path.realpath(helper_python())
    libexec = os.path.join(venv, "libexec")
    os.makedirs(libexec, mode=0o755, exist_ok=True)
    path = os.path.join(libexec, "python3-join")
    with open(source, "rb") as handle:
        data = handle.read()
    _replace(path, data, join_mode(os.getuid()))
    try:
        works = subprocess.run([path, "-I", "-S", "-c", "pass"], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=30, env={},
                               cwd="/").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    if not works:
        os.unlink(path)
        return None, (f"{source} does not run from another directory (its libraries are "
                      "found relative to its own path); firejail job steps cannot join — "
                      "use bwrap or landlock for jobs, or a Python installed as one file "
                      "(the system's python3)")
    return path, ""


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agent_sandbox.cli.userinstall",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--mandir", help="where agent-sandbox.1 goes "
                        "(default: PREFIX/share/man/man1)")
    parser.add_argument("--no-entry", action="store_true", help="keep the entry script")
    parser.add_argument("--no-join", action="store_true", help="no join interpreter")
    args = parser.parse_args(argv)
    venv = sys.prefix
    if venv == sys.base_prefix:
        print("userinstall: this interpreter is not a virtual environment's — install "
              "agent-sandbox into a venv, pipx or uv tool first (docs/install.md)",
              file=sys.stderr)
        return 1
    if not args.no_entry:
        print(f"userinstall: entry script {write_entry(venv)} (-IS)")
    mandir = args.mandir or os.path.join(venv, "share", "man", "man1")
    print(f"userinstall: man page {write_man_page(mandir)}")
    if not args.no_join:
        path, why = write_join(venv)
        print(f"userinstall: join interpreter {path}" if path else f"userinstall: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
