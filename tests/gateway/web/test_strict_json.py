"""`strict_json.loads`: the fast duplicate check (colons counted) agrees with the exact one on
every spelling that could fool it."""

from __future__ import annotations

import json

import pytest

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.web import strict_json


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"a":1,"a":2}', "a"),
        (b'{"a":{"b":":","b":1}}', "b"),  # a colon in the dropped value
        (b'{"a":1,"\\u0061":2}', "a"),  # the same key, escaped
        (b'{"a\\/b":1,"a/b":2}', "a/b"),
        (b'{"x":"\\u003a","a":1,"a":2}', "a"),  # an escaped colon elsewhere makes up for the lost one
        (b"[" * 300 + b'{"a":1,"a":2}' + b"]" * 300, "a"),  # deeper than orjson re-encodes
        (b' { "k" : [ { "a" : 1 , "a" : 1 } ] } ', "a"),  # the same value twice
    ],
)
def test_a_repeated_key_is_refused_however_it_is_spelled(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        strict_json.loads(raw)
    assert str(refused.value) == f"request body is not valid JSON: duplicate field '{field}'"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":"x:y","b":{"a":":"},"c":[{"a":1},{"a":2}]}',
        b'{"a":"\\u003a","b":"\\u00e9\\n"}',
        b'{"url":"s3://x/y", "n": 1.5e3, "big": 18446744073709551616}',
        b"[" * 300 + b'{"a":1}' + b"]" * 300,
        b"[]",
        b'"just a string: yes"',
    ],
)
def test_documents_without_repeated_keys_decode_as_json_does(raw: bytes) -> None:
    assert strict_json.loads(raw) == json.loads(raw)


@pytest.mark.parametrize("raw", [b"{", b'{"a":NaN}', b'{"\\ud800":1}', b"\xff"])
def test_malformed_json_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidRequestError, match=r"^request body is not valid JSON$"):
        strict_json.loads(raw)
