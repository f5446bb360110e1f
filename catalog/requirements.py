"""Commit requirements checked against the current metadata, refused in the words of Iceberg's
reference implementation (`UpdateRequirement` in iceberg-core).

Engines show these messages to people, and Iceberg's REST Compatibility Kit asserts them, so
they follow the reference rather than pyiceberg's wording. In the reference, "expected" is the
requirement's value and the second value the table's, except for the UUID, where it is the other
way round; both orders are kept.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AssertCreate,
    AssertCurrentSchemaId,
    AssertDefaultSortOrderId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    TableRequirement,
)

from cedarberg.catalog.errors import CommitFailedError, InvalidRequestError

_FAILED = "Requirement failed"

# Requirements on one id: (the requirement's field, the metadata's field, the reference's words).
_ID_CHECKS: dict[type[TableRequirement], tuple[str, str, str]] = {
    AssertLastAssignedFieldId: ("last_assigned_field_id", "last_column_id", "last assigned field id changed"),
    AssertCurrentSchemaId: ("current_schema_id", "current_schema_id", "current schema changed"),
    AssertLastAssignedPartitionId: (
        "last_assigned_partition_id",
        "last_partition_id",
        "last assigned partition id changed",
    ),
    AssertDefaultSpecId: ("default_spec_id", "default_spec_id", "default partition spec changed"),
    AssertDefaultSortOrderId: (
        "default_sort_order_id",
        "default_sort_order_id",
        "default sort order changed",
    ),
}


def validate(requirements: Iterable[TableRequirement], base: TableMetadata | None) -> None:
    """Raise CommitFailedError for the first requirement that does not hold for `base` (None:
    the table does not exist)."""
    for requirement in requirements:
        failure = _failure(requirement, base)
        if failure is not None:
            raise CommitFailedError(f"{_FAILED}: {failure}")


def _failure(requirement: TableRequirement, base: TableMetadata | None) -> str | None:
    if isinstance(requirement, AssertCreate):
        return None if base is None else "table already exists"
    if base is None:
        return "current table metadata is missing"
    if isinstance(requirement, AssertTableUUID):
        same = str(requirement.uuid).lower() == str(base.table_uuid).lower()
        return None if same else f"UUID does not match: expected {base.table_uuid} != {requirement.uuid}"
    if isinstance(requirement, AssertRefSnapshotId):
        return _ref_failure(requirement, base)
    check = _ID_CHECKS.get(type(requirement))
    if check is None:
        raise InvalidRequestError(f"unknown requirement: {requirement.type}")
    field, metadata_field, what = check
    expected, actual = getattr(requirement, field), getattr(base, metadata_field)
    return None if expected == actual else f"{what}: expected id {expected} != {actual}"


def _ref_failure(requirement: AssertRefSnapshotId, base: TableMetadata) -> str | None:
    ref = base.refs.get(requirement.ref)
    if ref is None:
        if requirement.snapshot_id is None:
            return None
        return f"branch or tag {requirement.ref} is missing, expected {requirement.snapshot_id}"
    kind = "branch" if ref.snapshot_ref_type == SnapshotRefType.BRANCH else "tag"
    if requirement.snapshot_id is None:
        return f"{kind} {requirement.ref} was created concurrently"
    if requirement.snapshot_id != ref.snapshot_id:
        expected, actual = requirement.snapshot_id, ref.snapshot_id
        return f"{kind} {requirement.ref} has changed: expected id {expected} != {actual}"
    return None
