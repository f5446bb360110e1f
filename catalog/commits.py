"""Commit = compare-and-swap, for one table or view or for several tables at once.

Tables and views share this one algorithm; only the planning differs (`catalog.table_changes`,
`catalog.view_changes` turn a request into `PlannedChange`s).

1. Plan: read the current pointer of every object in the commit, check the requirements and apply
   the updates (pure). A failure here is final (409 / 400). Every data key the commit needs is
   unwrapped (or, for a create, generated) here too: a KMS that cannot be reached fails the commit
   with nothing written.
2. Gate: the effect of every planned change (`catalog.effects`) goes to the caller's gate, which
   refuses by raising: nothing is written unless every object's effect is allowed.
3. Write each new metadata file under a fresh name (a registration brings its file: none is
   written), once the roots a change gains are checked clear of every other object's: nothing is
   written in another object's place.
4. In ONE database transaction, claim each object's roots (`catalog.confinement`), swap every
   pointer only if it still names the version read in 1 (or insert it, for a create); record the
   idempotent response in the same transaction. A registration with `overwrite` deletes the table
   it replaces there first, only if that is still the version judged in 2. On PostgreSQL a
   single change in the common case (no roots to claim for a commit; nothing near the roots of a
   create) is one statement instead, a server-side function doing the same checks
   (`catalog.store.server_writes`): one round trip.
5. If any swap lost a race, roll back, delete the files of step 3 and start again from 1: the
   requirements are re-checked against the newer metadata, so a commit that still holds lands
   and one that no longer holds fails with CommitFailedError.

Commits to the same objects in this process run one at a time (`catalog.commit_locks`), so they
queue instead of racing each other through retries; the swap still guards against other processes.

New metadata files are deleted whenever the transaction is known not to have committed, so a failed
swap orphans nothing. When the commit's outcome is unknown (CommitStateUnknownError) they are kept,
since one may be live: deleting it could leave the registry pointing at a missing file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.view.metadata import ViewMetadata

from cedarberg.catalog import confinement, documents, fileio, locations, lookups, roots, round_trip
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.effects import Effect, EffectGate
from cedarberg.catalog.errors import (
    CommitStateUnknownError,
    LocationNotAllowedError,
    StorageUnavailableError,
)
from cedarberg.catalog.idempotency import Body, Recorder
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.lookups import read_properties
from cedarberg.catalog.lost_races import PointerMoved, delete_unchanged, retry_lost_races
from cedarberg.catalog.sealing import ObjectKey, SealTarget
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import server_writes
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.tx import StoreTx

log = logging.getLogger(__name__)

M = TypeVar("M", TableMetadata, ViewMetadata)


@dataclass(frozen=True, slots=True)
class NewFile:
    """Where a change's new metadata file goes, and the object's data key that seals it."""

    metadata_location: str
    key: ObjectKey


@dataclass(frozen=True, slots=True)
class Replaced:
    """The table a registration with `overwrite` takes the place of: gated as leaving (`effect`),
    and deleted in the swap only if its pointer is still `row`, the version judged."""

    row: ObjectRow
    effect: Effect


# Not slotted: a slotted generic dataclass cannot be built through its subscripted alias on 3.11.
@dataclass(frozen=True)
class PlannedChange(Generic[M]):
    """One object's next version, checked and applied, ready to be gated, written and swapped."""

    identifier: Identifier
    kind: str  # TABLE or VIEW
    base: ObjectRow | None  # the pointer read; None: the commit creates (or registers) the object
    metadata: M
    origin: M | None  # the object before this commit (None: created by it)
    metadata_location: str
    metadata_json: bytes
    key: ObjectKey
    object_uuid: str  # the UUID the object is registered under (its data key and seals bind to it)
    effect: Effect  # what the commit does to the object, from `origin` to `metadata`
    roots: tuple[str, ...]  # the object's roots after the commit, claimed in the swap transaction
    writes_file: bool = True  # False: the file exists already (a registration) and is not ours
    check_uuid_free: bool = False  # refuse a UUID a live or dropped object has (creates of views)
    # (tables) the snapshot ids this commit has added so far: a later change list to the same
    # table may not add them again (`catalog.snapshot_ids`).
    added_snapshot_ids: frozenset[int] = frozenset()
    replaces: Replaced | None = None  # (a registration with overwrite) the table it replaces

    @property
    def effects(self) -> tuple[Effect, ...]:
        """What the gate judges: the change's effect, then the departure of a table it replaces."""
        return (self.effect,) if self.replaces is None else (self.effect, self.replaces.effect)

    def seal_target(self, warehouse: str) -> SealTarget:
        """The version this change seals its metadata for, in `warehouse` (a name)."""
        return SealTarget(warehouse, self.identifier, self.kind, self.object_uuid, self.metadata_location)


def with_namespaces_read(
    change: PlannedChange[M], chain: tuple[dict[str, str] | None, ...]
) -> PlannedChange[M]:
    """`change`, its effect carrying the namespace properties read from the database with its base
    (from the top level down): the gate decides on them instead of reading them again."""
    return dataclasses.replace(change, effect=dataclasses.replace(change.effect, namespaces_read=chain))


def default_location(
    warehouse: Warehouse, ns_properties: dict[str, str], identifier: Identifier, uid: str
) -> str:
    """`<namespace directory>/<name>-<uuid>`: unique, so a purge of one object can never delete
    another object's files, and an object directory (`catalog.roots`), so no namespace can ever
    need it as its directory."""
    base = roots.namespace_directory(warehouse.location, identifier.namespace, ns_properties)
    return locations.join(base, roots.object_directory_name(identifier.name, uid))


def commit_response(change: PlannedChange[M]) -> bytes:
    """The LoadTableResult / LoadViewResult of a landed change."""
    return documents.load_result(change.metadata_location, change.metadata_json)


def file_content(
    ctx: CatalogContext, warehouse: Warehouse, target: SealTarget, key: ObjectKey, metadata_json: bytes
) -> bytes:
    """What goes into a new metadata file: sealed in a sealing warehouse, else the plain JSON."""
    if not warehouse.seal_files:
        return metadata_json
    return ctx.sealer.seal_file(key, target, metadata_json)


def new_row(ctx: CatalogContext, target: SealTarget, key: ObjectKey, metadata_json: bytes) -> ObjectRow:
    """The registry row of a new table or view: sealed metadata copy and wrapped data key."""
    return ObjectRow(
        warehouse=target.warehouse,
        namespace=target.identifier.namespace.key,
        name=target.identifier.name,
        kind=target.kind,
        uuid=target.object_uuid,
        metadata_location=target.metadata_location,
        metadata=ctx.sealer.seal_record(key, target, metadata_json),
        version=0,
        kek_uri=key.wrapped.kek_uri,
        kek_version=key.wrapped.kek_version,
        wrapped_key=key.wrapped.ciphertext,
    )


async def _check_places_clear(ctx: CatalogContext, changes: Sequence[PlannedChange[M]]) -> None:
    """Raise LocationNotAllowedError before anything is written if a change writes its file while
    gaining a root that overlaps another object (the file lies under the new roots): no I/O in
    another object's place. Commits that keep their roots (nearly all) read nothing more here."""
    for change in changes:
        if not change.writes_file:
            continue
        before = set(roots.roots_of(change.origin)) if change.origin is not None else set()
        added = sorted(set(change.roots) - before)
        if added:
            await confinement.check_clear(ctx, change.kind, change.object_uuid, added)


async def _write_files(
    ctx: CatalogContext, warehouse: Warehouse, changes: Sequence[PlannedChange[M]]
) -> list[str]:
    """Write every change's new file; the locations written. On failure none is left behind."""
    written: list[str] = []
    try:
        for change in changes:
            if not change.writes_file:
                continue
            content = file_content(
                ctx, warehouse, change.seal_target(warehouse.name), change.key, change.metadata_json
            )
            try:
                await asyncio.to_thread(fileio.write_new_file, change.metadata_location, content)
            except StorageUnavailableError as err:
                # Before any pointer moved: the client may retry knowing its commit is not there.
                raise StorageUnavailableError(f"{err}; nothing was committed") from err
            written.append(change.metadata_location)
    except BaseException:
        await asyncio.to_thread(fileio.delete_files, written)
        raise
    return written


async def _swap_all(
    ctx: CatalogContext,
    warehouse: Warehouse,
    changes: Sequence[PlannedChange[M]],
    rec: Recorder | None,
    body: Body,
) -> None:
    # Rows are locked in one order, the objects' names, whatever order the request listed them in:
    # two multi-table transactions naming the same tables in opposite orders through different
    # processes would otherwise each hold one row and wait for the other until PostgreSQL aborts
    # one ("deadlock detected", answered 503). The commit locks order them only within a process.
    # The sort is stable, so changes to one object keep their order.
    ordered = sorted(changes, key=lambda change: (change.identifier.namespace.key, change.identifier.name))
    if (
        len(ordered) == 1
        and ctx.store.writes_alone
        and await _swap_alone(ctx, warehouse, ordered[0], rec, body)
    ):
        return
    async with ctx.store.write() as tx:
        for change in ordered:
            if change.replaces is not None:
                await _remove_replaced(ctx, tx, warehouse, change)
            if change.check_uuid_free:
                await lookups.check_uuid(tx, change.object_uuid)
            await confinement.claim(
                tx,
                ctx,
                warehouse,
                confinement.Holder(change.identifier.namespace, change.kind, change.object_uuid),
                change.roots,
            )
            target = change.seal_target(warehouse.name)
            if change.base is None:
                name = change.identifier
                if (
                    await object_rows.get_object(tx, warehouse.name, name.namespace.key, name.name)
                    is not None
                ):
                    # Created since it was planned: planning again answers as if it came first.
                    raise PointerMoved
                await object_rows.insert_object(tx, new_row(ctx, target, change.key, change.metadata_json))
            elif not await object_rows.swap_object(
                tx,
                change.base,
                change.metadata_location,
                ctx.sealer.seal_record(change.key, target, change.metadata_json),
            ):
                raise PointerMoved
        if rec is not None:
            await rec.record(tx, body)


async def _remove_replaced(
    ctx: CatalogContext, tx: StoreTx, warehouse: Warehouse, change: PlannedChange[M]
) -> None:
    """Delete the table a registration replaces (only the version judged: else PointerMoved, and
    the registration is planned and judged again), and its roots unless the registered table,
    with the same UUID, takes them over. Its data key goes with its row."""
    assert change.replaces is not None
    replaced = change.replaces.row
    await delete_unchanged(tx, warehouse.name, change.identifier, replaced)
    if replaced.uuid != change.object_uuid:
        await confinement.forget(tx, replaced.kind, replaced.uuid)


async def _swap_alone(
    ctx: CatalogContext, warehouse: Warehouse, change: PlannedChange[M], rec: Recorder | None, body: Body
) -> bool:
    """Step 4 for one change in one statement (catalog.store.server_writes): True if it landed.
    False if it is not the common case (roots to claim, a possible conflict, a constraint): then
    nothing was written and the transaction of `_swap_all` decides. Raises PointerMoved."""
    if change.replaces is not None:
        return False  # two rows change: the transaction does it
    target = change.seal_target(warehouse.name)
    pending = None if rec is None else rec.pending(body)
    if change.base is not None:
        if change.check_uuid_free:
            return False
        sealed = ctx.sealer.seal_record(change.key, target, change.metadata_json)
        new = server_writes.NewVersion(change.metadata_location, sealed, change.roots)
        outcome = await server_writes.swap_object(ctx.store, change.base, new, pending)
    else:
        if not server_writes.creates_alone(ctx.store):
            return False
        namespace = change.identifier.namespace
        ns_properties = await read_properties(ctx.store, warehouse.name, namespace.key)
        if ns_properties is None:
            return False
        try:
            # Against the properties read (maybe cached): the statement checks they are current.
            confinement.check_new_roots(ctx, warehouse, namespace, ns_properties, change.roots)
        except LocationNotAllowedError:
            return False  # the transaction checks again on the namespace as it is now
        row = new_row(ctx, target, change.key, change.metadata_json)
        placement = server_writes.Placement(change.roots, ns_properties, change.check_uuid_free)
        outcome = await server_writes.insert_object(ctx.store, row, placement, pending)
    if outcome is server_writes.Outcome.LOST_RACE:
        raise PointerMoved
    if outcome is server_writes.Outcome.GENERAL:
        return False
    if rec is not None:
        rec.recorded = True
    return True


def _keep_parsed(ctx: CatalogContext, changes: Sequence[PlannedChange[M]]) -> None:
    """Keep the metadata of landed changes as their versions' parsed form: the next commit to the
    object starts from it instead of parsing the JSON just stored (when it is what parsing gives)."""
    for change in changes:
        if round_trip.round_trips(change.metadata, change.origin):
            ctx.parsed_metadata.keep(
                (change.kind, change.object_uuid, change.metadata_location),
                change.metadata,
                len(change.metadata_json),
            )


# Not slotted, like PlannedChange: it is built through its subscripted alias too.
@dataclass(frozen=True)
class CommitJob(Generic[M]):
    """One commit's own parts, beside the catalog and warehouse it runs in and the gate."""

    objects: Iterable[Identifier]  # what the commit changes: held under the commit locks
    plan: Callable[[], Awaitable[list[PlannedChange[M]]]]  # called again on every attempt
    render: Callable[[Sequence[PlannedChange[M]]], Body]  # the response body of what landed
    rec: Recorder | None = None  # records the response in the swap transaction (idempotency)


async def commit(ctx: CatalogContext, warehouse: Warehouse, job: CommitJob[M], gate: EffectGate) -> Body:
    """Plan, gate, write and swap, retrying lost races; the body `job.render` made of what landed.

    `job.plan()` re-reads the pointers each attempt, and each attempt's effects are gated again (a
    retry plans on newer metadata). Commits to the same `objects` in this process run one at a
    time (`catalog.commit_locks`).

    Raises CommitFailedError when retries are exhausted, CommitStateUnknownError when the
    registry did not confirm the swap (the new files are kept then), whatever planning or the
    swap transaction raises (the new files are deleted then), and whatever `gate` raises to refuse
    (nothing is written then).
    """
    keys = [(warehouse.name, item.namespace.key, item.name) for item in job.objects]
    async with ctx.commit_locks.hold(keys):
        return await _commit(ctx, warehouse, job, gate)


async def _commit(ctx: CatalogContext, warehouse: Warehouse, job: CommitJob[M], gate: EffectGate) -> Body:
    kind = "object"  # named by the planned changes once an attempt has planned any

    async def attempt() -> Body:
        nonlocal kind
        changes = await job.plan()
        body = job.render(changes)
        if not changes:
            return body
        kind = changes[0].kind
        await gate([effect for change in changes for effect in change.effects])
        await _check_places_clear(ctx, changes)
        written = await _write_files(ctx, warehouse, changes)
        try:
            await _swap_all(ctx, warehouse, changes, job.rec, body)
        except CommitStateUnknownError:
            log.exception("commit outcome unknown; keeping %d new metadata file(s)", len(written))
            raise
        except BaseException:  # a lost race too: nothing was committed
            await asyncio.to_thread(fileio.delete_files, written)
            raise
        _keep_parsed(ctx, changes)
        return body

    return await retry_lost_races(
        ctx.limits.commit_retries,
        attempt,
        lambda: f"the {kind} changed concurrently too many times; reload and retry",
    )
