"""A reader's refused commits with large values do not grow a real gateway's memory.

The finding: refused commits carrying multi-megabyte values grew the gateway by about 120 MB per
40 requests, because the decision cache kept each request's context. Here a reader sends 40
commits to a table it may only read, each distinct (so none is a cache hit), either with a ~2 MB
`action` string (invalid: refused by the parse before any decision, 400) or setting ~10,000
distinct valid property keys (~2 MB of keys: refused by the decision, 403). Either way its
resident memory must not grow by more than a small bound.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.support.gateway import GatewayProcess

TIMEOUT = 60
REQUESTS = 40
KEYS_PER_REQUEST = 10_000
MAX_GROWTH_BYTES = 30 * 1024**2
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    with GatewayProcess(tmp_path / "gw", config={"max_body_bytes": 16 * 1024**2}) as gw:
        yield gw


def _admin(gw: GatewayProcess, method: str, path: str, body: object) -> requests.Response:
    answer = requests.request(
        method,
        f"{gw.url}{path}",
        json=body,
        headers={"Authorization": f"Bearer {gw.admin_key}"},
        timeout=TIMEOUT,
    )
    assert answer.status_code in (200, 201), answer.text
    return answer


def _many_property_keys(n: int) -> bytes:
    updates = {f"r{n}.key{i}." + "k" * 180: "v" for i in range(KEYS_PER_REQUEST)}
    return json.dumps(
        {"requirements": [], "updates": [{"action": "set-properties", "updates": updates}]}
    ).encode()


def _huge_action(n: int) -> bytes:
    return json.dumps({"requirements": [], "updates": [{"action": f"r{n}." + "x" * 2_000_000}]}).encode()


@pytest.mark.parametrize(
    ("commit", "status"), [(_many_property_keys, 403), (_huge_action, 400)], ids=["property-keys", "action"]
)
def test_refused_commits_with_large_values_do_not_grow_memory(
    gateway: GatewayProcess, commit: Callable[[int], bytes], status: int
) -> None:
    _admin(
        gateway,
        "POST",
        "/v1/namespaces",
        {"namespace": ["ns"], "properties": {"cedarberg.readers": "readers"}},
    )
    _admin(gateway, "POST", "/v1/namespaces/ns/tables", {"name": "t", "schema": SCHEMA})
    reader = _admin(
        gateway,
        "POST",
        "/admin/v1/api-keys",
        {"principal": "reader", "kind": "service", "groups": ["readers"]},
    ).json()["key"]
    headers = {"Authorization": f"Bearer {reader}", "Content-Type": "application/json"}
    url = f"{gateway.url}/v1/namespaces/ns/tables/t"
    assert requests.get(url, headers=headers, timeout=TIMEOUT).status_code == 200  # it may read
    pid = gateway.pid
    assert pid is not None
    bodies = [commit(n) for n in range(REQUESTS + 5)]
    assert len(bodies[0]) > 1_900_000
    for body in bodies[:5]:  # warm up: the allocator's arenas reach their working size
        assert requests.post(url, data=body, headers=headers, timeout=TIMEOUT).status_code == status
    before = _rss(pid)
    for body in bodies[5:]:
        refused = requests.post(url, data=body, headers=headers, timeout=TIMEOUT)
        assert refused.status_code == status, refused.text[:500]
    growth = _rss(pid) - before
    assert growth <= MAX_GROWTH_BYTES, f"RSS grew by {growth / 1024**2:.1f} MB over {REQUESTS} requests"
    # Control: the table is unchanged and ordinary requests work.
    loaded = requests.get(url, headers=headers, timeout=TIMEOUT)
    assert loaded.status_code == 200
    assert not any(k.startswith("r0.") for k in loaded.json()["metadata"].get("properties", {}))
