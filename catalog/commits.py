"""Commit = compare-and-swap, for one table or for several at once.

1. Read the current pointer of every table in the commit.
2. Check the requirements and apply the updates (pure) — a failure here is final (409 / 400).
3. Write each new metadata file under a fresh name.
4. In ONE database transaction, swap every pointer only if it still names the version read in 1
   (or insert it, for a create); record the idempotent response in the same transaction.
5. If any swap lost a race, roll back, delete the files of step 3 and start again from 1: the
   requirements are re-checked against the newer metadata, so a commit that still holds lands
   and one that no longer holds fails with CommitFailedError.

New metadata files are deleted whenever the transaction is known not to have committed, so a failed
swap orphans nothing. When the commit's outcome is unknown they are kept, since one may be live.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from catalog import documents, fileio, locations, table_metadata
from catalog.context import CatalogContext, Warehouse
from catalog.errors import CommitFailedError, CommitStateUnknownError, NoSuchTableError
from catalog.idempotency import Body, Recorder
from catalog.identifiers import Identifier
from catalog.objects import TABLE
from catalog.requests import CommitTableRequest
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


def load_metadata(row: ObjectRow) -> TableMetadata:
    return TableMetadataUtil.parse_raw(row.metadata)


def default_location(
    warehouse: Warehouse, ns_properties: dict[str, str], identifier: Identifier, uid: str
) -> str:
    """`<namespace location or warehouse/ns/levels>/<table>-<uuid>`: unique, so a purge of one
    table can never delete another table's files."""
    base = ns_properties.get("location") or locations.join(warehouse.location, *identifier.namespace.levels)
    return locations.join(base, f"{identifier.name}-{uid.replace('-', '')}")


def plan_change(
    warehouse: Warehouse,
    identifier: Identifier,
    row: ObjectRow | None,
    ns_properties: dict[str, str] | None,
    change: CommitTableRequest,
    working: TableMetadata | None = None,
) -> PlannedChange | None:
    """Check and apply one table's change; None when it changes nothing.

    `working` is the metadata left by an earlier change to the same table in this commit.
    Raises CommitFailedError, NoSuchTableError, InvalidRequestError, LocationNotAllowedError.
    """
    base = working if working is not None else (load_metadata(row) if row is not None else None)
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
    table_metadata.check_locations(new, warehouse.location)
    version = fileio.parse_metadata_version(row.metadata_location) + 1 if row is not None else 0
    return PlannedChange(
        identifier=identifier,
        base=row,
        metadata=new,
        metadata_location=fileio.metadata_file_location(new.location, max(version, 0)),
        metadata_json=documents.model_json(new),
    )


def commit_response(change: PlannedChange) -> bytes:
    return documents.load_result(change.metadata_location, change.metadata_json)


async def _write_files(changes: Sequence[PlannedChange]) -> list[str]:
    written: list[str] = []
    try:
        for change in changes:
            await asyncio.to_thread(fileio.write_new_file, change.metadata_location, change.metadata_json)
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
            ns, name = change.identifier.namespace.key, change.identifier.name
            if change.base is None:
                await tx.insert_object(
                    ObjectRow(
                        warehouse=warehouse.name,
                        namespace=ns,
                        name=name,
                        kind=TABLE,
                        uuid=str(change.metadata.table_uuid),
                        metadata_location=change.metadata_location,
                        metadata=change.metadata_json.decode(),
                        version=0,
                    )
                )
            elif not await tx.swap_object(
                warehouse.name,
                ns,
                name,
                change.base.metadata_location,
                change.metadata_location,
                change.metadata_json.decode(),
            ):
                raise _LostRace
        if rec is not None:
            await rec.record(tx, body)


async def commit(
    ctx: CatalogContext,
    warehouse: Warehouse,
    plan: Callable[[], Awaitable[list[PlannedChange]]],
    render: Callable[[Sequence[PlannedChange]], Body],
    rec: Recorder | None,
) -> Body:
    """Plan, write and swap, retrying lost races. `plan()` re-reads the pointers each attempt.

    Raises CommitFailedError when retries are exhausted, and whatever planning raises.
    """
    for _attempt in range(ctx.limits.commit_retries):
        changes = await plan()
        body = render(changes)
        if not changes:
            return body
        written = await _write_files(changes)
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
