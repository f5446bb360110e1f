"""Rebuild the registry of a warehouse from its sealed metadata files (the KMS must be reachable).

A sealed metadata file names its object (kind, UUID, namespace, name), carries the object's
wrapped data key and is bound to its metadata version, so the warehouse alone says which tables
and views exist and what their current metadata is: per object UUID, the file with the highest
version wins. Files parked by a soft delete (`cedarberg-dropped/`) are not restored; plaintext
metadata files carry no identity and are reported for registerTable instead.

What the warehouse does not hold cannot come back: namespace properties, and a rename done after
an object's last commit (the object returns under the name its newest file records).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from cedarberg.catalog import fileio, locations
from cedarberg.catalog.commits import new_row
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.errors import AlreadyExistsError, CatalogError, KeyServiceUnavailableError
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.locations import PARKING_DIR
from cedarberg.catalog.sealing import ObjectKey, OpenedFile, SealTarget
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows

log = logging.getLogger(__name__)

_METADATA_SUFFIX = ".metadata.json"


@dataclass
class RebuildReport:
    warehouse: str
    restored: list[str] = field(default_factory=list)  # "table ns.name" / "view ns.name"
    namespaces_created: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # what was not restored, and why


@dataclass(frozen=True, slots=True)
class _Found:
    location: str
    version: int
    opened: OpenedFile


def list_metadata_files(root: str) -> list[str]:
    """Every `*/metadata/*.metadata.json` below a warehouse root (blocking; any filesystem pyarrow
    reaches), except parked files of soft-deleted objects."""
    from pyarrow import fs

    filesystem, base = fs.FileSystem.from_uri(root)
    scheme = locations.normalize(root).split("://", 1)[0]
    found = []
    for info in filesystem.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True)):
        path = info.path
        if info.type != fs.FileType.File or not path.endswith(_METADATA_SUFFIX):
            continue
        parts = path.split("/")
        if len(parts) < 2 or parts[-2] != "metadata" or PARKING_DIR in parts:
            continue
        found.append(f"{scheme}://{path}" if scheme != "file" else f"file://{path}")
    return sorted(found)


async def _open(ctx: CatalogContext, warehouse: Warehouse, location: str) -> OpenedFile:
    content = await asyncio.to_thread(fileio.read_file, location, ctx.limits.max_metadata_bytes)
    return await ctx.sealer.open_file(warehouse.name, location, content)


async def rebuild(ctx: CatalogContext, warehouse_name: str | None) -> RebuildReport:
    """Restore every table and view of a warehouse whose sealed files are found and that the
    registry does not hold yet. Raises KeyServiceUnavailableError if the KMS cannot be reached."""
    warehouse = ctx.warehouse(warehouse_name)
    report = RebuildReport(warehouse.name)
    newest: dict[tuple[str, str], _Found] = {}
    for location in await asyncio.to_thread(list_metadata_files, warehouse.location):
        try:
            opened = await _open(ctx, warehouse, location)
        except KeyServiceUnavailableError:
            raise
        except CatalogError as err:
            report.skipped.append(f"{location}: {err}")
            continue
        if opened.kind is None or opened.object_uuid is None:
            report.skipped.append(f"{location}: plaintext metadata file (register it with registerTable)")
            continue
        version = fileio.parse_metadata_version(location)
        current = newest.get((opened.kind, opened.object_uuid))
        if current is None or version > current.version:
            newest[(opened.kind, opened.object_uuid)] = _Found(location, version, opened)
    for found in sorted(newest.values(), key=lambda item: item.location):
        await _restore(ctx, warehouse, found, report)
    return report


async def _ensure_namespace(ctx: CatalogContext, warehouse: Warehouse, namespace: Namespace) -> list[str]:
    created = []
    for depth in range(1, len(namespace.levels) + 1):
        level = Namespace(namespace.levels[:depth])
        async with ctx.store.write() as tx:
            if await namespace_rows.get_namespace(tx, warehouse.name, level.key) is None:
                parent = level.parent_key if depth > 1 else None
                await namespace_rows.insert_namespace(tx, warehouse.name, level.key, parent, {})
                created.append(str(level))
    return created


async def _restore(ctx: CatalogContext, warehouse: Warehouse, found: _Found, report: RebuildReport) -> None:
    opened = found.opened
    kind, object_uuid = opened.kind, opened.object_uuid
    if kind is None or object_uuid is None or opened.identifier is None or opened.sealed_key is None:
        return
    levels, name = opened.identifier
    identifier = Identifier.of(levels, name)
    label = f"{kind} {identifier}"
    key: ObjectKey = await ctx.sealer.unwrap_object_key(warehouse.name, kind, object_uuid, opened.sealed_key)
    row = new_row(
        ctx,
        SealTarget(warehouse.name, identifier, kind, object_uuid, found.location),
        key,
        opened.metadata_json,
    )
    report.namespaces_created += await _ensure_namespace(ctx, warehouse, identifier.namespace)
    try:
        async with ctx.store.write() as tx:
            await object_rows.insert_object(tx, row)
    except AlreadyExistsError as err:
        report.skipped.append(f"{label} ({found.location}): {err}")
        return
    report.restored.append(label)
    log.info("rebuild: restored %s from %s", label, found.location)
