"""Effects are derived from the metadata before and after a change, not from the request's words.

Changes are applied with the catalog's own `table_metadata.apply_updates` (pyiceberg), from
updates parsed by the catalog's request models, so every spelling those models accept is covered.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

from cedarberg.catalog import effects, table_metadata, view_metadata
from cedarberg.catalog import requests as req
from cedarberg.catalog.identifiers import Identifier

T = Identifier.of(["sales"], "orders")
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _create() -> TableMetadata:
    request = req.parse(
        req.CreateTableRequest,
        {
            "name": "orders",
            "schema": {
                "type": "struct",
                "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
            },
            "properties": {"owner": "etl"},
        },
    )
    return table_metadata.create_metadata(request, "file:///w/sales/orders")


def _apply(base: TableMetadata, *updates: dict[str, Any]) -> TableMetadata:
    change = req.parse(req.CommitTableRequest, {"requirements": [], "updates": list(updates)})
    return table_metadata.apply_updates(base, change.updates, "file:///w/sales/orders/metadata/v.json")


def _snapshot(snapshot_id: int, parent: int | None = None, sequence: int = 1) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": 1_700_000_000_000 + snapshot_id,
        "manifest-list": f"file:///w/sales/orders/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    if parent is not None:
        snap["parent-snapshot-id"] = parent
    return snap


def _with_history() -> TableMetadata:
    """Two snapshots; main points at the second."""
    base = _apply(_create(), {"action": "add-snapshot", "snapshot": _snapshot(1)})
    base = _apply(base, {"action": "add-snapshot", "snapshot": _snapshot(2, parent=1, sequence=2)})
    return _apply(
        base, {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 2, "type": "branch"}
    )


def test_a_created_table_creates_everything_it_carries() -> None:
    effect = effects.of_table_change(T, None, _create())
    assert effect.creates
    assert {"add-schema", "set-current-schema", "set-location", "set-properties", "assign-uuid"} <= (
        effect.update_kinds
    )
    assert effect.property_keys == {"owner"}
    assert effect.refs == frozenset()


@pytest.mark.parametrize(
    "spelling",
    [
        {"ref-name": "main", "snapshot-id": 1, "type": "branch"},
        {"ref_name": "main", "snapshot_id": 1, "type": "branch"},
        {"ref_name": "main", "snapshot-id": 1, "type": "branch"},
    ],
)
def test_moving_a_ref_names_it_however_the_update_is_spelled(spelling: dict[str, Any]) -> None:
    base = _with_history()
    new = _apply(base, {"action": "set-snapshot-ref", **spelling})
    effect = effects.of_table_change(T, base, new)
    assert effect.refs == {"main"}
    assert effect.update_kinds == {"set-snapshot-ref"}
    assert not effect.creates


def test_removing_the_snapshot_a_ref_points_at_removes_the_ref() -> None:
    base = _with_history()
    new = _apply(base, {"action": "remove-snapshots", "snapshot-ids": [2]})
    effect = effects.of_table_change(T, base, new)
    assert effect.refs == {"main"}
    assert effect.update_kinds == {"remove-snapshots", "remove-snapshot-ref"}


def test_expiring_an_unreferenced_snapshot_touches_no_ref() -> None:
    base = _with_history()
    effect = effects.of_table_change(
        T, base, _apply(base, {"action": "remove-snapshots", "snapshot-ids": [1]})
    )
    assert effect.refs == frozenset()
    assert effect.update_kinds == {"remove-snapshots"}


def test_a_request_that_changes_nothing_has_no_effect() -> None:
    base = _with_history()
    same = _apply(base, {"action": "set-properties", "updates": {"owner": "etl"}})
    effect = effects.of_table_change(T, base, same)
    assert effect.update_kinds == frozenset()
    assert effect.property_keys == frozenset()
    assert not effect.changes_anything


def test_schema_location_and_properties_are_named() -> None:
    base = _with_history()
    schema = {
        "type": "struct",
        "schema-id": 1,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 2, "name": "note", "type": "string", "required": False},
        ],
    }
    new = _apply(
        base,
        {"action": "add-schema", "schema": schema},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "set-location", "location": "file:///w/sales/orders2"},
        {"action": "remove-properties", "removals": ["owner"]},
        {"action": "set-properties", "updates": {"team": "blue"}},
    )
    effect = effects.of_table_change(T, base, new)
    assert effect.update_kinds == {
        "add-schema",
        "set-current-schema",
        "set-location",
        "set-properties",
        "remove-properties",
    }
    assert effect.property_keys == {"owner", "team"}


def test_a_move_across_namespaces_leaves_and_arrives_with_everything() -> None:
    metadata = _with_history()
    target = Identifier.of(["scratch"], "orders")
    leaving, arriving = effects.of_move(T, target, "table", metadata)
    assert (leaving.identifier, arriving.identifier) == (T, target)
    assert not leaving.creates
    assert leaving.refs == arriving.refs == {"main"}
    assert {"remove-snapshot-ref", "remove-schemas", "remove-snapshots"} <= leaving.update_kinds
    assert arriving.creates
    assert {"set-snapshot-ref", "add-schema", "add-snapshot"} <= arriving.update_kinds


def test_a_move_within_a_namespace_changes_no_content() -> None:
    (effect,) = effects.of_move(T, Identifier.of(["sales"], "orders_v2"), "table", None)
    assert not effect.changes_anything
    with pytest.raises(ValueError, match="metadata"):
        effects.of_move(T, Identifier.of(["other"], "orders"), "table", None)


def test_view_effects_name_schema_and_version_changes() -> None:
    version = ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1,
        summary={},
        representations=[SQLViewRepresentation(type="sql", sql="select 1", dialect="spark")],
        default_namespace=["sales"],
    )
    base = view_metadata.new_view_metadata("file:///w/sales/v", SCHEMA, version, {})
    assert effects.of_view_change(T, None, base).creates
    wider = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        schema_id=1,
    )
    change = req.parse(
        req.CommitViewRequest,
        {
            "updates": [
                {
                    "action": "add-schema",
                    "schema": wider.model_dump(mode="json", by_alias=True),
                    "last-column-id": 2,
                },
                {
                    "action": "add-view-version",
                    "view-version": {
                        **version.model_dump(mode="json", by_alias=True),
                        "version-id": 2,
                        "schema-id": -1,
                    },
                },
                {"action": "set-current-view-version", "view-version-id": -1},
            ]
        },
    )
    new = view_metadata.apply_updates(base, change.updates)
    effect = effects.of_view_change(T, base, new)
    assert effect.kind == "view"
    assert {"add-schema", "set-current-schema", "add-view-version", "set-current-view-version"} <= (
        effect.update_kinds
    )
