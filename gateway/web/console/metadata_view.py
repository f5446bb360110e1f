"""What a table's or view's page shows, read from the document the REST API answers for it
(LoadTableResult, LoadViewResult): plain rows for the templates, nothing more than that document
says (a restricted reader's document is already narrowed to its view)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Field:
    """One column, nested ones named by their path (`address.city`)."""

    id: int | None
    name: str
    type: str
    required: bool
    doc: str


def _type_name(kind: object) -> str:
    if isinstance(kind, str):
        return kind
    if not isinstance(kind, Mapping):
        return "?"
    shape = kind.get("type")
    if shape == "list":
        return f"list<{_type_name(kind.get('element'))}>"
    if shape == "map":
        return f"map<{_type_name(kind.get('key'))}, {_type_name(kind.get('value'))}>"
    return str(shape or "?")


def _fields(schema: Mapping[str, Any], prefix: str = "") -> Iterator[Field]:
    for field in schema.get("fields", ()):
        if not isinstance(field, Mapping):
            continue
        name = f"{prefix}{field.get('name', '?')}"
        kind = field.get("type")
        field_id = field.get("id")
        yield Field(
            field_id if isinstance(field_id, int) else None,
            name,
            _type_name(kind),
            bool(field.get("required", False)),
            str(field.get("doc") or ""),
        )
        if isinstance(kind, Mapping) and kind.get("type") == "struct":
            yield from _fields(kind, name + ".")


def when(milliseconds: object) -> str:
    """An epoch-milliseconds timestamp as UTC text, or '' if it is not one."""
    if not isinstance(milliseconds, int) or isinstance(milliseconds, bool):
        return ""
    try:
        moment = datetime.fromtimestamp(milliseconds / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _current_schema(metadata: Mapping[str, Any], schema_id: object) -> Mapping[str, Any]:
    for schema in metadata.get("schemas", ()):
        if isinstance(schema, Mapping) and schema.get("schema-id") == schema_id:
            return schema
    return {}


def table_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """The rows of a table's page, from its LoadTableResult."""
    metadata: Mapping[str, Any] = result.get("metadata") or {}
    current = metadata.get("current-snapshot-id")
    snapshots = [
        {
            "id": snap.get("snapshot-id"),
            "parent": snap.get("parent-snapshot-id"),
            "time": when(snap.get("timestamp-ms")),
            "operation": (snap.get("summary") or {}).get("operation", ""),
            "current": snap.get("snapshot-id") == current,
        }
        for snap in metadata.get("snapshots", ())
        if isinstance(snap, Mapping)
    ]
    refs = [
        {"name": name, "type": ref.get("type", ""), "snapshot": ref.get("snapshot-id")}
        for name, ref in sorted((metadata.get("refs") or {}).items())
        if isinstance(ref, Mapping)
    ]
    specs = [
        spec
        for spec in metadata.get("partition-specs", ())
        if isinstance(spec, Mapping) and spec.get("spec-id") == metadata.get("default-spec-id")
    ]
    return {
        "format_version": metadata.get("format-version"),
        "uuid": metadata.get("table-uuid", ""),
        "location": metadata.get("location", ""),
        "metadata_location": result.get("metadata-location") or "",
        "fields": list(_fields(_current_schema(metadata, metadata.get("current-schema-id")))),
        "partitioning": [
            f"{field.get('transform', '?')}({field.get('source-id', '?')}) as {field.get('name', '?')}"
            for spec in specs
            for field in spec.get("fields", ())
            if isinstance(field, Mapping)
        ],
        "snapshots": list(reversed(snapshots)),  # newest first
        "refs": refs,
        "properties": sorted((metadata.get("properties") or {}).items()),
        "restrictions": result.get("read-restrictions"),
    }


def view_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """The rows of a view's page, from its LoadViewResult."""
    metadata: Mapping[str, Any] = result.get("metadata") or {}
    current_id = metadata.get("current-version-id")
    versions = [v for v in metadata.get("versions", ()) if isinstance(v, Mapping)]
    current = next((v for v in versions if v.get("version-id") == current_id), {})
    return {
        "format_version": metadata.get("format-version"),
        "uuid": metadata.get("view-uuid", ""),
        "location": metadata.get("location", ""),
        "metadata_location": result.get("metadata-location") or "",
        "fields": list(_fields(_current_schema(metadata, current.get("schema-id")))),
        "representations": [
            {"dialect": rep.get("dialect", ""), "sql": rep.get("sql", "")}
            for rep in current.get("representations", ())
            if isinstance(rep, Mapping)
        ],
        "versions": [
            {"id": v.get("version-id"), "time": when(v.get("timestamp-ms")), "current": v is current}
            for v in reversed(versions)
        ],
        "properties": sorted((metadata.get("properties") or {}).items()),
    }
