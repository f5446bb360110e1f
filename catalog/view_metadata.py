"""Pure view-metadata logic: new views and the view updates of the REST spec.

pyiceberg models view metadata but has no server-side update logic, so the updates are applied
here, following the view spec: versions are immutable, `set-current-view-version` with -1 means
"the version added last in this commit", and every change of the current version is logged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

from cedarberg.catalog import metadata_ids
from cedarberg.catalog.errors import CommitFailedError, InvalidArgumentError, InvalidRequestError
from cedarberg.catalog.requests import (
    AddViewSchema,
    AddViewVersion,
    AssertViewUUID,
    AssignViewUUID,
    RemoveViewProperties,
    SetCurrentViewVersion,
    SetViewLocation,
    SetViewProperties,
    UpgradeViewFormatVersion,
    ViewUpdate,
)

LAST_ADDED = -1
FIRST_SCHEMA_ID = 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def new_view_metadata(
    location: str, schema: Schema, version: ViewVersion, properties: dict[str, str]
) -> ViewMetadata:
    """A view's first metadata. As in Iceberg's reference, the first schema is schema 0 and the
    version refers to it, whatever ids the client chose."""
    if not version.representations:
        raise InvalidRequestError("a view version needs at least one representation")
    _check_dialects(version)
    schema = schema.model_copy(update={"schema_id": FIRST_SCHEMA_ID})
    version = version.model_copy(update={"schema_id": FIRST_SCHEMA_ID})
    return ViewMetadata(
        view_uuid=str(uuid.uuid4()),
        format_version=1,
        location=location,
        schemas=[schema],
        current_version_id=version.version_id,
        versions=[version],
        version_log=[ViewHistoryEntry(timestamp_ms=version.timestamp_ms, version_id=version.version_id)],
        properties=properties,
    )


def validate_requirements(requirements: Sequence[AssertViewUUID], base: ViewMetadata) -> None:
    for requirement in requirements:
        if requirement.uuid != base.view_uuid:
            raise CommitFailedError(
                "Requirement failed: view UUID does not match: "
                f"expected {requirement.uuid}, found {base.view_uuid}"
            )


def _same_version(a: ViewVersion, b: ViewVersion) -> bool:
    """Versions are equal when they say the same thing (ids and timestamps aside)."""
    keys = {"version_id", "timestamp_ms"}
    return a.model_dump(exclude=keys) == b.model_dump(exclude=keys)


def apply_updates(base: ViewMetadata, updates: Sequence[ViewUpdate]) -> ViewMetadata:
    """Apply updates in order. Raises InvalidRequestError for an update that cannot apply."""
    meta = base
    last_added_version: int | None = None
    last_added_schema: int | None = None
    assigned: dict[int, int] = {}  # schema ids as sent -> as stored, for this commit's schemas
    for update in updates:
        if isinstance(update, AssignViewUUID):
            if update.uuid != meta.view_uuid:
                raise InvalidRequestError("cannot change the UUID of an existing view")
        elif isinstance(update, UpgradeViewFormatVersion):
            if update.format_version != 1:
                raise InvalidRequestError(f"unsupported view format version: {update.format_version}")
        elif isinstance(update, AddViewSchema):
            meta, last_added_schema = _add_schema(meta, update.view_schema)
            # Versions added with it may name the schema by the id the client gave it.
            assigned[update.view_schema.schema_id] = last_added_schema
        elif isinstance(update, SetViewLocation):
            meta = meta.model_copy(update={"location": update.location})
        elif isinstance(update, SetViewProperties):
            meta = meta.model_copy(update={"properties": {**meta.properties, **update.updates}})
        elif isinstance(update, RemoveViewProperties):
            meta = meta.model_copy(
                update={"properties": {k: v for k, v in meta.properties.items() if k not in update.removals}}
            )
        elif isinstance(update, AddViewVersion):
            version = update.view_version
            if version.schema_id in assigned:
                version = version.model_copy(update={"schema_id": assigned[version.schema_id]})
            meta, last_added_version = _add_version(meta, version, last_added_schema)
        elif isinstance(update, SetCurrentViewVersion):
            meta = _set_current(meta, update.view_version_id, last_added_version)
    return meta


def _add_schema(meta: ViewMetadata, schema: Schema) -> tuple[ViewMetadata, int]:
    """Add `schema` unless an equal one exists; its id as stored. As in Iceberg's reference, a
    new schema takes the next id after the highest, whatever id the client gave it."""
    for existing in meta.schemas:
        if metadata_ids.schema_identity(existing) == metadata_ids.schema_identity(schema):
            return meta, existing.schema_id
    schema_id = max((existing.schema_id for existing in meta.schemas), default=FIRST_SCHEMA_ID - 1) + 1
    schema = schema.model_copy(update={"schema_id": schema_id})
    return meta.model_copy(update={"schemas": [*meta.schemas, schema]}), schema_id


def _add_version(
    meta: ViewMetadata, version: ViewVersion, last_added_schema: int | None
) -> tuple[ViewMetadata, int]:
    if version.schema_id == LAST_ADDED:
        if last_added_schema is None:
            raise InvalidRequestError("view version refers to the last added schema, but none was added")
        version = version.model_copy(update={"schema_id": last_added_schema})
    if not any(schema.schema_id == version.schema_id for schema in meta.schemas):
        raise InvalidRequestError(f"view version refers to unknown schema {version.schema_id}")
    _check_dialects(version)
    for existing in meta.versions:
        if _same_version(existing, version):
            return meta, existing.version_id
    new_id = max((v.version_id for v in meta.versions), default=0) + 1
    version = version.model_copy(update={"version_id": new_id})
    return meta.model_copy(update={"versions": [*meta.versions, version]}), new_id


def _check_dialects(version: ViewVersion) -> None:
    """The view spec allows one SQL representation per dialect (dialects compare case-blind)."""
    seen: set[str] = set()
    for representation in version.representations:
        dialect = representation.root.dialect.lower()
        if dialect in seen:
            raise InvalidArgumentError(
                f"Invalid view version: Cannot add multiple queries for dialect {dialect}"
            )
        seen.add(dialect)


def _set_current(meta: ViewMetadata, version_id: int, last_added_version: int | None) -> ViewMetadata:
    if version_id == LAST_ADDED:
        if last_added_version is None:
            raise InvalidRequestError("cannot set the last added view version: none was added")
        version_id = last_added_version
    if not any(v.version_id == version_id for v in meta.versions):
        raise InvalidRequestError(f"view version {version_id} does not exist")
    if version_id == meta.current_version_id:
        return meta
    entry = ViewHistoryEntry(timestamp_ms=_now_ms(), version_id=version_id)
    return meta.model_copy(
        update={"current_version_id": version_id, "version_log": [*meta.version_log, entry]}
    )
