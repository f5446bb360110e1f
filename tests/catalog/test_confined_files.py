"""Purge and planning touch only files under the object's roots (catalog.dropped.purge_files,
catalog.planning.confined), whatever the table's metadata names."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.statistics import StatisticsFile

from cedarberg.catalog.context import Warehouse
from cedarberg.catalog.dropped import Purged, purge_files
from cedarberg.catalog.errors import ForbiddenError
from cedarberg.catalog.planning.confined import ConfinedFileIO


def _metadata(location: str, manifest_lists: list[str], stats: list[str]) -> TableMetadata:
    base = new_table_metadata(
        schema=Schema(),
        partition_spec=UNPARTITIONED_PARTITION_SPEC,
        sort_order=UNSORTED_SORT_ORDER,
        location=location,
        properties={},
    )
    snapshots = [
        Snapshot(snapshot_id=i + 1, timestamp_ms=1, manifest_list=path, summary=Summary(Operation.APPEND))
        for i, path in enumerate(manifest_lists)
    ]
    statistics = [
        StatisticsFile(
            snapshot_id=1,
            statistics_path=path,
            file_size_in_bytes=1,
            file_footer_size_in_bytes=1,
            blob_metadata=[],
        )
        for path in stats
    ]
    return base.model_copy(update={"snapshots": snapshots, "statistics": statistics})


def test_purge_deletes_only_under_the_roots_and_survives_a_crafted_manifest_list(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    warehouse = Warehouse("w", f"file://{tmp_path}/w", seal_files=False)
    table = tmp_path / "w" / "sales" / "t"
    neighbour = tmp_path / "w" / "sales" / "u" / "data" / "theirs.parquet"
    outside = tmp_path / "outside.txt"
    crafted = table / "metadata" / "snap-1.avro"  # not Avro at all
    own_stats = table / "metadata" / "stats.puffin"
    metadata_file = table / "metadata" / "00001.metadata.json"
    for path in (neighbour, outside, crafted, own_stats, metadata_file):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    metadata = _metadata(
        f"file:{table}",
        [str(crafted), f"file://{neighbour}"],
        [str(own_stats), f"file:{outside}", f"s3a://bucket{outside}"],
    )
    with caplog.at_level(logging.WARNING):
        purge_files(
            warehouse,
            Purged(f"file://{table}", [f"file://{table}"], (metadata, f"file://{metadata_file}")),
            set(),
            [],
        )
    assert not table.exists()
    assert neighbour.read_bytes() == b"x"
    assert outside.read_bytes() == b"x"
    assert "outside its locations" in caplog.text


def test_the_planners_file_io_opens_nothing_outside_the_roots(tmp_path: Path) -> None:
    inside = tmp_path / "t" / "m.avro"
    inside.parent.mkdir()
    inside.write_bytes(b"avro")
    outside = tmp_path / "u" / "m.avro"
    io = ConfinedFileIO(load_file_io(location=f"file://{tmp_path}"), [f"file://{tmp_path}/t"])
    with io.new_input(f"file:{inside}").open() as stream:
        assert stream.read() == b"avro"
    for refused in (f"file://{outside}", f"file://{tmp_path}/t/../u/m.avro", "s3://b/x"):
        with pytest.raises(ForbiddenError):
            io.new_input(refused)
    with pytest.raises(ForbiddenError):
        io.new_output(f"file://{inside}")
    with pytest.raises(ForbiddenError):
        io.delete(f"file://{inside}")
