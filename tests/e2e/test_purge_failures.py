"""The purge sweeper isolates failures per object (issue 15, section 3).

Found: a table whose manifest list was replaced by non-Avro bytes made the purge sweeper raise on
every cycle, so no later drop was ever purged and no data key destroyed. Now such a file is never
parsed, and any purge that fails is recorded on its object (attempts, a safe message, the next
attempt after a bounded backoff), shown in the admin API's and the CLI's dropped listing, while the
other objects are purged meanwhile.

Real gateway on loopback (SQLite registry, local:// KEK, the sealed warehouse `default` with no
retention), pyiceberg as the engine.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
GARBAGE = b"garbage"  # not Avro
RETRY_INITIAL_SECONDS = 1.0
RETRY_MAX_SECONDS = 2.0


_RETRIES = {
    "purge_retry_initial_seconds": RETRY_INITIAL_SECONDS,
    "purge_retry_max_seconds": RETRY_MAX_SECONDS,
}


@pytest.fixture
def sweeper_gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway sweeping every 0.2 s whose failed purges are retried after 1 s, then 2 s."""
    with GatewayProcess(tmp_path / "gateway", config=_RETRIES) as gw:
        yield gw


@pytest.fixture
def retained_gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    """The same, with a drop retention of 2 s: time to break a dropped object before its purge."""
    warehouse = {"location": (tmp_path / "gateway" / "warehouse").as_uri(), "drop_retention_seconds": 2}
    with GatewayProcess(
        tmp_path / "gateway", config={**_RETRIES, "warehouses": {"default": warehouse}}
    ) as gw:
        yield gw


def _table_with_data(cat: RestCatalog, name: str) -> tuple[Path, Path, str]:
    """(location, current manifest list, uuid) of a new table with one data file."""
    table = cat.create_table(name, SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    location = Path(table.location().removeprefix("file:"))
    manifest_list = Path(snapshot.manifest_list.removeprefix("file:"))
    assert manifest_list.is_file()
    assert any(p.suffix == ".parquet" for p in location.rglob("*"))
    return location, manifest_list, str(table.metadata.table_uuid)


def _dropped(gw: GatewayProcess) -> dict[str, dict[str, Any]]:
    """The admin API's dropped listing of warehouse default, by table name."""
    answer = requests.get(f"{gw.url}/admin/v1/warehouses/default/dropped", timeout=30)
    assert answer.status_code == 200, answer.text
    return {item["name"]: item for item in answer.json()["dropped"]}


def _wait_until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def _registry_rows(gw: GatewayProcess, table_uuid: str) -> int:
    """Rows (live or soft-deleted) still holding this table's wrapped data key."""
    with sqlite3.connect(gw.data_dir / "catalog.db") as db:
        return sum(
            int(db.execute(f"SELECT count(*) FROM {table} WHERE uuid = ?", (table_uuid,)).fetchone()[0])
            for table in ("catalog_objects", "dropped_objects")
        )


def _cli_dropped_list(gw: GatewayProcess) -> str:
    result = gw.cli("dropped", "list")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_crafted_manifest_list_no_longer_stops_the_purge(sweeper_gateway: GatewayProcess) -> None:
    """The finding itself: non-Avro bytes as a manifest list. The purge never parses what it
    cannot read (catalog.fileio skips it, and everything under the table's roots goes with the
    directory), so both tables are purged and no failure is recorded."""
    gw = sweeper_gateway
    cat = make_catalog(gw)
    cat.create_namespace("crafted")
    poisoned_location, manifest_list, poisoned_uuid = _table_with_data(cat, "crafted.poisoned")
    healthy_location, _, healthy_uuid = _table_with_data(cat, "crafted.healthy")
    manifest_list.write_bytes(GARBAGE)
    cat.purge_table("crafted.poisoned")
    cat.purge_table("crafted.healthy")
    for location, table_uuid in ((poisoned_location, poisoned_uuid), (healthy_location, healthy_uuid)):
        assert _wait_until(lambda location=location: not location.exists()), list(location.rglob("*"))
        assert _wait_until(lambda table_uuid=table_uuid: _registry_rows(gw, table_uuid) == 0)
    assert _dropped(gw) == {}


def _sealed_copy(gw: GatewayProcess, table_uuid: str) -> bytes:
    with sqlite3.connect(gw.data_dir / "catalog.db") as db:
        row = db.execute("SELECT metadata FROM dropped_objects WHERE uuid = ?", (table_uuid,)).fetchone()
    assert row is not None
    return bytes(row[0])


def _set_sealed_copy(gw: GatewayProcess, table_uuid: str, sealed: bytes) -> None:
    with sqlite3.connect(gw.data_dir / "catalog.db") as db:
        db.execute("UPDATE dropped_objects SET metadata = ? WHERE uuid = ?", (sealed, table_uuid))


def test_a_failing_purge_does_not_block_other_purges(retained_gateway: GatewayProcess) -> None:
    """Any object whose purge fails (here: its sealed copy in the registry fails its checks) is
    recorded, retried with backoff and shown; the objects dropped after it are purged meanwhile."""
    gw = retained_gateway
    cat = make_catalog(gw)
    cat.create_namespace("sweep")
    failing_location, _, failing_uuid = _table_with_data(cat, "sweep.failing")
    healthy_location, _, healthy_uuid = _table_with_data(cat, "sweep.healthy")
    cat.purge_table("sweep.failing")
    original = _sealed_copy(gw, failing_uuid)
    _set_sealed_copy(gw, failing_uuid, original[:-1] + bytes([original[-1] ^ 1]))  # the GCM tag
    cat.purge_table("sweep.healthy")

    assert _wait_until(lambda: _dropped(gw).get("failing", {}).get("last-purge-error") is not None)
    failing = _dropped(gw)["failing"]
    assert failing["purge-attempts"] >= 1
    assert failing["last-purge-error"].startswith("IntegrityCheckError")
    assert failing["next-purge-attempt-ms"] > failing["dropped-at-ms"]
    assert f"purge of table {failing['drop-id']} failed" in gw.log_text()

    # The table dropped after it is purged all the same: files gone, row and data key gone.
    assert _wait_until(lambda: not healthy_location.exists()), list(healthy_location.rglob("*"))
    assert _wait_until(lambda: "healthy" not in _dropped(gw))
    assert _registry_rows(gw, healthy_uuid) == 0

    # The failing one stays (files and key kept, still undroppable) and is retried with backoff:
    # a sweep every 0.2 s without backoff would try it about 25 times in these 5 seconds.
    assert failing_location.exists()
    assert _registry_rows(gw, failing_uuid) == 1
    before = _dropped(gw)["failing"]["purge-attempts"]
    time.sleep(5.0)
    after = _dropped(gw)["failing"]
    assert 1 <= after["purge-attempts"] - before <= 5, (before, after)
    assert after["next-purge-attempt-ms"] - after["dropped-at-ms"] >= RETRY_INITIAL_SECONDS * 1000

    # The CLI lists the failure too.
    line = next(line for line in _cli_dropped_list(gw).splitlines() if after["drop-id"] in line)
    assert "purge attempts" in line
    assert "last error: IntegrityCheckError" in line

    # Control: once the cause is gone, the next attempt purges it.
    _set_sealed_copy(gw, failing_uuid, original)
    assert _wait_until(lambda: "failing" not in _dropped(gw), timeout=RETRY_MAX_SECONDS * 5)
    assert _wait_until(lambda: not failing_location.exists())
    assert _registry_rows(gw, failing_uuid) == 0


def test_ordinary_purges_record_no_failure(sweeper_gateway: GatewayProcess) -> None:
    gw = sweeper_gateway
    cat = make_catalog(gw)
    cat.create_namespace("plainsweep")
    locations = [_table_with_data(cat, f"plainsweep.t{i}")[0] for i in range(3)]
    for i in range(3):
        cat.purge_table(f"plainsweep.t{i}")
    assert _wait_until(lambda: not any(location.exists() for location in locations))
    assert _wait_until(lambda: _dropped(gw) == {})
    assert "failed (attempt" not in gw.log_text()
