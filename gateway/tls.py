"""TLS for the listening socket: the server's `ssl.SSLContext`, client-certificate subjects, and
the rule for when plain HTTP is allowed.

Public API::

    settings: gateway.config.tls.TlsSettings (cert_file, key_file, client_ca_file, ...)
    server_ssl_context(settings) -> ssl.SSLContext          # for aiohttp's TCPSite(ssl_context=...)
    peer_subject(transport_or_ssl_object) -> str | None     # verified client cert subject (RFC 4514)
    peer_certificate_sha256(transport_or_ssl_object) -> bytes | None   # its DER's SHA-256 (RFC 8705)
    check_plain_http_allowed(host, settings) -> None        # raises PlainHttpRefusedError

Invariants:

- TLS 1.2 is the floor (``minimum_version`` may raise it to 1.3). TLS 1.2 offers only forward-secret
  AEAD suites (ECDHE/DHE with AES-GCM or ChaCha20-Poly1305); TLS 1.3 suites are all AEAD.
  Compression and renegotiation are off.
- With ``client_ca_file`` the server asks for a client certificate and verifies it against that CA
  (mTLS). ``require_client_cert`` refuses the handshake without one; otherwise a certificate is
  optional but, when sent, must verify. `peer_subject` returns a subject only for a certificate
  the handshake verified, never for one merely presented.
- Plain HTTP is served only when bound to loopback (development) or when ``allow_plain_http`` says
  so explicitly; both cases log a loud warning at start-up.

Raises: `TlsConfigError` (unreadable or mismatched certificate/key/CA; the message names the file,
never key material), `PlainHttpRefusedError`; `pydantic.ValidationError` for inconsistent settings.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import logging
import ssl
from pathlib import Path

from cryptography import x509

from cedarberg.gateway.config.tls import TlsSettings

__all__ = [
    "PlainHttpRefusedError",
    "TlsConfigError",
    "check_plain_http_allowed",
    "is_loopback",
    "peer_certificate_sha256",
    "peer_subject",
    "server_ssl_context",
]

log = logging.getLogger("cedarberg.tls")

# TLS 1.2 suites (OpenSSL names): forward secrecy and AEAD only. TLS 1.3 suites are OpenSSL's
# defaults, all AEAD. Close to Mozilla's "intermediate" profile, which Java 17, curl/OpenSSL
# (DuckDB) and Python clients all speak.
TLS12_CIPHERS = ":".join(
    [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
        "DHE-RSA-AES128-GCM-SHA256",
        "DHE-RSA-AES256-GCM-SHA384",
        "DHE-RSA-CHACHA20-POLY1305",
    ]
)


class TlsConfigError(Exception):
    """The TLS configuration cannot be used (file missing, unreadable, key does not match...)."""


class PlainHttpRefusedError(Exception):
    """Plain HTTP on a non-loopback address without ``allow_plain_http``."""


def server_ssl_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server-side context for ``settings``: certificate chain loaded, TLS >= 1.2, AEAD
    suites, and client-certificate verification when a client CA is configured.

    Raises `TlsConfigError` when TLS is not configured or a file cannot be used.
    """
    if settings.cert_file is None or settings.key_file is None:
        raise TlsConfigError("TLS is not configured (no cert_file/key_file)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = (
        ssl.TLSVersion.TLSv1_3 if settings.minimum_version == "1.3" else ssl.TLSVersion.TLSv1_2
    )
    ctx.options |= (
        ssl.OP_NO_COMPRESSION
        | ssl.OP_CIPHER_SERVER_PREFERENCE
        | ssl.OP_SINGLE_DH_USE
        | ssl.OP_SINGLE_ECDH_USE
        | ssl.OP_NO_RENEGOTIATION
    )
    ctx.set_ciphers(TLS12_CIPHERS)
    password = settings.key_password.get_secret_value() if settings.key_password else None
    _readable(settings.cert_file, "cert_file")
    _readable(settings.key_file, "key_file")
    try:
        ctx.load_cert_chain(settings.cert_file, settings.key_file, password=password)
    except ssl.SSLError as err:
        # The reason only (e.g. KEY_VALUES_MISMATCH, bad decrypt): no file contents.
        raise TlsConfigError(
            f"tls: cannot load certificate {settings.cert_file} with key {settings.key_file}: "
            f"{err.reason or 'invalid PEM'}"
        ) from None
    if settings.client_ca_file is not None:
        _readable(settings.client_ca_file, "client_ca_file")
        try:
            ctx.load_verify_locations(cafile=settings.client_ca_file)
        except ssl.SSLError as err:
            raise TlsConfigError(
                f"tls: cannot load client CA {settings.client_ca_file}: {err.reason or 'invalid PEM'}"
            ) from None
        ctx.verify_mode = ssl.CERT_REQUIRED if settings.require_client_cert else ssl.CERT_OPTIONAL
        ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _readable(path: Path, name: str) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as err:
        raise TlsConfigError(f"tls: {name} {path}: {err.strerror or err}") from None


def peer_subject(
    peer: asyncio.BaseTransport | ssl.SSLObject | ssl.SSLSocket | None,
) -> str | None:
    """The RFC 4514 subject of the client certificate the TLS handshake verified, or None (plain
    HTTP, no client certificate, or a context that does not verify client certificates).

    Takes the request's transport (``request.transport``) or its ``ssl_object``.
    """
    der = _verified_peer_der(peer)
    return _subject_of(der) if der is not None else None


def peer_certificate_sha256(
    peer: asyncio.BaseTransport | ssl.SSLObject | ssl.SSLSocket | None,
) -> bytes | None:
    """The SHA-256 of the DER client certificate the TLS handshake verified (what a token's
    `cnf.x5t#S256` names, RFC 8705), or None under the same conditions as `peer_subject`."""
    der = _verified_peer_der(peer)
    return hashlib.sha256(der).digest() if der is not None else None


def _verified_peer_der(peer: asyncio.BaseTransport | ssl.SSLObject | ssl.SSLSocket | None) -> bytes | None:
    ssl_object: ssl.SSLObject | ssl.SSLSocket | None
    if isinstance(peer, ssl.SSLObject | ssl.SSLSocket):
        ssl_object = peer
    elif peer is None:
        return None
    else:
        extra = peer.get_extra_info("ssl_object")
        ssl_object = extra if isinstance(extra, ssl.SSLObject | ssl.SSLSocket) else None
    if ssl_object is None or ssl_object.context.verify_mode == ssl.CERT_NONE:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der or None


@functools.lru_cache(maxsize=1024)
def _subject_of(der: bytes) -> str:
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only loopback addresses (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = host.strip().strip("[]")
    if host.lower() in {"localhost", "localhost."}:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_plain_http_allowed(host: str, settings: TlsSettings) -> None:
    """Decide whether the gateway may listen on ``host`` without TLS.

    Allowed on loopback (development) or with ``allow_plain_http``; each logs a loud warning.
    Raises `PlainHttpRefusedError` otherwise. Does nothing when TLS is configured.
    """
    if settings.enabled:
        return
    if is_loopback(host):
        log.warning(
            "PLAIN HTTP: TLS is not configured; serving unencrypted HTTP on loopback %s "
            "(development only: configure tls.cert_file/tls.key_file for anything else)",
            host,
        )
        return
    if settings.allow_plain_http:
        log.warning(
            "UNSAFE PLAIN HTTP on %s: tls.allow_plain_http is set, so tokens, API keys and table "
            "metadata cross the network in clear. Only do this behind a TLS-terminating proxy.",
            host,
        )
        return
    raise PlainHttpRefusedError(
        f"refusing plain HTTP on non-loopback address {host!r}: configure TLS (--tls-cert/--tls-key) "
        "or set tls.allow_plain_http = true behind a TLS-terminating proxy"
    )
