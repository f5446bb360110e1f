"""Subject tokens of a delegation exchange (RFC 8693): what an engine asserts about its user.

Public API::

    subject = read_unsigned_subject(token, max_bytes, max_age_seconds, leeway_seconds)
    subject.name, subject.facts                     # raises SubjectTokenError
    facts = DelegationFacts(...); facts.to_claim(); DelegationFacts.from_claim(claim)

Trino (`iceberg.rest-catalog.session=USER`) builds the subject as an UNSIGNED JWT (`alg: none`):
`sub` and `user` name the Trino user, `iss` and `trinoVersion` the Trino version, `iat` when the
session asked, `source` and `trinoCatalog` where the query came from. Nothing in it is proof: it
is trusted only because an actor the policies allow presents it (`gateway.authn.delegation`).

Rules for an unsigned subject (each failure is `SubjectTokenError` with a reason safe to send to
the client that built the token):

- at most `max_bytes`; three dot-separated base64url parts, the header exactly `alg: none` (with
  at most `typ: JWT`), the signature part empty: a token with any signature is not unsigned, and
  a signed token is only accepted through its issuer (`gateway.authn.oidc`);
- `sub` a name of 1-256 characters without control characters or `/` (directory names), equal to
  `user` when `user` is present;
- `iat` an integer no more than `leeway` in the future and no more than `max_age_seconds` in the
  past: an old subject is refused as expired, so a captured one is useless after that age (the
  client builds a fresh one for every new session); `exp`, if present, not past;
- the other claims, if present, strings of at most 256 characters.

`DelegationFacts` are what the decision saw of the subject; the issued token carries them
(`dlg` claim) so that a refresh is decided on the same facts.
"""

from __future__ import annotations

import base64
import binascii
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"  # noqa: S105
UNSIGNED_ISSUER = "unsigned"
MAX_NAME_LENGTH = 256
_MAX_CLAIM = 256
_FACT_CLAIMS = {"source": "source", "trinoCatalog": "trino_catalog", "trinoVersion": "trino_version"}


class SubjectTokenError(ValueError):
    """The subject token is not acceptable; the message says why (safe for the client)."""


@dataclass(frozen=True, slots=True)
class DelegationFacts:
    """What a delegation decision sees of the subject token (Cedar's `actAs` context)."""

    subject_token_type: str
    subject_issuer: str  # UNSIGNED_ISSUER, or the OIDC issuer's namespace (alias or URL)
    source: str | None = None
    trino_catalog: str | None = None
    trino_version: str | None = None
    subject_expires_at: int | None = None  # a signed subject's `exp`: no token outlives it

    def to_claim(self) -> dict[str, Any]:
        claim: dict[str, Any] = {"typ": self.subject_token_type, "iss": self.subject_issuer}
        for name in ("source", "trino_catalog", "trino_version"):
            value = getattr(self, name)
            if value is not None:
                claim[name] = value
        if self.subject_expires_at is not None:
            claim["exp"] = self.subject_expires_at
        return claim

    @classmethod
    def from_claim(cls, claim: object) -> DelegationFacts | None:
        """The facts a token's `dlg` claim holds, or None if it is malformed."""
        if not isinstance(claim, dict) or len(claim) > 6:
            return None
        strings = {k: v for k, v in claim.items() if k != "exp"}
        if not all(isinstance(v, str) and 0 < len(v) <= _MAX_CLAIM for v in strings.values()):
            return None
        expires = claim.get("exp")
        if expires is not None and type(expires) is not int:
            return None
        if not isinstance(claim.get("typ"), str) or not isinstance(claim.get("iss"), str):
            return None
        return cls(
            subject_token_type=claim["typ"],
            subject_issuer=claim["iss"],
            source=claim.get("source"),
            trino_catalog=claim.get("trino_catalog"),
            trino_version=claim.get("trino_version"),
            subject_expires_at=expires,
        )


@dataclass(frozen=True, slots=True)
class UnsignedSubject:
    """The user an unsigned subject token names, and what the decision may see of it."""

    name: str
    facts: DelegationFacts


def is_unsigned(token: str) -> bool:
    """Whether `token` looks like an unsigned JWT (its header says `alg: none`); unverified."""
    header = _json_part(token.split(".", 1)[0])
    return isinstance(header, dict) and header.get("alg") == "none"


def _json_part(part: str) -> object:
    if len(part) > 16_384:
        return None
    try:
        return orjson.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError):
        return None


def valid_user_name(name: object) -> bool:
    """Whether `name` may name a directory user (1-256 characters, no control characters, no
    `/`, not padded with spaces)."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME_LENGTH
        and name == name.strip()
        and "/" not in name
        and not any(unicodedata.category(ch).startswith("C") for ch in name)
    )


def read_unsigned_subject(
    token: str, token_type: str, max_bytes: int, max_age_seconds: int, leeway_seconds: int
) -> UnsignedSubject:
    """The user an unsigned subject token names. Raises SubjectTokenError (see the module)."""
    if len(token) > max_bytes:
        raise SubjectTokenError("subject_token is too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise SubjectTokenError("subject_token is not a JWT")
    header, claims = _json_part(parts[0]), _json_part(parts[1])
    if not isinstance(header, dict) or header.get("alg") != "none" or not set(header) <= {"alg", "typ"}:
        raise SubjectTokenError("subject_token is not an unsigned JWT")
    if parts[2]:
        raise SubjectTokenError("an unsigned subject_token carries no signature")
    if not isinstance(claims, dict):
        raise SubjectTokenError("subject_token claims are not a JSON object")
    name = claims.get("sub")
    if not valid_user_name(name):
        raise SubjectTokenError("subject_token sub is not a valid user name")
    assert isinstance(name, str)
    if "user" in claims and claims["user"] != name:
        raise SubjectTokenError("subject_token user and sub differ")
    _check_times(claims, max_age_seconds, leeway_seconds)
    facts = {field_name: _fact(claims, claim) for claim, field_name in _FACT_CLAIMS.items()}
    return UnsignedSubject(
        name,
        DelegationFacts(
            token_type,
            UNSIGNED_ISSUER,
            source=facts["source"],
            trino_catalog=facts["trino_catalog"],
            trino_version=facts["trino_version"],
        ),
    )


def _fact(claims: Mapping[str, Any], claim: str) -> str | None:
    value = claims.get(claim)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > _MAX_CLAIM:
        raise SubjectTokenError(f"subject_token {claim} must be a string of at most {_MAX_CLAIM} characters")
    return value


def _check_times(claims: Mapping[str, Any], max_age_seconds: int, leeway_seconds: int) -> None:
    now = time.time()
    issued = claims.get("iat")
    if type(issued) is not int:
        raise SubjectTokenError("subject_token must carry iat (an integer)")
    if issued > now + leeway_seconds:
        raise SubjectTokenError("subject_token was issued in the future")
    if issued < now - max_age_seconds - leeway_seconds:
        raise SubjectTokenError("subject_token has expired (too old)")
    expires = claims.get("exp")
    if expires is not None and (type(expires) is not int or expires <= now - leeway_seconds):
        raise SubjectTokenError("subject_token has expired")
