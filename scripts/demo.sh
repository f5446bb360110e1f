#!/usr/bin/env bash
# Demo: start `cedarberg serve` on embedded defaults (state in .demo/state), run a short PySpark
# job against it (scripts/demo_spark.py), stop the server. Exits non-zero if anything fails.
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
LOG="$DEMO_DIR/server.log"

[ -x "$PY" ] || { echo "no virtualenv at $VENV: run 'make venv' first" >&2; exit 1; }
mkdir -p "$STATE_DIR"

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
URL="http://127.0.0.1:$PORT"

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

echo "==> starting cedarberg on $URL (data dir $STATE_DIR, log $LOG)"
"$VENV/bin/cedarberg" serve --host 127.0.0.1 --port "$PORT" --data-dir "$STATE_DIR" >>"$LOG" 2>&1 &
SERVER_PID=$!

"$PY" - "$URL" "$SERVER_PID" <<'PYEOF'
import os, sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 30
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("the gateway exited before it was ready")
    try:
        with urllib.request.urlopen(url + "/v1/config", timeout=2) as response:
            if response.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("the gateway was not ready after 30 s")
    time.sleep(0.2)
PYEOF
echo "==> gateway ready"

"$PY" "$ROOT/scripts/demo_spark.py" --uri "$URL" --scratch-dir "$DEMO_DIR/spark"
echo "==> demo OK"
