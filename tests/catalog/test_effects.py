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


# -- an identifier is not an identity ----------------------------------------------------------------


def _replaced(metadata: TableMetadata, snapshot_id: int, manifest_list: str) -> TableMetadata:
    """`metadata` with another snapshot under `snapshot_id`: what a commit that removes a snapshot
    and adds another with its id would leave (the catalog refuses such a commit: this is the
    effect's own line of defence)."""
    snapshots = [
        s.model_copy(update={"manifest_list": manifest_list}) if s.snapshot_id == snapshot_id else s
        for s in metadata.snapshots
    ]
    return metadata.model_copy(update={"snapshots": snapshots})


def test_a_snapshot_replaced_under_its_id_moves_every_ref_whose_history_holds_it() -> None:
    base = _apply(
        _with_history(),
        {"action": "set-snapshot-ref", "ref-name": "release", "snapshot-id": 1, "type": "tag"},
        {"action": "set-snapshot-ref", "ref-name": "dev", "snapshot-id": 2, "type": "branch"},
    )
    head = effects.of_table_change(T, base, _replaced(base, 2, "file:///w/sales/orders/evil.avro"))
    assert head.refs == {"main", "dev"}
    assert head.update_kinds == {"set-snapshot-ref", "add-snapshot", "remove-snapshots"}
    # An ancestor: every ref that reads through it moved, though no ref tuple changed.
    ancestor = effects.of_table_change(T, base, _replaced(base, 1, "file:///w/sales/orders/evil.avro"))
    assert ancestor.refs == {"main", "dev", "release"}


def test_expiring_old_history_moves_no_ref() -> None:
    """Control: expiry cuts parent links (pyiceberg sets them to None); the ref reads what it read."""
    base = _apply(
        _with_history(),
        {"action": "add-snapshot", "snapshot": _snapshot(3, parent=2, sequence=3)},
        {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 3, "type": "branch"},
    )
    new = _apply(base, {"action": "remove-snapshots", "snapshot-ids": [2]})  # the middle one
    kept = new.snapshot_by_id(3)
    assert kept is not None
    assert kept.parent_snapshot_id is None
    effect = effects.of_table_change(T, base, new)
    assert effect.refs == frozenset()
    assert effect.update_kinds == {"remove-snapshots"}


def test_a_snapshot_linked_into_a_history_moves_the_ref() -> None:
    """A ref whose oldest snapshot names an expired parent: adding a snapshot under that id
    lengthens what the ref reads."""
    full = _with_history()
    dangling = full.model_copy(update={"snapshots": [s for s in full.snapshots if s.snapshot_id != 1]})
    linked = _apply(dangling, {"action": "add-snapshot", "snapshot": _snapshot(1, sequence=3)})
    effect = effects.of_table_change(T, dangling, linked)
    assert effect.refs == {"main"}
    assert "set-snapshot-ref" in effect.update_kinds


def test_a_schema_that_takes_a_removed_schemas_id_is_a_schema_change() -> None:
    """Two change lists of one transaction: the first drops schema 1, the second adds a schema
    that is numbered 1 and makes it current again. Ids and the current id end as they began."""
    base = _apply(
        _create(),
        {
            "action": "add-schema",
            "schema": {
                "type": "struct",
                "schema-id": 1,
                "fields": [
                    {"id": 1, "name": "id", "type": "long", "required": False},
                    {"id": 2, "name": "note", "type": "string", "required": False},
                ],
            },
        },
        {"action": "set-current-schema", "schema-id": -1},
    )
    first = _apply(
        base,
        {"action": "set-current-schema", "schema-id": 0},
        {"action": "remove-schemas", "schema-ids": [1]},
    )
    other = {
        "type": "struct",
        "schema-id": 1,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 3, "name": "secret", "type": "string", "required": False},
        ],
    }
    second = _apply(
        first, {"action": "add-schema", "schema": other}, {"action": "set-current-schema", "schema-id": -1}
    )
    assert ({s.schema_id for s in second.schemas}, second.current_schema_id) == ({0, 1}, 1)
    effect = effects.of_table_change(T, base, second)
    assert {"add-schema", "remove-schemas", "set-current-schema"} <= effect.update_kinds


def test_specs_and_sort_orders_are_compared_by_content() -> None:
    bucket = {"source-id": 1, "field-id": 1000, "name": "id_b", "transform": "bucket[4]"}
    ascending = {"source-id": 1, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}
    base = _apply(
        _create(),
        {"action": "add-spec", "spec": {"spec-id": 1, "fields": [bucket]}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 1, "fields": [ascending]}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
    )
    other = _apply(
        _create(),
        {"action": "add-spec", "spec": {"spec-id": 1, "fields": [{**bucket, "transform": "bucket[8]"}]}},
        {
            "action": "add-sort-order",
            "sort-order": {"order-id": 1, "fields": [{**ascending, "direction": "desc"}]},
        },
    )
    # The same ids (1 and 1, both the defaults) naming other content.
    swapped = base.model_copy(
        update={
            "partition_specs": [*base.partition_specs[:1], other.specs()[1]],
            "sort_orders": [*base.sort_orders[:1], other.sort_order_by_id(1)],
        }
    )
    assert (swapped.default_spec_id, swapped.default_sort_order_id) == (1, 1)
    effect = effects.of_table_change(T, base, swapped)
    assert effect.update_kinds == {
        "add-spec",
        "remove-partition-specs",
        "set-default-spec",
        "add-sort-order",
        "remove-sort-orders",
        "set-default-sort-order",
    }


def _view_version(version_id: int, sql: str) -> ViewVersion:
    return ViewVersion(
        version_id=version_id,
        schema_id=0,
        timestamp_ms=1,
        summary={},
        representations=[SQLViewRepresentation(type="sql", sql=sql, dialect="spark")],
        default_namespace=["sales"],
    )


def test_a_view_version_keeps_its_id_and_content() -> None:
    base = view_metadata.new_view_metadata("file:///w/sales/v", SCHEMA, _view_version(1, "select 1"), {})
    # A version sent with the current version's id is added under a new id: 1 still says select 1.
    change = req.parse(
        req.CommitViewRequest,
        {
            "updates": [
                {
                    "action": "add-view-version",
                    "view-version": _view_version(1, "select 2").model_dump(mode="json", by_alias=True),
                }
            ]
        },
    )
    added = view_metadata.apply_updates(base, change.updates)
    assert [(v.version_id, v.representations[0].root.sql) for v in added.versions] == [
        (1, "select 1"),
        (2, "select 2"),
    ]
    assert effects.of_view_change(T, base, added).update_kinds == {"add-view-version"}
    # Other content under the current version's id (as a registered file could carry) was set.
    replaced = base.model_copy(update={"versions": [_view_version(1, "select secret")]})
    assert effects.of_view_change(T, base, replaced).update_kinds == {
        "add-view-version",
        "remove-view-versions",
        "set-current-view-version",
    }
