"""Parsed metadata shared between commits (`catalog.parsed_metadata`) and updates applied without a
deep copy (`table_metadata.update_metadata`), on a real catalog (SQLite, local KEK, a sealing
warehouse).

What makes sharing safe is held for every update type a table commit can carry, on format v1, v2
and v3 tables:

- the metadata a commit starts from is the very model the previous commit kept, and it is the
  same after the commit as before it (nothing mutates a shared model);
- the model a commit keeps is what parsing the stored JSON gives, so the next commit starts from
  exactly what a process that parses it would;
- without the deep copy, pyiceberg's update steps give the same metadata as
  `pyiceberg.table.update.update_table_metadata`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import update_table_metadata

from cedarberg.catalog import documents, metadata_ids, table_changes, table_metadata, view_changes
from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.effects import Effect
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import TABLE, VIEW
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.parsed_metadata import SIZE_FACTOR, ParsedMetadataCache
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.tables import TableService
from cedarberg.catalog.views import ViewService
from tests.support.catalogs import WAREHOUSE, catalog_context

NAMESPACE = Namespace.of(["ns"])
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "name", "type": "string", "required": False},
        # Defaults of types whose JSON is a string: kept as decoded values, written back as JSON.
        {"id": 3, "name": "day", "type": "date", "required": False, "initial-default": "2020-01-02"},
        {"id": 4, "name": "price", "type": "decimal(9, 2)", "required": False, "write-default": "1.50"},
        {
            "id": 5,
            "name": "at",
            "type": "timestamp",
            "required": False,
            "initial-default": "2020-01-02T03:04:05",
        },
    ],
}
WIDER = {
    "type": "struct",
    "schema-id": 1,
    "fields": [*SCHEMA["fields"], {"id": 6, "name": "amount", "type": "double", "required": False}],  # type: ignore[misc]
}


async def allow(_effects: Sequence[Effect]) -> None:
    """A gate that allows everything."""


@pytest.fixture
async def ctx(tmp_path: Path, registry_url: str) -> AsyncIterator[CatalogContext]:
    async with catalog_context(tmp_path, url=registry_url) as context:
        await NamespaceService(context).create(None, NAMESPACE, {}, None)
        yield context


MOVED_HEX = "5f0c3b2a1d4e4f6a8b9c0d1e2f3a4b5c"


def _snapshot(location: str, snapshot_id: int, sequence: int, parent: int | None, v3: bool) -> dict[str, Any]:
    snapshot: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": 1_700_000_000_000 + sequence,
        "manifest-list": f"{location}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append", "added-records": "10"},
        "schema-id": 0,
    }
    if parent is not None:
        snapshot["parent-snapshot-id"] = parent
    if v3:
        snapshot["first-row-id"] = (sequence - 1) * 10
        snapshot["added-rows"] = 10
    return snapshot


def _steps(location: str, table_uuid: str, v3: bool) -> list[list[dict[str, Any]]]:
    """One commit's updates per step: every update type, each change over the previous ones."""
    statistics = {
        "snapshot-id": 2,
        "statistics-path": f"{location}/metadata/stats-2.puffin",
        "file-size-in-bytes": 10,
        "file-footer-size-in-bytes": 4,
        "blob-metadata": [],
    }
    partition_statistics = {
        "snapshot-id": 2,
        "statistics-path": f"{location}/metadata/partition-stats-2.parquet",
        "file-size-in-bytes": 10,
    }
    return [
        [{"action": "set-properties", "updates": {"owner": "etl", "comment": "first"}}],
        [{"action": "remove-properties", "removals": ["comment"]}],
        [{"action": "assign-uuid", "uuid": table_uuid}],
        [{"action": "add-schema", "schema": WIDER}, {"action": "set-current-schema", "schema-id": -1}],
        [
            {
                "action": "add-spec",
                "spec": {
                    "spec-id": 1,
                    "fields": [
                        {"source-id": 1, "field-id": 1000, "name": "id_bucket", "transform": "bucket[4]"}
                    ],
                },
            },
            {"action": "set-default-spec", "spec-id": -1},
        ],
        [
            {
                "action": "add-sort-order",
                "sort-order": {
                    "order-id": 1,
                    "fields": [
                        {
                            "source-id": 1,
                            "transform": "identity",
                            "direction": "asc",
                            "null-order": "nulls-first",
                        }
                    ],
                },
            },
            {"action": "set-default-sort-order", "sort-order-id": -1},
        ],
        [
            {"action": "add-snapshot", "snapshot": _snapshot(location, 1, 1, None, v3)},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1},
        ],
        [
            {"action": "add-snapshot", "snapshot": _snapshot(location, 2, 2, 1, v3)},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 2},
            {"action": "set-snapshot-ref", "ref-name": "audit", "type": "tag", "snapshot-id": 1},
        ],
        [{"action": "set-statistics", "snapshot-id": 2, "statistics": statistics}],
        [{"action": "set-partition-statistics", "partition-statistics": partition_statistics}],
        [{"action": "remove-statistics", "snapshot-id": 2}],
        [{"action": "remove-partition-statistics", "snapshot-id": 2}],
        [{"action": "remove-snapshot-ref", "ref-name": "audit"}],
        [{"action": "remove-snapshots", "snapshot-ids": [1]}],
        [{"action": "remove-partition-specs", "spec-ids": [0]}],
        [{"action": "remove-schemas", "schema-ids": [0]}],
        # Another object directory of the namespace (`<name>-<32 hex digits>`): a place it may move to.
        [{"action": "set-location", "location": f"{location.rsplit('/', 1)[0]}/moved-{MOVED_HEX}"}],
    ]


async def _row(ctx: CatalogContext, name: str, kind: str = TABLE) -> ObjectRow:
    async with ctx.store.read() as tx:
        row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, name)
    assert row is not None
    assert row.kind == kind
    return row


async def _create(ctx: CatalogContext, name: str, format_version: int) -> dict[str, Any]:
    properties = {"format-version": str(min(format_version, 2))}
    create = req.parse(req.CreateTableRequest, {"name": name, "schema": SCHEMA, "properties": properties})
    body = await TableService(ctx).create(None, NAMESPACE, create, None, allow)
    assert body is not None
    if format_version == 3:
        upgrade = req.parse(
            req.CommitTableRequest,
            {"requirements": [], "updates": [{"action": "upgrade-format-version", "format-version": 3}]},
        )
        body = await TableService(ctx).commit(None, Identifier.of(NAMESPACE, name), upgrade, None, allow)
        assert body is not None
    metadata: dict[str, Any] = json.loads(body)["metadata"]
    assert metadata["format-version"] == format_version
    assert metadata["schemas"][0]["fields"][2]["initial-default"] == "2020-01-02"
    assert metadata["schemas"][0]["fields"][3]["write-default"] == "1.50"
    return metadata


async def _assert_kept_as_parsed(ctx: CatalogContext, landed: ObjectRow, what: str) -> None:
    """The model kept for `landed`'s version is what parsing its stored JSON gives; it was kept as
    built, not parsed, except for v1 metadata (its JSON leaves the snapshots' sequence numbers
    out)."""
    stored = await ctx.sealer.open_row(landed)
    parse = _refuse if json.loads(stored)["format-version"] >= 2 else table_changes.parse_metadata
    kept = ctx.parsed_metadata.get_or_parse((TABLE, landed.uuid, landed.metadata_location), stored, parse)
    assert kept == table_changes.parse_metadata(stored), what
    assert documents.model_json(kept) == stored, what


@pytest.mark.parametrize("format_version", [1, 2, 3])
async def test_every_update_type_leaves_the_shared_base_unchanged_and_keeps_what_parsing_gives(
    ctx: CatalogContext, format_version: int
) -> None:
    name = f"t{format_version}"
    identifier = Identifier.of(NAMESPACE, name)
    created = await _create(ctx, name, format_version)
    await _assert_kept_as_parsed(ctx, await _row(ctx, name), "create")
    steps = _steps(created["location"], created["table-uuid"], format_version == 3)
    if format_version == 1:
        steps.append([{"action": "upgrade-format-version", "format-version": 2}])
    if format_version < 3:
        steps.append([{"action": "upgrade-format-version", "format-version": 3}])
    for updates in steps:
        row = await _row(ctx, name)
        current = await table_changes.open_table(ctx, row)
        assert current is not None
        base = current.metadata
        # The commit's base is the model the last commit kept (not parsed again).
        again = await table_changes.open_table(ctx, row)
        assert again is not None
        assert again.metadata is base
        before_json, before_dump = documents.model_json(base), base.model_dump()
        request = req.parse(req.CommitTableRequest, {"requirements": [], "updates": updates})
        await TableService(ctx).commit(None, identifier, request, None, allow)
        assert documents.model_json(base) == before_json, updates[0]["action"]
        assert base.model_dump() == before_dump, updates[0]["action"]
        landed = await _row(ctx, name)
        assert landed.metadata_location != row.metadata_location, updates[0]["action"]
        await _assert_kept_as_parsed(ctx, landed, updates[0]["action"])
    final = (await table_changes.open_table(ctx, await _row(ctx, name))).metadata  # type: ignore[union-attr]
    assert final.format_version == 3
    assert final.location.endswith(f"/moved-{MOVED_HEX}")
    assert [s.snapshot_id for s in final.snapshots] == [2]
    assert [s.schema_id for s in final.schemas] == [1]


def _refuse(_json: bytes) -> Any:
    raise AssertionError("the landed metadata was parsed instead of kept")


async def test_metadata_that_would_not_parse_back_the_same_is_not_kept(ctx: CatalogContext) -> None:
    """A snapshot sent with a null sequence number leaves `last-sequence-number` None in memory,
    and 0 once its JSON is parsed: the next commit parses it."""
    created = await _create(ctx, "nulls", 2)
    snapshot = {**_snapshot(created["location"], 7, 1, None, v3=False), "sequence-number": None}
    updates = [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 7},
    ]
    request = req.parse(req.CommitTableRequest, {"requirements": [], "updates": updates})
    await TableService(ctx).commit(None, Identifier.of(NAMESPACE, "nulls"), request, None, allow)
    landed = await _row(ctx, "nulls")
    stored = await ctx.sealer.open_row(landed)
    parsed: list[bytes] = []

    def parse(content: bytes) -> TableMetadata:
        parsed.append(content)
        return table_changes.parse_metadata(content)

    metadata = ctx.parsed_metadata.get_or_parse((TABLE, landed.uuid, landed.metadata_location), stored, parse)
    assert parsed == [stored]
    assert metadata.last_sequence_number == 0


def _reference_and_ours(
    base: TableMetadata, updates: tuple[Any, ...], location: str
) -> tuple[TableMetadata, TableMetadata]:
    """pyiceberg's result and ours for the same updates. Both stamp the time of the change; a run
    that crosses a millisecond between the two is run again (never more than a few times)."""
    for _attempt in range(5):
        reference = update_table_metadata(base, updates, metadata_location=location)
        ours = table_metadata.update_metadata(base, updates, metadata_location=location)
        if reference.last_updated_ms == ours.last_updated_ms:
            break
    return reference, ours


@pytest.mark.parametrize("format_version", [1, 2])
async def test_without_the_deep_copy_the_updates_give_what_pyiceberg_gives(
    ctx: CatalogContext, format_version: int
) -> None:
    name = f"r{format_version}"
    created = await _create(ctx, name, format_version)
    steps = _steps(created["location"], created["table-uuid"], v3=False)
    row = await _row(ctx, name)
    current = await table_changes.open_table(ctx, row)
    assert current is not None
    base = current.metadata
    for updates in steps:
        request = req.parse(req.CommitTableRequest, {"requirements": [], "updates": updates})
        assigned = metadata_ids.assign(base, request.updates)
        before = base.model_dump()
        reference, ours = _reference_and_ours(base, assigned, row.metadata_location)
        assert ours == reference, updates[0]["action"]
        assert documents.model_json(ours) == documents.model_json(reference)
        assert base.model_dump() == before
        base = ours


async def test_a_view_replace_keeps_what_parsing_gives_and_leaves_its_base_unchanged(
    ctx: CatalogContext,
) -> None:
    version = {
        "version-id": 1,
        "schema-id": 0,
        "timestamp-ms": 1,
        "summary": {},
        "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        "default-namespace": ["ns"],
    }
    create = req.parse(req.CreateViewRequest, {"name": "v", "schema": SCHEMA, "view-version": version})
    await ViewService(ctx).create(None, NAMESPACE, create, None, allow)
    identifier = Identifier.of(NAMESPACE, "v")
    second = {**version, "version-id": 2, "schema-id": 1}
    for updates in (
        [{"action": "set-properties", "updates": {"owner": "bi"}}],
        [
            {"action": "add-schema", "schema": WIDER},
            {"action": "add-view-version", "view-version": second},
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
        [{"action": "remove-properties", "removals": ["owner"]}],
    ):
        row = await _row(ctx, "v", VIEW)
        base = ctx.parsed_metadata.get_or_parse(
            (VIEW, row.uuid, row.metadata_location), await ctx.sealer.open_row(row), view_changes.parse
        )
        before = documents.model_json(base)
        request = req.parse(req.CommitViewRequest, {"requirements": [], "updates": updates})
        await ViewService(ctx).replace(None, identifier, request, None, allow)
        assert documents.model_json(base) == before
        landed = await _row(ctx, "v", VIEW)
        stored = await ctx.sealer.open_row(landed)
        kept = ctx.parsed_metadata.get_or_parse(
            (VIEW, landed.uuid, landed.metadata_location), stored, _refuse
        )
        assert kept == view_changes.parse(stored)
        assert documents.model_json(kept) == stored


def test_the_cache_is_bounded_in_bytes_and_age_and_keeps_kinds_apart() -> None:
    parses: list[bytes] = []

    def parse(content: bytes) -> str:
        parses.append(content)
        return content.decode()

    document = b"x" * 1000
    cache = ParsedMetadataCache(max_bytes=4 * 1000 * SIZE_FACTOR, max_age_seconds=60)
    for i in range(5):
        assert cache.get_or_parse((TABLE, "u", f"v{i}"), document, parse) == document.decode()
    assert len(cache) == 4
    assert cache.bytes == 4 * 1000 * SIZE_FACTOR
    cache.get_or_parse((TABLE, "u", "v4"), document, parse)
    assert len(parses) == 5  # kept: not parsed again
    cache.get_or_parse((TABLE, "u", "v0"), document, parse)
    assert len(parses) == 6  # evicted: parsed again
    cache.get_or_parse((VIEW, "u", "v4"), document, parse)
    assert len(parses) == 7  # a view's version is not a table's
    for _twice in range(2):
        cache.get_or_parse((TABLE, "u", "big"), b"y" * 1001, parse)  # over a quarter of the budget
    assert len(parses) == 9
    assert len(cache) == 4

    expired = ParsedMetadataCache(max_bytes=10**9, max_age_seconds=0)
    expired.get_or_parse((TABLE, "u", "v"), document, parse)
    expired.get_or_parse((TABLE, "u", "v"), document, parse)
    assert len(parses) == 11  # too old at once: parsed every time
    off = ParsedMetadataCache(max_bytes=0)
    off.keep((TABLE, "u", "v"), "model", 1)
    assert len(off) == 0
    assert off.bytes == 0
