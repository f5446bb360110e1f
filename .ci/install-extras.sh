#!/usr/bin/env bash
# Extra system tools the test suite needs beyond the Python virtualenv. Idempotent: each section
# checks before it installs. Called by .ci/run before `make test`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export SUDO

# -- OIDC: oauth2-mock-server (npm), a real identity provider for tests/gateway/test_oidc.py ------
# Installed project-locally under tests/.node (git-ignored); the test session installs it the same
# way if it is missing. Needs node and npm (Debian: nodejs, npm).
OAUTH2_MOCK_SERVER_VERSION="9.3.0"
if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
if [ ! -x tests/.node/node_modules/.bin/oauth2-mock-server ]; then
    mkdir -p tests/.node
    npm install --prefix tests/.node --no-audit --no-fund --loglevel=error \
        "oauth2-mock-server@${OAUTH2_MOCK_SERVER_VERSION}"
fi

# -- Rate limits: redis-server (Debian), the shared-budget store for tests/gateway/test_ratelimit.py --
# tests/support/redis.py starts it on a free loopback port with persistence off.
if ! command -v redis-server >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends redis-server
fi
# The Debian package starts a system-wide instance on :6379; the tests do not use it.

# -- deploy/: docker-compose (Debian) validates deploy/compose.yaml offline ---------------------
# tests/deploy/test_compose_and_image.py runs `docker-compose config`, which needs no engine.
if ! command -v docker-compose >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends docker-compose
fi
