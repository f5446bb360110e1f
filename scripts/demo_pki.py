"""Make a throw-away CA and a server certificate for the demo (used by scripts/demo.sh).

Writes into OUT_DIR: ``ca.pem`` (the CA certificate clients trust), ``server.pem`` and
``server-key.pem`` (for ``cedarberg serve --tls-cert/--tls-key``, valid for 127.0.0.1 and
localhost), and ``truststore.p12`` with its password in ``truststore.password`` (a PKCS12
truststore holding the CA, for Java/Spark: ``-Djavax.net.ssl.trustStore=...``).
Keys are ECDSA P-256; the CA's private key is never written. For demos only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import secrets
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HOSTS = ("127.0.0.1", "localhost")


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    path.chmod(mode)


def make_pki(out: Path, days: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Cedarberg Demo"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Cedarberg Demo CA"),
        ]
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days + 1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in HOSTS:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTS[0])]))
        .issuer_name(ca.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    password = secrets.token_urlsafe(16)
    truststore = pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca, b"cedarberg-demo-ca")],
        serialization.BestAvailableEncryption(password.encode()),
    )
    _write(out / "ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    _write(out / "server.pem", server.public_bytes(serialization.Encoding.PEM))
    _write(
        out / "server-key.pem",
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        0o600,
    )
    _write(out / "truststore.p12", truststore)
    _write(out / "truststore.password", password.encode(), 0o600)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir", type=Path, help="directory to write into (created)")
    parser.add_argument("--days", type=int, default=7, help="validity of the server certificate")
    args = parser.parse_args()
    make_pki(args.out_dir, args.days)
    print(f"==> CA and server certificate for {', '.join(HOSTS)} in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
