"""Scan grants as the spec's ReadRestrictions (`catalog.planning.read_restrictions`), on real
pyiceberg table metadata, every answer validated against the merged spec schema; and planning
refusing masked columns (`catalog.planning.grants`)."""

from __future__ import annotations

import pytest
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual, In
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import (
    DateType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

from cedarberg.catalog.errors import ForbiddenError
from cedarberg.catalog.planning.grants import ScanGrant, effective_row_filter
from cedarberg.catalog.planning.read_restrictions import read_restrictions
from tests.support.read_restrictions import action_names, validate

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ssn", StringType(), required=False),
    NestedField(4, "born", DateType(), required=False),
    NestedField(
        5,
        "address",
        StructType(
            NestedField(6, "zip", StringType(), required=False),
            NestedField(7, "street", StringType(), required=False),
        ),
        required=False,
    ),
    NestedField(8, "tags", MapType(9, StringType(), 10, StringType(), value_required=False), required=False),
    NestedField(11, "amount", DoubleType(), required=True),
    NestedField(12, "scores", ListType(13, IntegerType(), element_required=False), required=False),
)


def _metadata(schema: Schema = SCHEMA) -> TableMetadata:
    return new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///w/t", {})


def _restrictions(*grants: ScanGrant, metadata: TableMetadata | None = None) -> dict[str, object] | None:
    document = read_restrictions(metadata or _metadata(), grants)
    if document is not None:
        validate(document)
    return document


def _id(name: str) -> int:
    """The id a field has in the table (a new table's fields are given fresh ids)."""
    return _metadata().schema().find_field(name).field_id


def _projections(document: dict[str, object] | None, metadata: TableMetadata | None = None) -> dict[str, str]:
    """The projections by field name."""
    assert document is not None
    listed = document.get("required-column-projections") or []
    assert isinstance(listed, list)
    names: dict[int, str] = {}
    for schema in (metadata or _metadata()).schemas:
        names.update({i: name for i in schema.field_ids if (name := schema.find_column_name(i)) is not None})
    return {names[p["field-id"]]: p["action"] for p in listed}


def test_the_mask_kinds_are_the_specs() -> None:
    from cedarberg.catalog.planning.mask_actions import MASK_ACTIONS

    assert sorted(MASK_ACTIONS) == sorted(action_names())


def test_columns_a_grant_does_not_let_through_are_hidden_and_its_filter_is_required() -> None:
    grant = ScanGrant(frozenset({"id", "region", "ssn"}), EqualTo("region", "eu"), (("ssn", "show-last-4"),))
    document = _restrictions(grant)
    assert _projections(document) == {
        "ssn": "show-last-4",
        "born": "replace-with-null",  # optional: null
        "address": "replace-with-null",  # a struct hidden whole: nothing inside it is projected too
        "tags": "replace-with-null",
        "amount": "mask-to-fixed-value",  # required: the spec's fixed value, never null
        "scores": "replace-with-null",
    }
    assert document is not None
    assert document["required-row-filter"] == {
        "type": "eq",
        "left": {"type": "reference", "id": _id("region")},
        "right": {"type": "literal", "value": "eu"},
    }


def test_an_unrestricted_grant_means_no_restrictions_and_no_grant_refuses() -> None:
    assert _restrictions(ScanGrant(frozenset({"id"}), None), ScanGrant(None, None)) is None
    with pytest.raises(ForbiddenError):
        read_restrictions(_metadata(), ())


def test_a_struct_partly_let_through_is_walked_into_and_a_map_is_hidden_whole() -> None:
    everything_but = frozenset({"id", "region", "ssn", "born", "amount", "scores"})
    partial = ScanGrant(everything_but | {"address.zip", "tags.value"}, None)
    # address.street hidden, address.zip shown; a map read partly is hidden whole (never its key).
    assert _projections(_restrictions(partial)) == {
        "address.street": "replace-with-null",
        "tags": "replace-with-null",
    }


def test_several_grants_show_what_every_one_shows_with_the_rows_of_any() -> None:
    low = ScanGrant(frozenset({"id", "region", "amount"}), EqualTo("region", "eu"))
    high = ScanGrant(frozenset({"id", "amount", "ssn"}), GreaterThanOrEqual("amount", 100.0))
    document = _restrictions(low, high)
    projections = _projections(document)
    assert "id" not in projections
    assert "amount" not in projections
    assert projections["region"] == "replace-with-null"  # only one lets region through: hidden
    assert projections["ssn"] == "replace-with-null"  # only one lets ssn through: hidden
    assert document is not None
    row_filter = document["required-row-filter"]
    assert isinstance(row_filter, dict)
    assert row_filter["type"] == "or"
    # Planning grants a scan of id and amount exactly these rows: both grants cover it.
    planned = effective_row_filter((low, high), SCHEMA, frozenset({"id", "amount"}))
    assert planned == EqualTo("region", "eu") | GreaterThanOrEqual("amount", 100.0)


def test_one_grant_without_a_filter_lifts_the_row_filter_and_masks_combine_strictly() -> None:
    masked = ScanGrant(None, EqualTo("region", "eu"), (("ssn", "show-last-4"), ("region", "mask-alphanum")))
    other = ScanGrant(None, None, (("ssn", "sha-256-global"), ("region", "mask-alphanum")))
    document = _restrictions(masked, other)
    assert document is not None
    assert "required-row-filter" not in document
    # Two different masks: neither reader's view, so hidden; one shared mask stays that mask.
    assert _projections(document) == {"ssn": "replace-with-null", "region": "mask-alphanum"}


def test_a_mask_shown_only_to_some_grants_stays_a_mask() -> None:
    clear = ScanGrant(frozenset({"id", "ssn"}), None)
    masked = ScanGrant(frozenset({"id", "ssn"}), None, (("ssn", "show-first-4"),))
    assert _projections(_restrictions(clear, masked))["ssn"] == "show-first-4"


def test_in_filters_and_dates_are_written_in_the_specs_value_forms() -> None:
    import datetime as dt

    grant = ScanGrant(
        None, In("region", {"us", "eu"}) & GreaterThanOrEqual("born", dt.date(2000, 1, 2).isoformat())
    )
    document = _restrictions(grant)
    assert document is not None
    assert document["required-row-filter"] == {
        "type": "and",
        "left": {"type": "in", "child": {"type": "reference", "id": _id("region")}, "values": ["eu", "us"]},
        "right": {
            "type": "gt-eq",
            "left": {"type": "reference", "id": _id("born")},
            "right": {"type": "literal", "value": "2000-01-02"},
        },
    }


@pytest.mark.parametrize(
    ("grant", "message"),
    [
        (ScanGrant(None, None, (("id", "show-last-4"),)), "does not apply to column id"),
        (ScanGrant(None, None, (("id", "replace-with-null"),)), "does not apply to column id"),
        (ScanGrant(None, None, (("born", "sha-256-global"),)), "does not apply to column born"),
        (ScanGrant(None, None, (("gone", "show-last-4"),)), "does not have: gone"),
        (ScanGrant(None, EqualTo("gone", 1)), "row filter does not apply"),
    ],
)
def test_a_restriction_the_table_cannot_honour_refuses_the_load(grant: ScanGrant, message: str) -> None:
    with pytest.raises(ForbiddenError, match=message):
        read_restrictions(_metadata(), (grant,))


def test_a_column_dropped_from_the_schema_is_hidden_for_time_travel_too() -> None:
    old = Schema(*SCHEMA.fields, NestedField(20, "salary", LongType(), required=False), schema_id=0)
    metadata = _metadata(old)
    current = Schema(*(f for f in metadata.schema().fields if f.name != "salary"), schema_id=1)
    metadata = metadata.model_copy(update={"schemas": [*metadata.schemas, current], "current_schema_id": 1})
    grant = ScanGrant(frozenset({"id", "region", "ssn", "born", "address", "tags", "amount", "scores"}), None)
    assert _projections(_restrictions(grant, metadata=metadata), metadata) == {"salary": "replace-with-null"}


def test_planning_refuses_a_masked_column_it_cannot_mask() -> None:
    grant = ScanGrant(
        frozenset({"id", "ssn", "address"}), None, (("ssn", "show-last-4"), ("address.zip", "mask-alphanum"))
    )
    assert effective_row_filter((grant,), SCHEMA, frozenset({"id"})) is None  # control
    for touched in ({"id", "ssn"}, {"address"}, {"address.zip"}):
        with pytest.raises(ForbiddenError, match="not allowed to scan"):
            effective_row_filter((grant,), SCHEMA, frozenset(touched))
    assert effective_row_filter((grant,), SCHEMA, frozenset({"address.street"})) is None
