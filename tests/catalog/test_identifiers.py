"""Identifier validation at the edge."""

import pytest

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.identifiers import SEPARATOR, Identifier, Namespace


def test_namespace_round_trips_through_its_key() -> None:
    ns = Namespace.of(["a", "b", "c"])
    assert Namespace.parse(ns.key) == ns
    assert ns.parent_key == f"a{SEPARATOR}b"


@pytest.mark.parametrize(
    "levels",
    [
        [],
        [""],
        ["a", ""],
        ["a\x00"],
        ["a\nb"],
        [f"a{SEPARATOR}b"],
        "abc",
        [1],
        ["x" * 256],
        ["a"] * 17,
        ["x" * 250] * 5,
    ],
)
def test_bad_namespaces_are_refused(levels: object) -> None:
    with pytest.raises(InvalidRequestError):
        Namespace.of(levels)


def test_identifier_from_json_validates_both_parts() -> None:
    ident = Identifier.from_json({"namespace": ["a"], "name": "t"})
    assert ident.to_json() == {"namespace": ["a"], "name": "t"}
    with pytest.raises(InvalidRequestError):
        Identifier.from_json({"namespace": ["a"], "name": ""})
    with pytest.raises(InvalidRequestError):
        Identifier.from_json(["a", "t"])
