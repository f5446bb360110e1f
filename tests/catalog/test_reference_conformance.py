"""What Iceberg's reference implementation does and Cedarberg now does too, unit by unit.

tests/e2e/test_rck.py runs Iceberg's compatibility kit end to end; these pin each behaviour it
found missing where it is decided, with the exact wording engines show to people.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, StructType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from cedarberg.catalog import fileio, metadata_ids, requirements, table_metadata, view_metadata
from cedarberg.catalog import requests as req
from cedarberg.catalog.errors import CommitFailedError, InvalidArgumentError
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import TABLE, VIEW, name_taken
from cedarberg.catalog.objects import Move, rename_target_taken

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "data", StringType()))


def _table(**extra: Any) -> TableMetadata:
    request = req.parse(
        req.CreateTableRequest,
        {"name": "t", "schema": json.loads(SCHEMA.model_dump_json()), **extra},
    )
    return table_metadata.create_metadata(request, "file:///w/ns/t")


def _commit(
    updates: list[dict[str, Any]], reqs: list[dict[str, Any]] | None = None
) -> req.CommitTableRequest:
    return req.parse(req.CommitTableRequest, {"updates": updates, "requirements": reqs or []})


# -- requirement failures, in the reference's words -----------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "message"),
    [
        ({"type": "assert-create"}, "Requirement failed: table already exists"),
        (
            {"type": "assert-current-schema-id", "current-schema-id": 7},
            "Requirement failed: current schema changed: expected id 7 != 0",
        ),
        (
            {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 1},
            "Requirement failed: last assigned field id changed: expected id 1 != 2",
        ),
        (
            {"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 1001},
            "Requirement failed: last assigned partition id changed: expected id 1001 != 999",
        ),
        (
            {"type": "assert-default-spec-id", "default-spec-id": 3},
            "Requirement failed: default partition spec changed: expected id 3 != 0",
        ),
        (
            {"type": "assert-default-sort-order-id", "default-sort-order-id": 2},
            "Requirement failed: default sort order changed: expected id 2 != 0",
        ),
        (
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 5},
            "Requirement failed: branch or tag main is missing, expected 5",
        ),
    ],
)
def test_a_failed_requirement_is_worded_as_the_reference_words_it(
    requirement: dict[str, Any], message: str
) -> None:
    base = _table()
    with pytest.raises(CommitFailedError) as refused:
        requirements.validate(_commit([], [requirement]).requirements, base)
    assert str(refused.value) == message


def test_a_uuid_mismatch_names_the_tables_uuid_first_as_the_reference_does() -> None:
    base = _table()
    other = uuid.uuid4()
    with pytest.raises(CommitFailedError) as refused:
        requirements.validate(
            _commit([], [{"type": "assert-table-uuid", "uuid": str(other)}]).requirements, base
        )
    assert (
        str(refused.value)
        == f"Requirement failed: UUID does not match: expected {base.table_uuid} != {other}"
    )


def test_requirements_that_hold_pass() -> None:
    base = _table()
    held = [
        {"type": "assert-table-uuid", "uuid": str(base.table_uuid)},
        {"type": "assert-current-schema-id", "current-schema-id": 0},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None},
        {"type": "assert-default-sort-order-id", "default-sort-order-id": 0},
    ]
    requirements.validate(_commit([], held).requirements, base)
    requirements.validate(_commit([], [{"type": "assert-create"}]).requirements, None)


# -- ids of what a commit adds --------------------------------------------------------------------

SORT_BY_ID = {
    "order-id": 1,
    "fields": [{"transform": "identity", "source-id": 1, "direction": "asc", "null-order": "nulls-first"}],
}
SORT_BY_DATA = {
    "order-id": 1,
    "fields": [{"transform": "identity", "source-id": 2, "direction": "asc", "null-order": "nulls-first"}],
}


def test_a_sort_order_sent_with_a_taken_id_gets_the_next_one() -> None:
    """Two replace transactions both add "sort order 1": the second is not refused."""
    first = table_metadata.apply_updates(
        _table(),
        _commit(
            [
                {"action": "add-sort-order", "sort-order": SORT_BY_ID},
                {"action": "set-default-sort-order", "sort-order-id": -1},
            ]
        ).updates,
        None,
    )
    second = table_metadata.apply_updates(
        first,
        _commit(
            [
                {"action": "add-sort-order", "sort-order": SORT_BY_DATA},
                {"action": "set-default-sort-order", "sort-order-id": -1},
            ]
        ).updates,
        None,
    )
    assert [order.order_id for order in second.sort_orders] == [0, 1, 2]
    assert second.default_sort_order_id == 2
    assert second.sort_order().fields[0].source_id == 2


def test_an_equal_sort_order_is_reused_not_added_again() -> None:
    add = _commit(
        [
            {"action": "add-sort-order", "sort-order": SORT_BY_ID},
            {"action": "set-default-sort-order", "sort-order-id": -1},
        ]
    )
    once = table_metadata.apply_updates(_table(), add.updates, None)
    twice = table_metadata.apply_updates(once, add.updates, None)
    assert [order.order_id for order in twice.sort_orders] == [0, 1]
    assert twice.default_sort_order_id == 1


def test_a_schema_sent_with_a_taken_id_gets_the_next_one_and_set_current_follows() -> None:
    wider = Schema(*SCHEMA.fields, NestedField(3, "extra", IntegerType()), schema_id=0)
    updates = _commit(
        [
            {"action": "add-schema", "schema": json.loads(wider.model_dump_json())},
            {"action": "set-current-schema", "schema-id": 0},
        ]
    ).updates
    assigned = metadata_ids.assign(_table(), updates)
    new = table_metadata.apply_updates(_table(), updates, None)
    assert [schema.schema_id for schema in new.schemas] == [0, 1]
    assert new.current_schema_id == 1
    assert len(assigned) == 2


def test_a_v3_create_transaction_applies() -> None:
    """assert-create + upgrade-format-version 3 on the empty base (was a 500)."""
    updates = _commit(
        [
            {"action": "assign-uuid", "uuid": str(uuid.uuid4())},
            {"action": "upgrade-format-version", "format-version": 3},
            {"action": "add-schema", "schema": json.loads(SCHEMA.model_dump_json())},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
            {"action": "set-default-spec", "spec-id": -1},
            {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
            {"action": "set-default-sort-order", "sort-order-id": -1},
            {"action": "set-location", "location": "file:///w/ns/t"},
        ],
        [{"type": "assert-create"}],
    )
    new = table_metadata.apply_updates(None, updates.updates, None)
    assert new.format_version == 3
    assert new.schema().fields == SCHEMA.fields


def test_column_defaults_are_kept_on_create() -> None:
    sent = {
        "type": "struct",
        "schema-id": 0,
        "fields": [
            {"id": 7, "name": "n", "type": "int", "required": True, "initial-default": 3, "write-default": 4},
            {
                "id": 8,
                "name": "s",
                "type": {
                    "type": "struct",
                    "fields": [
                        {"id": 9, "name": "x", "type": "string", "required": False, "write-default": "w"}
                    ],
                },
                "required": False,
            },
        ],
    }
    request = req.parse(req.CreateTableRequest, {"name": "t", "schema": sent})
    schema = table_metadata.create_metadata(request, "file:///w/ns/t").schema()
    number, nested = schema.fields
    assert (number.field_id, number.initial_default, number.write_default) == (1, 3, 4)
    assert isinstance(nested.field_type, StructType)
    assert nested.field_type.fields[0].write_default == "w"
    assert schema.find_field("s.x").field_id == 3  # fresh ids, lookups rebuilt


# -- views ------------------------------------------------------------------------------------------


def _version(schema_id: int, *dialects: str) -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=schema_id,
        timestamp_ms=1,
        summary={},
        representations=[
            ViewRepresentation(SQLViewRepresentation(type="sql", sql="select 1", dialect=d)) for d in dialects
        ],
        default_namespace=["ns"],
    )


def test_a_new_views_schema_is_schema_0_whatever_id_was_sent() -> None:
    sent = Schema(*SCHEMA.fields, schema_id=5)
    view = view_metadata.new_view_metadata("file:///w/ns/v", sent, _version(5, "spark"), {})
    assert [schema.schema_id for schema in view.schemas] == [0]
    assert view.versions[0].schema_id == 0


def test_a_view_version_naming_its_added_schema_by_the_sent_id_refers_to_the_stored_one() -> None:
    base = view_metadata.new_view_metadata("file:///w/ns/v", SCHEMA, _version(0, "spark"), {})
    wider = Schema(*SCHEMA.fields, NestedField(3, "extra", IntegerType()), schema_id=6)
    updates = req.parse(
        req.CommitViewRequest,
        {
            "updates": [
                {"action": "add-schema", "schema": json.loads(wider.model_dump_json())},
                {
                    "action": "add-view-version",
                    "view-version": json.loads(_version(6, "trino").model_dump_json()),
                },
                {"action": "set-current-view-version", "view-version-id": -1},
            ]
        },
    ).updates
    new = view_metadata.apply_updates(base, updates)
    assert [schema.schema_id for schema in new.schemas] == [0, 1]
    assert new.versions[-1].schema_id == 1


@pytest.mark.parametrize("dialects", [("trino", "trino"), ("Trino", "trino")])
def test_two_queries_for_one_dialect_are_an_illegal_argument(dialects: tuple[str, str]) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        view_metadata.new_view_metadata("file:///w/ns/v", SCHEMA, _version(0, *dialects), {})
    assert str(refused.value) == "Invalid view version: Cannot add multiple queries for dialect trino"


# -- names and files -------------------------------------------------------------------------------


def test_name_conflicts_are_worded_as_the_reference_words_them() -> None:
    table, view = Identifier(Namespace(("ns",)), "t"), Identifier(Namespace(("ns",)), "v")
    assert str(name_taken(table, TABLE, TABLE)) == "Table already exists: ns.t"
    assert str(name_taken(view, VIEW, VIEW)) == "View already exists: ns.v"
    assert str(name_taken(view, VIEW, TABLE)) == "View with same name already exists: ns.v"
    assert str(name_taken(table, TABLE, VIEW)) == "Table with same name already exists: ns.t"
    assert (
        str(rename_target_taken(Move(TABLE, table, view), VIEW))
        == "Cannot rename ns.t to ns.v. View already exists"
    )


def test_metadata_files_go_to_write_metadata_path_as_spelled() -> None:
    custom = _table(properties={"write.metadata.path": "file:/w/ns/t/custom/"})
    assert fileio.metadata_file_location(custom, 3).startswith("file:/w/ns/t/custom/00003-")
    assert fileio.metadata_file_location(_table(), 0).startswith("file:///w/ns/t/metadata/00000-")
