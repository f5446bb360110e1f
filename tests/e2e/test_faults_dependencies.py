"""Faults of what the gateway depends on: the KMS, Redis, and the metadata it keeps.

Each test runs real servers (OpenBao, redis-server) and a real gateway process; the fault is the
attack, normal operation before and after it the control.

- The KMS (OpenBao transit) goes away while several clients commit to several tables, sealed
  (it answers, refusing) or unreachable (a proxy in front of it drops and resets connections):
  every commit is acknowledged and durable, or refused with 503 and absent; every pointer names a
  sealed file whose key unwraps; the gateway recovers without a restart.
- Redis, shared by the rate limits, is killed and restarted, then stalled: every request but the
  two probes is refused with 503 while it is gone (fail closed; /metrics too), /ready and the log
  say so, and the limits are back when it returns, without a restart.
- A table's sealed registry copy with flipped or cut bytes: loads and commits of that table fail
  closed naming it, other tables are unaffected, and the table serves again once repaired. A
  metadata file damaged on disk: refused where it is read, never served; the next commit points
  the table at a new, whole file.

Bounded for `make test` (about two minutes). The long variant raises the length of each phase of
the KMS runs (before, during, after the outage; 2.5 s by default):
`CEDARBERG_FAULTS_SECONDS=60 pytest -s tests/e2e/test_faults_dependencies.py -k kms`; each run
prints its seed and its counts, and `CEDARBERG_FAULTS_SEED=N` replays a seed's commit schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.sealing import Sealer
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings
from tests.support.gateway import GatewayProcess
from tests.support.kms_servers import OpenBaoServer
from tests.support.redis import RedisServer
from tests.support.tcp_proxy import TcpProxy

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
# Seconds of commits before, during and after the KMS outage (each phase).
PHASE_SECONDS = float(os.environ.get("CEDARBERG_FAULTS_SECONDS", "2.5"))
CLIENTS = 4
TABLES = ("t0", "t1", "t2")


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _create_table(gw: GatewayProcess, namespace: str, name: str) -> None:
    answer = requests.post(
        f"{gw.url}/v1/namespaces/{namespace}/tables", json={"name": name, "schema": SCHEMA}, timeout=30
    )
    assert answer.status_code == 200, answer.text


def _create_namespace(gw: GatewayProcess, namespace: str) -> None:
    answer = requests.post(f"{gw.url}/v1/namespaces", json={"namespace": [namespace]}, timeout=30)
    assert answer.status_code == 200, answer.text


def _path(location: str) -> Path:
    return Path(location.removeprefix("file://").removeprefix("file:"))


def _table_url(gw: GatewayProcess, namespace: str, name: str) -> str:
    return f"{gw.url}/v1/namespaces/{namespace}/tables/{name}"


# -- the KMS ---------------------------------------------------------------------------------


class CommitLog:
    """Every commit's outcome: the property it set, and how it was answered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: list[tuple[str, str, str]] = []  # (table, property, outcome)
        self.unexpected: list[str] = []

    def add(self, table: str, prop: str, outcome: str) -> None:
        with self.lock:
            self.outcomes.append((table, prop, outcome))

    def of(self, outcome: str) -> list[tuple[str, str]]:
        return [(t, p) for t, p, o in self.outcomes if o == outcome]


def _committer(gw: GatewayProcess, client: int, stop: threading.Event, log: CommitLog, seed: int) -> None:
    rng = random.Random(seed + client)
    count = 0
    while not stop.is_set():
        table = rng.choice(TABLES)
        prop = f"c{client}-{count}"
        count += 1
        commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {prop: "1"}}]}
        try:
            answer = requests.post(_table_url(gw, "ops", table), json=commit, timeout=20)
        except requests.Timeout:
            log.add(table, prop, "unknown")
            continue
        if answer.status_code == 200:
            log.add(table, prop, "acknowledged")
        elif answer.status_code == 503:
            error = answer.json()["error"]
            if (
                error["type"] != "ServiceUnavailableException"
                or "key management service" not in error["message"]
            ):
                log.unexpected.append(answer.text)
            log.add(table, prop, "refused")
        elif answer.status_code == 409:
            log.add(table, prop, "conflict")
        else:
            log.unexpected.append(f"{answer.status_code} {answer.text}")
            log.add(table, prop, "other")


def _open_metadata_file(gw: GatewayProcess, kms_config: dict[str, Any], location: str) -> bytes:
    """The metadata JSON of the sealed file at `location`, opened with the key it carries
    (unwrapped by the gateway's KMS, as a registry rebuild would)."""
    content = _path(location).read_bytes()
    keyring = KeyRing.open(KmsSettings.model_validate(kms_config), gw.data_dir / "kms")

    async def opened() -> bytes:
        try:
            result = await Sealer(keyring).open_file("default", location, content)
        finally:
            await keyring.aclose()
        assert result.sealed_key is not None, f"{location} is not sealed"
        return result.metadata_json

    return asyncio.run(opened())


@contextlib.contextmanager
def _kms_fault(fault: str, openbao: OpenBaoServer, proxy: TcpProxy) -> Iterator[None]:
    """The KMS refusing (OpenBao sealed: every transit call answers 503) or unreachable (every
    connection to it dropped or reset), for the duration of the block."""
    if fault == "sealed":
        openbao.seal()
        try:
            yield
        finally:
            openbao.unseal()
    else:
        proxy.cut()
        try:
            yield
        finally:
            proxy.restore()


@pytest.mark.parametrize("fault", ["sealed", "unreachable"])
def test_kms_outage_under_concurrent_commits(fault: str, openbao: OpenBaoServer, tmp_path: Path) -> None:
    with TcpProxy(openbao.port) as proxy:
        _, kms = openbao.pointed_at(proxy.port)
        # No data-key cache: every commit needs the KMS, so the outage reaches commits in flight.
        config = {"kms": {**kms, "cache": {"max_entries": 0}, "timeout_seconds": 2}}
        with GatewayProcess(tmp_path / "gw", config=config) as gw:
            _concurrent_commits_through(gw, kms, lambda: _kms_fault(fault, openbao, proxy))


def _concurrent_commits_through(
    gw: GatewayProcess, kms: dict[str, Any], outage: Callable[[], contextlib.AbstractContextManager[None]]
) -> None:
    """Clients commit to `TABLES` before, during (`outage`) and after a KMS outage; every answer
    is checked against the tables and the sealed files (opened with the gateway's `kms`)."""
    seed = int(os.environ.get("CEDARBERG_FAULTS_SEED", str(random.randrange(1 << 30))))
    print(f"seed {seed}")  # reproduces the commit schedule
    _create_namespace(gw, "ops")
    for table in TABLES:
        _create_table(gw, "ops", table)
    log = CommitLog()
    stop = threading.Event()
    clients = [
        threading.Thread(target=_committer, args=(gw, client, stop, log, seed), daemon=True)
        for client in range(CLIENTS)
    ]
    for thread in clients:
        thread.start()
    try:
        time.sleep(PHASE_SECONDS)
        with outage():  # mid-commit: the clients are committing all along
            time.sleep(PHASE_SECONDS)
            outage_ready = requests.get(f"{gw.url}/ready", timeout=30)
        time.sleep(PHASE_SECONDS)
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=60)
    assert not log.unexpected, log.unexpected[:5]
    assert outage_ready.status_code == 503
    assert outage_ready.json()["checks"]["kms"] == "unavailable"
    acknowledged, refused = log.of("acknowledged"), log.of("refused")
    counts = {o: len(log.of(o)) for o in ("acknowledged", "refused", "conflict", "unknown")}
    print(f"seed {seed}: {counts}")
    assert refused, f"no commit met the outage: {counts}"
    first_refused = min(i for i, (_t, _p, o) in enumerate(log.outcomes) if o == "refused")
    assert any(o == "acknowledged" for _t, _p, o in log.outcomes[:first_refused]), counts
    # Recovery without a restart: commits acknowledged after the KMS returned.
    last_refused = max(i for i, (_t, _p, o) in enumerate(log.outcomes) if o == "refused")
    assert any(o == "acknowledged" for _t, _p, o in log.outcomes[last_refused + 1 :])

    for table in TABLES:
        answer = requests.get(_table_url(gw, "ops", table), timeout=30)
        assert answer.status_code == 200, answer.text
        loaded = answer.json()
        properties = loaded["metadata"]["properties"]
        for t, prop in acknowledged:
            if t == table:
                assert properties.get(prop) == "1", f"acknowledged commit {prop} on {table} lost"
        for t, prop in refused + log.of("conflict"):
            if t == table:
                assert prop not in properties, f"refused commit {prop} on {table} applied"
        # The pointer names a file sealed with a key the KMS unwraps, holding this very version.
        opened = _open_metadata_file(gw, kms, loaded["metadata-location"])
        assert b'"' + str(loaded["metadata"]["table-uuid"]).encode() + b'"' in opened
        for t, prop in acknowledged:
            if t == table:
                assert f'"{prop}"'.encode() in opened
    assert gw.is_running()


# -- Redis -----------------------------------------------------------------------------------


def _refused_503(gw: GatewayProcess) -> float:
    """How many requests /metrics says were answered 503 (all operations, all methods)."""
    text = requests.get(f"{gw.url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cedarberg_http_requests_total{") and 'status="503"' in line
    )


def _writes_until_limited(gw: GatewayProcess, prefix: str, most: int) -> list[int]:
    """Create namespaces PREFIX0, PREFIX1, ... until one is refused; the statuses."""
    statuses = []
    for i in range(most):
        answer = requests.post(f"{gw.url}/v1/namespaces", json={"namespace": [f"{prefix}{i}"]}, timeout=30)
        statuses.append(answer.status_code)
        if answer.status_code != 200:
            break
    return statuses


def test_redis_gone_fails_closed_and_recovers(tmp_path: Path) -> None:
    redis = RedisServer()
    redis.start()
    limits = {"storage_uri": redis.url, "storage_timeout_seconds": 0.5, "write": "4/minute"}
    try:
        with GatewayProcess(tmp_path / "gw", config={"rate_limits": limits}) as gw:
            url = f"{gw.url}/v1/namespaces/before0"
            # Control: the shared budget limits writes.
            assert _writes_until_limited(gw, "before", 12)[-1] == 429

            redis.stop()
            for attempt in (
                lambda: requests.get(url, timeout=30),
                lambda: requests.post(f"{gw.url}/v1/namespaces", json={"namespace": ["x"]}, timeout=30),
                lambda: requests.get(url, headers={"Authorization": "Bearer not-a-token"}, timeout=30),
            ):
                answer = attempt()
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"] == {
                    "message": "rate limiting is unavailable",
                    "type": "ServiceUnavailableException",
                    "code": 503,
                }
            assert requests.get(f"{gw.url}/v1/namespaces/x", timeout=30).status_code == 503
            # /metrics verifies credentials: it is not spared.
            assert requests.get(f"{gw.url}/metrics", timeout=30).status_code == 503
            # The probes still answer, and say why.
            assert requests.get(f"{gw.url}/health", timeout=30).status_code == 200
            ready = requests.get(f"{gw.url}/ready", timeout=30)
            assert ready.status_code == 503
            assert ready.json()["checks"]["rate_limits"] == "unavailable"
            assert ready.json()["error"]["message"] == "not ready: rate_limits"
            assert "rate-limit storage unreachable" in gw.log_text()
            assert redis.url.removeprefix("redis://") not in ready.text

            redis.start()  # same port, empty: every budget is full again
            _wait_for(lambda: requests.get(f"{gw.url}/ready", timeout=30).status_code == 200, "/ready")
            assert "rate-limit storage reachable again" in gw.log_text()
            # Nothing the outage refused was applied; limits apply again.
            assert requests.get(f"{gw.url}/v1/namespaces/x", timeout=30).status_code == 404
            statuses = _writes_until_limited(gw, "after", 12)
            assert statuses[0] == 200, statuses
            assert statuses[-1] == 429, statuses
            assert gw.log_text().count("rate-limit storage unreachable") == 1  # once per outage

            # Stalled rather than gone: each refusal waits a bounded time, not for Redis.
            redis.pause()
            try:
                started = time.monotonic()
                stalled = requests.get(url, timeout=30)
                assert stalled.status_code == 503, stalled.text
                assert time.monotonic() - started < 3 * 0.5 + 2  # three storage timeouts, and slack
                assert requests.get(f"{gw.url}/health", timeout=30).status_code == 200
            finally:
                redis.resume()
            _wait_for(lambda: requests.get(f"{gw.url}/ready", timeout=30).status_code == 200, "/ready")
            assert requests.get(url, timeout=30).status_code == 200
    finally:
        redis.stop()


# -- corrupted metadata ----------------------------------------------------------------------


def _registry_copy(gw: GatewayProcess, name: str) -> bytes:
    with sqlite3.connect(gw.data_dir / "catalog.db") as db:
        row = db.execute("SELECT metadata FROM catalog_objects WHERE name = ?", (name,)).fetchone()
    return bytes(row[0])


def _set_registry_copy(gw: GatewayProcess, name: str, blob: bytes) -> None:
    with sqlite3.connect(gw.data_dir / "catalog.db") as db:
        db.execute("UPDATE catalog_objects SET metadata = ? WHERE name = ?", (blob, name))


def _flipped(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0x5A]) + blob[at + 1 :]


def _assert_fails_naming(answer: requests.Response, table: str) -> None:
    assert answer.status_code == 500, answer.text
    error = answer.json()["error"]
    assert error["type"] == "ServiceFailureException"
    assert f"table {table} " in error["message"], error["message"]
    assert "failed its check" in error["message"]


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    with GatewayProcess(tmp_path / "gw") as gw:
        yield gw


def test_corrupt_registry_copy_fails_closed_naming_the_table(gateway: GatewayProcess) -> None:
    gw = gateway
    _create_namespace(gw, "bad")
    for name in ("flipped", "cut", "fine"):
        _create_table(gw, "bad", name)
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    good = {name: _registry_copy(gw, name) for name in ("flipped", "cut")}
    files_before = sorted(gw.warehouse_dir.rglob("*.metadata.json"))

    gw.stop()  # nothing cached: what is read is what is stored
    _set_registry_copy(gw, "flipped", _flipped(good["flipped"], len(good["flipped"]) - 20))
    _set_registry_copy(gw, "cut", good["cut"][: len(good["cut"]) // 2])
    gw.start()
    for name, ident in (("flipped", "bad.flipped"), ("cut", "bad.cut")):
        _assert_fails_naming(requests.get(_table_url(gw, "bad", name), timeout=30), ident)
        _assert_fails_naming(requests.post(_table_url(gw, "bad", name), json=commit, timeout=30), ident)
        # A second load is not answered from anything kept of the first.
        _assert_fails_naming(requests.get(_table_url(gw, "bad", name), timeout=30), ident)
    assert sorted(gw.warehouse_dir.rglob("*.metadata.json")) == files_before  # nothing written
    # Other tables are unaffected.
    fine = requests.post(_table_url(gw, "bad", "fine"), json=commit, timeout=30)
    assert fine.status_code == 200, fine.text
    fine_now = requests.get(_table_url(gw, "bad", "fine"), timeout=30).json()
    assert fine_now["metadata"]["properties"]["k"] == "v"

    # A transaction that touches a damaged table changes nothing, not even the sound table.
    both = {
        "table-changes": [
            {
                "identifier": {"namespace": ["bad"], "name": name},
                "requirements": [],
                "updates": [{"action": "set-properties", "updates": {"both": "yes"}}],
            }
            for name in ("fine", "flipped")
        ]
    }
    refused = requests.post(f"{gw.url}/v1/transactions/commit", json=both, timeout=30)
    _assert_fails_naming(refused, "bad.flipped")
    assert (
        "both" not in requests.get(_table_url(gw, "bad", "fine"), timeout=30).json()["metadata"]["properties"]
    )

    # Repaired (restored from a backup) while running: served again, without a restart.
    for name in ("flipped", "cut"):
        _set_registry_copy(gw, name, good[name])
    _wait_for(lambda: requests.get(_table_url(gw, "bad", "flipped"), timeout=30).status_code == 200, "repair")
    committed = requests.post(_table_url(gw, "bad", "cut"), json=commit, timeout=30)
    assert committed.status_code == 200, committed.text
    assert committed.json()["metadata"]["properties"]["k"] == "v"


def test_corrupt_metadata_file_on_disk(gateway: GatewayProcess) -> None:
    """The registry's sealed copy is what loads and commits read; a damaged file on disk is refused
    where files are read (rebuild, registration), and the next commit points the table at a new,
    whole file."""
    gw = gateway
    _create_namespace(gw, "disk")
    for name in ("t", "u"):
        _create_table(gw, "disk", name)
    loaded = requests.get(_table_url(gw, "disk", "t"), timeout=30).json()
    location = loaded["metadata-location"]
    path = _path(location)
    whole = path.read_bytes()
    damaged: dict[str, bytes] = {"cut": whole[: len(whole) // 3], "flipped": _flipped(whole, len(whole) - 5)}
    for content in damaged.values():
        path.write_bytes(content)
        # Loads answer the registry's copy, checked when opened: the same version, never the file.
        answer = requests.get(_table_url(gw, "disk", "t"), timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["metadata"] == loaded["metadata"]
        # Where the file is read (a registry rebuild, a registration), it is refused.
        with pytest.raises(InvalidRequestError, match=r"sealed metadata file (is damaged|failed its check)"):
            _open_metadata_file(gw, {}, location)
    # The next commit writes a new file and moves the pointer to it: the table heals.
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"healed": "yes"}}]}
    committed = requests.post(_table_url(gw, "disk", "t"), json=commit, timeout=30)
    assert committed.status_code == 200, committed.text
    new_location = committed.json()["metadata-location"]
    assert new_location != location
    opened = _open_metadata_file(gw, {}, new_location)
    assert b'"healed":"yes"' in opened
    path.write_bytes(whole)
    assert _open_metadata_file(gw, {}, location)  # the control: the repaired file opens
    assert requests.get(_table_url(gw, "disk", "u"), timeout=30).status_code == 200
