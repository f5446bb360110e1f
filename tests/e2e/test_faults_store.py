"""Faults of the stores the gateway depends on, injected under real gateways: PostgreSQL stopped
(fast and immediate shutdown) and restarted under load; the warehouse's disk full; the SQLite
registry's disk full.

What each test holds the gateway to (docs/operations.md, "When what it depends on fails"):
- a request that cannot be served is answered with an Iceberg ErrorModel, 503
  ServiceUnavailableException naming what failed, within the configured timeouts: never an
  unmapped 500, never a hang;
- a commit answered with an error did not happen (a commit whose registry COMMIT was cut off is
  the one exception: 500 CommitStateUnknownException, and it is then either fully there or absent);
  every commit acknowledged is there afterwards;
- no registry pointer ever names a missing or partial file, and no partial file is left in a
  table's metadata directory;
- the gateway recovers by itself when the dependency returns (no restart), and /ready says so.

Every history of outcomes is printed when a check fails, so the failure can be read and replayed.
The load is bounded (seconds per phase); `FAULTS_STORE_PHASE_SECONDS` lengthens each phase for a
longer run (e.g. `FAULTS_STORE_PHASE_SECONDS=30 pytest tests/e2e/test_faults_store.py`).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.table.metadata import TableMetadataUtil

from cedarberg.catalog import fileio
from cedarberg.catalog.sealing import Sealer
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings
from tests.support.gateway import GatewayProcess
from tests.support.postgres import PostgresServer
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


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request of the load: what was sent (`key`: the property a commit set), how it ended,
    and when (monotonic seconds)."""

    client: int
    op: str  # "commit" or "load"
    key: str
    status: int  # 0: no answer (connection error or client timeout)
    error_type: str
    message: str
    started: float
    seconds: float


@dataclass
class History:
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def since(self, moment: float) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if o.started >= moment]

    def dump(self) -> str:
        with self.lock:
            return "\n".join(
                f"{o.started:.3f} +{o.seconds:.3f}s client {o.client} {o.op} {o.key}: {o.status} "
                f"{o.error_type} {o.message}"
                for o in self.outcomes
            )


def _table_url(gw: GatewayProcess, table: str, namespace: str = "load") -> str:
    return f"{gw.url}/v1/namespaces/{namespace}/tables/{table}"


def _send(history: History, client: int, op: str, key: str, call: Callable[[], requests.Response]) -> None:
    started = time.monotonic()
    try:
        answer = call()
    except requests.RequestException as err:
        history.add(Outcome(client, op, key, 0, type(err).__name__, "", started, time.monotonic() - started))
        return
    error: dict[str, Any] = answer.json().get("error", {}) if answer.status_code >= 400 else {}
    history.add(
        Outcome(
            client,
            op,
            key,
            answer.status_code,
            str(error.get("type", "")),
            str(error.get("message", "")),
            started,
            time.monotonic() - started,
        )
    )


def _client(gw: GatewayProcess, client: int, history: History, stop: threading.Event) -> None:
    """Commit a new property to this client's own table, then load it, until `stop`."""
    table = f"t{client}"
    with requests.Session() as session:
        n = 0
        while not stop.is_set():
            key = f"c{client}-{n}"
            change = {"requirements": [], "updates": [{"action": "set-properties", "updates": {key: "1"}}]}
            _send(
                history,
                client,
                "commit",
                key,
                lambda: session.post(_table_url(gw, table), json=change, timeout=SLOWEST_ANSWER_SECONDS * 2),
            )
            _send(
                history,
                client,
                "load",
                "",
                lambda: session.get(_table_url(gw, table), timeout=SLOWEST_ANSWER_SECONDS * 2),
            )
            n += 1


@dataclass
class Load:
    history: History
    stop: threading.Event
    threads: list[threading.Thread]


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own: it is stopped and restarted, which the session's
    shared server must never be."""
    server = PostgresServer()
    server.start()
    yield server
    server.stop()


def _start_load(gw: GatewayProcess) -> Load:
    history, stop = History(), threading.Event()
    threads = [
        threading.Thread(target=_client, args=(gw, client, history, stop), daemon=True) for client in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    return Load(history, stop, threads)


def _ready(gw: GatewayProcess) -> requests.Response:
    return requests.get(f"{gw.url}/ready", timeout=SLOWEST_ANSWER_SECONDS)


def _wait_for(check: Callable[[], bool], what: str, history: History) -> None:
    deadline = time.monotonic() + RECOVERY_SECONDS
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{history.dump()}"
        time.sleep(0.1)


def _store_unavailable(gw: GatewayProcess) -> bool:
    answer = _ready(gw)
    return answer.status_code == 503 and answer.json()["checks"]["store"] == "unavailable"


def _store_ready(gw: GatewayProcess) -> bool:
    """Both workers answer /ready with 200 (each probe lands on either: ask a few times)."""
    return all(_ready(gw).status_code == 200 for _ in range(4))


def _assert_answers_while_down(outcomes: list[Outcome], history: History) -> None:
    """Every answer is a success, or a 503 naming the registry, or (a commit cut off in its
    registry COMMIT) 500 CommitStateUnknownException; all within SLOWEST_ANSWER_SECONDS."""
    refused = 0
    for o in outcomes:
        assert o.seconds < SLOWEST_ANSWER_SECONDS, f"{o} hung\n{history.dump()}"
        if o.status == 200:
            continue
        if o.status == 503:
            assert o.error_type == UNAVAILABLE, f"{o}\n{history.dump()}"
            assert o.message.startswith("the registry (PostgreSQL) is unavailable: "), f"{o}\n{history.dump()}"
            refused += 1
            continue
        assert (o.op, o.status, o.error_type) == ("commit", 500, UNKNOWN), f"{o}\n{history.dump()}"
    assert refused > 0, f"no request was refused while PostgreSQL was down\n{history.dump()}"


def _assert_all_acknowledged(outcomes: list[Outcome], history: History) -> None:
    assert outcomes, "no request was sent"
    bad = [o for o in outcomes if o.status != 200]
    assert not bad, f"{bad}\n{history.dump()}"


def _check_histories(gw: GatewayProcess, history: History) -> int:
    """Every acknowledged commit is in its table; none answered 503 or 409 is. Returns how many
    commits were checked."""
    checked = 0
    for client in range(CLIENTS):
        answer = requests.get(_table_url(gw, f"t{client}"), timeout=30)
        assert answer.status_code == 200, answer.text
        present = set(answer.json()["metadata"]["properties"])
        for o in history.outcomes:
            if o.op != "commit" or o.client != client:
                continue
            checked += 1
            if o.status == 200:
                assert o.key in present, f"acknowledged commit {o} is lost\n{history.dump()}"
            elif o.status in (409, 503):
                assert o.key not in present, f"refused commit {o} was applied\n{history.dump()}"
    return checked


@pytest.mark.postgres
def test_postgres_stopped_and_restarted_under_load(private_postgres: PostgresServer, tmp_path: Path) -> None:
    url = private_postgres.create_database("faults")
    with GatewayProcess(tmp_path / "gw", store_url=url, extra_args=["--workers", "2"]) as gw:
        assert requests.post(f"{gw.url}/v1/namespaces", json={"namespace": ["load"]}, timeout=30).status_code == 200
        for client in range(CLIENTS):
            created = requests.post(
                f"{gw.url}/v1/namespaces/load/tables", json={"name": f"t{client}", "schema": SCHEMA}, timeout=30
            )
            assert created.status_code == 200, created.text
        load = _start_load(gw)
        try:
            for mode in ("fast", "immediate"):
                # Control: with PostgreSQL up, every commit and load succeeds.
                up = time.monotonic()
                time.sleep(PHASE_SECONDS)
                _assert_all_acknowledged(load.history.since(up), load.history)
                # The fault: PostgreSQL goes away under the load.
                down = time.monotonic()
                private_postgres.halt(mode)
                _wait_for(lambda: _store_unavailable(gw), f"/ready to report the store down ({mode})", load.history)
                time.sleep(PHASE_SECONDS)
                private_postgres.resume()
                back = time.monotonic()
                _assert_answers_while_down(load.history.since(down), load.history)
                assert any(o.started < back and o.status == 503 for o in load.history.since(down))
                # Recovery without a restart of the gateway: /ready, then every client commits again.
                _wait_for(lambda: _store_ready(gw), f"/ready to recover after a {mode} stop", load.history)
        finally:
            load.stop.set()
            for thread in load.threads:
                thread.join(timeout=SLOWEST_ANSWER_SECONDS * 3)
        recovered = time.monotonic()
        for client in range(CLIENTS):
            change = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"after": "1"}}]}
            answer = requests.post(_table_url(gw, f"t{client}"), json=change, timeout=30)
            assert answer.status_code == 200, answer.text
        assert gw.is_running()
        checked = _check_histories(gw, load.history)
        acknowledged = sum(1 for o in load.history.outcomes if o.op == "commit" and o.status == 200)
        assert acknowledged >= CLIENTS * 2, load.history.dump()
        assert checked == sum(1 for o in load.history.outcomes if o.op == "commit")
        assert not [o for o in load.history.since(recovered) if o.status != 200]
        print(_summary(load.history, checked))  # the figures of this run (pytest -s shows them)


def _summary(history: History, checked: int) -> str:
    counts: dict[tuple[str, int, str], int] = {}
    for o in history.outcomes:
        counts[(o.op, o.status, o.error_type)] = counts.get((o.op, o.status, o.error_type), 0) + 1
    parts = ", ".join(f"{op} {status} {kind or 'ok'}: {n}" for (op, status, kind), n in sorted(counts.items()))
    return f"{checked} commits checked; {parts}"


# -- the warehouse's disk full -------------------------------------------------------------------


def _open_metadata_file(gw: GatewayProcess, warehouse: str, location: str) -> bytes:
    """The metadata JSON of a file in `warehouse`, opened (and, when sealed, unsealed and checked)
    as the gateway would: raises if the file is partial or damaged."""
    content = fileio.read_file(location, 16 * 1024 * 1024)

    async def unseal() -> bytes:
        keyring = KeyRing.open(KmsSettings(), gw.data_dir / "kms")
        try:
            return (await Sealer(keyring).open_file(warehouse, location, content)).metadata_json
        finally:
            await keyring.aclose()

    document = asyncio.run(unseal())
    TableMetadataUtil.parse_raw(document)  # complete, valid table metadata
    return document


@pytest.fixture
def warehouse_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    disk = SmallDisk(tmp_path / "warehouse-disk", size_kib=512)
    yield disk
    disk.unmount()


def test_full_warehouse_disk_refuses_commits_and_recovers(warehouse_disk: SmallDisk, tmp_path: Path) -> None:
    root = warehouse_disk.root
    config = {
        "warehouses": {
            "default": {"location": (root / "sealed").as_uri(), "drop_retention_seconds": 0},
            "plain": {"location": (root / "plain").as_uri(), "seal_metadata_files": False},
        }
    }
    with GatewayProcess(tmp_path / "gw", config=config) as gw:
        prefixes = {"default": f"{gw.url}/v1", "plain": f"{gw.url}/v1/plain"}
        # Control: tables created and committed to while there is room.
        for warehouse, base in prefixes.items():
            assert requests.post(f"{base}/namespaces", json={"namespace": ["n"]}, timeout=30).status_code == 200
            created = requests.post(f"{base}/namespaces/n/tables", json={"name": "t", "schema": SCHEMA}, timeout=30)
            assert created.status_code == 200, created.text
            committed = _commit(base, "t", {"before": "1"})
            assert committed.status_code == 200, committed.text
            _assert_files_complete(gw, base, warehouse)

        warehouse_disk.fill()
        for warehouse, base in prefixes.items():
            before = requests.get(f"{base}/namespaces/n/tables/t", timeout=30).json()
            refused = _commit(base, "t", {"full": "1"})
            _assert_disk_full(refused)
            after = requests.get(f"{base}/namespaces/n/tables/t", timeout=30).json()
            assert after["metadata-location"] == before["metadata-location"]
            assert "full" not in after["metadata"]["properties"]
            create = requests.post(f"{base}/namespaces/n/tables", json={"name": "u", "schema": SCHEMA}, timeout=30)
            _assert_disk_full(create)
            assert requests.get(f"{base}/namespaces/n/tables/u", timeout=30).status_code == 404
            _assert_files_complete(gw, base, warehouse)

        # Room again: the same gateway commits and creates as before.
        warehouse_disk.free()
        for warehouse, base in prefixes.items():
            committed = _commit(base, "t", {"after": "1"})
            assert committed.status_code == 200, committed.text
            assert set(committed.json()["metadata"]["properties"]) >= {"before", "after"}
            created = requests.post(f"{base}/namespaces/n/tables", json={"name": "u", "schema": SCHEMA}, timeout=30)
            assert created.status_code == 200, created.text
            _assert_files_complete(gw, base, warehouse)


def _commit(base: str, table: str, properties: dict[str, str]) -> requests.Response:
    change = {"requirements": [], "updates": [{"action": "set-properties", "updates": properties}]}
    return requests.post(f"{base}/namespaces/n/tables/{table}", json=change, timeout=30)


def _assert_disk_full(answer: requests.Response) -> None:
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["type"] == UNAVAILABLE
    assert error["code"] == 503
    assert "no space left on device" in error["message"].lower(), error
    assert "nothing was committed" in error["message"], error


def _assert_files_complete(gw: GatewayProcess, base: str, warehouse: str) -> None:
    """Every table of namespace n (whichever exist) points at complete files only."""
    listed = requests.get(f"{base}/namespaces/n/tables", timeout=30)
    assert listed.status_code == 200, listed.text
    for identifier in listed.json()["identifiers"]:
        _assert_only_complete_files_at(gw, base, warehouse, identifier["name"])


def _assert_only_complete_files_at(gw: GatewayProcess, base: str, warehouse: str, table: str) -> None:
    """The registry's pointer names a complete file, and the table's metadata directory holds
    exactly the files its metadata log and pointer name: nothing partial left behind."""
    answer = requests.get(f"{base}/namespaces/n/tables/{table}", timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    pointer = body["metadata-location"]
    named = {pointer, *(entry["metadata-file"] for entry in body["metadata"]["metadata-log"])}
    directory = Path(fileio.locations.to_local_path(pointer)).parent
    on_disk = {path.as_uri() for path in directory.iterdir()}
    assert {fileio.locations.normalize(n) for n in named} == {fileio.locations.normalize(n) for n in on_disk}
    for location in named:
        _open_metadata_file(gw, warehouse, location)


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
        assert requests.post(f"{base}/namespaces", json={"namespace": ["n"]}, timeout=30).status_code == 200
        created = requests.post(f"{base}/namespaces/n/tables", json={"name": "t", "schema": SCHEMA}, timeout=30)
        assert created.status_code == 200, created.text
        assert _commit(base, "t", {"before": "1"}).status_code == 200

        registry_disk.fill()
        before = requests.get(f"{base}/namespaces/n/tables/t", timeout=30).json()
        refused = [_commit(base, "t", {f"full{n}": "1"}) for n in range(5)]
        refused.append(requests.post(f"{base}/namespaces/n/tables", json={"name": "u", "schema": SCHEMA}, timeout=30))
        refused.append(requests.post(f"{base}/namespaces", json={"namespace": ["m"]}, timeout=30))
        for answer in refused:
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["type"] == UNAVAILABLE, error
            assert error["message"].startswith("the registry (SQLite) is unavailable: "), error
        # Reads go on; nothing refused is there.
        after = requests.get(f"{base}/namespaces/n/tables/t", timeout=30).json()
        assert after["metadata-location"] == before["metadata-location"]
        assert after["metadata"]["properties"] == before["metadata"]["properties"]
        assert requests.get(f"{base}/namespaces/n/tables/u", timeout=30).status_code == 404
        assert requests.get(f"{base}/namespaces/m", timeout=30).status_code == 404

        registry_disk.free()
        committed = _commit(base, "t", {"after": "1"})
        assert committed.status_code == 200, committed.text
        assert set(committed.json()["metadata"]["properties"]) >= {"before", "after"}
        assert not {f"full{n}" for n in range(5)} & set(committed.json()["metadata"]["properties"])
        created = requests.post(f"{base}/namespaces/n/tables", json={"name": "u", "schema": SCHEMA}, timeout=30)
        assert created.status_code == 200, created.text
        _assert_files_complete(gw, base, "default")
    # The registry survives a restart whole: every acknowledged change is there.
    with GatewayProcess(tmp_path / "gw", store_url=store_url) as gw:
        properties = requests.get(f"{gw.url}/v1/namespaces/n/tables/t", timeout=30).json()["metadata"]["properties"]
        assert set(properties) >= {"before", "after"}
        assert requests.get(f"{gw.url}/v1/namespaces/n/tables/u", timeout=30).status_code == 200
