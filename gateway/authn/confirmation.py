"""The confirmation (`cnf`, RFC 7800) claim of a verified token: what its presenter must prove.

A token with `cnf` is not a bearer token: only the holder of the key it names may use it. The
gateway can check exactly one binding, the client certificate of the TLS connection (RFC 8705,
`cnf: {"x5t#S256": <base64url SHA-256 of the certificate's DER>}`). Every other form is refused,
never ignored, since ignoring it would turn a stolen sender-constrained token into a bearer token:

- `jkt` (DPoP, RFC 9449): the gateway does not check DPoP proofs → `DpopBindingError`;
- any other or additional member, an empty or non-object `cnf`, or a thumbprint that is not the
  canonical base64url spelling of 32 bytes → `BindingError`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

CERTIFICATE_THUMBPRINT = "x5t#S256"
DPOP_THUMBPRINT = "jkt"
_THUMBPRINT = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes, unpadded base64url


class BindingError(Exception):
    """The token's `cnf` claim cannot be honoured; the message is for the log."""


class DpopBindingError(BindingError):
    """The token is bound to a DPoP key, which the gateway does not check (the client is told)."""


def required_certificate(claims: Mapping[str, Any]) -> bytes | None:
    """The SHA-256 thumbprint of the client certificate a verified token is bound to, or None
    for a token without `cnf`. Raises `BindingError` / `DpopBindingError` (see module)."""
    if "cnf" not in claims:
        return None
    cnf = claims["cnf"]
    if not isinstance(cnf, dict) or not cnf:
        raise BindingError("cnf claim is not a non-empty object")
    if DPOP_THUMBPRINT in cnf:
        raise DpopBindingError("token is bound to a DPoP key (cnf.jkt), which is not supported")
    if set(cnf) != {CERTIFICATE_THUMBPRINT}:
        names = sorted(str(name)[:40] for name in cnf)[:5]
        raise BindingError(f"cnf names confirmation methods that cannot be checked: {names}")
    return _thumbprint(cnf[CERTIFICATE_THUMBPRINT])


def _thumbprint(value: object) -> bytes:
    if not isinstance(value, str) or not _THUMBPRINT.fullmatch(value):
        raise BindingError("cnf.x5t#S256 is not a base64url SHA-256 thumbprint")
    digest = base64.urlsafe_b64decode(value + "=")
    # 43 characters carry 258 bits: the last 2 must be zero, or two spellings name one certificate.
    if base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii") != value:
        raise BindingError("cnf.x5t#S256 is not canonical base64url")
    return digest
