#!/usr/bin/env bash
# Demo: the gateway as it runs in production, on embedded defaults.
#   1. make a throw-away CA and server certificate (scripts/demo_pki.py, under .demo/pki);
#   2. bootstrap an admin API key offline with `cedarberg keys create`;
#   3. start `cedarberg serve --tls-cert --tls-key` (fresh state in .demo/state each run);
#   4. as the admin, create namespace `demo` with grants and a writer and a reader API key
#      (scripts/demo_admin.py, through the admin API);
#   5. run a PySpark job (scripts/demo_spark.py) over TLS with `credential=<id>:<secret>`: the
#      writer creates, fills and reads a table; the reader reads it and its write is refused;
#   6. stop the server. Exits non-zero if anything fails.
#
#   DEMO_PORT   port to listen on (default 8181, or a free port if 8181 is taken)
#   DEMO_DIR    state directory root (default .demo)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
DEMO_DIR="${DEMO_DIR:-$ROOT/.demo}"
STATE_DIR="$DEMO_DIR/state"
PKI_DIR="$DEMO_DIR/pki"
LOG="$DEMO_DIR/server.log"

[ -x "$PY" ] || { echo "no virtualenv at $VENV: run 'make venv' first" >&2; exit 1; }
rm -rf "$STATE_DIR"  # every run starts from an empty catalog and key store
mkdir -p "$STATE_DIR"
umask 077

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
stop_server() {
    local status=$?
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
    if [ "$status" -ne 0 ]; then
        echo "==> demo FAILED (exit $status); last lines of $LOG:" >&2
        tail -n 40 "$LOG" >&2 || true
    fi
    exit "$status"
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$PY" "$ROOT/scripts/demo_pki.py" "$PKI_DIR"

echo "==> bootstrapping an admin API key with 'cedarberg keys create' (offline, against the store)"
ADMIN_KEY="$("$VENV/bin/cedarberg" keys create --principal demo-admin --group admins --data-dir "$STATE_DIR" 2>>"$LOG")"

echo "==> starting cedarberg on $URL (TLS; data dir $STATE_DIR, log $LOG)"
"$VENV/bin/cedarberg" serve --host 127.0.0.1 --port "$PORT" --data-dir "$STATE_DIR" \
    --tls-cert "$PKI_DIR/server.pem" --tls-key "$PKI_DIR/server-key.pem" >>"$LOG" 2>&1 &
SERVER_PID=$!

DEMO_ADMIN_KEY="$ADMIN_KEY" "$PY" "$ROOT/scripts/demo_admin.py" wait \
    --uri "$URL" --ca-cert "$PKI_DIR/ca.pem" --pid "$SERVER_PID"
echo "==> gateway ready"

"$PY" "$ROOT/scripts/demo_admin.py" anonymous --uri "$URL" --ca-cert "$PKI_DIR/ca.pem"

KEYS="$(DEMO_ADMIN_KEY="$ADMIN_KEY" "$PY" "$ROOT/scripts/demo_admin.py" setup --uri "$URL" --ca-cert "$PKI_DIR/ca.pem")"
WRITER_KEY="$(sed -n 's/^WRITER_KEY=//p' <<<"$KEYS")"
READER_KEY="$(sed -n 's/^READER_KEY=//p' <<<"$KEYS")"
unset ADMIN_KEY KEYS

DEMO_WRITER_KEY="$WRITER_KEY" DEMO_READER_KEY="$READER_KEY" "$PY" "$ROOT/scripts/demo_spark.py" \
    --uri "$URL" --scratch-dir "$DEMO_DIR/spark" \
    --truststore "$PKI_DIR/truststore.p12" --truststore-password-file "$PKI_DIR/truststore.password"

# Spark read everything through the API; at rest, every metadata file the gateway wrote is sealed.
"$PY" - "$STATE_DIR/warehouse" <<'PYEOF'
import pathlib, sys
files = sorted(pathlib.Path(sys.argv[1]).rglob("*.metadata.json"))
sealed = [f for f in files if f.read_bytes().startswith(b"\x00CBSEAL")]
assert files and sealed == files, f"unsealed metadata files: {set(files) - set(sealed)}"
print(f"==> {len(files)} metadata files in the warehouse, all sealed (local KEK, AES-256-GCM)")
PYEOF
echo "==> demo OK"
