"""Soft delete in sealing warehouses: drop, list, undrop, and the purge after the retention.

Engines cannot read sealed metadata files, so in a sealing warehouse the gateway, not the engine,
deletes a table's files. A drop therefore:
1. opens the object's metadata (so a KMS outage fails the drop before anything moves),
2. in one transaction deletes the pointer (only if unchanged) and records the soft-deleted row
   (sealed metadata copy and wrapped key kept) with its purge time and the moves of step 3,
3. then moves its metadata files away from their published location into
   `<object location>/cedarberg-dropped/<drop id>/` before it answers — an engine that parses
   the metadata file after dropping (Spark's `DROP TABLE ... PURGE`) finds none and leaves the
   files alone.
The registry changes before any file moves: a live entry never names a moved file, whenever the
process dies. A process that dies between 2 and 3 leaves a dropped object whose files are still
published (some or all); undrop and purge take each file from wherever it is. Undrop moves the
files back first, then restores the pointer in one transaction (a live entry again needs its
files). The purge, once the retention has passed, deletes data, manifests and metadata files at
both places, then the row — and with it the only copy of the wrapped data key.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from cedarberg.catalog import confinement, documents, fileio, locations, roots
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.errors import CatalogError, NoSuchTableError
from cedarberg.catalog.idempotency import Body, Recorder
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import TABLE, require_namespace, require_object
from cedarberg.catalog.lost_races import delete_unchanged, retry_lost_races
from cedarberg.catalog.pagination import PageRequest, Scope, fetch_page
from cedarberg.catalog.purge_failures import PurgeBackoff, describe_failure
from cedarberg.catalog.store import dropped as dropped_rows
from cedarberg.catalog.store import metrics as metrics_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.dropped import DroppedRow

log = logging.getLogger(__name__)

# How long a drop holds off the first purge of what it dropped while it moves the files.
PARKING_HOLD_MS = 30_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def _published_files(kind: str, metadata_json: bytes, metadata_location: str) -> tuple[str, list[str]]:
    """(object location, its metadata files that engines could find)."""
    document = orjson.loads(metadata_json)
    files = [metadata_location]
    if kind == TABLE:
        files += [entry["metadata-file"] for entry in document.get("metadata-log", [])]
    return str(document["location"]), files


def _parked(object_location: str, drop_id: str, published: str) -> str:
    return locations.join(object_location, locations.PARKING_DIR, drop_id, published.rsplit("/", 1)[-1])


def _move_all(moves: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Move files; returns the moves done (a missing source is skipped). Undoes them on failure."""
    done: list[tuple[str, str]] = []
    try:
        for source, target in moves:
            try:
                fileio.move_file(source, target)
            except FileNotFoundError:
                continue
            done.append((source, target))
    except BaseException:
        _move_back(done)
        raise
    return done


def _park(moves: list[tuple[str, str]]) -> None:
    """Move a dropped object's published metadata files to their parking place; a file already
    gone is skipped, one that cannot be moved is logged and left (the drop has happened)."""
    for source, target in moves:
        try:
            fileio.move_file(source, target)
        except FileNotFoundError:
            continue
        except CatalogError:
            log.exception("could not park %s at %s; it is purged where it is", source, target)


def _move_back(moves: list[tuple[str, str]]) -> None:
    for source, target in reversed(moves):
        try:
            fileio.move_file(target, source)
        except (FileNotFoundError, CatalogError):
            log.exception("could not move %s back to %s", target, source)


async def soft_drop(
    ctx: CatalogContext, warehouse: Warehouse, identifier: Identifier, kind: str, rec: Recorder | None
) -> None:
    """Soft-delete a table or view. Raises NoSuchTableError / NoSuchViewError,
    KeyServiceUnavailableError, CommitFailedError after repeated concurrent changes."""

    async def attempt() -> None:
        async with ctx.store.read() as tx:
            row = await require_object(tx, warehouse.name, identifier, kind)
        object_location, published = _published_files(
            kind, await ctx.sealer.open_row(row), row.metadata_location
        )
        drop_id = str(uuid.uuid4())
        moves = [(path, _parked(object_location, drop_id, path)) for path in published]
        now = _now_ms()
        purge_after = now + warehouse.drop_retention_seconds * 1000
        # No purge starts while this drop still moves the files (it would race the moves and
        # leave files or directories behind); a drop that dies meanwhile is purged after the hold.
        held = max(purge_after, now + PARKING_HOLD_MS)
        dropped = DroppedRow(drop_id, row, moves, now, purge_after, next_purge_attempt_ms=held)
        async with ctx.store.write() as tx:
            await delete_unchanged(tx, warehouse.name, identifier, row)
            await dropped_rows.insert_dropped(tx, dropped)
            await metrics_rows.delete_metrics_reports(
                tx, warehouse.name, identifier.namespace.key, identifier.name
            )
            if rec is not None:
                await rec.record(tx, None)
        # Dropped now: a file that cannot be parked stays published and is purged from there.
        await asyncio.to_thread(_park, moves)
        if held > purge_after:
            async with ctx.store.write() as tx:
                await dropped_rows.release_purge(tx, drop_id, purge_after)
        log.info("soft-deleted %s %s (drop id %s)", kind, identifier, drop_id)

    await retry_lost_races(
        ctx.limits.commit_retries,
        attempt,
        lambda: "the object changed concurrently too many times; retry the drop",
    )


def _describe(dropped: DroppedRow) -> dict[str, Any]:
    row = dropped.row
    return {
        "drop-id": dropped.drop_id,
        "kind": row.kind,
        "namespace": Namespace.parse(row.namespace).levels,
        "name": row.name,
        "uuid": row.uuid,
        "dropped-at-ms": dropped.dropped_at_ms,
        "purge-after-ms": dropped.purge_after_ms,
        "purge-attempts": dropped.purge_attempts,
        "last-purge-error": dropped.last_purge_error,
        "next-purge-attempt-ms": dropped.next_attempt_ms,
    }


async def list_dropped(ctx: CatalogContext, warehouse_name: str | None, page: PageRequest) -> bytes:
    """Soft-deleted tables and views of a warehouse, one page, with their drop ids."""
    warehouse = ctx.warehouse(warehouse_name)
    rows: dict[str, DroppedRow] = {}

    async def fetch(after: str | None, limit: int) -> list[str]:
        async with ctx.store.read() as tx:
            found = await dropped_rows.list_dropped(tx, warehouse.name, after, limit)
        rows.update((item.drop_id, item) for item in found)
        return [item.drop_id for item in found]

    result = await fetch_page(page, fetch, ctx.page_key, Scope(warehouse.name, "dropped"))
    return documents.dumps(
        {
            "dropped": [_describe(rows[drop_id]) for drop_id in result.items],
            "next-page-token": result.next_token,
        }
    )


async def undrop(ctx: CatalogContext, warehouse_name: str | None, drop_id: str, rec: Recorder | None) -> Body:
    """Restore a soft-deleted object exactly (same UUID, metadata and files) under its name.

    Raises NoSuchTableError for an unknown drop id, AlreadyExistsError if the name is taken,
    NoSuchNamespaceError if its namespace is gone."""
    warehouse = ctx.warehouse(warehouse_name)
    async with ctx.store.read() as tx:
        dropped = await dropped_rows.get_dropped(tx, drop_id)
    if dropped is None or dropped.row.warehouse != warehouse.name:
        raise NoSuchTableError(f"no dropped table or view with id {drop_id}")
    back = [(parked, published) for published, parked in dropped.moved_files]
    restored = await asyncio.to_thread(_move_all, back)
    body = documents.dumps(_describe(dropped))
    try:
        async with ctx.store.write() as tx:
            await require_namespace(tx, warehouse.name, Namespace.parse(dropped.row.namespace))
            await object_rows.insert_object(tx, dropped.row)
            if not await dropped_rows.delete_dropped(tx, drop_id):  # undropped concurrently
                raise NoSuchTableError(f"no dropped table or view with id {drop_id}")  # noqa: TRY301
            if rec is not None:
                await rec.record(tx, body)
    except BaseException:
        await asyncio.to_thread(_move_back, restored)
        raise
    return body


@dataclass(frozen=True, slots=True)
class Purged:
    """The object whose files a purge deletes."""

    location: str  # the object's location (its directory)
    held: Sequence[str]  # its roots: nothing outside them is read or deleted
    table: tuple[TableMetadata, str] | None = None  # a table's (metadata, metadata location)


def purge_files(warehouse: Warehouse, purged: Purged, files: set[str], others: list[str]) -> None:
    """Delete `files` and, for a table, every file its metadata reaches, but only files under the
    object's roots `purged.held` (anything else is someone else's: skipped and logged, never read
    or deleted); the object's directory too when it lies below the warehouse root and no other
    object (at `others`) lives below it."""
    object_location, held, table = purged.location, purged.held, purged.table
    if table is not None:
        files = files | fileio.table_files(*table, roots=held)
    outside = sorted(path for path in files if not roots.within(path, held))
    for path in outside:
        log.warning("purge of %s skips %s: outside its locations", object_location, path)
    deleted = fileio.delete_files(files - set(outside))
    root = locations.normalize(object_location)
    below_warehouse = root != locations.normalize(warehouse.location)
    shared = any(locations.is_within(other, root) for other in others)
    if below_warehouse and not shared:
        fileio.remove_tree(root)
    log.info("purged %s: %d file(s) deleted", root, deleted)


async def purge_dropped(ctx: CatalogContext, dropped: DroppedRow) -> None:
    """Delete a soft-deleted object's files, then its row (destroying its data key)."""
    row = dropped.row
    warehouse = ctx.warehouse(row.warehouse)
    metadata_json = await ctx.sealer.open_row(row)
    object_location = str(orjson.loads(metadata_json)["location"])
    table = (
        (TableMetadataUtil.parse_raw(metadata_json.decode()), row.metadata_location)
        if row.kind == TABLE
        else None
    )
    parked = {target for _source, target in dropped.moved_files}
    async with ctx.store.read() as tx:
        others = [loc for *_, loc in await object_rows.object_locations(tx, warehouse.name)]
    held = await confinement.held(
        ctx, row.kind, row.uuid, confinement.roots_of_document(row.kind, metadata_json)
    )
    await asyncio.to_thread(purge_files, warehouse, Purged(object_location, held, table), parked, others)
    async with ctx.store.write() as tx:
        await dropped_rows.delete_dropped(tx, dropped.drop_id)
        await confinement.forget(tx, row.kind, row.uuid)
    ctx.sealer.forget(row.data_key)


async def purge_due(ctx: CatalogContext, backoff: PurgeBackoff | None = None, limit: int = 20) -> int:
    """Purge up to `limit` soft-deleted objects whose next purge attempt is due (their retention
    has passed and any backoff too), earliest first; returns how many were purged.

    Failures are isolated per object: whatever one object's purge raises (a KMS or storage outage,
    a malformed manifest list, an OSError) is logged, recorded on that object (attempt count, a
    safe message, the next attempt after `backoff`) and the sweep goes on with the others; its
    files and row stay until an attempt succeeds or an admin undrops it. Raises only what the
    registry raises while reading or recording (StorageUnavailableError), and cancellation."""
    backoff = backoff or PurgeBackoff()
    async with ctx.store.read() as tx:
        due = await dropped_rows.due_for_purge(tx, _now_ms(), ctx.warehouses.keys(), limit)
    purged = 0
    for dropped in due:
        # Claimed first: another sweeper (worker or instance) does not purge it at the same time,
        # and an attempt that never ends (the process dies mid-purge) still waits its backoff.
        attempts = dropped.purge_attempts + 1
        async with ctx.store.write() as tx:
            if not await dropped_rows.claim_purge(tx, dropped, _now_ms() + backoff.delay_ms(attempts)):
                continue
        try:
            await purge_dropped(ctx, dropped)
        except Exception as err:  # any failure is this object's: recorded, never raised
            await _record_failure(ctx, dropped, attempts, err, backoff)
            continue
        purged += 1
    return purged


async def _record_failure(
    ctx: CatalogContext, dropped: DroppedRow, attempts: int, err: Exception, backoff: PurgeBackoff
) -> None:
    """Log a failed purge attempt (with the exception, for operators) and record it on the row."""
    delay_ms = backoff.delay_ms(attempts)
    # Our own errors (KMS or storage unavailable) are expected outages: no traceback needed.
    log.warning(
        "purge of %s %s failed (attempt %d), next attempt in %.0f s: %s",
        dropped.row.kind,
        dropped.drop_id,
        attempts,
        delay_ms / 1000,
        describe_failure(err),
        exc_info=None if isinstance(err, CatalogError) else err,
    )
    async with ctx.store.write() as tx:
        await dropped_rows.record_purge_failure(
            tx, dropped.drop_id, attempts, describe_failure(err), _now_ms() + delay_ms
        )
