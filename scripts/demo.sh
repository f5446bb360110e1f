#!/usr/bin/env bash
# Demo: a PySpark data pipeline through the gateway, as it runs in production, on embedded
# defaults (SQLite registry, local warehouse, local KEK, sealed metadata files, bundled policies).
#   1. make a throw-away CA and server certificate (scripts/demo_pki.py, under .demo/pki);
#   2. bootstrap an admin API key offline with `cedarberg keys create`;
#   3. start `cedarberg serve` with TLS, the audit log going to .demo/audit.jsonl;
#   4. as the admin, through the admin API (scripts/demo_admin.py): namespaces `raw` (PII, writers
#      group etl, no readers) and `analytics` (writers etl, readers analysts), an API key for the
#      pipeline's service account (etl), one for an analyst (analysts) and one for a security
#      admin (a person in group admins) to sign in to the console with;
#   5. run `cedarberg-pipeline` (pipelines/): raw events -> bronze -> MERGE into silver (with a
#      schema change) -> gold + a view -> compaction and snapshot expiry; then the analyst reads
#      gold, is refused writes and the PII namespace, and DuckDB reads gold as the analyst;
#   6. stop the gateway, show the denied decisions from the audit log, and check that every
#      metadata file in the warehouse is sealed. Exits non-zero if anything fails;
#   7. start the gateway again on the same state and print the security console's address
#      (https://127.0.0.1:PORT/console/), the security admin's sign-in key and the demo CA to trust;
#      when run from a terminal it keeps serving until Ctrl-C, otherwise it stops and prints the
#      command that serves it again.
#
#   DEMO_PORT   port to listen on (default 8181, or a free port if 8181 is taken)
#   DEMO_DIR    state directory root (default .demo); each run resets what it wrote there
#   DEMO_ROWS   raw events the pipeline generates (default 300000)
#   DEMO_FORMAT format of the generated raw files: json (default) or csv
#   DEMO_SERVE  after the demo, keep the gateway serving the console until Ctrl-C: auto (default:
#               when stdin is a terminal), yes or no
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
DEMO_DIR="${DEMO_DIR:-$ROOT/.demo}"
DEMO_ROWS="${DEMO_ROWS:-300000}"
DEMO_FORMAT="${DEMO_FORMAT:-json}"
DEMO_SERVE="${DEMO_SERVE:-auto}"
STATE_DIR="$DEMO_DIR/state"
PKI_DIR="$DEMO_DIR/pki"
WORK_DIR="$DEMO_DIR/pipeline"
LOG="$DEMO_DIR/server.log"
AUDIT="$DEMO_DIR/audit.jsonl"
CONFIG="$DEMO_DIR/cedarberg.toml"

[ -x "$PY" ] || { echo "no virtualenv at $VENV: run 'make venv' first" >&2; exit 1; }
[ -x "$VENV/bin/cedarberg-pipeline" ] || { echo "cedarberg-pipeline missing: run 'make venv'" >&2; exit 1; }
# Every run starts from an empty catalog, key store, audit log and pipeline input.
rm -rf "$STATE_DIR" "$WORK_DIR" "$PKI_DIR" "$LOG" "$AUDIT" "$CONFIG"
mkdir -p "$STATE_DIR"
umask 077
STARTED=$SECONDS

port_free() {
    "$PY" - "$1" <<'PYEOF'
import socket, sys
with socket.socket() as s:
    try:
        s.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        sys.exit(1)
PYEOF
}

if [ -n "${DEMO_PORT:-}" ]; then
    PORT="$DEMO_PORT"
    port_free "$PORT" || { echo "port $PORT (DEMO_PORT) is in use" >&2; exit 1; }
elif port_free 8181; then
    PORT=8181
else
    PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    echo "port 8181 is in use; using $PORT (set DEMO_PORT to choose)"
fi
URL="https://127.0.0.1:$PORT"

SERVER_PID=""
stop_gateway() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "==> stopping the gateway (pid $SERVER_PID)"
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            kill -KILL "$SERVER_PID" 2>/dev/null || true
        fi
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=""
}
on_exit() {
    local status=$?
    stop_gateway
    if [ "$status" -ne 0 ]; then
        echo "==> demo FAILED (exit $status); last lines of $LOG:" >&2
        tail -n 40 "$LOG" >&2 || true
    fi
    exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$PY" "$ROOT/scripts/demo_pki.py" "$PKI_DIR"

# The gateway's settings for the demo: only TLS, the audit log and the console (off by default;
# sign-in with an API key, no OpenID Connect issuer in the demo) differ from the defaults.
cat >"$CONFIG" <<TOMLEOF
[tls]
cert_file = "$PKI_DIR/server.pem"
key_file = "$PKI_DIR/server-key.pem"

[audit]
destination = "$AUDIT"

[console]
enabled = true
TOMLEOF

echo "==> bootstrapping an admin API key with 'cedarberg keys create' (offline, against the store)"
ADMIN_KEY="$("$VENV/bin/cedarberg" keys create --person demo-admin --group admins \
    --data-dir "$STATE_DIR" --config "$CONFIG" 2>>"$LOG")"

SERVE=("$VENV/bin/cedarberg" serve --host 127.0.0.1 --port "$PORT" --data-dir "$STATE_DIR" --config "$CONFIG")
start_gateway() {
    echo "==> starting cedarberg on $URL (TLS; data dir $STATE_DIR, audit log $AUDIT, log $LOG)"
    "${SERVE[@]}" >>"$LOG" 2>&1 &
    SERVER_PID=$!
    DEMO_ADMIN_KEY="$ADMIN_KEY" "$PY" "$ROOT/scripts/demo_admin.py" wait \
        --uri "$URL" --ca-cert "$PKI_DIR/ca.pem" --pid "$SERVER_PID"
    echo "==> gateway ready"
}
start_gateway

"$PY" "$ROOT/scripts/demo_admin.py" anonymous --uri "$URL" --ca-cert "$PKI_DIR/ca.pem"

KEYS="$(DEMO_ADMIN_KEY="$ADMIN_KEY" "$PY" "$ROOT/scripts/demo_admin.py" setup --uri "$URL" --ca-cert "$PKI_DIR/ca.pem")"
SERVICE_KEY="$(sed -n 's/^PIPELINE_SERVICE_KEY=//p' <<<"$KEYS")"
ANALYST_KEY="$(sed -n 's/^PIPELINE_ANALYST_KEY=//p' <<<"$KEYS")"
CONSOLE_KEY="$(sed -n 's/^CONSOLE_ADMIN_KEY=//p' <<<"$KEYS")"
unset KEYS

echo "==> running the pipeline: $DEMO_ROWS raw events, Spark local[2], keys from the environment"
PIPELINE_SERVICE_KEY="$SERVICE_KEY" PIPELINE_ANALYST_KEY="$ANALYST_KEY" \
    "$VENV/bin/cedarberg-pipeline" run --uri "$URL" --rows "$DEMO_ROWS" --format "$DEMO_FORMAT" --work-dir "$WORK_DIR" \
    --ca-cert "$PKI_DIR/ca.pem" \
    --truststore "$PKI_DIR/truststore.p12" --truststore-password-file "$PKI_DIR/truststore.password"
unset SERVICE_KEY ANALYST_KEY

stop_gateway  # a clean shutdown flushes the audit log
"$PY" "$ROOT/scripts/demo_audit.py" "$AUDIT"

# Spark and DuckDB read everything through the API; at rest, every metadata file is sealed.
"$PY" - "$STATE_DIR/warehouse" <<'PYEOF'
import pathlib, sys
files = sorted(pathlib.Path(sys.argv[1]).rglob("*.metadata.json"))
sealed = [f for f in files if f.read_bytes().startswith(b"\x00CBSEAL")]
assert files and sealed == files, f"unsealed metadata files: {set(files) - set(sealed)}"
print(f"==> {len(files)} metadata files in the warehouse, all sealed (local KEK, AES-256-GCM)")
PYEOF
echo "==> demo OK in $((SECONDS - STARTED)) s; state in $DEMO_DIR (reset by the next run, or 'make demo-clean')"

# The security console, on the catalog the demo just wrote (the bootstrap admin key only waits for
# the gateway to be ready; it is not shown).
start_gateway
unset ADMIN_KEY
cat <<CONSOLEEOF

==> the security console: $URL/console/
    sign in with this API key, a security admin's (the person security-admin, group admins:
    every page is open to it; the demo prints it only here):
      $CONSOLE_KEY
    the gateway's certificate is signed by the demo's own CA, $PKI_DIR/ca.pem:
    import it as a trusted authority in the browser, or the browser warns before the sign-in page.
CONSOLEEOF
unset CONSOLE_KEY
if [ "$DEMO_SERVE" = yes ] || { [ "$DEMO_SERVE" = auto ] && [ -t 0 ]; }; then
    echo "==> serving the console until Ctrl-C (pid $SERVER_PID, log $LOG)"
    trap 'exit 0' INT TERM  # Ctrl-C ends the demo as it should: on_exit stops the gateway
    status=0
    wait "$SERVER_PID" || status=$?
    SERVER_PID=""
    echo "==> the gateway exited (status $status); see $LOG" >&2
    exit 1
fi
stop_gateway
echo "==> not a terminal (DEMO_SERVE=$DEMO_SERVE): the gateway is stopped; serve the console again with"
echo "    ${SERVE[*]}"
