"""A client's JSON body, decoded once and only if it means one thing: no object repeats a key.

JSON leaves a repeated key's meaning open (RFC 8259 section 4): orjson keeps the last value, other
parsers the first or both. A body whose authorization read one value and whose application (or a
downstream engine, or an audit reader) reads another is the gap between two parsers; so a repeated
key is a 400 (`BadRequestException`, Jackson's wording with STRICT_DUPLICATE_DETECTION: "Duplicate
field"), whatever the key and however it is spelled (`"a"`, `"\\u0061"`).

The check costs little on the write path: without `\\u` escapes, every colon of a JSON text outside
its strings separates one member, and a string's colons are the same in the text and in its value;
so re-encoding the decoded document (orjson, ~1 us for 3 KB) yields as many colons as the body
unless the decoder dropped a repeated member. A body with `\\u` escapes, or one orjson cannot
re-encode, is checked exactly by Python's json with a hook that sees every member.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from cedarberg.catalog.errors import InvalidRequestError

_NOT_JSON = "request body is not valid JSON"


def loads(raw: bytes) -> Any:
    """The decoded document. Raises InvalidRequestError for malformed JSON or an object with a
    repeated key."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequestError(_NOT_JSON) from None
    # find(92): a memchr for any backslash, far cheaper than searching for the pair.
    if raw.find(92) == -1 or b"\\u" not in raw:
        try:
            if orjson.dumps(document).count(b":") == raw.count(b":"):
                return document
        except orjson.JSONEncodeError:  # nested past orjson's encoding depth: check exactly
            pass
    _check_exactly(raw)
    return document


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name, value in pairs:
        if name in members:
            raise InvalidRequestError(f"{_NOT_JSON}: duplicate field '{name[:100]}'")
        members[name] = value
    return members


def _check_exactly(raw: bytes) -> None:
    try:
        json.loads(raw, object_pairs_hook=_unique)
    except RecursionError:
        raise InvalidRequestError(f"{_NOT_JSON}: nested too deeply") from None
    except ValueError:  # orjson accepted it; json's stricter corners (lone surrogates) did not
        raise InvalidRequestError(_NOT_JSON) from None
