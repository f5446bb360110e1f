"""Data keys, wrapped data keys and the encryption context that binds them to an object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

DATA_KEY_BYTES = 32  # AES-256
MAX_WRAPPED_KEY_BYTES = 1024  # RSA-4096 wraps to 512 bytes; nothing legitimate is larger
MAX_KEK_URI_BYTES = 1024
MAX_KEK_VERSION_BYTES = 256

Context = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """A data key encrypted under a key-encryption key (KEK).

    `kek_uri` names the KEK (its scheme selects the provider); `kek_version` is the KEK version
    that wrapped it, as the provider reports it, so rotation can tell which keys are behind.
    """

    kek_uri: str
    kek_version: str
    ciphertext: bytes

    def __post_init__(self) -> None:
        if not self.ciphertext or len(self.ciphertext) > MAX_WRAPPED_KEY_BYTES:
            raise ValueError(f"wrapped key must be 1..{MAX_WRAPPED_KEY_BYTES} bytes")
        if len(self.kek_uri.encode()) > MAX_KEK_URI_BYTES:
            raise ValueError("KEK URI too long")
        if len(self.kek_version.encode()) > MAX_KEK_VERSION_BYTES:
            raise ValueError("KEK version too long")


@dataclass(frozen=True, slots=True)
class DataKey:
    """A plaintext data key with its wrapped form. `repr` never shows the key."""

    plaintext: bytes = field(repr=False)
    wrapped: WrappedKey

    def __post_init__(self) -> None:
        if len(self.plaintext) != DATA_KEY_BYTES:
            raise ValueError("a data key is 32 bytes")


def context_bytes(context: Context) -> bytes:
    """Canonical encoding of an encryption context (sorted keys): the associated data given to
    KMSs that take bytes rather than a map."""
    return orjson.dumps(dict(context), option=orjson.OPT_SORT_KEYS)
