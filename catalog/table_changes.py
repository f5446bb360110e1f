"""The table planner: a table commit request turned into the `PlannedChange` that
`catalog.commits.commit` gates, writes and swaps."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from cedarberg.catalog import (
    confinement,
    documents,
    effects,
    fileio,
    registration,
    requirements,
    roots,
    snapshot_ids,
    table_metadata,
)
from cedarberg.catalog.commits import CommitJob, NewFile, PlannedChange, Replaced, default_location
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.errors import InvalidRequestError, NoSuchTableError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.lookups import TABLE, name_taken, require_namespace
from cedarberg.catalog.requests import CommitTableRequest, RegisterTableRequest
from cedarberg.catalog.sealing import ObjectKey
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.objects import ObjectRow

TableChange = PlannedChange[TableMetadata]
TableJob = CommitJob[TableMetadata]


@dataclass(frozen=True, slots=True)
class CurrentTable:
    """A stored table opened for a commit: its pointer, data key and metadata."""

    row: ObjectRow
    key: ObjectKey
    metadata: TableMetadata


def parse_metadata(metadata_json: bytes) -> TableMetadata:
    return TableMetadataUtil.parse_raw(metadata_json.decode())


async def open_table(ctx: CatalogContext, row: ObjectRow | None) -> CurrentTable | None:
    """The table `row` points at, opened (None for no row). Raises KeyServiceUnavailableError."""
    if row is None:
        return None
    key = await ctx.sealer.object_key(row)
    # Opened (the registry copy checked) before the parsed form is looked up: the cache saves
    # the parse only.
    metadata_json = ctx.sealer.open_record(key, row)
    version = (TABLE, row.uuid, row.metadata_location)
    return CurrentTable(row, key, ctx.parsed_metadata.get_or_parse(version, metadata_json, parse_metadata))


def _change(
    identifier: Identifier,
    row: ObjectRow | None,
    new: TableMetadata,
    origin: TableMetadata | None,
    file: NewFile,
) -> TableChange:
    return PlannedChange(
        identifier=identifier,
        kind=TABLE,
        base=row,
        metadata=new,
        origin=origin,
        metadata_location=file.metadata_location,
        metadata_json=documents.model_json(new),
        key=file.key,
        object_uuid=row.uuid if row is not None else str(new.table_uuid),
        effect=effects.of_table_change(identifier, origin, new),
        roots=roots.roots_of(new),
    )


def created(identifier: Identifier, metadata: TableMetadata, key: ObjectKey) -> TableChange:
    """The change that creates a table with `metadata` (its checks were made by the caller)."""
    return _change(identifier, None, metadata, None, NewFile(fileio.metadata_file_location(metadata, 0), key))


async def plan_register(
    ctx: CatalogContext, warehouse: Warehouse, identifier: Identifier, request: RegisterTableRequest
) -> TableChange:
    """The change that registers the table metadata file `request` names (plain, or sealed: then
    it brings its own data key), adopted as it is: nothing is written. With `overwrite` it
    replaces the table at the name, which the gate judges leaving and the swap deletes only if it
    is still the version read here.

    Raises InvalidRequestError, LocationNotAllowedError, NoSuchNamespaceError,
    AlreadyExistsError, StorageUnavailableError, KeyServiceUnavailableError."""
    namespace = identifier.namespace
    target = registration.Target(TABLE, identifier, request.overwrite)
    location = await registration.confine_file(ctx, warehouse, target, request.metadata_location)
    content = await registration.read_file(ctx, location)
    opened = await ctx.sealer.open_file(warehouse.name, location, content)
    metadata = registration.read_metadata(opened.metadata_json, fileio.parse_table_metadata, "table")
    uid = str(metadata.table_uuid)
    if opened.sealed_key is not None and (opened.kind != TABLE or opened.object_uuid != uid):
        raise InvalidRequestError("sealed metadata file does not hold this table's metadata")
    async with ctx.store.read() as tx:
        ns_properties = await require_namespace(tx, warehouse.name, namespace)
        replaced = await object_rows.get_object(tx, warehouse.name, namespace.key, identifier.name)
    held = roots.roots_of(metadata)
    confinement.check_new_roots(ctx, warehouse, namespace, ns_properties, held)
    registration.check_contents(location, held, roots.added_paths(None, metadata))
    if replaced is not None and (not request.overwrite or replaced.kind != TABLE):
        raise name_taken(identifier, replaced.kind, TABLE)
    key = await (
        ctx.sealer.unwrap_object_key(warehouse.name, TABLE, uid, opened.sealed_key)
        if opened.sealed_key is not None
        else ctx.sealer.new_object_key(warehouse.name, TABLE, uid)
    )
    departure = None
    if replaced is not None:
        leaving = parse_metadata(await ctx.sealer.open_row(replaced))
        departure = Replaced(replaced, effects.of_departure(identifier, leaving))
    return dataclasses.replace(
        _change(identifier, None, metadata, None, NewFile(location, key)),
        writes_file=False,
        check_uuid_free=True,
        replaces=departure,
    )


@dataclass(frozen=True, slots=True)
class Basis:
    """What one table change applies to."""

    current: CurrentTable | None  # the table as stored (None: not stored, or not read again)
    ns_properties: dict[str, str] | None  # its namespace's properties (where its roots may lie)
    # An earlier change to the same table in this commit: the change builds on it and goes into
    # the same new file.
    working: TableChange | None = None


async def plan_change(
    ctx: CatalogContext,
    warehouse: Warehouse,
    identifier: Identifier,
    basis: Basis,
    change: CommitTableRequest,
) -> TableChange | None:
    """Check and apply one table's change to `basis`; None when it changes nothing.

    A change that creates the table gets a new data key.
    Raises CommitFailedError, NoSuchTableError, InvalidRequestError (MetadataValidationError for
    a snapshot id the commit cannot use again), LocationNotAllowedError,
    KeyServiceUnavailableError.
    """
    current, ns_properties, working = basis.current, basis.ns_properties, basis.working
    row = working.base if working is not None else (current.row if current is not None else None)
    if working is not None:
        base: TableMetadata | None = working.metadata
    else:
        base = current.metadata if current is not None else None
    if base is None and not table_metadata.is_create(change.requirements):
        raise NoSuchTableError(f"Table does not exist: {identifier}")
    requirements.validate(change.requirements, base)
    if not change.updates and base is not None:
        return None
    origin = working.origin if working is not None else base
    added = snapshot_ids.added_ids(
        origin, working.added_snapshot_ids if working is not None else frozenset(), change.updates
    )
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
        file = NewFile(working.metadata_location, working.key)
        planned = _change(identifier, row, new, working.origin, file)
        return dataclasses.replace(planned, added_snapshot_ids=added)
    version = fileio.parse_metadata_version(row.metadata_location) + 1 if row is not None else 0
    key = (
        current.key
        if current is not None
        else await ctx.sealer.new_object_key(warehouse.name, TABLE, str(new.table_uuid))
    )
    location = fileio.metadata_file_location(new, max(version, 0))
    planned = _change(identifier, row, new, base, NewFile(location, key))
    return dataclasses.replace(planned, added_snapshot_ids=added)
