"""View operations: list, create, load, replace, drop, exists, rename, register."""

from __future__ import annotations

import asyncio
import uuid

from pyiceberg.view.metadata import ViewMetadata

from catalog import confinement, documents, effects, fileio, locations, registration, roots, view_metadata
from catalog.commits import default_location, file_content, new_row
from catalog.context import CatalogContext, Warehouse
from catalog.dropped import soft_drop
from catalog.effects import EffectGate
from catalog.errors import AlreadyExistsError, CommitFailedError, InvalidRequestError, NoSuchViewError
from catalog.idempotency import Body, Recorder
from catalog.identifiers import Identifier, Namespace
from catalog.namespaces import require_namespace
from catalog.objects import VIEW, list_objects, load_object, read_object, rename_object, require_object
from catalog.pagination import PageRequest
from catalog.requests import CommitViewRequest, CreateViewRequest, RegisterViewRequest
from catalog.sealing import ObjectKey


def _parse(content: bytes | str) -> ViewMetadata:
    try:
        return ViewMetadata.model_validate_json(content)
    except ValueError as err:
        raise InvalidRequestError(
            f"not valid Iceberg view metadata: {str(err).splitlines()[0][:200]}"
        ) from None


class ViewService:
    def __init__(self, ctx: CatalogContext) -> None:
        self._ctx = ctx

    async def list_all(self, warehouse_name: str | None, namespace: Namespace, page: PageRequest) -> bytes:
        return await list_objects(self._ctx, warehouse_name, namespace, VIEW, page)

    async def create(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        request: CreateViewRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)
        async with self._ctx.store.read() as tx:
            ns_properties = await require_namespace(tx, warehouse.name, namespace)
        location = request.location or default_location(
            warehouse, ns_properties, identifier, uuid.uuid4().hex
        )
        location = locations.normalize(location)
        confinement.check_new_roots(
            self._ctx, warehouse, namespace, ns_properties, roots.object_roots(location)
        )
        metadata = view_metadata.new_view_metadata(
            location, request.view_schema, request.view_version, dict(request.properties)
        )
        await gate([effects.of_view_change(identifier, None, metadata)])
        key = await self._ctx.sealer.new_object_key(warehouse.name, VIEW, metadata.view_uuid)
        return await self._store_new(warehouse, identifier, metadata, key, None, rec)

    async def _store_new(
        self,
        warehouse: Warehouse,
        identifier: Identifier,
        metadata: ViewMetadata,
        key: ObjectKey,
        existing_file: str | None,
        rec: Recorder | None,
    ) -> Body:
        metadata_json = documents.model_json(metadata)
        metadata_location = existing_file or fileio.metadata_file_location(metadata.location, 0)
        uid = metadata.view_uuid
        if existing_file is None:
            content = file_content(
                self._ctx, warehouse, identifier, VIEW, uid, key, metadata_location, metadata_json
            )
            await asyncio.to_thread(fileio.write_new_file, metadata_location, content)
        body = documents.load_result(metadata_location, metadata_json)
        try:
            async with self._ctx.store.write() as tx:
                await registration.check_uuid(tx, uid)
                await confinement.claim(
                    tx,
                    self._ctx,
                    warehouse,
                    identifier.namespace,
                    VIEW,
                    uid,
                    roots.object_roots(metadata.location),
                )
                await tx.insert_object(
                    new_row(
                        self._ctx, warehouse, identifier, VIEW, uid, key, metadata_location, metadata_json
                    )
                )
                if rec is not None:
                    await rec.record(tx, body)
        except BaseException:
            if existing_file is None:
                await asyncio.to_thread(fileio.delete_files, [metadata_location])
            raise
        return body

    async def load(self, warehouse_name: str | None, identifier: Identifier) -> bytes:
        warehouse = self._ctx.warehouse(warehouse_name)
        row = await read_object(self._ctx.store, warehouse.name, identifier, VIEW)
        return await load_object(self._ctx, row, "view")

    async def exists(self, warehouse_name: str | None, identifier: Identifier) -> None:
        warehouse = self._ctx.warehouse(warehouse_name)
        await read_object(self._ctx.store, warehouse.name, identifier, VIEW)

    async def replace(
        self,
        warehouse_name: str | None,
        identifier: Identifier,
        request: CommitViewRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        """Compare-and-swap a view's metadata, like a table commit (`gate` judges the effect
        of each attempt before its file is written)."""
        warehouse = self._ctx.warehouse(warehouse_name)
        for _attempt in range(self._ctx.limits.commit_retries):
            async with self._ctx.store.read() as tx:
                row = await require_object(tx, warehouse.name, identifier, VIEW)
            key = await self._ctx.sealer.object_key(row)
            base = _parse(self._ctx.sealer.open_record(key, row))
            view_metadata.validate_requirements(request.requirements, base)
            new = view_metadata.apply_updates(base, request.updates)
            new_roots = roots.object_roots(new.location)
            if new_roots != roots.object_roots(base.location):
                async with self._ctx.store.read() as tx:
                    ns_properties = await require_namespace(tx, warehouse.name, identifier.namespace)
                confinement.check_new_roots(
                    self._ctx, warehouse, identifier.namespace, ns_properties, new_roots
                )
            await gate([effects.of_view_change(identifier, base, new)])
            version = fileio.parse_metadata_version(row.metadata_location) + 1
            metadata_json = documents.model_json(new)
            metadata_location = fileio.metadata_file_location(new.location, max(version, 1))
            content = file_content(
                self._ctx, warehouse, identifier, VIEW, row.uuid, key, metadata_location, metadata_json
            )
            await asyncio.to_thread(fileio.write_new_file, metadata_location, content)
            body = documents.load_result(metadata_location, metadata_json)
            try:
                async with self._ctx.store.write() as tx:
                    await confinement.claim(
                        tx, self._ctx, warehouse, identifier.namespace, VIEW, row.uuid, new_roots
                    )
                    swapped = await tx.swap_object(
                        warehouse.name,
                        identifier.namespace.key,
                        identifier.name,
                        row.metadata_location,
                        metadata_location,
                        self._ctx.sealer.seal_record(
                            key, warehouse.name, VIEW, row.uuid, metadata_location, metadata_json
                        ),
                    )
                    if swapped and rec is not None:
                        await rec.record(tx, body)
            except BaseException:
                await asyncio.to_thread(fileio.delete_files, [metadata_location])
                raise
            if swapped:
                return body
            await asyncio.to_thread(fileio.delete_files, [metadata_location])
        raise CommitFailedError("the view changed concurrently too many times; reload and retry")

    async def drop(self, warehouse_name: str | None, identifier: Identifier, rec: Recorder | None) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        if warehouse.seal_files:
            await soft_drop(self._ctx, warehouse, identifier, VIEW, rec)
            return None
        async with self._ctx.store.write() as tx:
            row = await tx.get_object(warehouse.name, identifier.namespace.key, identifier.name)
            if row is None or not await tx.delete_object(
                warehouse.name, identifier.namespace.key, identifier.name, VIEW
            ):
                raise NoSuchViewError(f"View does not exist: {identifier}")
            await confinement.forget(tx, VIEW, row.uuid)
            if rec is not None:
                await rec.record(tx, None)
        return None

    async def rename(
        self,
        warehouse_name: str | None,
        source: Identifier,
        target: Identifier,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        await rename_object(self._ctx, self._ctx.warehouse(warehouse_name), VIEW, source, target, rec, gate)
        return None

    async def register(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        request: RegisterViewRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)
        location = registration.check_file(warehouse, request.metadata_location)
        content = await asyncio.to_thread(fileio.read_file, location, self._ctx.limits.max_metadata_bytes)
        opened = await self._ctx.sealer.open_file(warehouse.name, location, content)
        metadata = _parse(opened.metadata_json)
        if opened.sealed_key is not None and (
            opened.kind != VIEW or opened.object_uuid != metadata.view_uuid
        ):
            raise InvalidRequestError("sealed metadata file does not hold this view's metadata")
        async with self._ctx.store.read() as tx:
            ns_properties = await require_namespace(tx, warehouse.name, namespace)
        held = roots.object_roots(metadata.location)
        confinement.check_new_roots(self._ctx, warehouse, namespace, ns_properties, held)
        registration.check_contents(location, held, ())
        async with self._ctx.store.read() as tx:
            if await tx.get_object(warehouse.name, namespace.key, identifier.name) is not None:
                raise AlreadyExistsError(f"Table or view already exists: {identifier}")
        await gate([effects.of_arrival(identifier, metadata)])
        key = await (
            self._ctx.sealer.unwrap_object_key(warehouse.name, VIEW, metadata.view_uuid, opened.sealed_key)
            if opened.sealed_key is not None
            else self._ctx.sealer.new_object_key(warehouse.name, VIEW, metadata.view_uuid)
        )
        return await self._store_new(warehouse, identifier, metadata, key, location, rec)
