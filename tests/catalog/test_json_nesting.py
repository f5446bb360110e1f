"""The depth of a JSON document, measured on its bytes before parsing (`catalog.json_nesting`)."""

from __future__ import annotations

import orjson
import pytest

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.json_nesting import check_depth, depth
from tests.support.iceberg_types import left_deep_filter, nested_type, schema_of


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b"42", 0, id="scalar"),
        pytest.param(b"{}", 1, id="empty-object"),
        pytest.param(b'[[], {"a": [1, [2]]}]', 4, id="mixed"),
        pytest.param(b'{"a": "[[[{{{"}', 1, id="brackets-in-a-string"),
        pytest.param(b'{"a": "x\\"[[", "b": []}', 2, id="escaped-quote-in-a-string"),
        pytest.param(b'["\\\\", []]', 2, id="escaped-backslash-ends-the-string"),
        pytest.param(b'"unterminated [[[[', 0, id="unterminated-string"),
        pytest.param(b"]]]][[", 2, id="stray-closing-brackets-do-not-hide-depth"),
    ],
)
def test_depth_counts_brackets_outside_strings(raw: bytes, expected: int) -> None:
    assert depth(raw) == expected


@pytest.mark.parametrize(
    "document",
    [
        pytest.param({"schema": schema_of(nested_type("struct", 20))}, id="structs"),
        pytest.param(
            {"schema": schema_of(nested_type("list", 30), nested_type("map", 7))}, id="lists-and-maps"
        ),
        pytest.param({"filter": left_deep_filter(40)}, id="filter"),
    ],
)
def test_depth_agrees_with_the_parsed_document(document: dict[str, object]) -> None:
    def parsed_depth(value: object) -> int:
        if isinstance(value, dict):
            return 1 + max((parsed_depth(v) for v in value.values()), default=0)
        if isinstance(value, list):
            return 1 + max((parsed_depth(v) for v in value), default=0)
        return 0

    assert depth(orjson.dumps(document)) == parsed_depth(document)


def test_check_depth_refuses_one_level_more_than_the_limit() -> None:
    at_limit = b"[" * 100 + b"]" * 100
    check_depth(at_limit, 100)
    with pytest.raises(InvalidRequestError, match="nested deeper than 100 levels"):
        check_depth(b"[" + at_limit + b"]", 100)


def test_many_brackets_side_by_side_are_not_deep() -> None:
    """Past the fast path (more brackets than the limit), depth is what counts, not the number."""
    check_depth(b"[" + b"[1]," * 10_000 + b"[]]", 100)


def test_quotes_and_backslashes_cannot_hide_depth() -> None:
    """A string that never ends swallows what follows (a parser sees no brackets there either);
    an ended one hides nothing after it."""
    with pytest.raises(InvalidRequestError):
        check_depth(b'["\\\\\\"", ' + b"[" * 200 + b"]" * 200 + b"]", 100)
