#!/usr/bin/env bash
# The unit suite and the smoke set under the other CPythons the product
# supports (issue 29: 3.9 through 3.14), one process per Python and per kind,
# all in parallel. Run as root, after scripts/install.sh (which brings the
# default interpreter's run; the smoke set builds its wheel with that install's
# Python and needs the Slurm cluster, started here if it is not running).
#
# Where the interpreters come from: the machine image's pyenv builds
# ($(pyenv root)/versions/X.Y.Z). They are copied to a root-owned,
# world-readable prefix ($AGENT_SANDBOX_PYTHONS, default /opt/agent-sandbox-pythons)
# with their RUNPATH set to $ORIGIN/../lib by patchelf — pyenv's points into
# root's home, which a test user cannot read — so the unprivileged test users
# can run them too. An entry that is an absolute path instead of X.Y names an
# interpreter to use where it is (root-owned and world-readable already: a
# site's /usr/bin/python3.14, a distribution root's). Each gets a virtual
# environment there with the package's dependencies (the ranges of
# pyproject.toml, installed by pip; kept while pyproject.toml is unchanged),
# and runs pytest on this tree (PYTHONPATH). The exit code is 0 only when
# every run passed; each one's log is kept in $AGENT_SANDBOX_PYTHONS/logs.
#
# AGENT_SANDBOX_TEST_PYTHONS: the unit suite's Pythons (default "3.9 3.10 3.12
# 3.13"; arguments go to its pytest, e.g. -x, a narrower path than tests/unit).
# AGENT_SANDBOX_SMOKE_PYTHONS: the smoke set's (tests/integration/
# test_python_smoke.py: a user's venv install from a wheel of this tree, doctor,
# run on each backend, a pty session, an allowlist session, Slurm through the
# chaperon; default "3.9 3.10 3.12 3.13"; "" for none). It runs as the test user
# of AGENT_SANDBOX_TEST_USER against the install of AGENT_SANDBOX_TEST_PREFIX,
# as the integration suite does. One interpreter by hand, e.g. a 3.14:
#   AGENT_SANDBOX_TEST_PYTHONS= AGENT_SANDBOX_SMOKE_PYTHONS=/usr/bin/python3.14 scripts/test-pythons.sh
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${AGENT_SANDBOX_PYTHONS:-/opt/agent-sandbox-pythons}
versions=${AGENT_SANDBOX_TEST_PYTHONS-3.9 3.10 3.12 3.13}
smoke_versions=${AGENT_SANDBOX_SMOKE_PYTHONS-3.9 3.10 3.12 3.13}
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

# An entry's name in file names: X.Y, or the path's with / as _.
tag() { local entry=$1; entry=${entry#/}; echo "${entry//\//_}"; }

# An entry's interpreter: the copy of pyenv's X.Y, or the path itself.
interpreter() {
    local entry=$1
    case $entry in
        /*) echo "$entry" ;;
        *) echo "$prefix/$(basename "$(ls -d "$pyenv_root/versions/$entry".* 2>/dev/null \
                                         | sort -V | tail -1)")/bin/python$entry" ;;
    esac
}

# One interpreter, copied and made relocatable (X.Y), with its environment.
prepare() {
    local version=$1 source target venv python
    if [[ $version != /* ]]; then
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
    fi
    python=$(interpreter "$version")
    if [ ! -x "$python" ]; then
        echo "test-pythons.sh: $python is not an interpreter" >&2
        return 1
    fi
    venv="$prefix/venv-$(tag "$version")"
    if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$venv"
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "${requirements[@]}"
        echo "$stamp" > "$venv/.stamp"
        chmod -R a+rX,go-w "$venv"
    fi
}

entries=$(printf '%s\n' $versions $smoke_versions | awk '!seen[$0]++')
for version in $entries; do
    prepare "$version" > "$prefix/logs/prepare-$(tag "$version").log" 2>&1 &
done
failed=()
for job in $(jobs -p); do wait "$job" || failed+=(prepare); done
if [ ${#failed[@]} -gt 0 ]; then
    tail -n 20 "$prefix"/logs/prepare-*.log >&2
    exit 1
fi
if [ -n "$smoke_versions" ]; then    # once, before the parallel runs (idempotent)
    "$repo/scripts/slurm-cluster.sh" start > "$prefix/logs/slurm-start.log" 2>&1 || {
        tail -n 20 "$prefix/logs/slurm-start.log" >&2; exit 1; }
fi

cd "$repo"
declare -A pids logs
all_start=$SECONDS
run() {     # KIND ENTRY LOG PYTEST-ARGS...: one pytest in the background, timed
    local kind=$1 entry=$2 log=$3 smoke=""
    shift 3
    [ "$kind" = smoke ] && smoke=$(interpreter "$entry")
    logs["$kind $entry"]=$log
    rm -f "$log.seconds"
    (
        start=$SECONDS
        rc=0
        PYTHONPATH="$repo" PYTHONDONTWRITEBYTECODE=1 AGENT_SANDBOX_SMOKE_PYTHON=$smoke \
            "$prefix/venv-$(tag "$entry")/bin/python" -m pytest -p no:cacheprovider -q -ra \
            "$@" > "$log" 2>&1 || rc=$?
        echo "$((SECONDS - start))" > "$log.seconds"
        exit "$rc"
    ) &
    pids["$kind $entry"]=$!
}
for version in $versions; do
    run unit "$version" "$prefix/logs/unit-$(tag "$version").log" "${paths[@]}"
done
for version in $smoke_versions; do
    run smoke "$version" "$prefix/logs/smoke-$(tag "$version").log" \
        tests/integration/test_python_smoke.py
done
rc=0
for key in "${!pids[@]}"; do
    log=${logs[$key]}
    if wait "${pids[$key]}"; then
        echo "test-pythons.sh: $key: $(tail -n 1 "$log") ($(cat "$log.seconds") s wall)"
    else
        rc=1
        echo "test-pythons.sh: $key FAILED ($log):" >&2
        grep -E '^(FAILED|ERROR) ' "$log" >&2 || tail -n 30 "$log" >&2
        tail -n 1 "$log" >&2
    fi
done
echo "test-pythons.sh: all runs in parallel: $((SECONDS - all_start)) s wall"
exit "$rc"
