"""JSON response documents of the Iceberg REST spec, rendered as bytes.

Stored metadata is already canonical JSON, so load results splice it in without re-parsing: the
read path never pays for pydantic.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import orjson
from pydantic import BaseModel


def dumps(document: Any) -> bytes:
    return orjson.dumps(document)


def model_json(model: BaseModel) -> bytes:
    """Spec JSON of a pyiceberg model (aliases, no nulls).

    Called through BaseModel because pyiceberg 0.12's v3 table metadata refuses to serialise
    itself (its own writer lacks v3 support); the catalog only relays what engines committed.
    """
    return BaseModel.model_dump_json(model, by_alias=True, exclude_none=True).encode()


def load_result(
    metadata_location: str | None, metadata_json: bytes, config: dict[str, str] | None = None
) -> bytes:
    """A LoadTableResult / LoadViewResult document."""
    head = b'{"metadata-location":' + orjson.dumps(metadata_location) if metadata_location else b"{"
    sep = b"," if metadata_location else b""
    return head + sep + b'"metadata":' + metadata_json + b',"config":' + orjson.dumps(config or {}) + b"}"


def with_member(document: bytes, name: str, value: Any) -> bytes:
    """A JSON object document (as `load_result` makes) with one more top-level member."""
    if not document.endswith(b"}"):  # pragma: no cover - every document here is an object
        raise ValueError("not a JSON object document")
    return document[:-1] + b"," + orjson.dumps(name) + b":" + orjson.dumps(value) + b"}"


def unregister_result(metadata_location: str, metadata_json: bytes) -> bytes:
    """An UnregisterTableResult document: the last metadata location and its metadata."""
    return b'{"metadata-location":' + orjson.dumps(metadata_location) + b',"metadata":' + metadata_json + b"}"


@functools.lru_cache(maxsize=8192)
def etag(metadata_location: str, variant: str) -> str:
    """A strong ETag, unique per metadata version and representation variant."""
    digest = hashlib.sha256(f"{metadata_location}\x00{variant}".encode()).hexdigest()[:40]
    return f'"{digest}"'


def etag_matches(if_none_match: str, tag: str) -> bool:
    """Whether an If-None-Match header value names `tag` (or is `*`)."""
    return if_none_match.strip() == "*" or tag in (part.strip() for part in if_none_match.split(","))
