#!/usr/bin/env bash
# Install agent-sandbox the way a site would (run as root):
#   - the Debian packages it needs (bubblewrap, firejail, libseccomp, util-linux, python3-venv)
#   - a virtual environment built from Debian's /usr/bin/python3 in a world-readable
#     prefix (default /opt/agent-sandbox), holding agent-sandbox and its dependencies
#   - /usr/local/bin/agent-sandbox on every user's PATH
# Environment: AGENT_SANDBOX_PREFIX (install prefix), AGENT_SANDBOX_EXTRAS (e.g. "test"),
#   AGENT_SANDBOX_ADMIN_DIR (the admin directory, default /etc/agent-sandbox).
set -euo pipefail

prefix=${AGENT_SANDBOX_PREFIX:-/opt/agent-sandbox}
extras=${AGENT_SANDBOX_EXTRAS:-}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: run as root (it installs Debian packages and writes $prefix)" >&2
    exit 1
fi

# install_missing [APT OPTIONS --] PACKAGE...: the Debian packages not installed yet.
install_missing() {
    local options=() missing=() package
    if [[ " $* " == *" -- "* ]]; then
        while [ "$1" != "--" ]; do options+=("$1"); shift; done
        shift
    fi
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "install.sh: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${options[@]}" "${missing[@]}" \
            >/dev/null
    fi
}
install_missing bubblewrap firejail libseccomp2 util-linux passwd python3 python3-venv
# The test extras also run MPI jobs (tests/integration/test_mpi.py): Open MPI with
# mpi4py, and libpmix-dev, whose libpmix.so Slurm's mpi/pmix plugin loads (slurmd
# loads it when it starts: start the clusters after this); and the clients the
# network tests drive through the egress proxy (curl, git) and make their test CA
# with (openssl); strace, which holds bwrap's setup for the killed-launcher test
# (tests/adversarial/test_placeholders.py). Never in a production install.
case ",$extras," in
    *,test,*) install_missing --no-install-recommends -- openmpi-bin python3-mpi4py libpmix-dev \
                  curl git openssl ca-certificates strace ;;
esac

umask 022
if [ ! -x "$prefix/venv/bin/python" ]; then
    /usr/bin/python3 -m venv "$prefix/venv"
fi
spec="$repo"
[ -n "$extras" ] && spec="$repo[$extras]"
# Build from a copy so that a source tree only root can read still installs.
"$prefix/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-warn-script-location --upgrade --force-reinstall --no-deps "$repo"
"$prefix/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-warn-script-location "$spec"
# The admin directory, fixed at install time (agent_sandbox/paths.py): written
# into the installed package only when the site chose another one.
"$prefix/venv/bin/python" -I - "${AGENT_SANDBOX_ADMIN_DIR:-}" <<'PY'
import os, sys
import agent_sandbox
site = os.path.join(os.path.dirname(agent_sandbox.__file__), "_site.py")
admin_dir = sys.argv[1]
if admin_dir in ("", "/etc/agent-sandbox"):
    if os.path.exists(site):
        os.unlink(site)
else:
    if not os.path.isabs(admin_dir) or os.path.normpath(admin_dir) != admin_dir:
        sys.exit(f"install.sh: AGENT_SANDBOX_ADMIN_DIR must be a normalised absolute path, not {admin_dir!r}")
    with open(site, "w") as out:
        out.write(f"# Written by scripts/install.sh: the admin directory of this install.\nADMIN_DIR = {admin_dir!r}\n")
    import py_compile   # users cannot write the package's __pycache__: compiled here, once
    py_compile.compile(site, doraise=True)
PY
# The launcher's entry script, in place of pip's: the interpreter in isolated
# mode without `site` (-IS), the package's site-packages named explicitly.
# PYTHON* variables and the user's site directory never reach the launcher,
# and a warm launch pays neither for site (.pth files) nor for the `re`
# import of pip's script (issue 19; benchmarks/launch.py). The venv holds
# only our dependencies, none of which needs a .pth file.
"$prefix/venv/bin/python" -I - "$prefix/venv" <<'PY'
import os, sys, sysconfig
venv = sys.argv[1]
site_packages = sysconfig.get_path("purelib", "venv", vars={"base": venv})
entry = os.path.join(venv, "bin", "agent-sandbox")
with open(entry + ".tmp", "w") as out:
    out.write(f"#!{venv}/bin/python -IS\n"
              "# Written by scripts/install.sh (see there): isolated, without site;\n"
              "# what site does for a virtual environment, done here.\n"
              "import sys\n"
              f"sys.prefix = sys.exec_prefix = {venv!r}\n"
              f"sys.path.append({site_packages!r})\n"
              "from agent_sandbox.cli import exit_now, main\n"
              "exit_now(main())\n")
os.chmod(entry + ".tmp", 0o755)
os.replace(entry + ".tmp", entry)
PY
chmod -R a+rX "$prefix"
# An execute-only copy of the helper's interpreter (after the chmod above,
# which would make it readable): `firejail --join` execs the helper already
# inside a job's sandbox, and the kernel makes a process that execs a file it
# cannot read non-dumpable from the start, so no member of the sandbox can
# ptrace it or write its memory before it has loaded its seccomp filter
# (jobs/join.py join_plan, docs/design.md "Jobs: one sandbox per node").
mkdir -p "$prefix/venv/libexec"
install -m 0711 -o root -g root "$(readlink -f /usr/bin/python3)" "$prefix/venv/libexec/python3-join.tmp"
mv -f "$prefix/venv/libexec/python3-join.tmp" "$prefix/venv/libexec/python3-join"
ln -sf "$prefix/venv/bin/agent-sandbox" /usr/local/bin/agent-sandbox
# The man page, generated from the installed command tree (agent_sandbox/cli/manpage.py).
mandir=${AGENT_SANDBOX_MANDIR:-/usr/local/share/man/man1}
mkdir -p "$mandir"
"$prefix/venv/bin/python" -m agent_sandbox.cli.manpage > "$mandir/agent-sandbox.1.tmp"
mv "$mandir/agent-sandbox.1.tmp" "$mandir/agent-sandbox.1"
chmod 0644 "$mandir/agent-sandbox.1"
echo "install.sh: agent-sandbox $("$prefix/venv/bin/agent-sandbox" version) installed in $prefix"
