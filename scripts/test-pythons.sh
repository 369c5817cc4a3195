#!/usr/bin/env bash
# The unit suite under the other CPythons the product supports (issue 29:
# 3.9 through 3.14), one process per Python, in parallel. Run as root, after
# scripts/install.sh (which brings the default interpreter's run).
#
# Where the interpreters come from: the machine image's pyenv builds
# ($(pyenv root)/versions/X.Y.Z). They are copied to a root-owned,
# world-readable prefix ($AGENT_SANDBOX_PYTHONS, default /opt/agent-sandbox-pythons)
# with their RUNPATH set to $ORIGIN/../lib by patchelf — pyenv's points into
# root's home, which a test user cannot read — so the unprivileged test users
# can run them too. Each gets a virtual environment there with the package's
# dependencies (the ranges of pyproject.toml, installed by pip; kept while
# pyproject.toml is unchanged), and runs `pytest tests/unit` on this tree
# (PYTHONPATH). The exit code is 0 only when every Python passed; each one's
# log is kept in $AGENT_SANDBOX_PYTHONS/logs.
#
# AGENT_SANDBOX_TEST_PYTHONS: the versions (default "3.9 3.10 3.12 3.13");
# arguments go to pytest (e.g. -x, a narrower path than tests/unit).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${AGENT_SANDBOX_PYTHONS:-/opt/agent-sandbox-pythons}
versions=${AGENT_SANDBOX_TEST_PYTHONS:-3.9 3.10 3.12 3.13}
default_python=${AGENT_SANDBOX_DEFAULT_PYTHON:-/opt/agent-sandbox/venv/bin/python}
pyenv_root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-/root/.pyenv}")
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests/unit)

if ! command -v patchelf >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null
fi
umask 022
mkdir -p "$prefix/logs"

# The dependencies, from pyproject.toml (read by the default interpreter:
# tomllib is 3.11+), with the test extra; the stamp says when to reinstall.
mapfile -t requirements < <("$default_python" - "$repo/pyproject.toml" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["test"]))
EOF
)
stamp=$(printf '%s\n' "${requirements[@]}" | sha256sum | cut -c1-16)

# One interpreter, copied and made relocatable, with its environment.
prepare() {
    local version=$1 source target venv
    source=$(ls -d "$pyenv_root/versions/$version".* 2>/dev/null | sort -V | tail -1)
    if [ -z "$source" ]; then
        echo "test-pythons.sh: no pyenv CPython $version in $pyenv_root/versions" >&2
        return 1
    fi
    target="$prefix/$(basename "$source")"
    if [ ! -x "$target/bin/python$version" ]; then
        rm -rf "$target.tmp"
        cp -a "$source" "$target.tmp"
        for binary in "$target.tmp/bin/python$version" "$target.tmp"/lib/libpython*.so.*; do
            [ -f "$binary" ] && [ ! -L "$binary" ] && patchelf --set-rpath '$ORIGIN/../lib' "$binary"
        done
        chown -R root:root "$target.tmp"
        chmod -R a+rX,go-w "$target.tmp"
        mv "$target.tmp" "$target"
    fi
    venv="$prefix/venv-$version"
    if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$venv"
        "$target/bin/python$version" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "${requirements[@]}"
        echo "$stamp" > "$venv/.stamp"
        chmod -R a+rX,go-w "$venv"
    fi
}

for version in $versions; do
    prepare "$version" > "$prefix/logs/prepare-$version.log" 2>&1 &
done
failed=()
for job in $(jobs -p); do wait "$job" || failed+=(prepare); done
if [ ${#failed[@]} -gt 0 ]; then
    tail -n 20 "$prefix"/logs/prepare-*.log >&2
    exit 1
fi

cd "$repo"
declare -A pids
for version in $versions; do
    PYTHONPATH="$repo" PYTHONDONTWRITEBYTECODE=1 "$prefix/venv-$version/bin/python" -m pytest \
        -p no:cacheprovider -q -ra "${paths[@]}" > "$prefix/logs/unit-$version.log" 2>&1 &
    pids[$version]=$!
done
rc=0
for version in $versions; do
    if wait "${pids[$version]}"; then
        echo "test-pythons.sh: Python $version: $(tail -n 1 "$prefix/logs/unit-$version.log")"
    else
        rc=1
        echo "test-pythons.sh: Python $version FAILED ($prefix/logs/unit-$version.log):" >&2
        grep -E '^(FAILED|ERROR) ' "$prefix/logs/unit-$version.log" >&2 || \
            tail -n 30 "$prefix/logs/unit-$version.log" >&2
        tail -n 1 "$prefix/logs/unit-$version.log" >&2
    fi
done
exit "$rc"
