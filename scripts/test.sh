#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian 12 machine (as root) and run
# the whole test suite. The integration tests create an unprivileged user and run
# the real backends on the real kernel as that user.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AGENT_SANDBOX_EXTRAS=test "$repo/scripts/install.sh"
cd "$repo"
exec /opt/agent-sandbox/venv/bin/python -m pytest -p no:cacheprovider -ra "$@" tests
