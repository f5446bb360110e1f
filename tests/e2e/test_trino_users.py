"""Each Trino user decided by Cedar: Trino 476 with `iceberg.rest-catalog.session=USER`.

One TLS gateway, the session's Trino coordinator, one Trino catalog `users` whose credential is the
coordinator's service key `trino`. A delegation policy lets that key act for users of the gateway's
directory (`actAs`); the directory lists `alice` (in `analysts`) and `bob` (in `guests`). Namespace
`sales` is read by `analysts` (written by `etl`), `hr` too, but a `forbid` on `context.via` keeps
everything under `hr` from being read through Trino, whoever it acts for. Tables are created by
the admin through a plain (token) catalog `users_admin`.

Controls: alice reads `sales.orders` through Trino, and the audit log records her as principal and
the Trino key as actor; an `analysts` key reads `hr` directly. Attacks: bob (listed, no grant)
after alice, carol (outside the directory), alice reading `hr` through Trino, and alice writing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.audit import flushed_audit_log
from tests.support.gateway import bundled_policies
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import TestPki
from tests.support.trino import TrinoQueryError, TrinoServer, rest_catalog_properties

pytestmark = pytest.mark.trino

TIMEOUT = 30
WAREHOUSE = "local"
TRINO_KEY_PRINCIPAL = "trino"
POLICIES = f"""
// The Trino coordinator's key acts for the users of the directory, with Trino's own unsigned
// subject, for its catalog `users` only.
@id("trino-acts-for-directory-users")
permit (
  principal == Cedarberg::Service::"key:{TRINO_KEY_PRINCIPAL}",
  action == Cedarberg::Action::"actAs",
  resource
)
when {{
  context.subject_issuer == "unsigned" && context has trino_catalog && context.trino_catalog == "users"
}};

// Nothing under `hr` is read through Trino, whoever it acts for.
@id("no-hr-through-trino")
forbid (principal, action, resource in Cedarberg::Namespace::"{WAREHOUSE}/hr")
when {{ context has via && context.via == "key:{TRINO_KEY_PRINCIPAL}" }};
"""


@dataclass
class Users:
    gateway: SecureGateway
    trino: TrinoServer
    audit_path: Path
    analyst_key: str  # an `analysts` key, used directly (no Trino, no delegation)
    guest_key: str  # a `guests` key, used directly: bob's groups without Trino

    def q(self, sql: str, user: str) -> list[list[Any]]:
        return self.trino.query(sql, user=user)

    def refused(self, sql: str, user: str) -> TrinoQueryError:
        with pytest.raises(TrinoQueryError) as error:
            self.trino.query(sql, user=user)
        return error.value

    def direct(self, method: str, path: str, body: object = None, *, key: str | None = None) -> Any:
        """The gateway's answer to ``key`` (default: the `analysts` key) itself for ``method path``."""
        session = self.gateway.session(self.gateway.token(key or self.analyst_key))
        return session.request(method, self.gateway.catalog_url(path), json=body, timeout=TIMEOUT)

    def audit(self) -> list[dict[str, Any]]:
        return flushed_audit_log(self.audit_path)


@pytest.fixture(scope="module")
def users(
    tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki, trino: TrinoServer
) -> Iterator[Users]:
    base = tmp_path_factory.mktemp("trino-users")
    local_dir = base / "local"
    audit_path = base / "audit.jsonl"
    policy_dir = bundled_policies(base / "policies", {"delegation.cedar": POLICIES})
    config = {
        "default_warehouse": WAREHOUSE,
        "warehouses": {WAREHOUSE: {"location": local_dir.as_uri()}},
        "authz": {"policy_dir": str(policy_dir)},
        "audit": {"destination": str(audit_path)},
    }
    with pytest.MonkeyPatch.context() as env:
        for name in AMBIENT_CA_VARIABLES:
            env.delenv(name, raising=False)
        with SecureGateway(base / "gw", pki=session_pki, config=config) as gateway:
            # Trino 476 needs a namespace location to create tables (test_trino.py pins why).
            for namespace in ("sales", "hr"):
                gateway.create_namespace(
                    namespace,
                    readers=["analysts"],
                    writers=["etl"],
                    properties={"location": (local_dir / namespace).as_uri()},
                )
            for user, groups in {"alice": ["analysts"], "bob": ["guests"]}.items():
                answer = gateway.admin.put(
                    f"{gateway.url}/admin/v1/users/{user}", json={"groups": groups}, timeout=TIMEOUT
                )
                assert answer.status_code < 300, answer.text
            trino_key = gateway.create_key(TRINO_KEY_PRINCIPAL, ["engines"])
            analyst_key = gateway.create_key("analyst-direct", ["analysts"])
            guest_key = gateway.create_key("guest-direct", ["guests"])
            trino.create_catalog(
                "users",
                rest_catalog_properties(
                    gateway.url,
                    warehouse=WAREHOUSE,
                    credential=gateway.credential(trino_key),
                    local_root=Path("/"),
                    **{"iceberg.rest-catalog.session": "USER"},
                ),
            )
            trino.create_catalog(
                "users_admin",
                rest_catalog_properties(
                    gateway.url, warehouse=WAREHOUSE, token=gateway.admin_key, local_root=Path("/")
                ),
            )
            for namespace, table in (("sales", "orders"), ("hr", "people")):
                trino.query(f"CREATE TABLE users_admin.{namespace}.{table} (id bigint, name varchar)")
                trino.query(f"INSERT INTO users_admin.{namespace}.{table} VALUES (1, 'one'), (2, 'two')")
            yield Users(gateway, trino, audit_path, analyst_key, guest_key)
            for name in ("users", "users_admin"):
                trino.query(f"DROP CATALOG {name}")


def test_alice_in_analysts_reads_as_herself_with_trino_as_actor(users: Users) -> None:
    """Control: a listed analyst reads through Trino; the audit log names her and Trino."""
    assert users.q("SELECT id, name FROM users.sales.orders ORDER BY id", "alice") == [
        [1, "one"],
        [2, "two"],
    ]
    assert {row[0] for row in users.q("SHOW TABLES FROM users.sales", "alice")} == {"orders"}
    records = users.audit()
    acts = {(r["principal"], r["resource"], r["decision"]) for r in records if r["action"] == "actAs"}
    assert (f"key:{TRINO_KEY_PRINCIPAL}", 'Cedarberg::User::"user:alice"', "allow") in acts
    loads = {(r["principal"], r["actor"], r["decision"]) for r in records if r["action"] == "loadTable"}
    assert ("user:alice", f"key:{TRINO_KEY_PRINCIPAL}", "allow") in loads


def test_bob_without_a_grant_sees_nothing_after_alice_read_the_same_table(users: Users) -> None:
    """Attack: bob, listed but in no granted group, on the catalog alice just read through. The
    gateway hides what he may not read (its existence checks answer 404), so Trino says, in its own
    words, that the schema does not exist; the audit log has the gateway's denials of bob."""
    assert users.q("SELECT count(*) FROM users.sales.orders", "alice") == [[2]]
    for sql, column in (("SELECT id, name FROM users.sales.orders", 22), ("SHOW TABLES FROM users.sales", 1)):
        error = users.refused(sql, "bob")
        assert error.message == f"line 1:{column}: Schema 'sales' does not exist", (sql, error.message)
    # What the gateway answers bob's groups for the same requests (Trino asks before it reads).
    assert users.direct("HEAD", "namespaces/sales", key=users.guest_key).status_code == 404
    hidden = users.direct("GET", "namespaces/sales/tables/orders", key=users.guest_key)
    assert hidden.status_code == 404, hidden.text
    assert hidden.json()["error"]["type"] == "NoSuchTableException"
    bobs = {
        (r["action"], r["resource"], r["decision"])
        for r in users.audit()
        if r["principal"] == "user:bob" and r["actor"] == f"key:{TRINO_KEY_PRINCIPAL}"
    }
    assert ("namespaceExists", 'Cedarberg::Namespace::"local/sales"', "deny") in bobs
    assert ("loadTable", 'Cedarberg::Table::"local/sales/orders"', "deny") in bobs
    assert all(decision == "deny" for _action, _resource, decision in bobs), bobs


def test_carol_outside_the_directory_fails_with_the_exchanges_oauth2_error(users: Users) -> None:
    """Attack: a Trino user the directory does not list gets no token, so no query. Trino 476
    shows its own wording; the exchange's OAuth2 error is the cause (what `trino --debug` prints),
    in the words of Iceberg's OAuth2 error handler (`Malformed request: <error>: <description>`)."""
    error = users.refused("SELECT id FROM users.sales.orders", "carol")
    assert error.message == "Failed to load view 'orders'"
    assert error.causes[0] == "Malformed request: unauthorized_client: the actor may not act for this user"
    records = users.audit()
    acts = {(r["resource"], r["decision"]) for r in records if r["action"] == "actAs"}
    assert ('Cedarberg::User::"user:carol"', "deny") in acts
    assert not [r for r in records if r["principal"] == "user:carol"]  # carol never got a token


def test_a_forbid_on_context_via_binds_alice_through_trino_but_not_the_same_grant_directly(
    users: Users,
) -> None:
    """Attack: alice reads `hr`, which her group may read, through Trino; the policy on
    `context.via` refuses it. Control: an `analysts` key reads the same table without Trino."""
    for sql, column in (("SELECT id FROM users.hr.people", 16), ("SHOW TABLES FROM users.hr", 1)):
        error = users.refused(sql, "alice")
        assert error.message == f"line 1:{column}: Schema 'hr' does not exist", (sql, error.message)
    # The same grant without Trino: an `analysts` key loads the table and lists the namespace.
    direct = users.direct("GET", "namespaces/hr/tables/people")
    assert direct.status_code == 200, direct.text
    assert direct.json()["metadata"]["current-snapshot-id"] is not None
    listed = users.direct("GET", "namespaces/hr/tables")
    assert [t["name"] for t in listed.json()["identifiers"]] == ["people"]
    alice_hr = [r for r in users.audit() if r["principal"] == "user:alice" and '"local/hr' in r["resource"]]
    assert alice_hr
    assert all(r["decision"] == "deny" and r["policy_ids"] == ["no-hr-through-trino"] for r in alice_hr)


def test_alice_may_not_write_with_the_gateways_message_and_nothing_changes(users: Users) -> None:
    """Attack: analysts only read; alice's INSERT through Trino is refused by the gateway."""
    direct = users.direct("POST", "namespaces/sales/tables/orders", {"requirements": [], "updates": []})
    assert direct.status_code == 403, direct.text
    error = users.refused("INSERT INTO users.sales.orders VALUES (3, 'three')", "alice")
    # Trino shows the gateway's refusal as Iceberg's client words it (`Forbidden: <message>`).
    assert error.message == f"Forbidden: {direct.json()['error']['message']}", error.message
    commits = {
        (r["principal"], r["actor"], r["decision"]) for r in users.audit() if r["action"] == "updateTable"
    }
    assert ("user:alice", f"key:{TRINO_KEY_PRINCIPAL}", "deny") in commits
    assert users.q("SELECT count(*) FROM users_admin.sales.orders", "trino") == [[2]]
