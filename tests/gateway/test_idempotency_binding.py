"""Idempotency records are bound to the principal and the request.

Attack (issue 15, section 4): another principal replaying an `Idempotency-Key` got the first
principal's recorded response and its own request did not run. Now the same key from another
principal is another key (its request runs and it gets its own answer), and the same key with a
different request from the same principal is 422. Control: the first principal's retry replays its
recorded response, also after a gateway restart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import requests

from tests.gateway.test_bad_input import assert_error
from tests.support import registry
from tests.support.secure import HTTP_TIMEOUT, SecureGateway

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
MARKER = "alice-private-marker-3f9c"


class Env:
    def __init__(self, gw: SecureGateway) -> None:
        self.gw = gw
        self.alice_key = gw.create_key("alice", ["etl"])
        self.bob_key = gw.create_key("bob", ["etl"])
        self.alice = gw.session(self.alice_key)
        self.bob = gw.session(self.bob_key)
        self.carol = gw.session(gw.create_key("carol", ["etl"]))

    def create(self, session: requests.Session, key: str, name: str, **properties: str) -> requests.Response:
        return session.post(
            self.gw.catalog_url("namespaces/shared/tables"),
            json={"name": name, "schema": SCHEMA, "properties": properties},
            headers={"Idempotency-Key": key},
            timeout=HTTP_TIMEOUT,
        )

    def tables(self) -> list[str]:
        answer = self.gw.admin.get(self.gw.catalog_url("namespaces/shared/tables"), timeout=HTTP_TIMEOUT)
        assert answer.status_code == 200, answer.text
        return sorted(item["name"] for item in answer.json()["identifiers"])


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None) -> Iterator[Env]:
    with SecureGateway(tmp_path_factory.mktemp("idempotency"), store_url=module_store_url) as gw:
        gw.create_namespace("shared", writers=["etl"])
        yield Env(gw)


def test_another_principal_reusing_a_key_runs_its_own_request(env: Env) -> None:
    key = str(uuid.uuid4())
    first = env.create(env.alice, key, "alice_orders", note=MARKER)
    assert first.status_code == 200, first.text

    # Bob sends Alice's key (a key is not a secret: it travels in logs and proxies).
    theirs = env.create(env.bob, key, "bob_orders")
    assert theirs.status_code == 200, theirs.text
    assert MARKER not in theirs.text
    assert "alice_orders" not in theirs.text
    assert theirs.json()["metadata"]["table-uuid"] != first.json()["metadata"]["table-uuid"]
    assert env.tables() == ["alice_orders", "bob_orders"]  # Bob's request ran

    # Carol sending Alice's exact request with her key runs it as her own: the name is taken.
    same = env.create(env.carol, key, "alice_orders", note=MARKER)
    assert_error(same, 409, "AlreadyExistsException")
    # And each principal's retry replays its own record.
    assert env.create(env.bob, key, "bob_orders").json() == theirs.json()
    assert env.create(env.alice, key, "alice_orders", note=MARKER).json() == first.json()


def test_the_same_key_with_another_request_is_422_and_changes_nothing(env: Env) -> None:
    key = str(uuid.uuid4())
    first = env.create(env.alice, key, "alice_events")
    assert first.status_code == 200, first.text
    before = env.tables()
    other_body = env.create(env.alice, key, "alice_other")
    assert_error(other_body, 422, "UnprocessableEntityException")
    same_body_other_properties = env.create(env.alice, key, "alice_events", extra="1")
    assert_error(same_body_other_properties, 422, "UnprocessableEntityException")
    other_query = env.alice.post(
        env.gw.catalog_url("namespaces/shared/tables"),
        params={"unexpected": "1"},
        json={"name": "alice_events", "schema": SCHEMA, "properties": {}},
        headers={"Idempotency-Key": key},
        timeout=HTTP_TIMEOUT,
    )
    assert_error(other_query, 422, "UnprocessableEntityException")
    assert env.tables() == before


def test_the_registry_stores_neither_the_key_nor_the_request(env: Env) -> None:
    key = str(uuid.uuid4())
    assert env.create(env.alice, key, "alice_stored", note=MARKER).status_code == 200
    rows = registry.query(env.gw.process, "SELECT key, request_hash, payload FROM idempotency_records")
    assert rows
    for stored_key, request_hash, payload in rows:
        assert stored_key != key
        assert len(request_hash) == 64
        assert MARKER.encode() not in (payload or b"")


def test_a_retry_replays_the_recorded_response_after_a_restart(env: Env) -> None:
    key = str(uuid.uuid4())
    first = env.create(env.alice, key, "alice_durable", note="x")
    assert first.status_code == 200, first.text
    env.gw.process.restart()
    with env.gw.session(env.alice_key) as alice:  # new connections to the new process
        again = env.create(alice, key, "alice_durable", note="x")
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
        assert_error(env.create(alice, key, "alice_durable", note="y"), 422, "UnprocessableEntityException")
    with env.gw.session(env.bob_key) as bob:
        assert env.create(bob, key, "bob_durable").status_code == 200
    assert "bob_durable" in env.tables()
