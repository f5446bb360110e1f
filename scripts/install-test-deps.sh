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
#     maven, unzip             mvn fetches Trino from Maven Central (below); unzip unpacks its plugin
#     chromium                 the headless browser the console's tests drive with Playwright
#                              (tests/support/browser.py; Playwright's own browser download is never used)
#   A JDK >= 24 for Trino 476: the first /usr/lib/jvm/* whose java reports 24 or later (a Temurin 25
#     JDK on the project's machines); else Debian's openjdk-25-jdk-headless where the release has it.
#   Trino 476 (tests/e2e/test_trino.py), cached outside the clone in ~/.cache/cedarberg/trino-476:
#     io.trino:trino-server-core (the coordinator without plugins) and io.trino:trino-iceberg (the
#     Iceberg connector plugin), fetched once with mvn into a throw-away local repository, checked
#     against the SHA-256 digests pinned below, unpacked, and marked complete. tests/support/trino.py
#     reads the same location and version.
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
    have mvn || echo maven
    have unzip || echo unzip
    [ -x /usr/bin/chromium ] || echo chromium
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

# -- Trino ------------------------------------------------------------------------------------
# Keep in step with TRINO_VERSION in tests/support/trino.py (which checks the marker's content).
TRINO_VERSION=476
TRINO_CORE_SHA256=0f388f9967c177ae70a47c099082fc95387f0c3cb96d8000d1d41fc3a5223158
TRINO_ICEBERG_SHA256=99edba5b491ed94d599aeb61e0794272d3569d8b563f3bb8569e8a49daa87b6c
TRINO_HOME="${XDG_CACHE_HOME:-$HOME/.cache}/cedarberg/trino-$TRINO_VERSION"
TRINO_MIN_JAVA=24

# The major version of the java at $1 (0 when it does not run).
java_major() {
    "$1" -XshowSettings:properties -version 2>&1 \
        | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' | head -n 1 | grep . || echo 0
}

# The home of the first JDK >= $TRINO_MIN_JAVA under /usr/lib/jvm, or nothing.
find_trino_jdk() {
    local home
    for home in /usr/lib/jvm/*/; do
        home="${home%/}"
        if [ -x "$home/bin/java" ] && [ "$(java_major "$home/bin/java")" -ge "$TRINO_MIN_JAVA" ]; then
            printf '%s\n' "$home"
            return 0
        fi
    done
    return 1
}

if ! find_trino_jdk >/dev/null; then
    if apt-cache show openjdk-25-jdk-headless >/dev/null 2>&1; then
        log "installing openjdk-25-jdk-headless (Trino $TRINO_VERSION needs Java >= $TRINO_MIN_JAVA)"
        SUDO=()
        [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends openjdk-25-jdk-headless
        installed+=(openjdk-25-jdk-headless)
    fi
    find_trino_jdk >/dev/null || {
        echo "test-deps: Trino $TRINO_VERSION needs a JDK >= $TRINO_MIN_JAVA under /usr/lib/jvm, and none is there" \
            "nor in this machine's Debian release" >&2
        exit 1
    }
fi

if [ "$(cat "$TRINO_HOME/.complete" 2>/dev/null)" != "$TRINO_VERSION" ]; then
    log "installing Trino $TRINO_VERSION (server core + Iceberg plugin) into $TRINO_HOME"
    staging="$(dirname "$TRINO_HOME")/.trino-$TRINO_VERSION-staging"
    rm -rf "$staging"
    mkdir -p "$staging/download"
    fetch_trino_artifact() {  # G:A:V:packaging, expected SHA-256
        local output file
        # -C: fail on a checksum that does not match the repository's. Maven's output is shown
        # only when it fails (Maven 3.8 prints colour codes even in batch mode).
        if ! output="$(mvn -B -q -C -Dmaven.repo.local="$staging/m2" dependency:copy \
            -Dartifact="$1" -DoutputDirectory="$staging/download" 2>&1)"; then
            printf '%s\n' "$output" >&2
            echo "test-deps: mvn could not fetch $1" >&2
            rm -rf "$staging"
            exit 1
        fi
        file="$staging/download/$(printf '%s' "$1" | awk -F: '{print $2 "-" $3 "." $4}')"
        echo "$2  $file" | sha256sum -c --quiet - || {
            echo "test-deps: $1 does not have the pinned SHA-256 digest" >&2
            rm -rf "$staging"
            exit 1
        }
    }
    fetch_trino_artifact "io.trino:trino-server-core:$TRINO_VERSION:tar.gz" "$TRINO_CORE_SHA256"
    fetch_trino_artifact "io.trino:trino-iceberg:$TRINO_VERSION:zip" "$TRINO_ICEBERG_SHA256"
    # Only the Iceberg connector: the core's own plugins would only slow the coordinator's start.
    tar -xzf "$staging/download/trino-server-core-$TRINO_VERSION.tar.gz" -C "$staging" \
        --exclude="trino-server-core-$TRINO_VERSION/plugin/*"
    mkdir -p "$staging/trino-server-core-$TRINO_VERSION/plugin"
    (cd "$staging" && unzip -q "download/trino-iceberg-$TRINO_VERSION.zip" \
        && mv "trino-iceberg-$TRINO_VERSION" "trino-server-core-$TRINO_VERSION/plugin/iceberg")
    rm -rf "$TRINO_HOME"
    mv "$staging/trino-server-core-$TRINO_VERSION" "$TRINO_HOME"
    rm -rf "$staging"
    echo "$TRINO_VERSION" >"$TRINO_HOME/.complete"
    installed+=("Trino $TRINO_VERSION ($TRINO_HOME)")
fi

if [ "${#installed[@]}" -eq 0 ]; then
    log "all present, nothing installed"
else
    log "installed: ${installed[*]}"
fi
