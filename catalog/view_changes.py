"""The view planner: a view create, replace or registration turned into the `PlannedChange` that
`catalog.commits.commit` gates, writes and swaps, exactly as it does a table's."""

from __future__ import annotations

import dataclasses
import uuid

from pyiceberg.view.metadata import ViewMetadata

from cedarberg.catalog import (
    confinement,
    documents,
    effects,
    fileio,
    locations,
    registration,
    roots,
    view_metadata,
)
from cedarberg.catalog.commits import NewFile, PlannedChange, default_location, with_namespaces_read
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.errors import InvalidRequestError, NoSuchNamespaceError, NoSuchViewError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.lookups import VIEW, name_taken, read_for_change, require_namespace
from cedarberg.catalog.requests import CommitViewRequest, CreateViewRequest, RegisterViewRequest
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.objects import ObjectRow

ViewChange = PlannedChange[ViewMetadata]


def parse(content: bytes | str) -> ViewMetadata:
    """View metadata from JSON. Raises InvalidRequestError naming the first problem."""
    try:
        return ViewMetadata.model_validate_json(content)
    except ValueError as err:
        raise InvalidRequestError(
            f"not valid Iceberg view metadata: {str(err).splitlines()[0][:200]}"
        ) from None


def _change(
    identifier: Identifier,
    row: ObjectRow | None,
    new: ViewMetadata,
    origin: ViewMetadata | None,
    file: NewFile,
) -> ViewChange:
    """The change from `origin` to `new` (a view created when `origin` is None)."""
    return PlannedChange(
        identifier=identifier,
        kind=VIEW,
        base=row,
        metadata=new,
        origin=origin,
        metadata_location=file.metadata_location,
        metadata_json=documents.model_json(new),
        key=file.key,
        object_uuid=row.uuid if row is not None else new.view_uuid,
        effect=effects.of_view_change(identifier, origin, new),
        roots=roots.roots_of(new),
        # A new view must not take the UUID of a live or dropped object (its key and seals are
        # bound to the UUID).
        check_uuid_free=row is None,
    )


async def plan_create(
    ctx: CatalogContext, warehouse: Warehouse, identifier: Identifier, request: CreateViewRequest
) -> ViewChange:
    """The change that creates the view `request` describes, with a new data key.

    Raises NoSuchNamespaceError, InvalidRequestError, LocationNotAllowedError,
    KeyServiceUnavailableError."""
    found = await read_for_change(ctx.store, warehouse.name, identifier)
    if found is None:
        raise NoSuchNamespaceError(f"Namespace does not exist: {identifier.namespace}")
    if found.row is not None:
        raise name_taken(identifier, found.row.kind, VIEW)
    ns_properties = found.ns_properties
    location = request.location or default_location(warehouse, ns_properties, identifier, uuid.uuid4().hex)
    metadata = view_metadata.new_view_metadata(
        locations.normalize(location), request.view_schema, request.view_version, dict(request.properties)
    )
    confinement.check_new_roots(
        ctx,
        warehouse,
        identifier.namespace,
        ns_properties,
        roots.roots_of(metadata),
    )
    key = await ctx.sealer.new_object_key(warehouse.name, VIEW, metadata.view_uuid)
    change = _change(
        identifier, None, metadata, None, NewFile(fileio.metadata_file_location(metadata, 0), key)
    )
    return with_namespaces_read(change, found.chain)


async def plan_replace(
    ctx: CatalogContext, warehouse: Warehouse, identifier: Identifier, request: CommitViewRequest
) -> ViewChange | None:
    """The change `request` makes to the view as stored now; None when it changes nothing (no
    file is written then, as for a table).

    Raises NoSuchViewError, CommitFailedError (a requirement fails), InvalidRequestError,
    LocationNotAllowedError, KeyServiceUnavailableError."""
    found = await read_for_change(ctx.store, warehouse.name, identifier)
    row = None if found is None else found.row
    if found is None or row is None or row.kind != VIEW:
        raise NoSuchViewError(f"View does not exist: {identifier}")
    key = await ctx.sealer.object_key(row)
    metadata_json = ctx.sealer.open_record(key, row)  # checked first: the cache saves the parse only
    base = ctx.parsed_metadata.get_or_parse((VIEW, row.uuid, row.metadata_location), metadata_json, parse)
    view_metadata.validate_requirements(request.requirements, base)
    new = view_metadata.apply_updates(base, request.updates)
    if new == base:
        return None
    new_roots = roots.roots_of(new)
    if new_roots != roots.roots_of(base):
        confinement.check_new_roots(ctx, warehouse, identifier.namespace, found.ns_properties, new_roots)
    # A view's versions count from 1 on: a file without a version number is followed by 00001.
    version = max(fileio.parse_metadata_version(row.metadata_location) + 1, 1)
    change = _change(identifier, row, new, base, NewFile(fileio.metadata_file_location(new, version), key))
    return with_namespaces_read(change, found.chain)


async def plan_register(
    ctx: CatalogContext, warehouse: Warehouse, identifier: Identifier, request: RegisterViewRequest
) -> ViewChange:
    """The change that registers the view metadata file `request` names (plain, or sealed: then
    it brings its own data key). The file is adopted as it is: nothing is written.

    Raises InvalidRequestError, LocationNotAllowedError, NoSuchNamespaceError,
    AlreadyExistsError, StorageUnavailableError, KeyServiceUnavailableError."""
    namespace = identifier.namespace
    target = registration.Target(VIEW, identifier)
    location = await registration.confine_file(ctx, warehouse, target, request.metadata_location)
    content = await registration.read_file(ctx, location)
    opened = await ctx.sealer.open_file(warehouse.name, location, content)
    metadata = registration.read_metadata(opened.metadata_json, parse, "view")
    if opened.sealed_key is not None and (opened.kind != VIEW or opened.object_uuid != metadata.view_uuid):
        raise InvalidRequestError("sealed metadata file does not hold this view's metadata")
    async with ctx.store.read() as tx:
        ns_properties = await require_namespace(tx, warehouse.name, namespace)
    held = roots.roots_of(metadata)
    confinement.check_new_roots(ctx, warehouse, namespace, ns_properties, held)
    registration.check_contents(location, held, ())
    async with ctx.store.read() as tx:
        existing = await object_rows.get_object(tx, warehouse.name, namespace.key, identifier.name)
        if existing is not None:
            raise name_taken(identifier, existing.kind, VIEW)
    key = await (
        ctx.sealer.unwrap_object_key(warehouse.name, VIEW, metadata.view_uuid, opened.sealed_key)
        if opened.sealed_key is not None
        else ctx.sealer.new_object_key(warehouse.name, VIEW, metadata.view_uuid)
    )
    # The registered file is adopted as it is (not ours to write), and the view arrives whole.
    return dataclasses.replace(
        _change(identifier, None, metadata, None, NewFile(location, key)),
        effect=effects.of_arrival(identifier, metadata),
        writes_file=False,
    )
