"""Table operations: list, create (incl. stage-create), load, exists, commit, drop (and purge),
register, rename, metrics reports, and multi-table transactions."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence

from pyiceberg.table.metadata import TableMetadata

from catalog import documents, fileio, locations, table_metadata
from catalog.commits import (
    PlannedChange,
    commit,
    commit_response,
    default_location,
    load_metadata,
    plan_change,
)
from catalog.context import CatalogContext, Warehouse
from catalog.errors import AlreadyExistsError, InvalidRequestError, NoSuchTableError
from catalog.idempotency import Body, Recorder
from catalog.identifiers import Identifier, Namespace
from catalog.namespaces import require_namespace
from catalog.objects import TABLE, list_objects, rename_object, require_object
from catalog.pagination import PageRequest
from catalog.requests import CommitTableRequest, CreateTableRequest, MetricsReport, RegisterTableRequest
from catalog.store.sql import ObjectRow

log = logging.getLogger(__name__)

SNAPSHOT_MODES = ("all", "refs")


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
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)
        async with self._ctx.store.read() as tx:
            ns_properties = await require_namespace(tx, warehouse.name, namespace)
            if await tx.get_object(warehouse.name, namespace.key, identifier.name) is not None:
                raise AlreadyExistsError(f"Table already exists: {identifier}")
        location = request.location or default_location(
            warehouse, ns_properties, identifier, uuid.uuid4().hex
        )
        locations.require_within(location, warehouse.location, "table location")
        metadata = table_metadata.create_metadata(request, locations.normalize(location))
        table_metadata.check_locations(metadata, warehouse.location)
        metadata_json = documents.model_json(metadata)
        if request.stage_create:
            # Nothing is stored: the client commits the staged table later with assert-create.
            return documents.load_result(None, metadata_json)
        change = PlannedChange(
            identifier, None, metadata, fileio.metadata_file_location(metadata.location, 0), metadata_json
        )

        async def plan() -> list[PlannedChange]:
            return [change]

        return await commit(self._ctx, warehouse, plan, lambda changes: commit_response(changes[0]), rec)

    async def load(
        self, warehouse_name: str | None, identifier: Identifier, snapshots: str, if_none_match: str | None
    ) -> tuple[str, bytes | None]:
        """(ETag, LoadTableResult); the body is None when `if_none_match` names the current ETag."""
        if snapshots not in SNAPSHOT_MODES:
            raise InvalidRequestError("snapshots must be 'all' or 'refs'")
        warehouse = self._ctx.warehouse(warehouse_name)
        async with self._ctx.store.read() as tx:
            row = await require_object(tx, warehouse.name, identifier, TABLE)
        tag = documents.etag(row.metadata_location, snapshots)
        if if_none_match is not None and (
            if_none_match.strip() == "*" or tag in (part.strip() for part in if_none_match.split(","))
        ):
            return tag, None
        if snapshots == "refs":
            metadata_json = documents.model_json(table_metadata.filter_to_refs(load_metadata(row)))
        else:
            metadata_json = row.metadata.encode()
        return tag, documents.load_result(row.metadata_location, metadata_json)

    async def exists(self, warehouse_name: str | None, identifier: Identifier) -> None:
        warehouse = self._ctx.warehouse(warehouse_name)
        async with self._ctx.store.read() as tx:
            await require_object(tx, warehouse.name, identifier, TABLE)

    async def commit(
        self,
        warehouse_name: str | None,
        identifier: Identifier,
        request: CommitTableRequest,
        rec: Recorder | None,
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)

        async def plan() -> list[PlannedChange]:
            async with self._ctx.store.read() as tx:
                row = await tx.get_object(warehouse.name, identifier.namespace.key, identifier.name)
                if row is not None and row.kind != TABLE:
                    raise AlreadyExistsError(f"A view with this name exists: {identifier}")
                ns_properties = await require_namespace(tx, warehouse.name, identifier.namespace)
            change = plan_change(warehouse, identifier, row, ns_properties, request)
            return [] if change is None else [change]

        async def current() -> bytes:
            async with self._ctx.store.read() as tx:
                row = await require_object(tx, warehouse.name, identifier, TABLE)
            return documents.load_result(row.metadata_location, row.metadata.encode())

        body = await commit(
            self._ctx, warehouse, plan, lambda changes: commit_response(changes[0]) if changes else None, rec
        )
        # A commit without updates changes nothing and answers the current metadata.
        return body if body is not None else await current()

    async def commit_transaction(
        self,
        warehouse_name: str | None,
        changes: Sequence[tuple[Identifier, CommitTableRequest]],
        rec: Recorder | None,
    ) -> Body:
        """Apply every table change or none (one database transaction swaps all pointers)."""
        warehouse = self._ctx.warehouse(warehouse_name)

        async def plan() -> list[PlannedChange]:
            planned: dict[Identifier, PlannedChange] = {}
            async with self._ctx.store.read() as tx:
                for identifier, change in changes:
                    previous = planned.get(identifier)
                    row = (
                        previous.base
                        if previous
                        else await tx.get_object(warehouse.name, identifier.namespace.key, identifier.name)
                    )
                    if row is not None and row.kind != TABLE:
                        raise AlreadyExistsError(f"A view with this name exists: {identifier}")
                    ns_properties = await require_namespace(tx, warehouse.name, identifier.namespace)
                    step = plan_change(
                        warehouse,
                        identifier,
                        row,
                        ns_properties,
                        change,
                        previous.metadata if previous else None,
                    )
                    if step is not None:
                        if previous is not None:
                            # Several changes to one table in one transaction: one new file, based on
                            # the pointer read first.
                            step = PlannedChange(
                                identifier,
                                previous.base,
                                step.metadata,
                                previous.metadata_location,
                                step.metadata_json,
                            )
                        planned[identifier] = step
            return list(planned.values())

        await commit(self._ctx, warehouse, plan, lambda _changes: None, rec)
        return None

    async def drop(
        self, warehouse_name: str | None, identifier: Identifier, purge: bool, rec: Recorder | None
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        async with self._ctx.store.write() as tx:
            row = await require_object(tx, warehouse.name, identifier, TABLE)
            if not await tx.delete_object(warehouse.name, identifier.namespace.key, identifier.name, TABLE):
                raise NoSuchTableError(f"Table does not exist: {identifier}")
            others = [loc for *_, loc in await tx.object_locations(warehouse.name)] if purge else []
            if rec is not None:
                await rec.record(tx, None)
        if purge:
            await asyncio.to_thread(_purge, warehouse, load_metadata(row), row.metadata_location, others)
        return None

    async def register(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        request: RegisterTableRequest,
        rec: Recorder | None,
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)
        location = locations.require_within(
            request.metadata_location, warehouse.location, "metadata-location"
        )
        content = await asyncio.to_thread(fileio.read_file, location, self._ctx.limits.max_metadata_bytes)
        metadata = fileio.parse_table_metadata(content)
        table_metadata.check_locations(metadata, warehouse.location)
        metadata_json = documents.model_json(metadata)
        body = documents.load_result(location, metadata_json)
        async with self._ctx.store.write() as tx:
            await require_namespace(tx, warehouse.name, namespace)
            existing = await tx.get_object(warehouse.name, namespace.key, identifier.name)
            if existing is not None:
                if not request.overwrite or existing.kind != TABLE:
                    raise AlreadyExistsError(f"Table already exists: {identifier}")
                await tx.swap_object(
                    warehouse.name,
                    namespace.key,
                    identifier.name,
                    existing.metadata_location,
                    location,
                    metadata_json.decode(),
                )
            else:
                await tx.insert_object(
                    ObjectRow(
                        warehouse.name,
                        namespace.key,
                        identifier.name,
                        TABLE,
                        str(metadata.table_uuid),
                        location,
                        metadata_json.decode(),
                        0,
                    )
                )
            if rec is not None:
                await rec.record(tx, body)
        return body

    async def rename(
        self, warehouse_name: str | None, source: Identifier, target: Identifier, rec: Recorder | None
    ) -> Body:
        await rename_object(self._ctx, self._ctx.warehouse(warehouse_name), TABLE, source, target, rec)
        return None

    async def report_metrics(
        self, warehouse_name: str | None, identifier: Identifier, report: MetricsReport
    ) -> None:
        warehouse = self._ctx.warehouse(warehouse_name)
        async with self._ctx.store.write() as tx:
            await require_object(tx, warehouse.name, identifier, TABLE)
            await tx.insert_metrics_report(
                warehouse.name,
                identifier.namespace.key,
                identifier.name,
                report.report_type,
                report.model_dump(by_alias=True, mode="json"),
            )


def _purge(warehouse: Warehouse, metadata: TableMetadata, metadata_location: str, others: list[str]) -> None:
    """Delete a dropped table's files; its directory too when no other object lives below it."""
    deleted = fileio.delete_files(fileio.table_files(metadata, metadata_location))
    root = locations.normalize(metadata.location)
    below_warehouse = root != locations.normalize(warehouse.location)
    shared = any(locations.is_within(other, root) for other in others)
    if below_warehouse and not shared:
        fileio.remove_local_tree(root)
    log.info("purged table at %s: %d file(s) deleted", root, deleted)
