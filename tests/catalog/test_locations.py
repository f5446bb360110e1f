"""Location normalisation and the inside-the-warehouse rule."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cedarberg.catalog import locations
from cedarberg.catalog.errors import InvalidRequestError, LocationNotAllowedError


@pytest.mark.parametrize(
    ("given_location", "expected"),
    [
        ("file:/w/a", "file:///w/a"),
        ("file:///w/a/", "file:///w/a"),
        ("file://localhost/w/a", "file:///w/a"),
        ("/w//a", "file:///w/a"),
        ("s3a://bucket/k//x/", "s3://bucket/k/x"),
        ("s3://bucket", "s3://bucket"),
    ],
)
def test_normalize_spellings_of_one_place(given_location: str, expected: str) -> None:
    assert locations.normalize(given_location) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "relative/path",
        "file:///w/../etc",
        "ftp://host/x",
        "file://otherhost/x",
        "s3:///nobucket",
        "file:///w?x=1",
        "file:///w\n",
    ],
)
def test_normalize_refuses_ambiguous_locations(bad: str) -> None:
    with pytest.raises(InvalidRequestError):
        locations.normalize(bad)


def test_file_colon_slash_and_triple_slash_are_within_each_other() -> None:
    assert locations.is_within("file:/w/ns/t/data/f.parquet", "file:///w")
    assert locations.is_within("file:///w", "file:/w/")


def test_sibling_with_common_prefix_is_not_within() -> None:
    assert not locations.is_within("file:///warehouse2/t", "file:///warehouse")


def test_require_within_raises_for_outside() -> None:
    with pytest.raises(LocationNotAllowedError):
        locations.require_within("file:///elsewhere/t", "file:///w")


@given(st.text(min_size=1, max_size=30).filter(lambda s: all(ord(c) >= 0x20 for c in s)))
def test_join_never_climbs_out_of_the_base(name: str) -> None:
    joined = locations.join("file:///w/ns", name)
    assert locations.is_within(joined, "file:///w/ns")
    assert joined != locations.normalize("file:///w/ns")
