"""Commit = compare-and-swap, for one table or for several at once.

1. Read the current pointer of every table in the commit.
2. Check the requirements and apply the updates (pure) — a failure here is final (409 / 400).
   The effect of every planned change (`catalog.effects`) goes to the caller's gate, which
   refuses by raising: nothing is written unless every table's effect is allowed.
3. Write each new metadata file under a fresh name.
4. In ONE database transaction, swap every pointer only if it still names the version read in 1
   (or insert it, for a create); record the idempotent response in the same transaction.
5. If any swap lost a race, roll back, delete the files of step 3 and start again from 1: the
   requirements are re-checked against the newer metadata, so a commit that still holds lands
   and one that no longer holds fails with CommitFailedError.

New metadata files are deleted whenever the transaction is known not to have committed, so a failed
swap orphans nothing. When the commit's outcome is unknown they are kept, since one may be live.

Every data key a commit needs is unwrapped (or, for a create, generated) in step 1, before any file
is written: a KMS that cannot be reached fails the commit with nothing written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from catalog import confinement, documents, effects, fileio, locations, roots, table_metadata
from catalog.context import CatalogContext, Warehouse
from catalog.effects import Effect, EffectGate
from catalog.errors import CommitFailedError, CommitStateUnknownError, NoSuchTableError
from catalog.idempotency import Body, Recorder
from catalog.identifiers import Identifier
from catalog.objects import TABLE
from catalog.requests import CommitTableRequest
from catalog.sealing import ObjectKey
from catalog.store.sql import ObjectRow

log = logging.getLogger(__name__)


class _LostRace(Exception):
    """A pointer moved between read and swap; the whole commit is retried."""


@dataclass(frozen=True, slots=True)
class PlannedChange:
    identifier: Identifier
    base: ObjectRow | None  # None: the commit creates the table
    metadata: TableMetadata
    metadata_location: str
    metadata_json: bytes
    key: ObjectKey
    origin: TableMetadata | None  # the table as it was before this commit (None: created by it)

    @property
    def effect(self) -> Effect:
        """What the commit does to this table, from before the commit to after all its changes."""
        return effects.of_table_change(self.identifier, self.origin, self.metadata)

    @property
    def object_uuid(self) -> str:
        """The UUID the table is registered under (its data key and seals are bound to it)."""
        return self.base.uuid if self.base is not None else str(self.metadata.table_uuid)


@dataclass(frozen=True, slots=True)
class CurrentTable:
    """A stored table opened for a commit: its pointer, data key and metadata."""

    row: ObjectRow
    key: ObjectKey
    metadata: TableMetadata


def parse_metadata(metadata_json: bytes) -> TableMetadata:
    return TableMetadataUtil.parse_raw(metadata_json.decode())


async def open_table(ctx: CatalogContext, row: ObjectRow | None) -> CurrentTable | None:
    if row is None:
        return None
    key = await ctx.sealer.object_key(row)
    return CurrentTable(row, key, parse_metadata(ctx.sealer.open_record(key, row)))


def default_location(
    warehouse: Warehouse, ns_properties: dict[str, str], identifier: Identifier, uid: str
) -> str:
    """`<namespace location or warehouse/ns/levels>/<table>-<uuid>`: unique, so a purge of one
    table can never delete another table's files."""
    base = ns_properties.get("location") or locations.join(warehouse.location, *identifier.namespace.levels)
    return locations.join(base, f"{identifier.name}-{uid.replace('-', '')}")


async def plan_change(
    ctx: CatalogContext,
    warehouse: Warehouse,
    identifier: Identifier,
    current: CurrentTable | None,
    ns_properties: dict[str, str] | None,
    change: CommitTableRequest,
    working: PlannedChange | None = None,
) -> PlannedChange | None:
    """Check and apply one table's change; None when it changes nothing.

    `working` is an earlier change to the same table in this commit: this one builds on it and
    goes into the same new file. A change that creates the table gets a new data key.
    Raises CommitFailedError, NoSuchTableError, InvalidRequestError, LocationNotAllowedError,
    KeyServiceUnavailableError.
    """
    row = working.base if working is not None else (current.row if current is not None else None)
    if working is not None:
        base: TableMetadata | None = working.metadata
    else:
        base = current.metadata if current is not None else None
    table_metadata.validate_requirements(change.requirements, base)
    if base is None and not table_metadata.is_create(change.requirements):
        raise NoSuchTableError(f"Table does not exist: {identifier}")
    if not change.updates and base is not None:
        return None
    # The metadata log gains the previous file once, on the first change to a table in a commit.
    previous_file = row.metadata_location if row is not None and working is None else None
    new = table_metadata.apply_updates(base, change.updates, previous_file)
    if base is None and not new.location:
        new = new.model_copy(
            update={
                "location": default_location(warehouse, ns_properties or {}, identifier, str(new.table_uuid))
            }
        )
    confinement.check_new_roots(
        ctx, warehouse, identifier.namespace, ns_properties or {}, roots.new_roots(base, new)
    )
    roots.check_added_paths(base, new)
    if working is not None:
        return PlannedChange(
            identifier,
            row,
            new,
            working.metadata_location,
            documents.model_json(new),
            working.key,
            working.origin,
        )
    version = fileio.parse_metadata_version(row.metadata_location) + 1 if row is not None else 0
    key = (
        current.key
        if current is not None
        else await ctx.sealer.new_object_key(warehouse.name, TABLE, str(new.table_uuid))
    )
    return PlannedChange(
        identifier=identifier,
        base=row,
        metadata=new,
        metadata_location=fileio.metadata_file_location(new.location, max(version, 0)),
        metadata_json=documents.model_json(new),
        key=key,
        origin=base,
    )


def commit_response(change: PlannedChange) -> bytes:
    return documents.load_result(change.metadata_location, change.metadata_json)


def file_content(
    ctx: CatalogContext,
    warehouse: Warehouse,
    identifier: Identifier,
    kind: str,
    uid: str,
    key: ObjectKey,
    metadata_location: str,
    metadata_json: bytes,
) -> bytes:
    """What goes into a new metadata file: sealed in a sealing warehouse, else the plain JSON."""
    if not warehouse.seal_files:
        return metadata_json
    return ctx.sealer.seal_file(key, warehouse.name, kind, uid, metadata_location, identifier, metadata_json)


def new_row(
    ctx: CatalogContext,
    warehouse: Warehouse,
    identifier: Identifier,
    kind: str,
    uid: str,
    key: ObjectKey,
    metadata_location: str,
    metadata_json: bytes,
) -> ObjectRow:
    """The registry row of a new table or view: sealed metadata copy and wrapped data key."""
    return ObjectRow(
        warehouse=warehouse.name,
        namespace=identifier.namespace.key,
        name=identifier.name,
        kind=kind,
        uuid=uid,
        metadata_location=metadata_location,
        metadata=ctx.sealer.seal_record(key, warehouse.name, kind, uid, metadata_location, metadata_json),
        version=0,
        kek_uri=key.wrapped.kek_uri,
        kek_version=key.wrapped.kek_version,
        wrapped_key=key.wrapped.ciphertext,
    )


async def _write_files(
    ctx: CatalogContext, warehouse: Warehouse, changes: Sequence[PlannedChange]
) -> list[str]:
    written: list[str] = []
    try:
        for change in changes:
            content = file_content(
                ctx,
                warehouse,
                change.identifier,
                TABLE,
                change.object_uuid,
                change.key,
                change.metadata_location,
                change.metadata_json,
            )
            await asyncio.to_thread(fileio.write_new_file, change.metadata_location, content)
            written.append(change.metadata_location)
    except BaseException:
        await asyncio.to_thread(fileio.delete_files, written)
        raise
    return written


async def _swap_all(
    ctx: CatalogContext,
    warehouse: Warehouse,
    changes: Sequence[PlannedChange],
    rec: Recorder | None,
    body: Body,
) -> None:
    async with ctx.store.write() as tx:
        for change in changes:
            await confinement.claim(
                tx,
                ctx,
                warehouse,
                change.identifier.namespace,
                TABLE,
                change.object_uuid,
                roots.table_roots(change.metadata),
            )
            if change.base is None:
                await tx.insert_object(
                    new_row(
                        ctx,
                        warehouse,
                        change.identifier,
                        TABLE,
                        change.object_uuid,
                        change.key,
                        change.metadata_location,
                        change.metadata_json,
                    )
                )
            elif not await tx.swap_object(
                warehouse.name,
                change.identifier.namespace.key,
                change.identifier.name,
                change.base.metadata_location,
                change.metadata_location,
                ctx.sealer.seal_record(
                    change.key,
                    warehouse.name,
                    TABLE,
                    change.base.uuid,
                    change.metadata_location,
                    change.metadata_json,
                ),
            ):
                raise _LostRace
        if rec is not None:
            await rec.record(tx, body)


async def commit(
    ctx: CatalogContext,
    warehouse: Warehouse,
    tables: Iterable[Identifier],
    plan: Callable[[], Awaitable[list[PlannedChange]]],
    render: Callable[[Sequence[PlannedChange]], Body],
    rec: Recorder | None,
    gate: EffectGate,
) -> Body:
    """Plan, gate, write and swap, retrying lost races. `plan()` re-reads the pointers each
    attempt, and each attempt's effects are gated again (a retry plans on newer metadata).
    Commits to the same `tables` in this process run one at a time (`catalog.commit_locks`).

    Raises CommitFailedError when retries are exhausted, whatever planning raises, and whatever
    `gate` raises to refuse (nothing is written then).
    """
    keys = [(warehouse.name, table.namespace.key, table.name) for table in tables]
    async with ctx.commit_locks.hold(keys):
        return await _commit(ctx, warehouse, plan, render, rec, gate)


async def _commit(
    ctx: CatalogContext,
    warehouse: Warehouse,
    plan: Callable[[], Awaitable[list[PlannedChange]]],
    render: Callable[[Sequence[PlannedChange]], Body],
    rec: Recorder | None,
    gate: EffectGate,
) -> Body:
    for _attempt in range(ctx.limits.commit_retries):
        changes = await plan()
        body = render(changes)
        if not changes:
            return body
        await gate([change.effect for change in changes])
        written = await _write_files(ctx, warehouse, changes)
        try:
            await _swap_all(ctx, warehouse, changes, rec, body)
        except CommitStateUnknownError:
            log.exception("commit outcome unknown; keeping %d new metadata file(s)", len(written))
            raise
        except _LostRace:
            await asyncio.to_thread(fileio.delete_files, written)
            continue
        except BaseException:
            await asyncio.to_thread(fileio.delete_files, written)
            raise
        return body
    raise CommitFailedError("the table changed concurrently too many times; reload and retry")
