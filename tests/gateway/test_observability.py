"""Metrics, probes and logs of real gateway processes.

- `/metrics` (Cedar action `readMetrics`, group `monitoring`) exposes every family with the right
  labels after a short workload, and sums all workers of `serve --workers 2`;
- `/health` and `/ready`: ready only while the registry (PostgreSQL), the KMS (OpenBao) and the
  policies are usable, with the failing dependency named;
- JSON log lines carry the request id (the one returned in `X-Request-ID`) and the principal.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from cedarberg.gateway.authn.key_format import generate_key
from tests.support.gateway import GatewayProcess
from tests.support.kms_servers import OpenBaoServer
from tests.support.postgres import PostgresServer

DEADLINE_SECONDS = 20.0
TABLE_SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _create_key(gw: GatewayProcess, principal: str, groups: list[str]) -> dict[str, Any]:
    answer = requests.post(
        f"{gw.url}/admin/v1/api-keys",
        json={"principal": principal, "kind": "service", "groups": groups},
        timeout=30,
    )
    assert answer.status_code in (200, 201), answer.text
    body: dict[str, Any] = answer.json()
    return body


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _pool_capacity(gw: GatewayProcess) -> int:
    """The most registry connections one worker opens, by default: on SQLite 4 readers and the
    writer; on PostgreSQL store_pool_size + store_max_overflow (10 + 10)."""
    return 5 if gw.store_kind == "sqlite" else 20


def _checked_out(gw: GatewayProcess, key: str) -> float:
    scraped = requests.get(f"{gw.url}/metrics", headers=_bearer(key), timeout=30)
    assert scraped.status_code == 200, scraped.text
    return _value(_samples(scraped.text), "cedarberg_store_pool_connections", state="checked_out")


def test_metrics_cover_the_workload_with_bounded_labels(tmp_path: Path, fresh_store_url: str | None) -> None:
    config = {"rate_limits": {"admin": "3/minute", "token": "1/minute"}}
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url, config=config) as gw:
        monitoring = _create_key(gw, "prometheus", ["monitoring"])  # admin operation 1
        stranger = _create_key(gw, "stranger", ["nobody"])  # admin operation 2
        assert requests.get(f"{gw.url}/admin/v1/api-keys", timeout=30).status_code == 200  # 3
        limited = requests.get(f"{gw.url}/admin/v1/api-keys", timeout=30)
        assert limited.status_code == 429

        assert requests.post(f"{gw.url}/v1/namespaces", json={"namespace": ["m"]}, timeout=30).ok
        created = requests.post(
            f"{gw.url}/v1/namespaces/m/tables", json={"name": "t", "schema": TABLE_SCHEMA}, timeout=30
        )
        assert created.status_code == 200, created.text
        for _ in range(3):
            assert requests.get(f"{gw.url}/v1/namespaces/m/tables/t", timeout=30).status_code == 200
        conflict = requests.post(
            f"{gw.url}/v1/namespaces/m/tables/t",
            json={
                "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 99}],
                "updates": [{"action": "set-properties", "updates": {"k": "v"}}],
            },
            timeout=30,
        )
        assert conflict.status_code == 409
        denied = requests.get(
            f"{gw.url}/v1/namespaces/m/tables/t", headers=_bearer(stranger["key"]), timeout=30
        )
        assert denied.status_code == 404  # what a caller may not read does not exist for it
        key_id, _, secret = monitoring["key"][4:].partition("_")
        issued = requests.post(
            f"{gw.url}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": key_id, "client_secret": secret},
            timeout=30,
        )
        assert issued.status_code == 200, issued.text
        refused = requests.post(
            f"{gw.url}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": key_id, "client_secret": "x" * 43},
            timeout=30,
        )
        assert refused.status_code == 401
        throttled = requests.post(  # right credentials, over the principal's token budget
            f"{gw.url}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": key_id, "client_secret": secret},
            timeout=30,
        )
        assert throttled.status_code == 429
        assert int(throttled.headers["Retry-After"]) >= 1
        assert throttled.json()["error"] == "temporarily_unavailable"

        forbidden = requests.get(f"{gw.url}/metrics", headers=_bearer(stranger["key"]), timeout=30)
        assert forbidden.status_code == 403
        scraped = requests.get(f"{gw.url}/metrics", headers=_bearer(monitoring["key"]), timeout=30)
        assert scraped.status_code == 200, scraped.text
        assert scraped.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        samples = _samples(scraped.text)
        # Background work (the key change feed's poll, a sweeper, a stale entry's refresh) may hold
        # a connection at the moment of any one scrape; a connection never given back holds one at
        # every scrape.
        _wait_for(lambda: _checked_out(gw, monitoring["key"]) == 0, "every registry connection given back")

    total = "cedarberg_http_requests_total"
    assert _value(samples, total, operation="loadTable", method="GET", status="200") == 3
    assert _value(samples, total, operation="updateTable", method="POST", status="409") == 1
    assert _value(samples, total, operation="listApiKeys", method="GET", status="429") == 1
    assert _value(samples, total, operation="loadTable", method="GET", status="404") == 1
    assert _value(samples, "cedarberg_http_request_duration_seconds_count", operation="loadTable") == 4
    assert _value(samples, "cedarberg_commit_conflicts_total", operation="updateTable") == 1
    decisions = "cedarberg_authz_decisions_total"
    assert _value(samples, decisions, action="loadTable", outcome="allow") == 3
    assert _value(samples, decisions, action="loadTable", outcome="deny") >= 1
    assert _value(samples, decisions, action="readMetrics", outcome="deny") == 1
    assert _value(samples, decisions, action="readMetrics", outcome="allow") == 1
    limited_total = "cedarberg_rate_limit_rejections_total"
    assert _value(samples, limited_total, scope="principal", op_class="admin") == 1
    tokens = "cedarberg_tokens_total"
    assert _value(samples, tokens, grant_type="client_credentials", outcome="issued") == 1
    assert _value(samples, tokens, grant_type="client_credentials", outcome="refused") == 2
    assert _value(samples, limited_total, scope="principal", op_class="token") == 1
    kms = "cedarberg_kms_calls_total"
    assert _value(samples, kms, provider="local", op="generate_data_key", outcome="ok") >= 1
    # The first load and the refused commit open the table's metadata with its cached data key;
    # the other loads of that version are answered from the load-result cache without unsealing.
    assert _value(samples, "cedarberg_kms_data_key_cache_total", result="hit") >= 2
    assert _value(samples, "cedarberg_store_pool_connections", state="capacity") == _pool_capacity(gw)
    # Labels never carry principals, table names or raw paths.
    assert "stranger" not in scraped.text
    assert "prometheus" not in scraped.text
    assert "/v1/namespaces/m" not in scraped.text


def test_metrics_are_summed_over_all_workers(tmp_path: Path, fresh_store_url: str | None) -> None:
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url, extra_args=["--workers", "2"]) as gw:
        before = _samples(requests.get(f"{gw.url}/metrics", timeout=30).text)
        for _ in range(40):  # a new connection each time: the kernel spreads them over the workers
            with requests.get(f"{gw.url}/v1/config", timeout=30) as answer:
                assert answer.status_code == 200
        after = _samples(requests.get(f"{gw.url}/metrics", timeout=30).text)
    name = "cedarberg_http_requests_total"
    counted = _value(after, name, operation="getConfig", method="GET", status="200") - _value(
        before, name, operation="getConfig", method="GET", status="200"
    )
    assert counted == 40
    assert _value(after, "cedarberg_store_pool_connections", state="capacity") == 2 * _pool_capacity(gw)


def _ready(gw: GatewayProcess) -> requests.Response:
    return requests.get(f"{gw.url}/ready", timeout=30)


def test_ready_follows_the_kms(openbao: OpenBaoServer, tmp_path: Path) -> None:
    with GatewayProcess(tmp_path / "gw", config={"kms": {**openbao.kms_config, "timeout_seconds": 1}}) as gw:
        assert _ready(gw).json() == {
            "status": "ready",
            "checks": {"store": "ok", "kms": "ok", "policies": "ok", "audit": "ok", "rate_limits": "ok"},
        }
        openbao.seal()
        try:
            _wait_for(lambda: _ready(gw).status_code == 503, "/ready to report the sealed KMS")
            body = _ready(gw).json()
            assert body["checks"] == {
                "store": "ok",
                "kms": "unavailable",
                "policies": "ok",
                "audit": "ok",
                "rate_limits": "ok",
            }
            assert body["error"]["type"] == "ServiceUnavailableException"
            assert body["error"]["message"] == "not ready: kms"
            assert "root" not in json.dumps(body)  # nothing about the Vault or its token
            health = requests.get(f"{gw.url}/health", timeout=30)
            assert health.status_code == 200  # alive, only not ready
        finally:
            openbao.unseal()
        _wait_for(lambda: _ready(gw).status_code == 200, "/ready to recover")


@pytest.fixture
def private_database(postgres_server: PostgresServer) -> Iterator[tuple[str, str]]:
    url = postgres_server.create_database()
    name = url.rsplit("/", 1)[1]
    yield url, name
    postgres_server.psql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def _store_check(gw: GatewayProcess) -> tuple[int, str]:
    answer = _ready(gw)
    return answer.status_code, answer.json()["checks"]["store"]


def test_ready_follows_the_registry(
    postgres_server: PostgresServer, private_database: tuple[str, str], tmp_path: Path
) -> None:
    url, name = private_database
    with GatewayProcess(tmp_path / "gw", store_url=url) as gw:
        assert _ready(gw).status_code == 200
        postgres_server.psql(
            f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false; '
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        )
        # The pool's idle connections die as their backends exit, one by one: a check may still
        # find a live one just after the first 503, so wait for the store's own verdict.
        _wait_for(lambda: _store_check(gw) == (503, "unavailable"), "/ready to report the registry")
        postgres_server.psql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        _wait_for(lambda: _ready(gw).status_code == 200, "/ready to recover")


def _log_records(gw: GatewayProcess) -> list[dict[str, Any]]:
    records = []
    for line in gw.log_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "level" in record:  # audit records (stdout) have their own shape
                records.append(record)
    return records


def test_json_log_lines_carry_the_request_id_and_principal(
    tmp_path: Path, fresh_store_url: str | None
) -> None:
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url, config={"access_log": True}) as gw:
        etl = _create_key(gw, "etl", ["admins"])
        request_id = f"client-{uuid.uuid4().hex[:12]}"
        answer = requests.get(
            f"{gw.url}/v1/config", headers={**_bearer(etl["key"]), "X-Request-ID": request_id}, timeout=30
        )
        assert answer.status_code == 200
        assert answer.headers["X-Request-ID"] == request_id
        unknown = generate_key()  # well-formed, never issued
        bad = requests.get(f"{gw.url}/v1/config", headers=_bearer(unknown.presented), timeout=30)
        assert bad.status_code == 401
        bad_id = bad.headers["X-Request-ID"]
        time.sleep(0.2)
        records = _log_records(gw)

    assert records, "no JSON log lines"
    for record in records:
        assert {"time", "level", "logger", "message", "request_id", "principal"} <= record.keys()
        assert record["time"].endswith("Z")
    mine = [r for r in records if r["request_id"] == request_id]
    assert [r["logger"] for r in mine] == ["cedarberg.access"]
    assert mine[0]["principal"] == "key:etl"  # the audit record's form: the namespaced id
    assert mine[0]["message"].startswith("GET /v1/config 200")
    failed = [r for r in records if r["request_id"] == bad_id]
    assert {r["logger"] for r in failed} == {"cedarberg.authn.api_keys", "cedarberg.access"}
    assert all(r["principal"] is None for r in failed)  # it never authenticated
    startup = [r for r in records if "serving on" in r["message"]]
    assert startup
    assert startup[0]["request_id"] is None
    assert unknown.secret not in gw.log_text()  # the presented secret never reaches the log
