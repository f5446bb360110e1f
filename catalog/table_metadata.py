"""Pure table-metadata logic on top of pyiceberg: new tables, requirements, updates, locations.

pyiceberg is the reference Python implementation of the table spec, so requirements and updates
are applied with its code; this module only adapts what Java engines send that pyiceberg would
refuse, and enforces the gateway's location rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from pydantic import ValidationError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataV1, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AssertCreate,
    AssignUUIDUpdate,
    RemovePartitionStatisticsUpdate,
    RemoveSnapshotsUpdate,
    RemoveStatisticsUpdate,
    TableRequirement,
    TableUpdate,
    update_table_metadata,
)

from catalog import locations
from catalog.errors import CommitFailedError, InvalidRequestError
from catalog.requests import CreateTableRequest

# Table properties that point engines at other places to write; they must stay in the warehouse.
LOCATION_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)


def _message(err: Exception) -> str:
    return str(err).splitlines()[0][:300] if str(err) else type(err).__name__


def check_locations(metadata: TableMetadata, allowed_root: str) -> None:
    """Raise LocationNotAllowedError if the table or a write-path property leaves `allowed_root`."""
    locations.require_within(metadata.location, allowed_root, "table location")
    for key in LOCATION_PROPERTIES:
        if key in metadata.properties:
            locations.require_within(metadata.properties[key], allowed_root, key)


def create_metadata(request: CreateTableRequest, location: str) -> TableMetadata:
    """Metadata of a new table with fresh field, spec and sort-order ids (clients send their own)."""
    try:
        return new_table_metadata(
            schema=request.table_schema,
            partition_spec=request.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=request.write_order or UNSORTED_SORT_ORDER,
            location=location,
            properties=dict(request.properties),
            table_uuid=uuid.uuid4(),
        )
    except (ValueError, ValidationError, IcebergValidationError) as err:
        raise InvalidRequestError(f"invalid table definition: {_message(err)}") from None


def empty_metadata() -> TableMetadata:
    """The base that create-by-commit (stage-create, then assert-create) updates are applied to."""
    return TableMetadataV1.model_construct(last_column_id=-1, schema=Schema())  # type: ignore[call-arg]


def validate_requirements(requirements: Iterable[TableRequirement], base: TableMetadata | None) -> None:
    """Raise CommitFailedError if any requirement does not hold for `base` (None: no table)."""
    for requirement in requirements:
        try:
            requirement.validate(base)
        except CommitFailedException as err:
            raise CommitFailedError(_message(err)) from None


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


def apply_updates(
    base: TableMetadata | None, updates: Sequence[TableUpdate], base_location: str | None
) -> TableMetadata:
    """Apply updates to `base` (None: build a new table from them). Raises InvalidRequestError."""
    start = base if base is not None else empty_metadata()
    if base is not None:
        _refuse_uuid_change(base, updates)
    try:
        new = update_table_metadata(
            base_metadata=start,
            updates=_tolerate_removed_statistics(start, updates),
            enforce_validation=base is None,
            metadata_location=base_location,
        )
        _check_added_sort_orders(start, new)
    except CommitFailedException as err:
        raise CommitFailedError(_message(err)) from None
    except (
        ValueError,
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
