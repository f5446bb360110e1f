"""FileScanTasks as the spec's JSON (ScanTasks: `delete-files`, `file-scan-tasks`), exactly as
pyiceberg 0.12's REST client parses it (`pyiceberg.catalog.rest.scan_planning.ScanTasks`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask

from cedarberg.catalog.planning.values import bound_to_json, to_json

_CONTENT = {
    DataFileContent.DATA: "data",
    DataFileContent.POSITION_DELETES: "position-deletes",
    DataFileContent.EQUALITY_DELETES: "equality-deletes",
}
# Positions of the format-v3 fields in a manifest's data_file struct (pyiceberg exposes no
# properties for them; they are absent from v1/v2 records).
_FIRST_ROW_ID, _REFERENCED_DATA_FILE, _CONTENT_OFFSET, _CONTENT_SIZE = 16, 17, 18, 19

Document = dict[str, Any]


class TaskEncoder:
    """Encodes the tasks of one plan: table schema and specs, and which columns' stats to send."""

    def __init__(self, schema: Schema, specs: Mapping[int, PartitionSpec], stats_ids: frozenset[int]) -> None:
        self._schema = schema
        self._specs = specs
        self._stats_ids = stats_ids

    def page(self, tasks: Iterable[FileScanTask]) -> Document:
        """One ScanTasks document; each delete file appears once, referenced by index."""
        delete_index: dict[str, int] = {}
        delete_files: list[Document] = []
        scan_tasks: list[Document] = []
        for task in tasks:
            references = []
            for delete_file in sorted(task.delete_files, key=lambda f: f.file_path):
                index = delete_index.get(delete_file.file_path)
                if index is None:
                    index = delete_index[delete_file.file_path] = len(delete_files)
                    delete_files.append(self.content_file(delete_file))
                references.append(index)
            scan_task: Document = {"data-file": self.content_file(task.file)}
            if references:
                scan_task["delete-file-references"] = references
            residual = _residual(task.residual)
            if residual is not None:
                scan_task["residual-filter"] = residual
            scan_tasks.append(scan_task)
        document: Document = {"file-scan-tasks": scan_tasks}
        if delete_files:
            document["delete-files"] = delete_files
        return document

    def content_file(self, data_file: DataFile) -> Document:
        doc: Document = {
            "content": _CONTENT[data_file.content],
            "file-path": data_file.file_path,
            "file-format": data_file.file_format.value.lower(),
            "spec-id": data_file.spec_id,
            "partition": self._partition(data_file),
            "file-size-in-bytes": data_file.file_size_in_bytes,
            "record-count": data_file.record_count,
        }
        _put(doc, "key-metadata", data_file.key_metadata.hex() if data_file.key_metadata else None)
        _put(doc, "split-offsets", data_file.split_offsets)
        _put(doc, "sort-order-id", data_file.sort_order_id)
        if data_file.content == DataFileContent.DATA:
            _put(doc, "first-row-id", _v3_field(data_file, _FIRST_ROW_ID))
            self._stats(doc, data_file)
        elif data_file.content == DataFileContent.POSITION_DELETES:
            _put(doc, "referenced-data-file", _v3_field(data_file, _REFERENCED_DATA_FILE))
            _put(doc, "content-offset", _v3_field(data_file, _CONTENT_OFFSET))
            _put(doc, "content-size-in-bytes", _v3_field(data_file, _CONTENT_SIZE))
        else:
            _put(doc, "equality-ids", data_file.equality_ids)
        return doc

    def _partition(self, data_file: DataFile) -> list[Any]:
        """The partition tuple in the order of the file's spec, as single-value JSON."""
        spec = self._specs[data_file.spec_id]
        if not spec.fields:
            return []
        partition_type = spec.partition_type(self._schema)
        return [
            to_json(field.field_type, data_file.partition[pos])
            for pos, field in enumerate(partition_type.fields)
        ]

    def _stats(self, doc: Document, data_file: DataFile) -> None:
        """Column statistics of the requested stats fields only (none when none were asked for)."""
        if not self._stats_ids:
            return
        for key, counts in (
            ("column-sizes", data_file.column_sizes),
            ("value-counts", data_file.value_counts),
            ("null-value-counts", data_file.null_value_counts),
            ("nan-value-counts", data_file.nan_value_counts),
        ):
            kept = sorted((fid, n) for fid, n in (counts or {}).items() if fid in self._stats_ids)
            if kept:
                doc[key] = {"keys": [fid for fid, _ in kept], "values": [n for _, n in kept]}
        for key, bounds in (
            ("lower-bounds", data_file.lower_bounds),
            ("upper-bounds", data_file.upper_bounds),
        ):
            values = []
            for fid, raw in sorted((bounds or {}).items()):
                if fid not in self._stats_ids:
                    continue
                try:
                    value = bound_to_json(self._schema.find_type(fid), raw)
                except ValueError:
                    continue  # a column dropped from the schema: its bound says nothing now
                if value is not None:
                    values.append((fid, value))
            if values:
                doc[key] = {"keys": [fid for fid, _ in values], "values": [v for _, v in values]}


def _residual(residual: BooleanExpression) -> Any:
    if isinstance(residual, AlwaysTrue):
        return None
    return residual.model_dump(mode="json", by_alias=True, exclude_none=True)


def _v3_field(data_file: DataFile, position: int) -> Any:
    return data_file[position] if len(data_file) > position else None


def _put(doc: Document, key: str, value: Any) -> None:
    if value is not None:
        doc[key] = value
