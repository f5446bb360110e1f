"""Envelope encryption end to end: what is at rest, tampering, soft delete, undrop, rebuild, rotation.

All against the real gateway process (local:// KEK, SQLite registry, local warehouse) and pyiceberg.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests.support import registry
from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

COLUMN = "zq_secret_column_4471"
PROPERTY_VALUE = "zq-property-value-8812"
SUMMARY_VALUE = "zq-summary-value-5530"
VIEW_COLUMN = "zq_view_column_9034"
MARKERS = (COLUMN, PROPERTY_VALUE, SUMMARY_VALUE, VIEW_COLUMN)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, COLUMN, StringType(), required=False),
)


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), COLUMN: pa.array([f"v{i}" for i in ids], pa.string())})


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _wait_until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def _admin(gw: GatewayProcess, method: str, path: str) -> requests.Response:
    return requests.request(method, f"{gw.url}/admin/v1{path}", timeout=30)


def _create_view(gw: GatewayProcess, namespace: str, name: str) -> requests.Response:
    body = {
        "name": name,
        "schema": {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": VIEW_COLUMN, "type": "long", "required": False}],
        },
        "view-version": {
            "version-id": 1,
            "timestamp-ms": int(time.time() * 1000),
            "schema-id": 0,
            "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": f"SELECT 1 AS {VIEW_COLUMN}", "dialect": "spark"}],
            "default-namespace": [namespace],
        },
        "properties": {},
    }
    return requests.post(f"{gw.url}/v1/namespaces/{namespace}/views", json=body, timeout=30)


@pytest.fixture
def retained_gateway(tmp_path: Path, fresh_store_url: str | None) -> Any:
    """A gateway whose default warehouse keeps dropped tables for an hour."""
    config = {
        "warehouses": {
            "default": {"location": (tmp_path / "gw" / "warehouse").as_uri(), "drop_retention_seconds": 3600}
        }
    }
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url, config=config) as gw:
        yield gw


def test_nothing_readable_at_rest(gateway: GatewayProcess) -> None:
    cat = make_catalog(gateway)
    cat.create_namespace("sec")
    table = cat.create_table("sec.t", SCHEMA, properties={"owner-note": PROPERTY_VALUE})
    table.append(_rows([1, 2, 3]), snapshot_properties={"run-tag": SUMMARY_VALUE})
    assert _create_view(gateway, "sec", "v").status_code == 200
    # An idempotent commit records its (sealed) response; a metrics report names a column.
    key = str(uuid.uuid4())
    table.refresh()
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": PROPERTY_VALUE}}]}
    response = requests.post(
        f"{gateway.url}/v1/namespaces/sec/tables/t", json=commit, headers={"Idempotency-Key": key}, timeout=30
    )
    assert response.status_code == 200, response.text
    report = {
        "report-type": "scan-report",
        "table-name": "sec.t",
        "snapshot-id": table.current_snapshot().snapshot_id,  # type: ignore[union-attr]
        "filter": True,
        "schema-id": 0,
        "projected-field-ids": [2],
        "projected-field-names": [COLUMN],
        "metrics": {},
    }
    assert (
        requests.post(
            f"{gateway.url}/v1/namespaces/sec/tables/t/metrics", json=report, timeout=30
        ).status_code
        == 204
    )

    # Through the API, after authorization, clients get plaintext.
    loaded = cat.load_table("sec.t")
    assert loaded.schema().find_field(COLUMN).name == COLUMN
    assert loaded.properties["owner-note"] == PROPERTY_VALUE
    assert loaded.current_snapshot() is not None
    assert sorted(loaded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]

    gateway.stop()
    at_rest = registry.dump(gateway)
    metadata_files = [p for p in _files(gateway.warehouse_dir) if p.name.endswith(".metadata.json")]
    assert len(metadata_files) >= 4  # table versions + view
    for marker in MARKERS:
        for spelling in registry.at_rest_spellings(marker):
            assert spelling not in at_rest, f"{marker} readable in the registry"
        for path in metadata_files:
            assert marker.encode() not in path.read_bytes(), f"{marker} readable in {path}"
    # The data files themselves are the engines' business: the column is in their Parquet schema.
    assert any(
        COLUMN.encode() in p.read_bytes() for p in _files(gateway.warehouse_dir) if p.suffix == ".parquet"
    )


def _set_metadata(gw: GatewayProcess, name: str, blob: bytes) -> None:
    registry.execute(gw, "UPDATE catalog_objects SET metadata = ? WHERE name = ?", blob, name)


def _get_metadata(gw: GatewayProcess, name: str) -> bytes:
    return bytes(registry.query(gw, "SELECT metadata FROM catalog_objects WHERE name = ?", name)[0][0])


def test_sealed_copy_moved_or_rolled_back_is_refused(gateway: GatewayProcess) -> None:
    cat = make_catalog(gateway)
    cat.create_namespace("tamper")
    first = cat.create_table("tamper.a", SCHEMA)
    cat.create_table("tamper.b", SCHEMA)
    old_copy = _get_metadata(gateway, "a")
    first.append(_rows([1]))
    url = f"{gateway.url}/v1/namespaces/tamper/tables"
    assert requests.get(f"{url}/a", timeout=30).status_code == 200

    gateway.stop()
    _set_metadata(gateway, "b", _get_metadata(gateway, "a"))  # a's document onto b
    _set_metadata(gateway, "a", old_copy)  # a's previous version back in place
    gateway.start()
    for name in ("a", "b"):
        response = requests.get(f"{url}/{name}", timeout=30)
        assert response.status_code == 500, response.text
        assert response.json()["error"]["type"] == "ServiceFailureException"
        assert "failed its check" in response.json()["error"]["message"]


def _second_gateway(first: GatewayProcess, tmp_path: Path, store_url: str | None) -> GatewayProcess:
    """A gateway with a fresh registry (`store_url`) on the same warehouse and the same local KEK."""
    config = {
        "warehouses": {"default": {"location": first.warehouse_dir.as_uri()}},
        "kms": {"local_key_dir": str(first.data_dir / "kms")},
    }
    return GatewayProcess(tmp_path / "second", store_url=store_url, config=config)


def test_register_sealed_file_in_a_second_registry(
    gateway: GatewayProcess, tmp_path: Path, second_fresh_store_url: str | None
) -> None:
    cat = make_catalog(gateway)
    cat.create_namespace("reg")
    table = cat.create_table("reg.t", SCHEMA, properties={"p": "1"})
    v0 = Path(table.metadata_location.removeprefix("file:"))
    table.append(_rows([4, 5]))
    table.refresh()
    v1 = Path(table.metadata_location.removeprefix("file:"))
    with _second_gateway(gateway, tmp_path, second_fresh_store_url) as second:
        other = make_catalog(second)
        other.create_namespace("reg")
        # An older sealed version copied under a newer version's file name is refused...
        forged = v1.parent / f"{v1.name.split('-', 1)[0]}-{uuid.uuid4()}.metadata.json"
        forged.write_bytes(v0.read_bytes())
        response = requests.post(
            f"{second.url}/v1/namespaces/reg/register",
            json={"name": "forged", "metadata-location": forged.as_uri()},
            timeout=30,
        )
        assert response.status_code == 400, response.text
        assert "failed its check" in response.json()["error"]["message"]
        # ...and the real current file registers, with its own data key, and reads as before.
        registered = other.register_table("reg.t", table.metadata_location)
        assert registered.metadata == table.metadata
        assert sorted(registered.scan().to_arrow()["id"].to_pylist()) == [4, 5]


def test_undrop_within_retention_restores_exactly(retained_gateway: GatewayProcess) -> None:
    gw = retained_gateway
    cat = make_catalog(gw)
    cat.create_namespace("undo")
    table = cat.create_table("undo.t", SCHEMA)
    table.append(_rows([7, 8]))
    before = requests.get(f"{gw.url}/v1/namespaces/undo/tables/t", timeout=30).json()
    published = Path(before["metadata-location"].removeprefix("file:"))
    cat.drop_table("undo.t")
    assert not cat.table_exists("undo.t")
    assert not published.exists()  # moved away: engines cannot parse it after a drop
    # The name is free meanwhile, and the dropped table is listed with its drop id.
    listing = _admin(gw, "GET", "/warehouses/default/dropped").json()["dropped"]
    assert [(d["name"], d["kind"]) for d in listing] == [("t", "table")]
    cat.create_table("undo.t", SCHEMA)
    conflict = _admin(gw, "POST", f"/warehouses/default/dropped/{listing[0]['drop-id']}/undrop")
    assert conflict.status_code == 409, conflict.text
    cat.drop_table("undo.t")
    restored = _admin(gw, "POST", f"/warehouses/default/dropped/{listing[0]['drop-id']}/undrop")
    assert restored.status_code == 200, restored.text
    after = requests.get(f"{gw.url}/v1/namespaces/undo/tables/t", timeout=30).json()
    assert after == before
    assert published.exists()
    assert sorted(cat.load_table("undo.t").scan().to_arrow()["id"].to_pylist()) == [7, 8]
    unknown = _admin(gw, "POST", f"/warehouses/default/dropped/{uuid.uuid4()}/undrop")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "NoSuchTableException"


def test_undrop_and_list_from_the_cli(retained_gateway: GatewayProcess) -> None:
    gw = retained_gateway
    cat = make_catalog(gw)
    cat.create_namespace("cli")
    cat.create_table("cli.t", SCHEMA).append(_rows([1]))
    cat.drop_table("cli.t")
    listed = gw.cli("dropped", "list")
    assert listed.returncode == 0, listed.stderr
    drop_id = listed.stdout.split()[0]
    assert "cli.t" in listed.stdout
    restored = gw.cli("dropped", "undrop", drop_id)
    assert restored.returncode == 0, restored.stderr
    assert "restored table cli.t" in restored.stdout
    assert cat.load_table("cli.t").scan().to_arrow().num_rows == 1


def test_purge_after_retention_removes_files_and_key(gateway: GatewayProcess) -> None:
    cat = make_catalog(gateway)
    cat.create_namespace("shred")
    table = cat.create_table("shred.t", SCHEMA)
    table.append(_rows([1, 2]))
    table.append(_rows([3]))
    location = Path(table.location().removeprefix("file:"))
    assert any(p.suffix == ".parquet" for p in _files(location))
    cat.purge_table("shred.t")
    assert _wait_until(lambda: not location.exists()), _files(location)
    # The purge deletes the files, then the record (so a purge cut short in between is found and
    # completed later): the files may be gone a moment before the record is. Wait for both.
    no_record = [(0,)]
    assert _wait_until(lambda: registry.query(gateway, "SELECT count(*) FROM dropped_objects") == no_record)
    assert registry.query(gateway, "SELECT count(*) FROM catalog_objects") == [(0,)]
    with pytest.raises(NoSuchTableError):
        cat.load_table("shred.t")


def test_rebuild_restores_every_table_and_view(gateway: GatewayProcess) -> None:
    cat = make_catalog(gateway)
    cat.create_namespace("r1")
    cat.create_namespace(("r1", "inner"))
    first = cat.create_table("r1.a", SCHEMA)
    first.append(_rows([1, 2]))
    first.append(_rows([3]))
    second = cat.create_table(("r1", "inner", "b"), SCHEMA)
    second.append(_rows([10]))
    assert _create_view(gateway, "r1", "v").status_code == 200
    before = {
        path: requests.get(f"{gateway.url}/v1/namespaces/{path}", timeout=30).json()
        for path in ("r1/tables/a", "r1%1Finner/tables/b", "r1/views/v")
    }
    gateway.stop()
    registry.lose(gateway)
    result = gateway.cli("rebuild")
    assert result.returncode == 0, result.stderr
    assert "3 restored, 0 skipped" in result.stdout, result.stdout
    gateway.start()
    gateway.forget_admin_key()  # API keys lived in the lost registry database too
    cat = make_catalog(gateway)
    for path, document in before.items():
        assert requests.get(f"{gateway.url}/v1/namespaces/{path}", timeout=30).json() == document
    assert sorted(cat.load_table("r1.a").scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert cat.load_table(("r1", "inner", "b")).scan().to_arrow()["id"].to_pylist() == [10]


def _kek_versions(gw: GatewayProcess) -> set[str]:
    rows = registry.query(
        gw, "SELECT kek_version FROM catalog_objects UNION SELECT kek_version FROM registry_keys"
    )
    return {row[0] for row in rows}


def test_kek_rotation_under_load(tmp_path: Path, fresh_store_url: str | None) -> None:
    config = {"kms": {"cache": {"max_entries": 0}}}  # every request unwraps: rotation is felt
    with GatewayProcess(tmp_path / "rot", store_url=fresh_store_url, config=config) as gw:
        cat = make_catalog(gw)
        cat.create_namespace("rot")
        names = [f"t{i}" for i in range(6)]
        for name in names:
            cat.create_table(f"rot.{name}", SCHEMA).append(_rows([1]))
        key = str(uuid.uuid4())
        requests.post(
            f"{gw.url}/v1/namespaces/rot/tables/t0",
            json={"requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "b"}}]},
            headers={"Idempotency-Key": key},
            timeout=30,
        ).raise_for_status()
        assert _kek_versions(gw) == {"1"}
        errors: list[str] = []
        stop = threading.Event()
        counts = {"reads": 0, "writes": 0}

        def reader() -> None:
            while not stop.is_set() and counts["reads"] < 5000:
                for name in names:
                    response = requests.get(f"{gw.url}/v1/namespaces/rot/tables/{name}", timeout=30)
                    if response.status_code != 200:
                        errors.append(f"load {name}: {response.status_code} {response.text}")
                    counts["reads"] += 1

        def writer() -> None:
            worker = make_catalog(gw)
            step = 0
            while not stop.is_set() and step < 200:
                step += 1
                table = worker.load_table(f"rot.{names[step % len(names)]}")
                try:
                    with table.transaction() as tx:
                        tx.set_properties(step=str(step))
                except Exception as err:  # recorded: `errors` must stay empty
                    errors.append(f"commit: {err!r}")
                counts["writes"] += 1

        threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
        for thread in threads:
            thread.start()
        try:
            assert _wait_until(lambda: counts["reads"] > 20 and counts["writes"] > 2)
            new_version = gw.cli("kms", "new-local-version")
            assert new_version.returncode == 0, new_version.stderr
            rotated = gw.cli("kms", "rotate")
            assert rotated.returncode == 0, rotated.stdout + rotated.stderr
            assert "0 remaining" in rotated.stdout
            reads_at_rotation = counts["reads"]
            assert _wait_until(lambda: counts["reads"] > reads_at_rotation + 20)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        assert errors == []
        assert counts["writes"] > 2
        assert _kek_versions(gw) == {"2"}
        status = gw.cli("kms", "status")
        assert "keys not under it: 0" in status.stdout, status.stdout
        for name in names:
            assert cat.load_table(f"rot.{name}").scan().to_arrow().num_rows == 1
        replay = requests.post(
            f"{gw.url}/v1/namespaces/rot/tables/t0",
            json={"requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "b"}}]},
            headers={"Idempotency-Key": key},
            timeout=30,
        )
        assert replay.status_code == 200, replay.text


def test_kms_counters_count_calls_and_cache_hits(gateway: GatewayProcess) -> None:
    cat = make_catalog(gateway)
    cat.create_namespace("count")
    cat.create_table("count.t", SCHEMA)
    url = f"{gateway.url}/v1/namespaces/count/tables/t"
    before = _admin(gateway, "GET", "/kms").json()
    for n in range(3):
        # A new version each time: the loads of one version are unsealed once (load-result cache).
        update = {"action": "set-properties", "updates": {"n": str(n)}}
        assert requests.post(url, json={"requirements": [], "updates": [update]}, timeout=30).ok
        assert requests.get(url, timeout=30).status_code == 200
    after = _admin(gateway, "GET", "/kms").json()
    assert after["kek"] == "local://default"
    assert after["counters"]["cache_hits"] >= before["counters"]["cache_hits"] + 3
