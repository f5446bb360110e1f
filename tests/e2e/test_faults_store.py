"""Faults of the stores the gateway depends on, injected under real gateways: PostgreSQL stopped
(fast and immediate shutdown) and restarted under load; the warehouse's disk full; the SQLite
registry's disk full.

What each test holds the gateway to (docs/operations.md, "When what it depends on fails"):
- a request that cannot be served is answered with an Iceberg ErrorModel, 503
  ServiceUnavailableException naming what failed, within the configured timeouts: never an
  unmapped 500, never a hang;
- a commit answered with an error did not happen (the one exception: a commit whose registry
  COMMIT was cut off is 500 CommitStateUnknownException, and is then either fully there or not);
  every commit acknowledged is there afterwards;
- no registry pointer names a missing or partial file, and no partial file is left in a table's
  metadata directory;
- the gateway recovers by itself when the dependency returns (no restart), and /ready says so.

Attack: the fault. Control: the same requests before and after it, all acknowledged.
A failing check prints the whole history of the load. Each phase lasts PHASE_SECONDS; for a longer
run, `FAULTS_STORE_PHASE_SECONDS=30 pytest tests/e2e/test_faults_store.py` (the tests print the
figures of their run with `-s`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.support.gateway import GatewayProcess
from tests.support.postgres import PostgresServer
from tests.support.store_faults import (
    NAMESPACE,
    History,
    Load,
    Outcome,
    assert_only_complete_files,
    set_property,
    table_url,
)
from tests.support.tmpfs import SmallDisk

PHASE_SECONDS = float(os.environ.get("FAULTS_STORE_PHASE_SECONDS", "2.5"))
CLIENTS = 4
# The longest any request may take while a store is down: the gateway answers at once when
# PostgreSQL refuses connections; this leaves room for a loaded 2-core machine.
SLOWEST_ANSWER_SECONDS = 15.0
RECOVERY_SECONDS = 30.0
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
UNAVAILABLE = "ServiceUnavailableException"
UNKNOWN = "CommitStateUnknownException"


def _create_namespace(base: str, name: str) -> requests.Response:
    return requests.post(f"{base}/namespaces", json={"namespace": [name]}, timeout=30)


def _create_table(base: str, namespace: str, name: str) -> requests.Response:
    # The metadata log keeps every version (Iceberg keeps 100 by default), so the check that no file
    # is left behind can name every file in the directory however many commits the load makes.
    properties = {"write.metadata.previous-versions-max": str(1_000_000)}
    body = {"name": name, "schema": SCHEMA, "properties": properties}
    return requests.post(f"{base}/namespaces/{namespace}/tables", json=body, timeout=30)


def _table(base: str, namespace: str, name: str) -> requests.Response:
    return requests.get(f"{base}/namespaces/{namespace}/tables/{name}", timeout=30)


def _commit(base: str, namespace: str, name: str, key: str) -> requests.Response:
    url = f"{base}/namespaces/{namespace}/tables/{name}"
    return requests.post(url, json=set_property(key), timeout=30)


def _wait_for(check: Callable[[], bool], what: str, history: History) -> None:
    deadline = time.monotonic() + RECOVERY_SECONDS
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{history.dump()}"
        time.sleep(0.1)


# -- PostgreSQL stopped and restarted under load -------------------------------------------------


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own: it is stopped and restarted, which the session's
    shared server must never be."""
    server = PostgresServer()
    server.start()
    yield server
    server.stop()


def _ready(gw: GatewayProcess) -> requests.Response:
    return requests.get(f"{gw.url}/ready", timeout=SLOWEST_ANSWER_SECONDS)


def _store_unavailable(gw: GatewayProcess) -> bool:
    answer = _ready(gw)
    return answer.status_code == 503 and answer.json()["checks"]["store"] == "unavailable"


def _store_ready(gw: GatewayProcess) -> bool:
    """Both workers answer /ready with 200 (each probe lands on either: ask a few times)."""
    return all(_ready(gw).status_code == 200 for _ in range(4))


def _assert_answers_while_down(outcomes: list[Outcome], history: History) -> None:
    """Every answer is a success, a 503 naming the registry or (a commit cut off in its registry
    COMMIT) 500 CommitStateUnknownException; each within SLOWEST_ANSWER_SECONDS; some are 503."""
    for o in outcomes:
        assert o.seconds < SLOWEST_ANSWER_SECONDS, f"{o} hung\n{history.dump()}"
        if o.status == 503:
            assert o.error_type == UNAVAILABLE, f"{o}\n{history.dump()}"
            assert o.message.startswith("the registry (PostgreSQL) is unavailable: "), history.dump()
        elif o.status != 200:
            assert (o.op, o.status, o.error_type) == ("commit", 500, UNKNOWN), f"{o}\n{history.dump()}"
    assert any(o.status == 503 for o in outcomes), f"nothing refused while down\n{history.dump()}"


def _assert_all_acknowledged(outcomes: list[Outcome], history: History) -> None:
    assert outcomes, "no request was sent"
    refused = [o for o in outcomes if o.status != 200]
    assert not refused, f"{refused}\n{history.dump()}"


def _check_histories(gw: GatewayProcess, history: History) -> int:
    """Every acknowledged commit is in its table; none answered 503 or 409 is. Returns how many
    commits were checked."""
    present: dict[int, set[str]] = {}
    for client in range(CLIENTS):
        answer = requests.get(table_url(gw, f"t{client}"), timeout=30)
        assert answer.status_code == 200, answer.text
        present[client] = set(answer.json()["metadata"]["properties"])
    commits = history.commits()
    for o in commits:
        if o.status == 200:
            assert o.key in present[o.client], f"acknowledged commit {o} is lost\n{history.dump()}"
        elif o.status in (409, 503):
            assert o.key not in present[o.client], f"refused commit {o} was applied\n{history.dump()}"
    return len(commits)


@pytest.mark.postgres
def test_postgres_stopped_and_restarted_under_load(private_postgres: PostgresServer, tmp_path: Path) -> None:
    url = private_postgres.create_database("faults")
    with GatewayProcess(tmp_path / "gw", store_url=url, extra_args=["--workers", "2"]) as gw:
        base = f"{gw.url}/v1"
        assert _create_namespace(base, NAMESPACE).status_code == 200
        for client in range(CLIENTS):
            created = _create_table(base, NAMESPACE, f"t{client}")
            assert created.status_code == 200, created.text
        load = Load(gw, CLIENTS, timeout=SLOWEST_ANSWER_SECONDS * 2).start()
        history = load.history
        try:
            for mode in ("fast", "immediate"):
                # Control: with PostgreSQL up, every commit and load succeeds.
                up = time.monotonic()
                time.sleep(PHASE_SECONDS)
                _assert_all_acknowledged(history.since(up), history)
                # The fault: PostgreSQL goes away under the load, and comes back.
                down = time.monotonic()
                private_postgres.halt(mode)
                _wait_for(lambda: _store_unavailable(gw), f"/ready to report a {mode} stop", history)
                time.sleep(PHASE_SECONDS)
                private_postgres.resume()
                _assert_answers_while_down(history.since(down), history)
                # Recovery without restarting the gateway.
                _wait_for(lambda: _store_ready(gw), f"/ready to recover after a {mode} stop", history)
            # Control after the last outage: every commit and load succeeds again.
            up = time.monotonic()
            time.sleep(PHASE_SECONDS)
            _assert_all_acknowledged(history.since(up), history)
        finally:
            load.stop()
        checked = _check_histories(gw, history)
        unknown = any(o.status == 500 for o in history.commits())
        assert_only_complete_files(gw, f"{gw.url}/v1", "default", NAMESPACE, exact=not unknown)
        assert sum(1 for o in history.commits() if o.status == 200) >= CLIENTS * 2, history.dump()
        print(f"{checked} commits checked; {history.summary()}")  # the run's figures (pytest -s)


# -- the warehouse's disk full -------------------------------------------------------------------


@pytest.fixture
def warehouse_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    disk = SmallDisk(tmp_path / "warehouse-disk", size_kib=512)
    yield disk
    disk.unmount()  # after the gateway (set up later, stopped first) has let go of its files


def _assert_disk_full(answer: requests.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"] == {
        "message": "cannot write to the warehouse: No space left on device; nothing was committed",
        "type": UNAVAILABLE,
        "code": 503,
    }


def test_full_warehouse_disk_refuses_commits_and_recovers(warehouse_disk: SmallDisk, tmp_path: Path) -> None:
    root = warehouse_disk.root
    config = {
        "warehouses": {
            "default": {"location": (root / "sealed").as_uri(), "drop_retention_seconds": 0},
            "plain": {"location": (root / "plain").as_uri(), "seal_metadata_files": False},
        }
    }
    with GatewayProcess(tmp_path / "gw", config=config) as gw:
        catalogs = {"default": f"{gw.url}/v1", "plain": f"{gw.url}/v1/plain"}
        # Control: tables created and committed to while there is room.
        for warehouse, base in catalogs.items():
            assert _create_namespace(base, "n").status_code == 200
            assert _create_table(base, "n", "t").status_code == 200
            assert _commit(base, "n", "t", "before").status_code == 200
            assert_only_complete_files(gw, base, warehouse, "n")

        warehouse_disk.fill()
        for warehouse, base in catalogs.items():
            before = _table(base, "n", "t").json()
            _assert_disk_full(_commit(base, "n", "t", "full"))
            after = _table(base, "n", "t").json()
            assert after["metadata-location"] == before["metadata-location"]
            assert after["metadata"]["properties"] == before["metadata"]["properties"]
            _assert_disk_full(_create_table(base, "n", "u"))
            assert _table(base, "n", "u").status_code == 404
            assert_only_complete_files(gw, base, warehouse, "n")

        # Room again: the same gateway commits and creates as before.
        warehouse_disk.free()
        for warehouse, base in catalogs.items():
            committed = _commit(base, "n", "t", "after")
            assert committed.status_code == 200, committed.text
            assert set(committed.json()["metadata"]["properties"]) >= {"before", "after"}
            assert "full" not in committed.json()["metadata"]["properties"]
            assert _create_table(base, "n", "u").status_code == 200
            assert_only_complete_files(gw, base, warehouse, "n")


# -- the SQLite registry's disk full -------------------------------------------------------------


@pytest.fixture
def registry_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    disk = SmallDisk(tmp_path / "registry-disk", size_kib=4096)
    yield disk
    disk.unmount()


def test_full_registry_disk_refuses_changes_and_recovers(registry_disk: SmallDisk, tmp_path: Path) -> None:
    store_url = f"sqlite+aiosqlite:///{registry_disk.root / 'catalog.db'}"
    with GatewayProcess(tmp_path / "gw", store_url=store_url) as gw:
        base = f"{gw.url}/v1"
        assert _create_namespace(base, "n").status_code == 200
        assert _create_table(base, "n", "t").status_code == 200
        assert _commit(base, "n", "t", "before").status_code == 200

        registry_disk.fill()
        before = _table(base, "n", "t").json()
        refused = [_commit(base, "n", "t", f"full{n}") for n in range(5)]
        refused += [_create_table(base, "n", "u"), _create_namespace(base, "m")]
        for answer in refused:
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["type"] == UNAVAILABLE, error
            assert error["message"].startswith("the registry (SQLite) is unavailable: "), error
        # Reads go on; nothing refused is there, and no file of it is left in the warehouse.
        after = _table(base, "n", "t").json()
        assert after["metadata-location"] == before["metadata-location"]
        assert after["metadata"]["properties"] == before["metadata"]["properties"]
        assert _table(base, "n", "u").status_code == 404
        assert requests.get(f"{base}/namespaces/m", timeout=30).status_code == 404
        assert_only_complete_files(gw, base, "default", "n")

        registry_disk.free()
        committed = _commit(base, "n", "t", "after")
        assert committed.status_code == 200, committed.text
        properties = set(committed.json()["metadata"]["properties"])
        assert properties >= {"before", "after"}
        assert not {f"full{n}" for n in range(5)} & properties
        assert _create_table(base, "n", "u").status_code == 200
        assert_only_complete_files(gw, base, "default", "n")
    # Restarted on the same file: every acknowledged change is there.
    with GatewayProcess(tmp_path / "gw", store_url=store_url) as gw:
        table = _table(f"{gw.url}/v1", "n", "t").json()
        assert set(table["metadata"]["properties"]) == properties
        assert _table(f"{gw.url}/v1", "n", "u").status_code == 200
