"""The planner and scan grants on a real table written by pyiceberg (its SQL catalog on a local
directory): grant semantics, snapshot and incremental resolution, and task JSON that pyiceberg's
REST client models parse back to the files its own planner selects."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest.scan_planning import PlanCompleted, ScanTasks
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    LessThan,
    Or,
)
from pyiceberg.io import load_file_io
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRef
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from cedarberg.catalog.errors import ForbiddenError, InvalidRequestError
from cedarberg.catalog.planning import pages
from cedarberg.catalog.planning.grants import UNRESTRICTED, ScanGrant
from cedarberg.catalog.planning.request import PlanScanRequest
from cedarberg.catalog.planning.request import parse_request as parse
from cedarberg.catalog.planning.scan import Guard, Scan, TooManyFilesError, plan_files, prepare
from cedarberg.catalog.planning.slots import Slots
from cedarberg.catalog.planning.values import to_json

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(
        3,
        "address",
        StructType(
            NestedField(4, "zip", StringType(), required=False),
            NestedField(5, "city", StringType(), required=False),
        ),
        required=False,
    ),
)


def _rows(ids: list[int]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "name": f"n{i}", "address": {"zip": f"{i:05d}", "city": "x"}} for i in ids],
        schema=SCHEMA.as_arrow(),
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    root = tmp_path_factory.mktemp("planning")
    catalog = SqlCatalog("local", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=(root / "wh").as_uri())
    catalog.create_namespace("ns")
    created = catalog.create_table("ns.people", SCHEMA)
    created.append(_rows([1, 2, 3]))
    created.append(_rows([4, 5, 6]))
    created.append(_rows([7, 8, 9]))
    return catalog.load_table("ns.people")


@pytest.fixture(scope="module")
def evolved(table: Table) -> Table:
    """A table whose column `name` was renamed to `label` after its first snapshot."""
    catalog = table.catalog
    created = catalog.create_table("ns.evolved", SCHEMA)
    created.append(_rows([1, 2]))
    with created.update_schema() as update:
        update.rename_column("name", "label")
    reloaded = catalog.load_table("ns.evolved")
    reloaded.append(_rows([3]).rename_columns(["id", "label", "address"]))
    return catalog.load_table("ns.evolved")


def _request(**fields: object) -> PlanScanRequest:
    return parse(PlanScanRequest, fields)


def _scan(table: Table, grants: tuple[ScanGrant, ...] = UNRESTRICTED, **fields: object) -> Scan:
    return prepare(table.metadata, _request(**fields), grants)


def _completed(table: Table, scan: Scan, per_page: int = 1000) -> list[ScanTasks]:
    """The plan's pages as pyiceberg's REST client parses them."""
    tasks = plan_files(scan, load_file_io(location=table.location()), Guard(lambda: False, 10_000))
    encoded = pages.encode_pages(scan.encoder, tasks, per_page)
    first = PlanCompleted.model_validate_json(pages.completed(encoded[0], "p", ["t"] * (len(encoded) - 1)))
    return [first, *(ScanTasks.model_validate_json(page) for page in encoded[1:])]


def _files(parsed: list[ScanTasks]) -> set[str]:
    return {task.data_file.file_path for page in parsed for task in page.file_scan_tasks}


def _local_files(table: Table, row_filter: BooleanExpression | None = None, **scan: object) -> set[str]:
    planned = table.scan(row_filter=row_filter or AlwaysTrue(), **scan).plan_files()  # type: ignore[arg-type]
    return {task.file.file_path for task in planned}


def test_tasks_round_trip_through_pyicebergs_models_and_match_its_planner(table: Table) -> None:
    row_filter = GreaterThan("id", 4)
    filter_json = row_filter.model_dump(mode="json", by_alias=True)
    parsed = _completed(table, _scan(table, filter=filter_json), per_page=1)
    assert len(parsed) == 2  # one file per page
    assert parsed[0].plan_tasks == ["t"]
    assert _files(parsed) == _local_files(table, row_filter)
    for page in parsed:
        for task in page.file_scan_tasks:
            assert task.data_file.file_format.value == "PARQUET"
            assert task.data_file.record_count == 3
            assert task.data_file.lower_bounds is None  # no stats-fields: no stats
            assert task.residual_filter == row_filter


def test_snapshot_id_and_incremental_ranges(table: Table) -> None:
    first, second, third = (snapshot.snapshot_id for snapshot in table.snapshots())
    older = _completed(table, _scan(table, **{"snapshot-id": second}))
    assert _files(older) == _local_files(table, snapshot_id=second)
    assert len(_files(older)) == 2
    added = _completed(table, _scan(table, **{"start-snapshot-id": first, "end-snapshot-id": third}))
    local = table.incremental_append_scan(from_snapshot_id_exclusive=first, to_snapshot_id_inclusive=third)
    assert _files(added) == {task.file.file_path for task in local.plan_files()}
    assert len(_files(added)) == 2
    assert (
        _files(_completed(table, _scan(table, **{"start-snapshot-id": third, "end-snapshot-id": third})))
        == set()
    )
    with pytest.raises(InvalidRequestError, match="is not an ancestor"):
        _scan(table, **{"start-snapshot-id": third, "end-snapshot-id": first})
    with pytest.raises(InvalidRequestError, match="is not a snapshot of this table"):
        _scan(table, **{"snapshot-id": 12345})


def test_a_ref_scans_the_snapshot_it_names(table: Table) -> None:
    _first, second, _third = (snapshot.snapshot_id for snapshot in table.snapshots())
    tagged = table.metadata.model_copy(
        update={
            "refs": {**table.metadata.refs, "v2": SnapshotRef(snapshot_id=second, snapshot_ref_type="tag")}
        }
    )
    scan = prepare(tagged, _request(ref="v2"), UNRESTRICTED)
    assert scan.snapshot is not None
    assert scan.snapshot.snapshot_id == second
    assert _files(_completed(table, scan)) == _local_files(table, snapshot_id=second)
    current = prepare(tagged, _request(ref="main"), UNRESTRICTED)
    assert current.snapshot == table.current_snapshot()
    with pytest.raises(InvalidRequestError, match="'v9' is not a branch or tag"):
        prepare(tagged, _request(ref="v9"), UNRESTRICTED)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"snapshot-id": 1, "ref": "main"}, "ref cannot be combined"),
        ({"ref": "main", "start-snapshot-id": 1, "end-snapshot-id": 2}, "ref cannot be combined"),
        ({"snapshot-id": 1, "start-snapshot-id": 1, "end-snapshot-id": 2}, "cannot be combined"),
        ({"start-snapshot-id": 1}, "needs both"),
        ({"end-snapshot-id": 1}, "needs both"),
        ({"selected": ["id"]}, "selected"),
        ({"filter": {"type": "eq", "term": "id"}}, "filter"),
        ({"case-sensitive": "yes"}, "case-sensitive"),
    ],
)
def test_invalid_requests_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        _request(**fields)


def test_use_snapshot_schema_resolves_names_in_the_snapshots_schema(evolved: Table) -> None:
    first = evolved.snapshots()[0].snapshot_id
    with pytest.raises(InvalidRequestError, match="no such column"):
        _scan(evolved, select=["name"], **{"snapshot-id": first})
    old = _scan(evolved, select=["name"], **{"snapshot-id": first, "use-snapshot-schema": True})
    assert len(_files(_completed(evolved, old))) == 1
    # Grants name the columns of the schema the scan uses.
    grants = (ScanGrant(frozenset({"label"}), None),)
    with pytest.raises(ForbiddenError, match=r"columns: name$"):
        _scan(evolved, grants, select=["name"], **{"snapshot-id": first, "use-snapshot-schema": True})
    current = _scan(evolved, grants, select=["label"], filter={"type": "eq", "term": "label", "value": "n1"})
    assert _files(_completed(evolved, current)) == _local_files(evolved, EqualTo("label", "n1"))


def test_unknown_columns_are_bad_requests(table: Table) -> None:
    with pytest.raises(InvalidRequestError, match="no such column"):
        _scan(table, select=["nope"])
    with pytest.raises(InvalidRequestError, match="filter does not apply"):
        _scan(table, filter={"type": "eq", "term": "nope", "value": 1})
    with pytest.raises(InvalidRequestError, match="no such column"):
        _scan(table, **{"stats-fields": ["nope"]})


def test_a_grant_must_cover_every_selected_and_filtered_field(table: Table) -> None:
    ids_only = (ScanGrant(frozenset({"id"}), None),)
    _scan(table, ids_only, select=["id"])
    with pytest.raises(ForbiddenError, match=r"columns: name$"):
        _scan(table, ids_only, select=["id", "name"])
    with pytest.raises(ForbiddenError, match=r"columns: name$"):
        _scan(table, ids_only, select=["id"], filter={"type": "eq", "term": "name", "value": "n1"})
    # No select reads every column.
    with pytest.raises(ForbiddenError, match=r"columns: address, name$"):
        _scan(table, ids_only)


def test_refusal_names_what_the_closest_grant_lacks(table: Table) -> None:
    grants = (ScanGrant(frozenset({"id"}), None), ScanGrant(frozenset({"id", "name"}), None))
    with pytest.raises(ForbiddenError, match=r"columns: address$"):
        _scan(table, grants)


def test_a_granted_struct_covers_its_fields_but_not_the_reverse(table: Table) -> None:
    _scan(table, (ScanGrant(frozenset({"id", "address"}), None),), select=["id", "address.zip"])
    zip_only = (ScanGrant(frozenset({"address.zip"}), None),)
    _scan(table, zip_only, select=["address.zip"])
    with pytest.raises(ForbiddenError, match=r"columns: address$"):
        _scan(table, zip_only, select=["address"])


def test_names_resolve_case_insensitively_when_asked(table: Table) -> None:
    ids_only = (ScanGrant(frozenset({"id"}), None),)
    _scan(table, ids_only, select=["ID"], **{"case-sensitive": False})
    with pytest.raises(InvalidRequestError, match="no such column"):
        _scan(table, ids_only, select=["ID"])
    with pytest.raises(ForbiddenError, match=r"columns: name$"):
        _scan(table, ids_only, select=["ID", "NAME"], **{"case-sensitive": False})


def test_row_filters_of_covering_grants_are_ored_and_anded_into_the_scan(table: Table) -> None:
    low, high = LessThan("id", 3), GreaterThan("id", 8)
    grants = (
        ScanGrant(frozenset({"id"}), low),
        ScanGrant(frozenset({"id", "name"}), high),
        ScanGrant(frozenset({"name"}), None),  # does not cover: its "no filter" does not count
    )
    request_filter = GreaterThan("id", 0)
    scan = _scan(table, grants, select=["id"], filter=request_filter.model_dump(mode="json", by_alias=True))
    assert scan.row_filter == And(request_filter, Or(low, high))
    parsed = _completed(table, scan)
    # Pruning used the policy filter: the file of ids 4..6 is not planned at all.
    assert _files(parsed) == _local_files(table, Or(low, high))
    assert len(_files(parsed)) == 2
    for task in parsed[0].file_scan_tasks:
        assert task.residual_filter == And(request_filter, Or(low, high))


def test_a_covering_grant_without_filter_lifts_the_row_restriction(table: Table) -> None:
    grants = (ScanGrant(frozenset({"id"}), LessThan("id", 3)), ScanGrant(None, None))
    scan = _scan(table, grants, select=["id"])
    assert scan.row_filter == AlwaysTrue()
    assert len(_files(_completed(table, scan))) == 3


def test_the_residual_of_every_task_carries_the_policy_filter(table: Table) -> None:
    policy = EqualTo("name", "n5")
    parsed = _completed(table, _scan(table, (ScanGrant(None, policy),)))
    assert len(_files(parsed)) == 1
    assert all(task.residual_filter == policy for task in parsed[0].file_scan_tasks)


def test_a_policy_filter_that_does_not_bind_refuses_the_scan(table: Table) -> None:
    for policy in (EqualTo("region", "eu"), EqualTo("id", "not a number"), EqualTo("ID", 1)):
        with pytest.raises(ForbiddenError, match="a required row filter does not apply to this table"):
            _scan(table, (ScanGrant(None, policy),))


def test_no_grant_at_all_refuses(table: Table) -> None:
    with pytest.raises(ForbiddenError):
        _scan(table, ())


def test_stats_only_for_the_requested_fields(table: Table) -> None:
    parsed = _completed(table, _scan(table, **{"stats-fields": ["id", "address"]}))
    for task in parsed[0].file_scan_tasks:
        data_file = task.data_file
        assert data_file.value_counts is not None
        assert set(data_file.value_counts.keys) == {1, 4, 5}  # a struct's stats are its fields'
        # pyiceberg writes bounds for top-level columns only; they arrive decoded.
        assert data_file.lower_bounds is not None
        assert data_file.upper_bounds is not None
        low, high = data_file.lower_bounds.to_dict()[1], data_file.upper_bounds.to_dict()[1]
        assert (low, high) in {(1, 3), (4, 6), (7, 9)}
    none_asked = _completed(table, _scan(table))[0].file_scan_tasks[0].data_file
    assert none_asked.value_counts is None
    assert none_asked.column_sizes is None


def test_the_file_guard_bounds_a_plan(table: Table) -> None:
    scan = _scan(table)
    with pytest.raises(TooManyFilesError):
        plan_files(scan, load_file_io(location=table.location()), Guard(lambda: False, 2))


def test_single_value_json() -> None:
    assert to_json(DateType(), 19723) == "2024-01-01"
    assert to_json(TimeType(), 3_600_000_001) == "01:00:00.000001"
    assert to_json(TimestampType(), 1_704_067_200_000_000) == "2024-01-01T00:00:00.000000"
    assert to_json(TimestamptzType(), 0) == "1970-01-01T00:00:00.000000+00:00"
    assert to_json(DecimalType(9, 2), Decimal("14.2")) == "14.20"
    assert to_json(UUIDType(), uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert to_json(BinaryType(), b"\x01\xab") == "01AB"
    assert to_json(StringType(), "x") == "x"
    assert to_json(LongType(), None) is None
    assert dt.date.fromisoformat(str(to_json(DateType(), 0))) == dt.date(1970, 1, 1)


def test_plan_slots_are_taken_without_waiting_or_refused() -> None:
    slots = Slots(2)
    assert slots.try_acquire()
    assert slots.try_acquire()
    assert not slots.try_acquire()
    slots.release()
    assert slots.try_acquire()
    slots.release()
    slots.release()
    with pytest.raises(RuntimeError):
        slots.release()
