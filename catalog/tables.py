"""Table operations: list, create (incl. stage-create), load, exists, commit, drop (and purge),
register, rename, metrics reports, and multi-table transactions."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence

from cedarberg.catalog import (
    confinement,
    documents,
    fileio,
    locations,
    roots,
    table_changes,
    table_metadata,
)
from cedarberg.catalog.commits import commit, commit_response, default_location, with_namespaces_read
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.dropped import Purged, purge_files, soft_drop
from cedarberg.catalog.effects import EffectGate
from cedarberg.catalog.errors import InvalidRequestError, NoSuchNamespaceError
from cedarberg.catalog.idempotency import Body, Recorder
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import TABLE, name_taken, read_for_change, read_object, require_object
from cedarberg.catalog.lost_races import delete_unchanged, retry_lost_races
from cedarberg.catalog.objects import Move, list_objects, load_object, rename_object
from cedarberg.catalog.pagination import PageRequest
from cedarberg.catalog.planning import mode as planning_mode
from cedarberg.catalog.planning.read_restrictions import ReadView, read_restrictions
from cedarberg.catalog.requests import (
    CommitTableRequest,
    CreateTableRequest,
    MetricsReport,
    RegisterTableRequest,
)
from cedarberg.catalog.store import metrics as metrics_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import roots as confinement_rows
from cedarberg.catalog.store.commit_reads import ObjectInChain
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.table_changes import (
    Basis,
    TableChange,
    TableJob,
    open_table,
    parse_metadata,
    plan_change,
    plan_register,
)

log = logging.getLogger(__name__)

SNAPSHOT_MODES = ("all", "refs")


def _refs_only(metadata_json: bytes) -> bytes:
    """Table metadata with only the snapshots that refs name (`snapshots=refs`)."""
    return documents.model_json(table_metadata.filter_to_refs(parse_metadata(metadata_json)))


async def _object_in_chain(ctx: CatalogContext, warehouse: str, identifier: Identifier) -> ObjectInChain:
    """The table's pointer (None: none yet) with the properties of its namespace and every one
    above it, in one statement. Raises NoSuchNamespaceError, or AlreadyExistsError when the name
    is a view's."""
    found = await read_for_change(ctx.store, warehouse, identifier)
    if found is None:
        raise NoSuchNamespaceError(f"Namespace does not exist: {identifier.namespace}")
    if found.row is not None and found.row.kind != TABLE:
        raise name_taken(identifier, found.row.kind, TABLE)
    return found


class TableService:
    def __init__(self, ctx: CatalogContext) -> None:
        self._ctx = ctx

    async def list_all(self, warehouse_name: str | None, namespace: Namespace, page: PageRequest) -> bytes:
        return await list_objects(self._ctx, warehouse_name, namespace, TABLE, page)

    async def create(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        request: CreateTableRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        """Create a table (or, with `stage-create`, only answer its metadata). The new table is
        gated like any commit that creates one; a staged table is gated when it is committed."""
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)
        found = await _object_in_chain(self._ctx, warehouse.name, identifier)
        if found.row is not None:
            raise name_taken(identifier, found.row.kind, TABLE)
        ns_properties = found.ns_properties
        location = request.location or default_location(
            warehouse, ns_properties, identifier, uuid.uuid4().hex
        )
        metadata = table_metadata.create_metadata(request, locations.normalize(location))
        confinement.check_new_roots(self._ctx, warehouse, namespace, ns_properties, roots.roots_of(metadata))
        if request.stage_create:
            # Nothing is stored: the client commits the staged table later with assert-create
            # (claimed then); refused now if its place is taken already.
            await confinement.check_free(self._ctx, warehouse, namespace, TABLE, roots.roots_of(metadata))
            return documents.load_result(None, documents.model_json(metadata))
        key = await self._ctx.sealer.new_object_key(warehouse.name, TABLE, str(metadata.table_uuid))
        change = table_changes.created(identifier, metadata, key)
        judged_on_read = [with_namespaces_read(change, found.chain)]

        async def plan() -> list[TableChange]:
            # The first attempt is judged on the grants read with the name; a retry reads them.
            first = judged_on_read[:]
            judged_on_read.clear()
            return first or [change]

        job = TableJob([identifier], plan, lambda changes: commit_response(changes[0]), rec)
        return await commit(self._ctx, warehouse, job, gate)

    async def load(
        self,
        warehouse_name: str | None,
        identifier: Identifier,
        snapshots: str,
        if_none_match: str | None,
        view: ReadView | None = None,
    ) -> tuple[str, bytes | None]:
        """(ETag, LoadTableResult); the body is None when `if_none_match` names the current ETag.

        A restricted caller's `view` adds its `read-restrictions` (raises ForbiddenError when the
        table cannot honour them); its ETag and cached body are its view's own, so no caller is
        answered (or told "not modified" about) another view of the same version."""
        if snapshots not in SNAPSHOT_MODES:
            raise InvalidRequestError("snapshots must be 'all' or 'refs'")
        warehouse = self._ctx.warehouse(warehouse_name)
        row = await read_object(self._ctx.store, warehouse.name, identifier, TABLE)
        variant = snapshots if view is None else f"{snapshots}\x00read-view:{view.key}"
        tag = documents.etag(row.metadata_location, variant)
        if if_none_match is not None and documents.etag_matches(if_none_match, tag):
            return tag, None
        transform = _refs_only if snapshots == "refs" else None
        body = await load_object(self._ctx, row, snapshots, transform, planning_mode.load_config)
        if view is None:
            return tag, body
        return tag, await self._restricted(row, variant, body, view)

    async def _restricted(self, row: ObjectRow, variant: str, body: bytes, view: ReadView) -> bytes:
        """`body` with the `read-restrictions` of `view`, kept per version and view."""

        async def render() -> bytes:
            current = await open_table(self._ctx, row)
            assert current is not None  # a row was given
            restrictions = read_restrictions(current.metadata, view.grants)
            if restrictions is None:
                return body
            return documents.with_member(body, "read-restrictions", restrictions)

        return await self._ctx.load_results.get_or_render((row.uuid, row.metadata_location, variant), render)

    async def exists(self, warehouse_name: str | None, identifier: Identifier) -> None:
        warehouse = self._ctx.warehouse(warehouse_name)
        await read_object(self._ctx.store, warehouse.name, identifier, TABLE)

    async def commit(
        self,
        warehouse_name: str | None,
        identifier: Identifier,
        request: CommitTableRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)

        async def plan() -> list[TableChange]:
            # The pointer and the grants the effect is judged on, in one statement.
            found = await _object_in_chain(self._ctx, warehouse.name, identifier)
            current = await open_table(self._ctx, found.row)
            change = await plan_change(
                self._ctx, warehouse, identifier, Basis(current, found.ns_properties), request
            )
            return [] if change is None else [with_namespaces_read(change, found.chain)]

        async def current() -> bytes:
            async with self._ctx.store.read() as tx:
                row = await require_object(tx, warehouse.name, identifier, TABLE)
            return await load_object(self._ctx, row, "all")

        job = TableJob(
            [identifier], plan, lambda changes: commit_response(changes[0]) if changes else None, rec
        )
        body = await commit(self._ctx, warehouse, job, gate)
        # A commit without updates changes nothing and answers the current metadata.
        return body if body is not None else await current()

    async def commit_transaction(
        self,
        warehouse_name: str | None,
        changes: Sequence[tuple[Identifier, CommitTableRequest]],
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        """Apply every table change or none (one database transaction swaps all pointers, and
        `gate` sees every table's effect before anything is written)."""
        warehouse = self._ctx.warehouse(warehouse_name)

        async def plan() -> list[TableChange]:
            planned: dict[Identifier, TableChange] = {}
            read: dict[Identifier, ObjectInChain] = {}
            for identifier, _change in changes:
                if identifier not in read:
                    read[identifier] = await _object_in_chain(self._ctx, warehouse.name, identifier)
            for identifier, change in changes:
                found = read[identifier]
                previous = planned.get(identifier)
                current = None if previous is not None else await open_table(self._ctx, found.row)
                step = await plan_change(
                    self._ctx, warehouse, identifier, Basis(current, found.ns_properties, previous), change
                )
                if step is not None:
                    planned[identifier] = step
            # Each table's effect is judged on the grants read with its pointer.
            return [with_namespaces_read(step, read[name].chain) for name, step in planned.items()]

        tables = [identifier for identifier, _change in changes]
        await commit(self._ctx, warehouse, TableJob(tables, plan, lambda _changes: None, rec), gate)
        return None

    async def drop(
        self, warehouse_name: str | None, identifier: Identifier, purge: bool, rec: Recorder | None
    ) -> Body:
        """Drop a table. In a sealing warehouse this is a soft delete whatever `purge` says (the
        gateway purges after the retention: engines cannot read sealed files to purge them)."""
        warehouse = self._ctx.warehouse(warehouse_name)
        if warehouse.seal_files:
            await soft_drop(self._ctx, warehouse, identifier, TABLE, rec)
            return None

        async def attempt() -> None:
            async with self._ctx.store.read() as tx:
                row = await require_object(tx, warehouse.name, identifier, TABLE)
            # Opened before anything is deleted: a KMS outage fails the drop, it does not leave
            # a dropped table whose files can no longer be found.
            metadata = parse_metadata(await self._ctx.sealer.open_row(row)) if purge else None
            async with self._ctx.store.write() as tx:
                # Only the version whose files were read: a commit meanwhile is looked at again.
                await delete_unchanged(tx, warehouse.name, identifier, row)
                await metrics_rows.delete_metrics_reports(
                    tx, warehouse.name, identifier.namespace.key, identifier.name
                )
                own = await confinement_rows.held(tx, TABLE, row.uuid)
                await confinement.forget(tx, TABLE, row.uuid)
                others = [loc for *_, loc in await object_rows.object_locations(tx, warehouse.name)]
                if rec is not None:
                    await rec.record(tx, None)
            if metadata is not None:
                purged = Purged(
                    metadata.location, (*own, *roots.roots_of(metadata)), (metadata, row.metadata_location)
                )
                await asyncio.to_thread(purge_files, warehouse, purged, set(), others)
            self._ctx.sealer.forget(row.data_key)

        await retry_lost_races(
            self._ctx.limits.commit_retries,
            attempt,
            lambda: "the table changed concurrently too many times; retry the drop",
        )
        return None

    async def unregister(
        self, warehouse_name: str | None, identifier: Identifier, rec: Recorder | None
    ) -> Body:
        """Unregister a table: its row leaves the registry, its files stay where they are, and the
        answer is the last metadata location with that metadata (an UnregisterTableResult).

        In a sealing warehouse the table leaves the catalog's protection: a plain copy of the
        current metadata is written next to the sealed file (same version number, a new UUID) and
        its location is answered, so that any catalog or engine can register or read it. Later
        commits through this catalog fail: the table is no longer in the registry."""
        warehouse = self._ctx.warehouse(warehouse_name)

        async def attempt() -> Body:
            async with self._ctx.store.read() as tx:
                row = await require_object(tx, warehouse.name, identifier, TABLE)
            # Opened before anything changes: a KMS outage fails the unregister, nothing else.
            metadata_json = await self._ctx.sealer.open_row(row)
            location = row.metadata_location
            written = False
            if warehouse.seal_files:
                metadata = parse_metadata(metadata_json)
                version = max(fileio.parse_metadata_version(row.metadata_location), 0)
                location = fileio.metadata_file_location(metadata, version)
                await asyncio.to_thread(fileio.write_new_file, location, metadata_json)
                written = True
            body = documents.unregister_result(location, metadata_json)
            try:
                async with self._ctx.store.write() as tx:
                    await delete_unchanged(tx, warehouse.name, identifier, row)
                    await metrics_rows.delete_metrics_reports(
                        tx, warehouse.name, identifier.namespace.key, identifier.name
                    )
                    await confinement.forget(tx, TABLE, row.uuid)
                    if rec is not None:
                        await rec.record(tx, body)
            except BaseException:  # a lost race too: the plain copy is not the answer
                if written:
                    await asyncio.to_thread(fileio.delete_files, [location])
                raise
            self._ctx.sealer.forget(row.data_key)
            log.info("unregistered table %s (last metadata %s)", identifier, location)
            return body

        return await retry_lost_races(
            self._ctx.limits.commit_retries,
            attempt,
            lambda: "the table changed concurrently too many times; retry the unregister",
        )

    async def register(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        request: RegisterTableRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        """Register a metadata file, plain or sealed (a sealed file brings its own data key).

        The table arrives with everything its metadata carries, and is gated so; an overwrite
        also removes the table it replaces, and is gated as that too."""
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)

        async def plan() -> list[TableChange]:
            return [await plan_register(self._ctx, warehouse, identifier, request)]

        job = TableJob([identifier], plan, lambda changes: commit_response(changes[0]), rec)
        return await commit(self._ctx, warehouse, job, gate)

    async def rename(
        self,
        warehouse_name: str | None,
        source: Identifier,
        target: Identifier,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        await rename_object(
            self._ctx, self._ctx.warehouse(warehouse_name), Move(TABLE, source, target), rec, gate
        )
        return None

    async def report_metrics(
        self, warehouse_name: str | None, identifier: Identifier, report: MetricsReport
    ) -> None:
        warehouse = self._ctx.warehouse(warehouse_name)
        async with self._ctx.store.read() as tx:
            row = await require_object(tx, warehouse.name, identifier, TABLE)
        # Reports name columns and values: sealed under the table's key, shredded with it.
        sealed = self._ctx.sealer.seal_report(
            await self._ctx.sealer.object_key(row), row, report.model_dump(by_alias=True, mode="json")
        )
        async with self._ctx.store.write() as tx:
            await require_object(tx, warehouse.name, identifier, TABLE)
            await metrics_rows.insert_metrics_report(
                tx, warehouse.name, identifier.namespace.key, identifier.name, report.report_type, sealed
            )
