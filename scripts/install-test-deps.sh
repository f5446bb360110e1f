#!/usr/bin/env bash
# Everything the test suite needs beyond the Python virtualenv, installed only when missing.
# Run by `make test` (target test-deps) before the virtualenv is created; safe to run by hand.
#
#   Debian packages (apt-get, through sudo unless root), each checked before anything installs:
#     python3 + venv support   the interpreter make creates .venv with ($PYTHON, default python3)
#     make                     to run `make test` itself (when this script is run by hand)
#     openjdk-17-jdk-headless  java, javac and keytool: PySpark, Iceberg's compatibility kit
#                              (tests/rck, compiled by tests/support/rck.py), the TLS truststore tests
#     junit5                   JUnit's console launcher, which runs the compatibility kit
#     libassertj-core-java     AssertJ, which the compatibility kit's assertions use
#     postgresql-15            /usr/lib/postgresql/15/bin: the private PostgreSQL of tests/support/postgres.py
#     util-linux               runuser: PostgreSQL runs as an unprivileged user when the tests run as root
#     nodejs, npm              for oauth2-mock-server
#     redis-server             the shared rate-limit store of tests/gateway/test_ratelimit.py
#     docker-compose           `docker-compose config` validates deploy/compose.yaml (no engine needed)
#   npm, project-locally (tests/.node, git-ignored):
#     oauth2-mock-server       the identity provider of tests/gateway/test_oidc.py, at the version
#                              pinned in tests/support/idp.py
#
# When everything is present this only checks (no apt-get update, no network) and says so.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
NODE_DIR="tests/.node"

log() { printf '==> test-deps: %s\n' "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }

# runuser lives in /usr/sbin, which is not on a non-root user's PATH on Debian.
have_runuser() { have runuser || [ -x /usr/sbin/runuser ] || [ -x /sbin/runuser ]; }

# The Debian package that gives $PYTHON its venv module and ensurepip (python3.X-venv).
python_venv_package() {
    local version
    version="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    printf 'python%s-venv\n' "$version"
}

# Debian packages missing on this machine, one per line.
missing_packages() {
    if ! have "$PYTHON"; then
        printf '%s\n' python3 python3-venv python3-dev
    elif ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        python_venv_package
    fi
    have make || echo make
    { have java && have javac && have keytool; } || echo openjdk-17-jdk-headless
    [ -f /usr/share/java/junit-platform-console-standalone.jar ] || echo junit5
    [ -f /usr/share/java/assertj-core.jar ] || echo libassertj-core-java
    [ -x /usr/lib/postgresql/15/bin/initdb ] || echo postgresql-15
    have_runuser || echo util-linux
    have node || echo nodejs
    have npm || echo npm
    have redis-server || echo redis-server
    have docker-compose || echo docker-compose
}

installed=()

mapfile -t packages < <(missing_packages)
if [ "${#packages[@]}" -gt 0 ]; then
    if ! have apt-get; then
        echo "test-deps: missing ${packages[*]} (Debian package names) and no apt-get to install them" >&2
        exit 1
    fi
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        have sudo || { echo "test-deps: need root or sudo to install: ${packages[*]}" >&2; exit 1; }
        SUDO=(sudo)
    fi
    log "installing Debian packages: ${packages[*]}"
    # env, not export: sudo resets the environment.
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${packages[@]}"
    installed+=("${packages[@]}")
    mapfile -t still < <(missing_packages)
    if [ "${#still[@]}" -gt 0 ]; then
        echo "test-deps: still missing after apt-get install: ${still[*]}" >&2
        exit 1
    fi
fi

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "test-deps: $PYTHON is $("$PYTHON" --version 2>&1); Cedarberg needs Python >= 3.11 (make test PYTHON=...)" >&2
    exit 1
fi

# oauth2-mock-server, at the version tests/support/idp.py pins (its single source).
version="$(sed -n 's/^OAUTH2_MOCK_SERVER_VERSION = "\([^"]*\)".*/\1/p' tests/support/idp.py)"
[ -n "$version" ] || { echo "test-deps: OAUTH2_MOCK_SERVER_VERSION not found in tests/support/idp.py" >&2; exit 1; }
package_json="$NODE_DIR/node_modules/oauth2-mock-server/package.json"
current=""
if [ -x "$NODE_DIR/node_modules/.bin/oauth2-mock-server" ] \
    && [ -f "$NODE_DIR/node_modules/oauth2-mock-server/dist/index.mjs" ] && [ -f "$package_json" ]; then
    current="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$package_json" | head -n 1)"
fi
if [ "$current" != "$version" ]; then
    log "installing oauth2-mock-server@$version into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error "oauth2-mock-server@$version"
    installed+=("oauth2-mock-server@$version (npm)")
fi

if [ "${#installed[@]}" -eq 0 ]; then
    log "all present, nothing installed"
else
    log "installed: ${installed[*]}"
fi
