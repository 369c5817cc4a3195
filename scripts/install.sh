#!/usr/bin/env bash
# Install agent-sandbox the way a site would (run as root):
#   - the distribution's packages it needs (bubblewrap, firejail, libseccomp, a
#     Python with venv) with apt (Debian, Ubuntu), dnf (RHEL, Rocky, Alma, Fedora;
#     firejail from EPEL) or zypper (SLES, openSUSE); on any other host nothing is
#     installed: what is missing is checked and named, and the install stops
#   - a virtual environment built from that Python in a world-readable, root-owned
#     prefix (default /opt/agent-sandbox), holding agent-sandbox and its dependencies
#   - /usr/local/bin/agent-sandbox on every user's PATH, the man page, and with
#     AGENT_SANDBOX_MODULEFILES a modulefile (`module load agent-sandbox`)
# Environment: AGENT_SANDBOX_PREFIX (install prefix), AGENT_SANDBOX_EXTRAS (e.g. "test"),
#   AGENT_SANDBOX_ADMIN_DIR (the admin directory, default /etc/agent-sandbox),
#   AGENT_SANDBOX_PYTHON (the interpreter, default /usr/bin/python3),
#   AGENT_SANDBOX_MANDIR (default /usr/local/share/man/man1),
#   AGENT_SANDBOX_MODULEFILES (a modulefiles directory: writes agent-sandbox/VERSION there),
#   AGENT_SANDBOX_PACKAGES=none (install no package, only check),
#   AGENT_SANDBOX_BIN_LINK (the command's link on PATH, default
#   /usr/local/bin/agent-sandbox; empty: none — a second install beside the
#   site's, e.g. a baseline for benchmarks/, leaves the site's link alone).
set -euo pipefail

prefix=${AGENT_SANDBOX_PREFIX:-/opt/agent-sandbox}
extras=${AGENT_SANDBOX_EXTRAS:-}
python=${AGENT_SANDBOX_PYTHON:-/usr/bin/python3}
admin_dir=${AGENT_SANDBOX_ADMIN_DIR:-/etc/agent-sandbox}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The oldest Python the package runs on: pyproject.toml's requires-python.
min_python=$(sed -n 's/^requires-python *= *">=\([0-9.]*\)".*/\1/p' "$repo/pyproject.toml")

if [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: run as root (it installs the distribution's packages and writes $prefix);" \
         "without root see docs/install.md (a venv, pipx or uv tool install)" >&2
    exit 1
fi

# A Python that is there but too old — the python3 of RHEL/Rocky/Alma 8 and
# SLES 15 is 3.6 — is said at once, with the route, before anything is
# installed (docs/install.md, "Hosts whose python3 is 3.6").
if [ -x "$python" ] && ! "$python" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$min_python'.split('.'))))" 2>/dev/null; then
    found=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo "?")
    cat >&2 <<EOF
install.sh: $python is Python $found — agent-sandbox needs Python $min_python or newer (RHEL/Rocky/Alma 8 and SLES 15 ship 3.6 as python3). Install a newer Python beside it and name it, then run install.sh again:
  RHEL/Rocky/Alma 8:  dnf install python3.11 (or python39)  then  AGENT_SANDBOX_PYTHON=/usr/bin/python3.11 scripts/install.sh
  SLES 15 SP4+:       zypper install python311               then  AGENT_SANDBOX_PYTHON=/usr/bin/python3.11 scripts/install.sh
  a module's or conda's Python $min_python+ outside users' writable paths:  AGENT_SANDBOX_PYTHON=/path/to/bin/python3 scripts/install.sh
(docs/install.md, "Hosts whose python3 is 3.6")
EOF
    exit 1
fi

# The package manager: the distribution's family from /etc/os-release, then
# whichever manager is there.
manager=none
if [ "${AGENT_SANDBOX_PACKAGES:-}" != none ]; then
    # AGENT_SANDBOX_OS_RELEASE: another os-release file (tests/integration/test_install_routes.py)
    family=$( (. "${AGENT_SANDBOX_OS_RELEASE:-/etc/os-release}" 2>/dev/null
               echo "${ID:-} ${ID_LIKE:-}") || true)
    case " $family " in
        *" debian "*|*" ubuntu "*) command -v apt-get >/dev/null && manager=apt ;;
        *" rhel "*|*" fedora "*|*" centos "*|*" rocky "*) command -v dnf >/dev/null && manager=dnf ;;
        *" suse "*|*" sles "*|*" opensuse "*) command -v zypper >/dev/null && manager=zypper ;;
    esac
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

# rpm_install TOOL PACKAGE...: the rpm packages not installed yet; one that the
# configured repositories lack (firejail without EPEL or PackageHub) is named
# and skipped: firejail is one backend of three.
rpm_install() {
    local tool=$1 package; shift
    for package in "$@"; do
        rpm -q --whatprovides "$package" >/dev/null 2>&1 && continue
        echo "install.sh: installing $package"
        if [ "$tool" = dnf ]; then
            dnf install -y -q "$package" >/dev/null 2>&1 \
                || echo "install.sh: $package is not in the configured repositories — skipped" \
                        "(firejail: enable EPEL, dnf install epel-release)" >&2
        else
            zypper --non-interactive --quiet install "$package" >/dev/null 2>&1 \
                || echo "install.sh: $package is not in the configured repositories — skipped" \
                        "(firejail: enable PackageHub, SUSEConnect -p PackageHub/…)" >&2
        fi
    done
}

case $manager in
    apt)
        install_missing bubblewrap firejail libseccomp2 util-linux passwd python3 python3-venv
        # The test extras also run MPI jobs (tests/integration/test_mpi.py): Open MPI with
        # mpi4py, and libpmix-dev, whose libpmix.so Slurm's mpi/pmix plugin loads (slurmd
        # loads it when it starts: start the clusters after this); and the clients the
        # network tests drive through the egress proxy (curl, git) and make their test CA
        # with (openssl); strace, which holds bwrap's setup for the killed-launcher test
        # (tests/adversarial/test_placeholders.py); environment-modules, whose modulecmd.tcl
        # loads the modulefile template (tests/integration/test_install_routes.py).
        # Never in a production install.
        case ",$extras," in
            *,test,*) install_missing --no-install-recommends -- openmpi-bin python3-mpi4py \
                          libpmix-dev curl git openssl ca-certificates strace \
                          environment-modules ;;
        esac ;;
    dnf) rpm_install dnf bubblewrap firejail libseccomp util-linux python3 ;;
    zypper) rpm_install zypper bubblewrap firejail libseccomp2 util-linux python3 ;;
esac

# What the install needs, checked whichever way it came (the only check on a
# host whose package manager this script does not know): a Python new enough
# with venv and ensurepip, libseccomp; bubblewrap or firejail (landlock needs
# no program, but a kernel with Landlock: agent-sandbox doctor says).
missing=()
if ! "$python" -c "import sys, venv, ensurepip; sys.exit(sys.version_info < tuple(map(int, '$min_python'.split('.'))))" 2>/dev/null; then
    missing+=("a Python >= $min_python with venv and ensurepip at $python (RHEL 8: dnf install python3.11, then AGENT_SANDBOX_PYTHON=/usr/bin/python3.11; SLES 15: zypper install python311; Debian/Ubuntu: python3-venv)")
fi
# grep reads all of ldconfig's output (no -q): with pipefail, a grep that
# stops at the first match can leave ldconfig to die of SIGPIPE and the
# check to fail with the library present (seen once).
if ! ldconfig -p 2>/dev/null | grep 'libseccomp\.so\.2' >/dev/null; then
    missing+=("libseccomp (libseccomp2 on Debian/SUSE, libseccomp on RHEL)")
fi
if ! command -v bwrap >/dev/null && ! command -v firejail >/dev/null; then
    echo "install.sh: neither bubblewrap nor firejail is installed — only the landlock backend" \
         "can run (install bubblewrap >= 0.4 for the full sandbox)" >&2
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "install.sh: missing (package manager: $manager):" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
fi

umask 022
if [ ! -x "$prefix/venv/bin/python" ]; then
    "$python" -m venv "$prefix/venv"
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
"$prefix/venv/bin/python" -I - "$admin_dir" <<'PY'
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
chmod -R a+rX "$prefix"
# What a plain pip install lacks, written by the package's own tool (one
# source for a site and a user install, agent_sandbox/cli/userinstall.py):
# the launcher's entry script in place of pip's (`-IS`: PYTHON* variables and
# the user's site never reach the launcher, and a warm launch pays neither for
# site nor for pip's script; issue 19), the man page generated from the
# command tree, and — after the chmod above, which would make it readable — the
# root-owned execute-only copy of the helper's interpreter that `firejail
# --join` execs inside a job's sandbox (non-dumpable from its exec: no member
# can ptrace it before it loads its seccomp filter; jobs/join.py).
mandir=${AGENT_SANDBOX_MANDIR:-/usr/local/share/man/man1}
"$prefix/venv/bin/python" -I -m agent_sandbox.cli.userinstall --mandir "$mandir"
bin_link=${AGENT_SANDBOX_BIN_LINK-/usr/local/bin/agent-sandbox}
if [ -n "$bin_link" ]; then
    ln -sf "$prefix/venv/bin/agent-sandbox" "$bin_link"
fi
# A modulefile for Lmod and environment-modules (conf/modulefiles/agent-sandbox.tcl).
if [ -n "${AGENT_SANDBOX_MODULEFILES:-}" ]; then
    version=$("$prefix/venv/bin/agent-sandbox" version | awk '{print $NF}')
    mkdir -p "$AGENT_SANDBOX_MODULEFILES/agent-sandbox"
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@ADMIN_DIR@|$admin_dir|g" -e "s|@VERSION@|$version|g" \
        -e "s|@MANDIR@|$(dirname "$mandir")|g" "$repo/conf/modulefiles/agent-sandbox.tcl" \
        > "$AGENT_SANDBOX_MODULEFILES/agent-sandbox/$version"
    chmod 0644 "$AGENT_SANDBOX_MODULEFILES/agent-sandbox/$version"
    echo "install.sh: modulefile $AGENT_SANDBOX_MODULEFILES/agent-sandbox/$version"
fi
echo "install.sh: agent-sandbox $("$prefix/venv/bin/agent-sandbox" version) installed in $prefix"
