#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian 12 machine (as root) and run
# the whole test suite. The integration tests create an unprivileged user and run
# the real backends on the real kernel as that user.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AGENT_SANDBOX_EXTRAS=test "$repo/scripts/install.sh"
cd "$repo"

# The real agent CLIs for tests/integration/test_agents.py, at the versions
# pinned in tests/integration/agent-versions.txt, in a world-readable prefix
# (Node and npm from Debian). Skipped when those versions are already there.
agents=${AGENT_SANDBOX_TEST_AGENTS:-/opt/agent-sandbox-agents}
mapfile -t agent_specs < <(grep -v '^#' "$repo/tests/integration/agent-versions.txt")
if ! command -v npm >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
installed_specs=()
for spec in "${agent_specs[@]}"; do
    name=${spec%@*}
    version=$(node -p "require('$agents/node_modules/$name/package.json').version" 2>/dev/null || true)
    installed_specs+=("$name@$version")
done
if [ "${installed_specs[*]}" != "${agent_specs[*]}" ]; then
    echo "test.sh: installing ${agent_specs[*]} into $agents"
    (umask 022 && npm install --prefix "$agents" --no-audit --no-fund --loglevel=error "${agent_specs[@]}")
fi
chmod -R a+rX "$agents"

# Real Slurm clusters for the chaperon's tests — the single-node one and the
# multi-node one beside it — stopped whatever the tests do: the exit code is
# pytest's, or 1 when only a stop failed.
stop_slurm() {
    local rc=$?
    trap - EXIT
    if ! "$repo/scripts/slurm-multinode.sh" stop; then
        echo "test.sh: scripts/slurm-multinode.sh stop failed" >&2
        if ((rc == 0)); then rc=1; fi
    fi
    # The Slurm 24.11 root's cluster (tests/integration/test_slurm_root.py stops
    # it itself; this covers a killed run). Only what its start started.
    if ! "$repo/scripts/slurm-root-cluster.sh" stop trixie; then
        echo "test.sh: scripts/slurm-root-cluster.sh stop failed" >&2
        if ((rc == 0)); then rc=1; fi
    fi
    if ! "$repo/scripts/slurm-cluster.sh" stop; then
        echo "test.sh: scripts/slurm-cluster.sh stop failed" >&2
        if ((rc == 0)); then rc=1; fi
    fi
    exit "$rc"
}
trap stop_slurm EXIT
"$repo/scripts/slurm-cluster.sh" start
"$repo/scripts/slurm-multinode.sh" start

# The older distribution the smoke set runs in (tests/integration/test_platform_roots.py,
# issue 30): a Debian 11 root made with debootstrap once (a few minutes on a
# fresh machine, cached under /var/cache/agent-sandbox-roots), before pytest so
# that its time does not count against a test's timeout.
# AGENT_SANDBOX_TEST_PLATFORM_SUITES="bullseye sid" adds Python 3.14 (issue 29).
for suite in ${AGENT_SANDBOX_TEST_PLATFORM_SUITES:-bullseye}; do
    "$repo/scripts/platform-root.sh" build "$suite" >/dev/null
done
# Slurm 24.11 with auth/slurm and sackd (tests/integration/test_slurm_root.py,
# issue 32): a Debian 13 root with slurmctld, slurmd, slurm-client and sackd
# (about 3 minutes cold, cached after); the test module starts and stops its
# cluster (scripts/slurm-root-cluster.sh).
AGENT_SANDBOX_ROOT_EXTRA="slurmctld slurmd slurm-client sackd" \
    "$repo/scripts/platform-root.sh" build trixie >/dev/null

rc=0
# The smoke set (tests/integration/test_python_smoke.py) runs below, with the
# other Pythons', in parallel.
/opt/agent-sandbox/venv/bin/python -m pytest -p no:cacheprovider -ra \
    --ignore=tests/integration/test_python_smoke.py "$@" tests || rc=$?
# After the default interpreter's whole run, all in parallel
# (scripts/test-pythons.sh, its logs in /opt/agent-sandbox-pythons/logs): the
# unit suite under the oldest and the newest other CPython the package claims
# (pyproject's requires-python; issue 29), and the smoke set — a user's venv
# install, doctor, run on each backend, a pty session, an allowlist session,
# Slurm through the chaperon — under 3.9, 3.10 and 3.12 (3.13 runs the unit
# suite; the system python3 runs everything above; Debian 11's own 3.9 runs
# the platform root's smoke set; 3.14 is Debian sid's, by hand:
# AGENT_SANDBOX_TEST_PLATFORM_SUITES=sid — its root costs ~4.5 min cold).
if ! AGENT_SANDBOX_TEST_PYTHONS="3.9 3.13" \
        AGENT_SANDBOX_SMOKE_PYTHONS="3.9 3.10 3.12" \
        "$repo/scripts/test-pythons.sh"; then
    echo "test.sh: the unit suite or the smoke set failed under another Python (scripts/test-pythons.sh)" >&2
    if ((rc == 0)); then rc=1; fi
fi
exit "$rc"
