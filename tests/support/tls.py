"""A throw-away PKI for tests: a CA, a server certificate for 127.0.0.1/localhost, client
certificates, and a PKCS12 truststore that Java (Spark) accepts.

    pki = make_pki(tmp_path / "pki")
    TlsSettings(cert_file=pki.server_cert, key_file=pki.server_key, client_ca_file=pki.ca_cert)
    pki.client_context(pki.issue_client("alice"))    # an ssl.SSLContext for aiohttp/requests clients
    pki.java_options()                              # -Djavax.net.ssl.trustStore=... for Spark

Keys are ECDSA P-256 (fast to make; spoken by Java 17, OpenSSL/DuckDB and Python). Certificates
carry the extensions a strict verifier wants (basic constraints, key usage, extended key usage,
subject/authority key identifiers), so they pass ``ssl.VERIFY_X509_STRICT``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path
    subject: str  # RFC 4514, as `gateway.tls.peer_subject` reports it


@dataclass
class TestPki:
    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    truststore: Path  # PKCS12 holding the CA as a trusted certificate entry
    truststore_password: str
    _ca_key: ec.EllipticCurvePrivateKey = field(repr=False)
    _ca: x509.Certificate = field(repr=False)

    __test__ = False  # not a pytest test class

    def issue_client(
        self,
        common_name: str,
        organization: str = "Cedarberg Tests",
        organizational_unit: str | None = None,
        valid_days: int = 30,
    ) -> ClientCert:
        """A client certificate (extended key usage clientAuth) signed by this CA."""
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)]
        if organizational_unit:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit))
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        subject = x509.Name(attrs)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _leaf(subject, key, self._ca, self._ca_key, ExtendedKeyUsageOID.CLIENT_AUTH, [], valid_days)
        stem = "client-" + "".join(ch if ch.isalnum() else "_" for ch in common_name)
        cert_path = _write(self.directory / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM))
        key_path = _write(self.directory / f"{stem}-key.pem", _key_pem(key))
        return ClientCert(cert=cert_path, key=key_path, subject=subject.rfc4514_string())

    def client_context(
        self,
        client: ClientCert | None = None,
        minimum_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
        maximum_version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED,
    ) -> ssl.SSLContext:
        """A client context that trusts this CA and optionally presents ``client``."""
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        ctx.minimum_version = minimum_version
        ctx.maximum_version = maximum_version
        if client is not None:
            ctx.load_cert_chain(client.cert, client.key)
        return ctx

    def java_options(self) -> str:
        """JVM flags making Java (e.g. ``spark.driver.extraJavaOptions``) trust this CA."""
        return (
            f"-Djavax.net.ssl.trustStore={self.truststore} "
            "-Djavax.net.ssl.trustStoreType=PKCS12 "
            f"-Djavax.net.ssl.trustStorePassword={self.truststore_password}"
        )


def make_pki(
    directory: Path,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    ca_name: str = "Cedarberg Test CA",
    truststore_password: str | None = None,
) -> TestPki:
    """Create a CA and a server certificate for ``hosts`` under ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Cedarberg Tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, ca_name),
        ]
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=60))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    server_subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Cedarberg Tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "localhost"),
        ]
    )
    server = _leaf(server_subject, server_key, ca, ca_key, ExtendedKeyUsageOID.SERVER_AUTH, sans, 30)
    password = truststore_password or secrets.token_urlsafe(12)
    truststore = pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca, b"cedarberg-test-ca")],
        serialization.BestAvailableEncryption(password.encode()),
    )
    return TestPki(
        directory=directory,
        ca_cert=_write(directory / "ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
        server_cert=_write(directory / "server.pem", server.public_bytes(serialization.Encoding.PEM)),
        server_key=_write(directory / "server-key.pem", _key_pem(server_key)),
        truststore=_write(directory / "truststore.p12", truststore),
        truststore_password=password,
        _ca_key=ca_key,
        _ca=ca,
    )


def _leaf(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
    valid_days: int,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    if path.suffix == ".pem" and path.stem.endswith("key"):
        path.chmod(0o600)
    return path
