"""The roots of an object and the placement rule (catalog.roots), on every accepted spelling."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from cedarberg.catalog import locations, roots
from cedarberg.catalog.errors import InvalidRequestError, LocationNotAllowedError
from cedarberg.catalog.identifiers import Namespace

WAREHOUSE = "file:///w"
NS_DIR = "file:///w/sales"
HEX = "0b7e1a526c1d4d5e9a4b2f3c4d5e6f70"  # a UUID's 32 lowercase hex digits


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


@pytest.mark.parametrize(
    "candidate",
    [
        f"file:///w/sales/t-{HEX}",
        f"file:/w/sales/t-{HEX}/",
        f"/w/sales//t-{HEX}/data",
        f"file://localhost/w/sales/my%20table-{HEX}/x/y",
    ],
)
def test_inside_an_object_directory_of_the_namespace_is_placed(candidate: str) -> None:
    place(candidate)


@pytest.mark.parametrize(
    "candidate",
    [
        # The default directory of a future child namespace `sales.hr`, in every spelling, and below it.
        "file:///w/sales/hr",
        "file:/w/sales/hr/",
        "/w/sales/hr",
        "file://localhost/w/sales/hr",
        "file:///w/sales/hr/deeper",
        f"file:///w/sales/hr/t-{HEX}",
        # Near misses of the object-directory form.
        f"file:///w/sales/t-{HEX.upper()}",
        f"file:///w/sales/t-{HEX[:-1]}",
        f"file:///w/sales/{HEX}",
        f"file:///w/sales/t%2D{HEX}",
        f"file:///w/sales/t-{HEX}x",
    ],
)
def test_inside_the_namespace_directory_but_not_in_an_object_directory_is_refused(candidate: str) -> None:
    with pytest.raises(LocationNotAllowedError, match="not inside a table or view directory"):
        place(candidate)
    place(candidate, allow_outside=True)  # a legacy layout: admitted for migrations only


@given(st.text(min_size=1, max_size=40).filter(lambda s: all(ord(c) >= 0x20 for c in s)), st.uuids())
def test_default_directories_are_object_directories_that_no_namespace_can_take(
    name: str, uid: uuid.UUID
) -> None:
    for spelling in (str(uid), uid.hex):
        directory = locations.join(NS_DIR, roots.object_directory_name(name, spelling))
        assert roots.is_object_directory(roots.first_segment_below(NS_DIR, directory))
        place(directory)
    # A namespace with the directory's name would take that very directory: refused.
    with pytest.raises(InvalidRequestError, match="reserved"):
        roots.check_namespace_name(roots.object_directory_name(name, str(uid)))


# In either case: on a filesystem that folds case, `T-<HEX>` would be the directory `t-<hex>`.
@pytest.mark.parametrize(
    "name",
    [
        f"t-{HEX}",
        f"é-{HEX}",
        f".x-{HEX}",
        f"a b-{HEX}",
        f"T-{HEX.upper()}",
        f"t-{HEX[:16].upper()}{HEX[16:]}",
    ],
)
def test_namespace_names_of_the_object_directory_form_are_reserved(name: str) -> None:
    with pytest.raises(InvalidRequestError, match="reserved"):
        roots.check_namespace_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "hr",
        "t",
        f"t_{HEX}",
        f"t-{HEX[:-1]}",
        HEX,
        f"-{HEX}",
        f"t-{HEX}.x",
        "t-" + "g" * 32,
    ],
)
def test_other_namespace_names_are_free(name: str) -> None:
    roots.check_namespace_name(name)


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
