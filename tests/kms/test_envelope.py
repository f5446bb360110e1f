"""Property tests of the sealed-document format (kms/envelope.py)."""

from __future__ import annotations

import dataclasses
import os
import struct
import uuid
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cedarberg.kms.envelope import MAGIC, Binding, is_sealed, open_sealed, read_header, seal
from cedarberg.kms.errors import MalformedEnvelopeError, SealIntegrityError
from cedarberg.kms.keys import MAX_WRAPPED_KEY_BYTES, WrappedKey


def _text(max_bytes: int, max_size: int | None = None) -> st.SearchStrategy[str]:
    return st.text(max_size=max_size or max_bytes).filter(lambda s: len(s.encode()) <= max_bytes)


bindings = st.builds(
    Binding,
    warehouse=_text(128),
    kind=st.one_of(st.sampled_from(["table", "view"]), _text(16)),
    object_uuid=st.uuids().map(str),
    version=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
wrapped_keys = st.builds(
    WrappedKey,
    kek_uri=_text(1024, max_size=80),
    kek_version=_text(256, max_size=40),
    ciphertext=st.binary(min_size=1, max_size=MAX_WRAPPED_KEY_BYTES),
)
data_keys = st.binary(min_size=32, max_size=32)
plaintexts = st.binary(max_size=2048)
embeds = st.none() | wrapped_keys


@given(key=data_keys, plaintext=plaintexts, binding=bindings, embed=embeds)
def test_round_trip(key: bytes, plaintext: bytes, binding: Binding, embed: WrappedKey | None) -> None:
    blob = seal(key, plaintext, binding, embed)
    assert is_sealed(blob)
    assert open_sealed(key, blob, binding) == plaintext


@given(key=data_keys, plaintext=plaintexts, binding=bindings, embed=embeds)
def test_header_reads_back_exactly(
    key: bytes, plaintext: bytes, binding: Binding, embed: WrappedKey | None
) -> None:
    blob = seal(key, plaintext, binding, embed)
    header = read_header(blob)
    assert header.binding == binding
    assert header.wrapped_key == embed
    # nonce (12) and ciphertext with its tag (len + 16) follow the header
    assert len(blob) == header.length + 12 + len(plaintext) + 16


@given(key=data_keys, plaintext=plaintexts, binding=bindings, embed=embeds, data=st.data())
def test_any_flipped_bit_is_an_integrity_error(
    key: bytes, plaintext: bytes, binding: Binding, embed: WrappedKey | None, data: st.DataObject
) -> None:
    blob = bytearray(seal(key, plaintext, binding, embed))
    bit = data.draw(st.integers(min_value=0, max_value=len(blob) * 8 - 1), label="bit")
    blob[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(SealIntegrityError):
        open_sealed(key, bytes(blob), binding)


@given(key=data_keys, plaintext=plaintexts, binding=bindings, embed=embeds, data=st.data())
def test_truncated_or_extended_blob_is_an_integrity_error(
    key: bytes, plaintext: bytes, binding: Binding, embed: WrappedKey | None, data: st.DataObject
) -> None:
    blob = seal(key, plaintext, binding, embed)
    cut = data.draw(st.integers(min_value=0, max_value=len(blob) - 1), label="cut")
    with pytest.raises(SealIntegrityError):
        open_sealed(key, blob[:cut], binding)
    extra = data.draw(st.binary(min_size=1, max_size=32), label="extra")
    with pytest.raises(SealIntegrityError):
        open_sealed(key, blob + extra, binding)


@given(key=data_keys, plaintext=plaintexts, binding=bindings, data=st.data())
def test_another_binding_is_refused(
    key: bytes, plaintext: bytes, binding: Binding, data: st.DataObject
) -> None:
    """Another warehouse, object kind, object UUID or metadata version (e.g. an older version put
    back in place of the current one) is refused before decryption."""
    blob = seal(key, plaintext, binding)
    field = data.draw(st.sampled_from(["warehouse", "kind", "object_uuid", "version"]), label="field")
    changes = {
        "warehouse": _text(128),
        "kind": _text(16),
        "object_uuid": st.uuids().map(str),
        "version": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    }
    value: Any = data.draw(changes[field], label="value")
    assume(value != getattr(binding, field))
    other = dataclasses.replace(binding, **{field: value})
    with pytest.raises(SealIntegrityError, match="another object or metadata version"):
        open_sealed(key, blob, other)


@given(key=data_keys, other_key=data_keys, plaintext=plaintexts, binding=bindings, embed=embeds)
def test_wrong_data_key_is_an_integrity_error(
    key: bytes, other_key: bytes, plaintext: bytes, binding: Binding, embed: WrappedKey | None
) -> None:
    assume(key != other_key)
    blob = seal(key, plaintext, binding, embed)
    with pytest.raises(SealIntegrityError, match="failed authentication"):
        open_sealed(other_key, blob, binding)


def test_document_moved_to_another_object_is_refused_even_if_its_header_is_rewritten() -> None:
    """Rewriting the header to name the other object passes the binding check but not the tag."""
    key = os.urandom(32)
    mine = Binding("wh", "table", str(uuid.uuid4()), 3)
    theirs = Binding("wh", "table", str(uuid.uuid4()), 3)
    blob = seal(key, b'{"format-version": 2}', mine)
    forged = blob.replace(uuid.UUID(mine.object_uuid).bytes, uuid.UUID(theirs.object_uuid).bytes)
    assert read_header(forged).binding == theirs
    with pytest.raises(SealIntegrityError, match="failed authentication"):
        open_sealed(key, forged, theirs)


def test_plain_json_is_not_sealed() -> None:
    assert not is_sealed(b'{"format-version": 2}')
    with pytest.raises(MalformedEnvelopeError):
        read_header(b'{"format-version": 2}')


def test_wrapped_key_above_the_cap_is_refused_on_seal() -> None:
    with pytest.raises(ValueError, match="wrapped key"):
        WrappedKey("local://default", "1", b"x" * (MAX_WRAPPED_KEY_BYTES + 1))
    # A WrappedKey that slipped past its own check (frozen dataclass, forced) is still refused.
    oversized = WrappedKey("local://default", "1", b"x")
    object.__setattr__(oversized, "ciphertext", b"x" * (MAX_WRAPPED_KEY_BYTES + 1))
    binding = Binding("wh", "table", str(uuid.uuid4()), 1)
    with pytest.raises(ValueError, match="wrapped key longer than"):
        seal(os.urandom(32), b"{}", binding, oversized)


def _crafted_header(wrapped_len: int) -> bytes:
    """A header with the embedded-key flag whose wrapped key field claims `wrapped_len` bytes."""

    def field(value: bytes, width: int) -> bytes:
        return len(value).to_bytes(width, "big") + value

    return b"".join(
        [
            MAGIC,
            bytes([1, 1]),
            field(b"table", 1),
            field(b"wh", 2),
            uuid.uuid4().bytes,
            struct.pack(">q", 1),
            field(b"local://default", 2),
            field(b"1", 2),
            wrapped_len.to_bytes(2, "big") + b"k" * wrapped_len,
        ]
    )


def test_wrapped_key_above_the_cap_is_refused_on_read() -> None:
    tail = os.urandom(12 + 16 + 8)  # nonce, tag and some ciphertext: only the size is wrong
    at_cap = read_header(_crafted_header(MAX_WRAPPED_KEY_BYTES) + tail)
    assert at_cap.wrapped_key is not None
    assert len(at_cap.wrapped_key.ciphertext) == MAX_WRAPPED_KEY_BYTES
    with pytest.raises(MalformedEnvelopeError, match="exceeds"):
        read_header(_crafted_header(MAX_WRAPPED_KEY_BYTES + 1) + tail)
    with pytest.raises(MalformedEnvelopeError, match="empty"):
        read_header(_crafted_header(0) + tail)
