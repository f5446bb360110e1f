"""AES-256-GCM sealing of documents with a versioned, authenticated header.

Layout (big-endian):

    magic      7  b"\\x00CBSEAL"  (starts with NUL: never valid JSON, so never mistaken for it)
    format     1  0x01
    flags      1  bit 0: the wrapped data key is embedded (self-describing file)
    kind       1+n  object kind, e.g. "table" / "view"
    warehouse  2+n  UTF-8
    object     16   object UUID
    version    8    signed metadata version
    [kek_uri 2+n, kek_version 2+n, wrapped_key 2+n]   only with the embedded-key flag
    nonce      12
    ciphertext n+16 (GCM tag last)

The whole header (everything before the nonce) is the GCM associated data, so the binding —
warehouse, object kind, object UUID, metadata version — and the embedded key reference cannot be
changed without the tag failing. `open_sealed` also compares the binding with the one the caller
expects, so a document copied onto another object or an older version put back is refused before
decryption. Every failure is a SealIntegrityError; a damaged document never yields plaintext.
"""

from __future__ import annotations

import os
import struct
import uuid
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cedarberg.kms.errors import MalformedEnvelopeError, SealIntegrityError
from cedarberg.kms.keys import (
    DATA_KEY_BYTES,
    MAX_KEK_URI_BYTES,
    MAX_KEK_VERSION_BYTES,
    MAX_WRAPPED_KEY_BYTES,
    WrappedKey,
)

MAGIC = b"\x00CBSEAL"
FORMAT_VERSION = 1
_FLAG_EMBEDDED_KEY = 0x01
_NONCE_BYTES = 12
_TAG_BYTES = 16
_MAX_KIND_BYTES = 16
_MAX_WAREHOUSE_BYTES = 128


@dataclass(frozen=True, slots=True)
class Binding:
    """What a sealed document belongs to."""

    warehouse: str
    kind: str
    object_uuid: str
    version: int

    def __post_init__(self) -> None:
        # Canonical form, as read back from a header: "ABC..." and "abc-..." are the same object.
        object.__setattr__(self, "object_uuid", str(uuid.UUID(self.object_uuid)))


@dataclass(frozen=True, slots=True)
class Header:
    binding: Binding
    wrapped_key: WrappedKey | None  # present only in self-describing (file) envelopes
    length: int  # bytes of header, i.e. offset of the nonce


def is_sealed(blob: bytes) -> bool:
    return blob.startswith(MAGIC)


def _field(value: bytes, width: int, limit: int, what: str) -> bytes:
    if len(value) > limit:
        raise ValueError(f"{what} longer than {limit} bytes")
    return (len(value).to_bytes(width, "big")) + value


def _encode_header(binding: Binding, wrapped: WrappedKey | None) -> bytes:
    parts = [
        MAGIC,
        bytes([FORMAT_VERSION, _FLAG_EMBEDDED_KEY if wrapped is not None else 0]),
        _field(binding.kind.encode(), 1, _MAX_KIND_BYTES, "kind"),
        _field(binding.warehouse.encode(), 2, _MAX_WAREHOUSE_BYTES, "warehouse"),
        uuid.UUID(binding.object_uuid).bytes,
        struct.pack(">q", binding.version),
    ]
    if wrapped is not None:
        parts += [
            _field(wrapped.kek_uri.encode(), 2, MAX_KEK_URI_BYTES, "KEK URI"),
            _field(wrapped.kek_version.encode(), 2, MAX_KEK_VERSION_BYTES, "KEK version"),
            _field(wrapped.ciphertext, 2, MAX_WRAPPED_KEY_BYTES, "wrapped key"),
        ]
    return b"".join(parts)


def seal(data_key: bytes, plaintext: bytes, binding: Binding, embed: WrappedKey | None = None) -> bytes:
    """Encrypt `plaintext` for `binding`; with `embed`, the document carries its wrapped key."""
    if len(data_key) != DATA_KEY_BYTES:
        raise ValueError("a data key is 32 bytes")
    header = _encode_header(binding, embed)
    nonce = os.urandom(_NONCE_BYTES)
    return header + nonce + AESGCM(data_key).encrypt(nonce, plaintext, header)


class _Reader:
    def __init__(self, blob: bytes, offset: int) -> None:
        self._blob = blob
        self.offset = offset

    def take(self, count: int) -> bytes:
        end = self.offset + count
        if end > len(self._blob):
            raise MalformedEnvelopeError("sealed document is truncated")
        chunk = self._blob[self.offset : end]
        self.offset = end
        return chunk

    def field(self, width: int, limit: int, what: str) -> bytes:
        size = int.from_bytes(self.take(width), "big")
        if size > limit:
            raise MalformedEnvelopeError(f"sealed document's {what} exceeds {limit} bytes")
        return self.take(size)

    def text(self, width: int, limit: int, what: str) -> str:
        try:
            return self.field(width, limit, what).decode()
        except UnicodeDecodeError:
            raise MalformedEnvelopeError(f"sealed document's {what} is not UTF-8") from None


def read_header(blob: bytes) -> Header:
    """Parse and bound-check the header (not yet authenticated: `open_sealed` does that)."""
    if not is_sealed(blob):
        raise MalformedEnvelopeError("not a sealed document")
    reader = _Reader(blob, len(MAGIC))
    version_byte, flags = reader.take(2)
    if version_byte != FORMAT_VERSION:
        raise MalformedEnvelopeError(f"unsupported sealed document format {version_byte}")
    if flags & ~_FLAG_EMBEDDED_KEY:
        raise MalformedEnvelopeError("unknown flags in sealed document")
    kind = reader.text(1, _MAX_KIND_BYTES, "kind")
    warehouse = reader.text(2, _MAX_WAREHOUSE_BYTES, "warehouse")
    object_uuid = str(uuid.UUID(bytes=reader.take(16)))
    (version,) = struct.unpack(">q", reader.take(8))
    wrapped = None
    if flags & _FLAG_EMBEDDED_KEY:
        kek_uri = reader.text(2, MAX_KEK_URI_BYTES, "KEK URI")
        kek_version = reader.text(2, MAX_KEK_VERSION_BYTES, "KEK version")
        ciphertext = reader.field(2, MAX_WRAPPED_KEY_BYTES, "wrapped key")
        if not ciphertext:
            raise MalformedEnvelopeError("sealed document's wrapped key is empty")
        wrapped = WrappedKey(kek_uri, kek_version, ciphertext)
    if len(blob) < reader.offset + _NONCE_BYTES + _TAG_BYTES:
        raise MalformedEnvelopeError("sealed document is truncated")
    return Header(Binding(warehouse, kind, object_uuid, version), wrapped, reader.offset)


def open_sealed(data_key: bytes, blob: bytes, expected: Binding) -> bytes:
    """Decrypt a document sealed for `expected`. Raises SealIntegrityError otherwise."""
    header = read_header(blob)
    if header.binding != expected:
        raise SealIntegrityError(
            "sealed document belongs to another object or metadata version"
            f" ({header.binding.kind} {header.binding.object_uuid} v{header.binding.version})"
        )
    nonce_end = header.length + _NONCE_BYTES
    try:
        return AESGCM(data_key).decrypt(
            blob[header.length : nonce_end], blob[nonce_end:], blob[: header.length]
        )
    except InvalidTag:
        raise SealIntegrityError("sealed document failed authentication") from None
