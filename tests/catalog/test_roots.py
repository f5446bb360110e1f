"""The roots of an object and the placement rule (catalog.roots), on every accepted spelling."""

from __future__ import annotations

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from cedarberg.catalog import roots
from cedarberg.catalog.errors import LocationNotAllowedError
from cedarberg.catalog.identifiers import Namespace

WAREHOUSE = "file:///w"
NS_DIR = "file:///w/sales"


def place(candidate: str, *, allow_outside: bool = False) -> None:
    roots.check_placement(
        [roots.object_roots(candidate)[0]], NS_DIR, WAREHOUSE, [WAREHOUSE, "s3://other/wh"], allow_outside
    )


@pytest.mark.parametrize(
    "candidate",
    [
        "file:/w",
        "file:///w/",
        "/w",
        "file://localhost/w",
        "file:///w/sales",
        "file:/w/sales/",
        "file:///",
        "s3://other/wh/x",
    ],
)
def test_warehouse_roots_and_namespace_directories_are_never_roots(candidate: str) -> None:
    for allow_outside in (False, True):
        with pytest.raises(LocationNotAllowedError):
            place(candidate, allow_outside=allow_outside)


@pytest.mark.parametrize(
    "candidate", ["file:///w/marketing/t", "file:/w/t", "file:///w/salesx/t", "file:///elsewhere/t"]
)
def test_outside_the_namespace_directory_is_refused_by_default(candidate: str) -> None:
    with pytest.raises(LocationNotAllowedError, match="outside"):
        place(candidate)


def test_migration_setting_allows_elsewhere_in_the_warehouse_only() -> None:
    place("file:///w/legacy/t", allow_outside=True)
    with pytest.raises(LocationNotAllowedError, match="outside the warehouse"):
        place("file:///elsewhere/t", allow_outside=True)


@pytest.mark.parametrize("candidate", ["file:///w/sales/t", "file:/w/sales/t/", "/w/sales//t"])
def test_inside_the_namespace_directory_is_placed(candidate: str) -> None:
    place(candidate)


def test_roots_include_every_write_path_spelling_normalised() -> None:
    found = roots.object_roots(
        "file:/w/sales/t/",
        {
            "write.data.path": "file:///w/sales/t-data/",
            "write.metadata.path": "/w/sales/t-meta",
            "write.object-storage.path": "s3a://b/k/",
            "other": "file:///nowhere",
        },
    )
    assert found == ("file:///w/sales/t", "file:///w/sales/t-data", "file:///w/sales/t-meta", "s3://b/k")


def test_overlap_is_by_path_segment_not_by_string_prefix() -> None:
    assert roots.overlaps("file:///w/sales/t", "file:///w/sales/t/data")
    assert roots.overlaps("file:///w/sales/t/data", "file:///w/sales/t")
    assert not roots.overlaps("file:///w/sales/t", "file:///w/sales/t2")
    assert roots.within("s3a://b/k/x.avro", ["s3://b/k"])
    assert roots.within("file:/w/sales/t/m.avro", ["file:///w/sales/t"])
    assert not roots.within("file:///w/sales/t/../u/x", ["file:///w/sales/t"])
    assert not roots.within("ftp://host/x", ["file:///w"])


def test_ancestors_reach_the_bucket_or_the_filesystem_root() -> None:
    assert roots.ancestors("file:///w/sales/t") == [
        "file:///",
        "file:///w",
        "file:///w/sales",
        "file:///w/sales/t",
    ]
    assert roots.ancestors("s3://b/w/t") == ["s3://b", "s3://b/w", "s3://b/w/t"]


def test_namespace_directory_is_its_location_property_or_below_the_warehouse() -> None:
    assert roots.namespace_directory(WAREHOUSE, Namespace(("a", "b")), {}) == "file:///w/a/b"
    assert (
        roots.namespace_directory(WAREHOUSE, Namespace(("a",)), {"location": "file:/w/x/"}) == "file:///w/x"
    )


def _table(location: str) -> TableMetadata:
    return new_table_metadata(
        schema=Schema(),
        partition_spec=UNPARTITIONED_PARTITION_SPEC,
        sort_order=UNSORTED_SORT_ORDER,
        location=location,
        properties={},
    )


def test_added_paths_outside_the_roots_are_refused() -> None:
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.statistics import StatisticsFile

    base = _table("file:///w/sales/t")

    def with_snapshot(manifest_list: str, stats: str | None = None) -> TableMetadata:
        snap = Snapshot(
            snapshot_id=1, timestamp_ms=1, manifest_list=manifest_list, summary=Summary(Operation.APPEND)
        )
        statistics = (
            [
                StatisticsFile(
                    snapshot_id=1,
                    statistics_path=stats,
                    file_size_in_bytes=1,
                    file_footer_size_in_bytes=1,
                    blob_metadata=[],
                )
            ]
            if stats
            else []
        )
        return base.model_copy(update={"snapshots": [snap], "statistics": statistics})

    roots.check_added_paths(base, with_snapshot("file:/w/sales/t/metadata/snap.avro"))
    with pytest.raises(LocationNotAllowedError):
        roots.check_added_paths(base, with_snapshot("file:///w/sales/u/metadata/snap.avro"))
    with pytest.raises(LocationNotAllowedError):
        roots.check_added_paths(base, with_snapshot("file:///w/sales/t/m.avro", "file:///etc/passwd"))
    # A path the table had already is not added again.
    old = with_snapshot("file:///w/sales/u/metadata/snap.avro")
    roots.check_added_paths(old, old)
