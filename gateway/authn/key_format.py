"""The API key format: `cbk_<id>_<secret>`, generated and parsed strictly.

- `<id>`: 16 characters of lowercase RFC 4648 base32 (`a-z2-7`), 80 random bits. Public: it names
  the key in listings, logs and the admin API, and is the OAuth2 `client_id`.
- `<secret>`: 43 characters of unpadded URL-safe base64 encoding exactly 32 random bytes
  (256 bits). It is the OAuth2 `client_secret`; only an Argon2id hash of it is ever stored.

A key is exactly 64 ASCII characters. `parse_api_key` checks length before anything else, then the
exact shape with an anchored regular expression, then that the secret is canonical base64, so a
malformed key costs neither a database lookup nor a hash. The secret may contain `_`, which is why
the id has a fixed length rather than being split on separators.
"""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass, field

PREFIX = "cbk_"
ID_LENGTH = 16
SECRET_BYTES = 32
SECRET_LENGTH = 43  # unpadded base64 of 32 bytes
KEY_LENGTH = len(PREFIX) + ID_LENGTH + 1 + SECRET_LENGTH

_ID = r"[a-z2-7]{16}"
_SECRET = r"[A-Za-z0-9_-]{43}"  # noqa: S105 (a pattern, not a secret)
_KEY_RE = re.compile(rf"cbk_({_ID})_({_SECRET})", re.ASCII)
_ID_RE = re.compile(_ID, re.ASCII)
_SECRET_RE = re.compile(_SECRET, re.ASCII)


class MalformedKeyError(ValueError):
    """The string is not an API key in the `cbk_<id>_<secret>` format."""


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """A syntactically valid key. `secret` is excluded from `repr` so it cannot leak into logs."""

    key_id: str
    secret: str = field(repr=False)

    def __str__(self) -> str:
        return f"{PREFIX}{self.key_id}_<redacted>"

    @property
    def presented(self) -> str:
        """The full key string (secret material: never log it)."""
        return f"{PREFIX}{self.key_id}_{self.secret}"


def new_key_id() -> str:
    return base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


def new_secret() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(SECRET_BYTES)).rstrip(b"=").decode("ascii")


def is_key_id(value: str) -> bool:
    """True if `value` has the exact shape of a key id (no lookup)."""
    return len(value) == ID_LENGTH and _ID_RE.fullmatch(value) is not None


def _canonical_secret(secret: str) -> bool:
    # 43 base64 characters carry 258 bits; the last 2 must be zero for a canonical encoding of
    # 32 bytes. Rejecting non-canonical forms keeps exactly one accepted spelling per secret.
    raw = base64.urlsafe_b64decode(secret + "=")
    return len(raw) == SECRET_BYTES and base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == secret


def parse_parts(key_id: str, secret: str) -> ParsedKey:
    """Validate an (id, secret) pair such as an OAuth2 client id and secret.

    Raises MalformedKeyError without revealing which part is wrong.
    """
    if len(key_id) != ID_LENGTH or len(secret) != SECRET_LENGTH:
        raise MalformedKeyError("malformed key")
    if _ID_RE.fullmatch(key_id) is None or _SECRET_RE.fullmatch(secret) is None:
        raise MalformedKeyError("malformed key")
    if not _canonical_secret(secret):
        raise MalformedKeyError("malformed key")
    return ParsedKey(key_id, secret)


def parse_api_key(presented: str) -> ParsedKey:
    """Parse a presented key strictly. Raises MalformedKeyError (message never echoes the input)."""
    if len(presented) != KEY_LENGTH:
        raise MalformedKeyError("malformed key")
    match = _KEY_RE.fullmatch(presented)
    if match is None:
        raise MalformedKeyError("malformed key")
    return parse_parts(match.group(1), match.group(2))


def generate_key() -> ParsedKey:
    """A fresh key with a random id and a random 256-bit secret."""
    return ParsedKey(new_key_id(), new_secret())
