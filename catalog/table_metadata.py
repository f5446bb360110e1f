"""Pure table-metadata logic on top of pyiceberg: new tables, requirements, updates, locations.

pyiceberg is the reference Python implementation of the table spec, so requirements and updates
are applied with its code; this module only adapts what Java engines send that pyiceberg would
refuse (the location rules are catalog.roots).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import datetime

from pydantic import ValidationError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import (
    TableMetadata,
    TableMetadataUtil,
    TableMetadataV1,
    TableMetadataV3,
    new_table_metadata,
)
from pyiceberg.table.snapshots import MetadataLogEntry
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AssertCreate,
    AssignUUIDUpdate,
    RemovePartitionStatisticsUpdate,
    RemoveSnapshotsUpdate,
    RemoveStatisticsUpdate,
    TableRequirement,
    TableUpdate,
    UpgradeFormatVersionUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.types import IcebergType, ListType, MapType, NestedField, StructType
from pyiceberg.utils.datetime import datetime_to_millis

from cedarberg.catalog import metadata_ids
from cedarberg.catalog.errors import CommitFailedError, InvalidRequestError
from cedarberg.catalog.requests import CreateTableRequest

V3 = 3


def _message(err: Exception) -> str:
    return str(err).splitlines()[0][:300] if str(err) else type(err).__name__


def create_metadata(request: CreateTableRequest, location: str) -> TableMetadata:
    """Metadata of a new table with fresh field, spec and sort-order ids (clients send their own)."""
    try:
        metadata = new_table_metadata(
            schema=request.table_schema,
            partition_spec=request.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=request.write_order or UNSORTED_SORT_ORDER,
            location=location,
            properties=dict(request.properties),
            table_uuid=uuid.uuid4(),
        )
        return _with_row_lineage(_with_sent_defaults(metadata, request.table_schema))
    except (ValueError, TypeError, ValidationError, IcebergValidationError) as err:
        raise InvalidRequestError(f"invalid table definition: {_message(err)}") from None


def _with_sent_defaults(metadata: TableMetadata, sent: Schema) -> TableMetadata:
    """`metadata` whose schema keeps the `initial-default`s and `write-default`s of the schema the
    client sent. pyiceberg's fresh-id assignment rebuilds every field without them; the
    reference keeps them (field ids change, the shape does not). Built anew, not copied: pyiceberg
    caches lookups on schemas and types."""
    fresh = metadata.schema()
    kept = Schema(
        *_fields_with_defaults(sent.fields, fresh.fields),
        schema_id=fresh.schema_id,
        identifier_field_ids=fresh.identifier_field_ids,
    )
    return metadata.model_copy(
        update={"schemas": [kept if s.schema_id == fresh.schema_id else s for s in metadata.schemas]}
    )


def _fields_with_defaults(
    sent: Sequence[NestedField], fresh: Sequence[NestedField]
) -> tuple[NestedField, ...]:
    return tuple(
        NestedField(
            field_id=new.field_id,
            name=new.name,
            field_type=_type_with_defaults(old.field_type, new.field_type),
            required=new.required,
            doc=new.doc,
            initial_default=old.initial_default,
            write_default=old.write_default,
        )
        for old, new in zip(sent, fresh, strict=True)
    )


def _type_with_defaults(sent: IcebergType, fresh: IcebergType) -> IcebergType:
    if isinstance(sent, StructType) and isinstance(fresh, StructType):
        return StructType(*_fields_with_defaults(sent.fields, fresh.fields))
    if isinstance(sent, ListType) and isinstance(fresh, ListType):
        return ListType(
            element_id=fresh.element_id,
            element_type=_type_with_defaults(sent.element_type, fresh.element_type),
            element_required=fresh.element_required,
        )
    if isinstance(sent, MapType) and isinstance(fresh, MapType):
        return MapType(
            key_id=fresh.key_id,
            key_type=_type_with_defaults(sent.key_type, fresh.key_type),
            value_id=fresh.value_id,
            value_type=_type_with_defaults(sent.value_type, fresh.value_type),
            value_required=fresh.value_required,
        )
    return fresh


def empty_metadata() -> TableMetadata:
    """The base that create-by-commit (stage-create, then assert-create) updates are applied to."""
    return TableMetadataV1.model_construct(last_column_id=-1, schema=Schema())  # type: ignore[call-arg]


def is_create(requirements: Sequence[TableRequirement]) -> bool:
    return any(isinstance(requirement, AssertCreate) for requirement in requirements)


def _tolerate_removed_statistics(
    base: TableMetadata, updates: Sequence[TableUpdate]
) -> tuple[TableUpdate, ...]:
    """Drop remove-(partition-)statistics updates whose statistics are already gone.

    pyiceberg's remove-snapshots also removes those snapshots' statistics, while Java's
    expire_snapshots sends remove-statistics for them right after; the end state is the same.
    """
    stats = {stat.snapshot_id for stat in base.statistics}
    partition_stats = {stat.snapshot_id for stat in base.partition_statistics}
    kept: list[TableUpdate] = []
    for update in updates:
        if isinstance(update, RemoveSnapshotsUpdate):
            stats -= set(update.snapshot_ids)
            partition_stats -= set(update.snapshot_ids)
        elif (isinstance(update, RemoveStatisticsUpdate) and update.snapshot_id not in stats) or (
            isinstance(update, RemovePartitionStatisticsUpdate) and update.snapshot_id not in partition_stats
        ):
            continue
        kept.append(update)
    return tuple(kept)


def _with_row_lineage(metadata: TableMetadata) -> TableMetadata:
    """v3 tables track row lineage from row id 0; pyiceberg leaves `next-row-id` unset, which
    would stop it from ever advancing."""
    if isinstance(metadata, TableMetadataV3) and metadata.next_row_id is None:
        return metadata.model_copy(update={"next_row_id": 0})
    return metadata


def _upgrade_to_v3(
    base: TableMetadata, updates: Sequence[TableUpdate]
) -> tuple[TableMetadata, tuple[TableUpdate, ...]]:
    """Take an upgrade to format v3 out of `updates` and apply it to `base`.

    pyiceberg 0.12 models v3 metadata but refuses to upgrade to it; the upgrade itself is only a
    version bump plus the start of row lineage.
    """
    wants_v3 = any(isinstance(u, UpgradeFormatVersionUpdate) and u.format_version == V3 for u in updates)
    if not wants_v3 or base.format_version >= V3:
        return base, tuple(updates)
    if base.format_version == 1 and base.partition_specs:
        # An existing v1 table goes through pyiceberg's own v1->v2 upgrade (the empty base of a
        # create has nothing to upgrade, and pyiceberg cannot validate it).
        base = update_metadata(base, (UpgradeFormatVersionUpdate(format_version=2),))
    upgraded = TableMetadataUtil._construct_without_validation(  # pyiceberg's own v2->v3 path
        base.model_copy(update={"format_version": V3, "next_row_id": 0})
    )
    rest = tuple(
        u for u in updates if not (isinstance(u, UpgradeFormatVersionUpdate) and u.format_version == V3)
    )
    return upgraded, rest


def update_metadata(
    base: TableMetadata,
    updates: tuple[TableUpdate, ...],
    enforce_validation: bool = False,
    metadata_location: str | None = None,
) -> TableMetadata:
    """pyiceberg's `update_table_metadata`, step for step, without its closing deep copy.

    Each of pyiceberg's update steps builds a new model with `model_copy(update=...)` and new
    lists and maps for what it changes; none changes the model it is given. So the result shares
    every part it did not change with `base`, which stays as it was: the parsed metadata that
    `catalog.parsed_metadata` hands to many commits is never mutated, and the deep copy (most of
    the CPU of applying a small change to a large table) bought nothing. Every consumer of
    metadata treats it as immutable.
    """
    context = _TableMetadataUpdateContext()
    new = base
    for update in updates:
        new = _apply_table_update(update, new, context)
    if context.has_changes():
        if metadata_location:
            new = _update_table_metadata_log(new, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == new.last_updated_ms:
            new = new.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    if enforce_validation:
        return TableMetadataUtil.parse_obj(new.model_dump())
    return new.model_copy()


def apply_updates(
    base: TableMetadata | None, updates: Sequence[TableUpdate], base_location: str | None
) -> TableMetadata:
    """Apply updates to `base` (None: build a new table from them). Raises InvalidRequestError."""
    start = base if base is not None else empty_metadata()
    if base is not None:
        _refuse_uuid_change(base, updates)
    try:
        upgraded, updates = _upgrade_to_v3(start, updates)
        new = update_metadata(
            upgraded,
            updates=metadata_ids.assign(upgraded, _tolerate_removed_statistics(upgraded, updates)),
            enforce_validation=base is None,
            metadata_location=base_location,
        )
        if upgraded is not start and new.metadata_log == upgraded.metadata_log and base_location:
            # The upgrade was the only change: log the previous file as any other commit would.
            entry = MetadataLogEntry(metadata_file=base_location, timestamp_ms=start.last_updated_ms)
            new = new.model_copy(
                update={
                    "metadata_log": [*new.metadata_log, entry],
                    "last_updated_ms": int(time.time() * 1000),
                }
            )
        new = _with_row_lineage(new)
        _check_added_sort_orders(start, new)
    except CommitFailedException as err:
        raise CommitFailedError(_message(err)) from None
    except (
        ValueError,
        TypeError,  # pyiceberg, for a value it cannot decode or encode for its type
        ValidationError,
        IcebergValidationError,
        KeyError,
        AttributeError,
        NotImplementedError,
    ) as err:
        raise InvalidRequestError(f"cannot apply updates: {_message(err)}") from None
    return new


def _refuse_uuid_change(base: TableMetadata, updates: Sequence[TableUpdate]) -> None:
    """A table's UUID is its identity (requirements and encryption bind to it): never reassigned."""
    for update in updates:
        if isinstance(update, AssignUUIDUpdate) and update.uuid != base.table_uuid:
            raise InvalidRequestError("cannot reassign the UUID of an existing table")


def _check_added_sort_orders(base: TableMetadata, new: TableMetadata) -> None:
    """Every sort order added must bind to the current schema; pyiceberg checks only the default
    one, and Java engines refuse to load a table whose sort orders do not bind."""
    known = {order.order_id for order in base.sort_orders}
    schema = new.schema()
    for order in new.sort_orders:
        if order.order_id not in known:
            order.check_compatible(schema)


def filter_to_refs(metadata: TableMetadata) -> TableMetadata:
    """The metadata with only the snapshots that a branch or tag points at (`snapshots=refs`)."""
    referenced = {ref.snapshot_id for ref in metadata.refs.values()}
    return metadata.model_copy(
        update={"snapshots": [snap for snap in metadata.snapshots if snap.snapshot_id in referenced]}
    )
