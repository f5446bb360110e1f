"""Several gateway processes on one PostgreSQL registry and one Redis, as behind a load balancer.

Each instance is a real `cedarberg serve` process with its own caches; they share the registry,
the rate-limit store, the warehouse, the token signing key and the policy directory. What one
instance does must hold on the other: revocations (within `api_keys.change_poll_seconds`), policy
changes (within `authz.reload_interval_seconds`), rate limits, idempotency keys. Killing one
instance outright must leave a consistent registry; SIGTERM must let a commit in flight finish.
(Sixteen writers appending through two instances: tests/e2e/test_concurrency.py.)
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import postgres
from tests.support.gateway import GatewayProcess, bundled_policies, to_toml
from tests.support.postgres import PostgresServer
from tests.support.redis import RedisServer
from tests.support.secure import keys_create

POLL_SECONDS = 0.5
RELOAD_SECONDS = 0.5
DEADLINE_SECONDS = 30.0
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
GENEROUS = "1000000/minute"


@dataclass
class Cluster:
    """Two (or more) gateway instances sharing one registry, Redis, data dir and policies."""

    instances: list[GatewayProcess]
    admin_key: str
    store_url: str
    policy_dir: Path

    def session(self, key: str | None = None) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {key or self.admin_key}"
        return session

    def create_key(self, principal: str, groups: list[str]) -> str:
        with self.session() as admin:
            answer = admin.post(
                f"{self.instances[0].url}/admin/v1/api-keys",
                json={"principal": principal, "kind": "service", "groups": groups},
                timeout=30,
            )
        assert answer.status_code in (200, 201), answer.text
        return str(answer.json()["key"])


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@contextmanager
def _cluster(
    tmp_path: Path,
    store_url: str,
    redis_url: str,
    *,
    rate_limits: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    count: int = 2,
) -> Iterator[Cluster]:
    policy_dir = tmp_path / "policies"
    bundled_policies(policy_dir)
    data_dir = tmp_path / "shared"  # one warehouse, one token signing key, one local KEK
    config: dict[str, Any] = {
        "api_keys": {"change_poll_seconds": POLL_SECONDS},
        "authz": {"policy_dir": str(policy_dir), "reload_interval_seconds": RELOAD_SECONDS},
        "rate_limits": {
            "storage_uri": redis_url,
            "key_prefix": f"t{uuid.uuid4().hex[:8]}",
            "per_address": GENEROUS,
            "read": GENEROUS,
            "write": GENEROUS,
            "admin": GENEROUS,
            **(rate_limits or {}),
        },
        "shutdown_timeout_seconds": 10,
        **(extra or {}),
    }
    data_dir.mkdir(parents=True)
    config_path = tmp_path / "bootstrap.toml"
    config_path.write_text(to_toml(config))
    admin_key = keys_create(data_dir, "root", ["admins"], config_path=config_path, store_url=store_url)
    instances = [
        GatewayProcess(
            data_dir,
            store_url=store_url,
            config=config,
            anonymous=False,
            probe_headers={"Authorization": f"Bearer {admin_key}"},
            log_path=tmp_path / f"gw{i}.log",
        )
        for i in range(count)
    ]
    for i, gw in enumerate(instances):
        gw.config_path = tmp_path / f"gw{i}.toml"
    with ExitStack() as stack:
        for gw in instances:
            stack.enter_context(gw)
        try:
            yield Cluster(instances, admin_key, store_url, policy_dir)
        except BaseException:
            for gw in instances:
                print(f"--- {gw.log_path} (tail) ---\n{gw.log_text()[-3000:]}")
            raise


@pytest.fixture
def cluster(postgres_url: str, redis_server: RedisServer, tmp_path: Path) -> Iterator[Cluster]:
    with _cluster(tmp_path, postgres_url, redis_server.url) as started:
        yield started


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_SECONDS) -> float:
    """Seconds until `condition` held (polled every 20 ms)."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - started


# -- keys and policies -------------------------------------------------------------------------


def test_a_key_revoked_on_one_instance_is_refused_by_the_other_within_the_poll_interval(
    cluster: Cluster,
) -> None:
    first, second = cluster.instances
    key = cluster.create_key("etl", ["admins"])
    with cluster.session(key) as etl:
        for gw in (first, second):  # each instance verifies it once and caches the verification
            assert etl.get(f"{gw.url}/v1/config", timeout=30).status_code == 200
        key_id = key[4:20]
        with cluster.session() as admin:
            revoked = admin.delete(f"{first.url}/admin/v1/api-keys/{key_id}", timeout=30)
        assert revoked.status_code == 200, revoked.text
        assert etl.get(f"{first.url}/v1/config", timeout=30).status_code == 401  # at once here
        elapsed = _wait_for(
            lambda: etl.get(f"{second.url}/v1/config", timeout=30).status_code == 401,
            "the other instance to refuse the revoked key",
        )
    # The stated bound: one poll interval plus a store round trip (and this loop's granularity).
    assert elapsed <= POLL_SECONDS + 1.0, elapsed


def test_a_policy_change_reaches_every_instance_within_the_reload_interval(cluster: Cluster) -> None:
    first, second = cluster.instances
    key = cluster.create_key("ops", ["operators"])
    (cluster.policy_dir / "operators.cedar").write_text(
        '@id("operators-create-namespaces")\n'
        'permit (principal in Cedarberg::Group::"operators", '
        'action == Cedarberg::Action::"createNamespace", resource);\n'
    )
    with cluster.session(key) as ops:

        def creates(gw: GatewayProcess) -> int:
            name = f"n{uuid.uuid4().hex[:8]}"
            return ops.post(f"{gw.url}/v1/namespaces", json={"namespace": [name]}, timeout=30).status_code

        for gw in (first, second):
            _wait_for(lambda gw=gw: creates(gw) == 200, "the grant to load")  # type: ignore[misc]
        (cluster.policy_dir / "operators.cedar").unlink()
        changed = time.monotonic()
        for gw in (first, second):
            _wait_for(lambda gw=gw: creates(gw) == 403, "the revoked grant to apply")  # type: ignore[misc]
        assert time.monotonic() - changed <= RELOAD_SECONDS + 1.5


def test_an_idempotency_key_holds_across_instances(cluster: Cluster) -> None:
    first, second = cluster.instances
    idempotency_key = str(uuid.uuid4())
    body = {"namespace": ["once"], "properties": {"owner": "a"}}
    with cluster.session() as admin:
        headers = {"Idempotency-Key": idempotency_key}
        one = admin.post(f"{first.url}/v1/namespaces", json=body, headers=headers, timeout=30)
        two = admin.post(f"{second.url}/v1/namespaces", json=body, headers=headers, timeout=30)
        without = admin.post(f"{second.url}/v1/namespaces", json=body, timeout=30)
        listed = admin.get(f"{second.url}/v1/namespaces", timeout=30).json()["namespaces"]
    assert one.status_code == two.status_code == 200
    assert one.json() == two.json()  # the second instance replayed the first one's answer
    assert without.status_code == 409  # without the key it is a second create, refused
    assert listed.count(["once"]) == 1


def test_page_tokens_and_idempotency_bindings_hold_across_instances(cluster: Cluster) -> None:
    """Every instance derives the same page-token and idempotency keys from the shared registry
    key: a token from one resumes the listing on the other, a key replays there for its principal
    only, and a different request under it is refused there too."""
    first, second = cluster.instances
    names = [f"p{i}" for i in range(5)]
    other = cluster.create_key("other-admin", ["admins"])
    with cluster.session() as admin, cluster.session(other) as other_admin:
        for name in names:
            assert admin.post(f"{first.url}/v1/namespaces", json={"namespace": [name]}, timeout=30).ok
        seen: list[list[str]] = []
        token = ""
        for hop in range(len(names) + 1):  # alternate instances page by page
            gw = cluster.instances[hop % 2]
            page = admin.get(
                f"{gw.url}/v1/namespaces", params={"pageSize": "2", "pageToken": token}, timeout=30
            )
            assert page.status_code == 200, page.text
            seen += page.json()["namespaces"]
            token = page.json().get("next-page-token") or ""
            if not token:
                break
            foreign = other_admin.get(
                f"{cluster.instances[(hop + 1) % 2].url}/v1/namespaces",
                params={"pageSize": "2", "pageToken": token},
                timeout=30,
            )
            assert foreign.status_code == 400, foreign.text
        assert [n for n in seen if n[0] in names] == [[name] for name in names]

        key = {"Idempotency-Key": str(uuid.uuid4())}
        mine = admin.post(
            f"{first.url}/v1/namespaces", json={"namespace": ["k-mine"]}, headers=key, timeout=30
        )
        again = admin.post(
            f"{second.url}/v1/namespaces", json={"namespace": ["k-mine"]}, headers=key, timeout=30
        )
        theirs = other_admin.post(
            f"{second.url}/v1/namespaces", json={"namespace": ["k-theirs"]}, headers=key, timeout=30
        )
        changed = admin.post(
            f"{second.url}/v1/namespaces", json={"namespace": ["k-other"]}, headers=key, timeout=30
        )
    assert mine.status_code == again.status_code == theirs.status_code == 200
    assert again.json() == mine.json()
    assert theirs.json()["namespace"] == ["k-theirs"]
    assert changed.status_code == 422, changed.text


def test_the_rate_limit_is_one_budget_across_instances(
    postgres_url: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    with _cluster(tmp_path, postgres_url, redis_server.url, rate_limits={"read": "20/minute"}) as cluster:
        reader = cluster.create_key("reader", ["admins"])
        statuses: list[int] = []
        limited: list[requests.Response] = []
        with cluster.session(reader) as session:
            for i in range(30):
                gw = cluster.instances[i % 2]
                answer = session.get(f"{gw.url}/v1/namespaces", timeout=30)
                statuses.append(answer.status_code)
                if answer.status_code == 429:
                    limited.append(answer)
        assert statuses.count(200) == 20, statuses
        assert statuses[:20] == [200] * 20
        assert set(statuses[20:]) == {429}
        for answer in limited[:2]:  # one from each instance
            assert int(answer.headers["Retry-After"]) >= 1
            assert answer.json()["error"]["type"] == "TooManyRequestsException"
            assert answer.json()["error"]["code"] == 429


# -- crashes and shutdown ----------------------------------------------------------------------


@dataclass
class Appends:
    acknowledged: list[str] = field(default_factory=list)  # property keys whose commit answered 200
    uncertain: list[str] = field(default_factory=list)  # the instance died before answering
    conflicts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _table_url(gw: GatewayProcess, table: str) -> str:
    return f"{gw.url}/v1/namespaces/crash/tables/{table}"


def _writer(cluster: Cluster, writer: int, tables: list[str], stop: threading.Event, out: Appends) -> None:
    """Property commits, each with a unique key, to a table; on a dead instance, the other one."""
    preferred = cluster.instances[writer % 2]
    with cluster.session() as session:
        for n in range(400):
            if stop.is_set():
                return
            table = tables[n % len(tables)]
            marker = f"w{writer}-{n}"
            for gw in (preferred, *[g for g in cluster.instances if g is not preferred]):
                try:
                    answer = session.post(
                        _table_url(gw, table),
                        json={"updates": [{"action": "set-properties", "updates": {marker: "1"}}]},
                        timeout=30,
                    )
                except requests.ConnectionError:
                    with out.lock:
                        out.uncertain.append(marker)
                    continue  # the instance is gone: the load balancer sends the retry elsewhere
                if answer.status_code == 409:
                    with out.lock:
                        out.conflicts += 1
                    continue
                assert answer.status_code == 200, answer.text
                with out.lock:
                    out.acknowledged.append(marker)
                break


def _registry_pointers(server: PostgresServer, store_url: str) -> list[tuple[str, str]]:
    database = store_url.rsplit("/", 1)[1]
    rows = server.psql("SELECT name, metadata_location FROM catalog_objects ORDER BY name", database)
    return [tuple(line.split("|", 1)) for line in rows.splitlines() if line]  # type: ignore[misc]


def _local(location: str) -> Path:
    return Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))


def test_killing_one_instance_mid_commits_leaves_a_consistent_registry(
    cluster: Cluster, postgres_server: PostgresServer
) -> None:
    first, second = cluster.instances
    tables = ["a", "b"]
    with cluster.session() as admin:
        assert admin.post(f"{first.url}/v1/namespaces", json={"namespace": ["crash"]}, timeout=30).ok
        for table in tables:
            created = admin.post(
                f"{first.url}/v1/namespaces/crash/tables", json={"name": table, "schema": SCHEMA}, timeout=30
            )
            assert created.status_code == 200, created.text
    out, stop = Appends(), threading.Event()
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(_writer, cluster, w, tables, stop, out) for w in range(8)]
        _wait_for(lambda: len(out.acknowledged) >= 40, "commits through both instances")
        first.kill()  # SIGKILL: no graceful anything
        killed_at = len(out.acknowledged)
        _wait_for(lambda: len(out.acknowledged) >= killed_at + 40, "commits through the survivor")
        stop.set()
        for future in futures:
            future.result()

    with cluster.session() as admin:
        survivor_view: dict[str, dict[str, Any]] = {}
        for table in tables:
            loaded = admin.get(_table_url(second, table), timeout=30)
            assert loaded.status_code == 200, loaded.text
            survivor_view[table] = loaded.json()
            assert _local(loaded.json()["metadata-location"]).is_file()
            for entry in loaded.json()["metadata"]["metadata-log"]:  # no hole in the history
                assert _local(entry["metadata-file"]).is_file(), entry
    properties = {key for body in survivor_view.values() for key in body["metadata"]["properties"]}
    acknowledged = set(out.acknowledged)
    assert acknowledged <= properties, "an acknowledged commit was lost"
    assert {p for p in properties if p.startswith("w")} <= acknowledged | set(out.uncertain), (
        "a commit nobody made appeared"
    )
    # Every pointer in the registry names a file that exists.
    pointers = _registry_pointers(postgres_server, cluster.store_url)
    assert sorted(name for name, _ in pointers) == tables
    for _, location in pointers:
        assert _local(location).is_file(), location

    first.start()  # the killed instance comes back and serves the same state
    with cluster.session() as admin:
        for table in tables:
            again = admin.get(_table_url(first, table), timeout=30)
            assert again.status_code == 200
            assert again.json()["metadata"] == survivor_view[table]["metadata"]


def _hold_row_lock(
    server: PostgresServer, store_url: str, table: str, seconds: float
) -> subprocess.Popen[str]:
    """A psql session that locks a table's registry row for `seconds`, as a slow transaction would."""
    database = store_url.rsplit("/", 1)[1]
    sql = (
        f"BEGIN; SELECT uuid FROM catalog_objects WHERE name = '{table}' FOR UPDATE; "
        f"SELECT pg_sleep({seconds}); COMMIT;"
    )
    argv = [str(postgres.PG_BIN / "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(server.port)]
    argv += ["-U", postgres.SUPERUSER, "-d", database, "-v", "ON_ERROR_STOP=1", "-c", sql]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _refuses_connections(gw: GatewayProcess) -> bool:
    try:
        with socket.create_connection((gw.host, gw.port), timeout=1):
            return False
    except OSError:
        return True


def _single(tmp_path: Path, store_url: str, redis_url: str, shutdown_timeout: float, workers: int = 1) -> Any:
    extra = {"shutdown_timeout_seconds": shutdown_timeout, "workers": workers}
    return _cluster(tmp_path, store_url, redis_url, extra=extra, count=1)


def _start_commit(cluster: Cluster, table: str, marker: str) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def commit() -> None:
        try:
            with cluster.session() as admin:
                answer = admin.post(
                    _table_url(cluster.instances[0], table),
                    json={"updates": [{"action": "set-properties", "updates": {marker: "1"}}]},
                    timeout=60,
                )
            result["status"] = answer.status_code
        except requests.ConnectionError as err:
            result["error"] = err

    thread = threading.Thread(target=commit)
    thread.start()
    return thread, result


def _create_crash_table(cluster: Cluster, table: str) -> dict[str, Any]:
    gw = cluster.instances[0]
    with cluster.session() as admin:
        assert admin.post(f"{gw.url}/v1/namespaces", json={"namespace": ["crash"]}, timeout=30).ok
        created = admin.post(
            f"{gw.url}/v1/namespaces/crash/tables", json={"name": table, "schema": SCHEMA}, timeout=30
        )
    assert created.status_code == 200, created.text
    body: dict[str, Any] = created.json()
    return body


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "supervisor-and-two-workers"])
def test_sigterm_lets_a_commit_in_flight_finish(
    postgres_url: str,
    redis_server: RedisServer,
    postgres_server: PostgresServer,
    tmp_path: Path,
    workers: int,
) -> None:
    with _single(tmp_path, postgres_url, redis_server.url, shutdown_timeout=20, workers=workers) as cluster:
        gw = cluster.instances[0]
        _create_crash_table(cluster, "t")
        lock = _hold_row_lock(postgres_server, postgres_url, "t", 3)
        time.sleep(0.5)  # the lock is held
        thread, result = _start_commit(cluster, "t", "finished")
        time.sleep(0.5)  # the commit waits on the row lock
        assert gw.process is not None
        gw.process.send_signal(signal.SIGTERM)
        _wait_for(lambda: _refuses_connections(gw), "the port to stop accepting", timeout=5)
        assert thread.is_alive(), "the commit should still be waiting for the lock"
        assert lock.wait(timeout=30) == 0, lock.stderr.read() if lock.stderr else ""
        thread.join(timeout=30)
        assert result.get("status") == 200, result
        assert gw.process.wait(timeout=30) == 0
        gw.start()
        with cluster.session() as admin:
            loaded = admin.get(_table_url(gw, "t"), timeout=30).json()
        assert loaded["metadata"]["properties"]["finished"] == "1"


def test_a_commit_longer_than_the_shutdown_timeout_is_cut_off_whole(
    postgres_url: str, redis_server: RedisServer, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    with _single(tmp_path, postgres_url, redis_server.url, shutdown_timeout=1) as cluster:
        gw = cluster.instances[0]
        before = _create_crash_table(cluster, "t")
        lock = _hold_row_lock(postgres_server, postgres_url, "t", 8)
        time.sleep(0.5)
        thread, result = _start_commit(cluster, "t", "cut")
        time.sleep(0.5)
        assert gw.process is not None
        stopping = time.monotonic()
        gw.process.send_signal(signal.SIGTERM)
        assert gw.process.wait(timeout=30) == 0
        assert time.monotonic() - stopping < 6  # the timeout, not the 8 s lock, bounded the wait
        thread.join(timeout=30)
        assert result.get("status") != 200, result  # never acknowledged
        assert lock.wait(timeout=30) == 0
        gw.start()
        with cluster.session() as admin:
            after = admin.get(_table_url(gw, "t"), timeout=30).json()
        assert "cut" not in after["metadata"]["properties"]  # rolled back, not half-applied
        assert after["metadata-location"] == before["metadata-location"]
        pointers = _registry_pointers(postgres_server, postgres_url)
        assert all(_local(location).is_file() for _, location in pointers)
