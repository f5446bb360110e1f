"""Sealed page tokens: opaque to the caller, bound to the listing and the caller they came from.

A token carries the last name of the previous page (keyset pagination), which the caller may not
be allowed to see: listings are filtered by visibility after the page is read. So the name is
encrypted and authenticated with AES-256-GCM under a deployment key (derived from the registry
key, the same on every instance). The associated data binds the token to the listing (warehouse,
what is listed, under which parent) and to an opaque caller binding given by the gateway (the
principal): a token used on another listing or by another caller fails its tag exactly like a
forged one, and all of them are the same 400.

Layout (base64url, unpadded): version (1) | nonce (12) | ciphertext | tag (16). The plaintext is
the name's length (4 bytes) and the name, zero-padded to a multiple of `_BUCKET` bytes, so tokens
of names up to 252 bytes all have the same length; longer names reveal only their 256-byte bucket.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from dataclasses import dataclass

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cedarberg.catalog.errors import InvalidRequestError

_VERSION = 1
_NONCE_BYTES = 12
_TAG_BYTES = 16
_LENGTH = struct.Struct(">I")
_BUCKET = 256
# Names are at most a few KiB (namespace keys 1024 characters); anything longer is not ours.
_MAX_TOKEN_CHARS = 8192
_INVALID = "invalid pageToken"


@dataclass(frozen=True, slots=True)
class Listing:
    """Which listing a token belongs to. `caller` is opaque here (the gateway binds the principal);
    the CLI, which pages on its own behalf, uses ''."""

    warehouse: str
    what: str  # namespaces | table | view | dropped
    parent: str  # the parent namespace's key ('' for top-level namespaces and dropped objects)
    caller: str

    def associated_data(self) -> bytes:
        # A JSON array is unambiguous: no choice of names makes two listings' bytes equal.
        return orjson.dumps(
            ["cedarberg-page-token", _VERSION, self.warehouse, self.what, self.parent, self.caller]
        )


def seal(key: bytes, listing: Listing, after: str) -> str:
    """A token that resumes `listing` after the name `after`."""
    name = after.encode()
    plain = _LENGTH.pack(len(name)) + name
    plain += b"\x00" * (-len(plain) % _BUCKET)
    nonce = os.urandom(_NONCE_BYTES)
    sealed = bytes([_VERSION]) + nonce + AESGCM(key).encrypt(nonce, plain, listing.associated_data())
    return base64.urlsafe_b64encode(sealed).decode().rstrip("=")


def open_token(key: bytes, listing: Listing, token: str) -> str:
    """The name a token resumes after. Raises InvalidRequestError (one message for every cause:
    malformed, forged, altered, or made for another listing or caller)."""
    if len(token) > _MAX_TOKEN_CHARS:
        raise InvalidRequestError(_INVALID)
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise InvalidRequestError(_INVALID) from None
    if len(raw) < 1 + _NONCE_BYTES + _TAG_BYTES + _BUCKET or raw[0] != _VERSION:
        raise InvalidRequestError(_INVALID)
    nonce = raw[1 : 1 + _NONCE_BYTES]
    try:
        plain = AESGCM(key).decrypt(nonce, raw[1 + _NONCE_BYTES :], listing.associated_data())
    except InvalidTag:
        raise InvalidRequestError(_INVALID) from None
    # Authenticated: the content is ours, so its layout holds.
    (length,) = _LENGTH.unpack_from(plain)
    return plain[_LENGTH.size : _LENGTH.size + length].decode()
