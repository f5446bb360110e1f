#!/usr/bin/env bash
# Development secrets for deploy/compose.yaml: a self-signed TLS certificate for the gateways and
# the Ed25519 key that signs gateway tokens (shared by both gateways). Kept out of version control.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
mkdir -p tls
if [ ! -f tls/tls.key ]; then
    openssl req -x509 -newkey rsa:3072 -nodes -days 365 -subj "/CN=cedarberg" \
        -addext "subjectAltName=DNS:localhost,DNS:gateway-1,DNS:gateway-2,IP:127.0.0.1" \
        -keyout tls/tls.key -out tls/tls.crt
fi
if [ ! -f token-signing-key.pem ]; then
    openssl genpkey -algorithm ed25519 -out token-signing-key.pem
fi
chmod 0644 tls/tls.crt
chmod 0640 tls/tls.key token-signing-key.pem
echo "ok: deploy/compose/tls/ and deploy/compose/token-signing-key.pem"
