"""Vended credentials for an S3 warehouse: a real moto S3 + STS server, a production-like gateway
(TLS, API keys, Cedar with namespace grants), and DuckDB and pyiceberg holding no S3 keys of their own.

moto does not enforce session policies: what vended credentials may do is proved by the exact
session policy the gateway sent to STS, recorded by a proxy in front of moto's STS together with the
access key id that AssumeRole call issued.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.audit import flushed_audit_log
from tests.support.gateway import bundled_policies
from tests.support.s3 import REGION, ROLE_ARN, MotoS3Server, moto_s3_server
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import TestPki

# Group "viewers" may load tables but never receives credentials for their files.
NO_CREDENTIALS_POLICY = """
@id("viewers-get-no-credentials")
forbid (principal, action == Cedarberg::Action::"loadCredentials", resource)
when { principal.groups.contains("viewers") };

// Group "eu" may read sales.orders only through plans restricted to two columns and EU rows.
@id("eu-orders-restricted")
@columns("id, tag")
@row_filter("tag = 'eu'")
permit (principal in Cedarberg::Group::"eu", action in Cedarberg::Action::"read",
        resource == Cedarberg::Table::"lake/sales/orders");
"""


def read_policy(bucket: str, prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "Sid": "ReadTableFiles",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:GetObjectVersion"],
            "Resource": [f"arn:aws:s3:::{bucket}/{prefix}/*"],
        },
        {
            "Sid": "ListTableFiles",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{bucket}"],
            "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
        },
        {
            "Sid": "LocateBucket",
            "Effect": "Allow",
            "Action": ["s3:GetBucketLocation"],
            "Resource": [f"arn:aws:s3:::{bucket}"],
        },
    ]


def write_statement(bucket: str, prefix: str) -> dict[str, Any]:
    return {
        "Sid": "WriteTableFiles",
        "Effect": "Allow",
        "Action": [
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        ],
        "Resource": [f"arn:aws:s3:::{bucket}/{prefix}/*"],
    }


class Lake:
    """The gateway, the S3 server, and one API key per role."""

    def __init__(self, gateway: SecureGateway, s3: MotoS3Server, audit: Path) -> None:
        self.gateway = gateway
        self.s3 = s3
        self.audit = audit
        self.writer = gateway.create_key("etl-bot", ["etl"])
        self.reader = gateway.create_key("analyst", ["bi"])
        self.viewer = gateway.create_key("viewer", ["viewers"])
        self.outsider = gateway.create_key("stranger", ["nobody"])
        self.restricted = gateway.create_key("eu-analyst", ["eu"])
        self.vended: list[dict[str, str]] = []  # every credential config seen, for the log checks

    def catalog(self, key: str, **props: str) -> RestCatalog:
        # No s3.* keys: the catalog's default header asks for vended credentials.
        return self.gateway.catalog(credential=self.gateway.credential(key), warehouse="lake", **props)

    def credentials(self, key: str, namespace: str, table: str, **params: str) -> Any:
        session = self.gateway.session(self.gateway.token(key))
        path = f"namespaces/{self.gateway.ns_path(namespace)}/tables/{table}/credentials"
        answer = session.get(self.gateway.catalog_url(path), params=params, timeout=30)
        if answer.status_code == 200:
            self.vended.extend(item["config"] for item in answer.json()["storage-credentials"])
        return answer

    def load(self, key: str, namespace: str, table: str, delegation: str | None) -> Any:
        session = self.gateway.session(self.gateway.token(key))
        if delegation is not None:
            session.headers["X-Iceberg-Access-Delegation"] = delegation
        path = f"namespaces/{self.gateway.ns_path(namespace)}/tables/{table}"
        answer = session.get(self.gateway.catalog_url(path), timeout=30)
        if answer.status_code == 200 and "s3.secret-access-key" in answer.json().get("config", {}):
            self.vended.append(answer.json()["config"])
        return answer

    def prefix_of(self, location: str) -> str:
        return location.removeprefix(f"s3://{self.s3.bucket}/")

    def audit_records(self) -> list[dict[str, Any]]:
        return flushed_audit_log(self.audit)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[Lake]:
    base = tmp_path_factory.mktemp("vending")
    policies = base / "policies"
    bundled_policies(policies, {"viewers.cedar": NO_CREDENTIALS_POLICY})
    audit = base / "audit.jsonl"
    with pytest.MonkeyPatch.context() as env, moto_s3_server() as s3:
        for name in AMBIENT_CA_VARIABLES:  # pyiceberg/requests trust only the given CA
            env.delenv(name, raising=False)
        config = {
            "default_warehouse": "lake",
            "warehouses": {
                "lake": s3.warehouse("lake", vending=True),
                "files": {"location": (base / "files").as_uri()},
            },
            "audit": {"destination": str(audit)},
            "authz": {"policy_dir": str(policies)},
        }
        with SecureGateway(base / "gw", pki=session_pki, config=config) as gateway:
            gateway.create_namespace("sales", readers=["bi", "viewers"], writers=["etl"])
            yield Lake(gateway, s3, audit)


@pytest.fixture(scope="module")
def orders(lake: Lake) -> str:
    """Table sales.orders with rows 1..3, written by pyiceberg with the writer's vended credentials."""
    catalog = lake.catalog(lake.writer)
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "tag": pa.array(["a", "b", "c"])})
    table = catalog.create_table("sales.orders", schema=data.schema)
    table.append(data)
    catalog.close()
    return table.location()


def test_pyiceberg_reader_reads_with_vended_credentials_only(lake: Lake, orders: str) -> None:
    catalog = lake.catalog(lake.reader)
    table = catalog.load_table("sales.orders")
    assert table.io.properties["s3.access-key-id"].startswith("ASIA")
    assert "s3.session-token" in table.io.properties
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    catalog.close()


def test_load_credentials_read_only_for_a_reader_read_write_for_a_writer(lake: Lake, orders: str) -> None:
    prefix = lake.prefix_of(orders)
    answers = {who: lake.credentials(key, "sales", "orders") for who, key in
               (("reader", lake.reader), ("writer", lake.writer))}  # fmt: skip
    policies = {}
    for who, answer in answers.items():
        assert answer.status_code == 200, answer.text
        assert answer.headers["Cache-Control"] == "no-store"
        [credential] = answer.json()["storage-credentials"]
        assert credential["prefix"] == orders
        config = credential["config"]
        assert int(config["s3.session-token-expires-at-ms"]) > (time.time() + 400) * 1000
        assert config["s3.endpoint"] == lake.s3.url
        assert config["s3.path-style-access"] == "true"
        assert config["s3.region"] == config["client.region"] == REGION
        call = lake.s3.assumed_role(config["s3.access-key-id"])
        assert call["RoleArn"] == ROLE_ARN
        assert call["DurationSeconds"] == "900"
        policies[who] = json.loads(call["Policy"])["Statement"]

    assert policies["reader"] == read_policy(lake.s3.bucket, prefix)
    assert policies["writer"] == [
        *read_policy(lake.s3.bucket, prefix),
        write_statement(lake.s3.bucket, prefix),
    ]
    # planId is accepted: credentials cover the whole table location.
    assert lake.credentials(lake.reader, "sales", "orders", planId="p-1").status_code == 200


def test_credentials_are_reused_per_location_and_level(lake: Lake, orders: str) -> None:
    first = lake.credentials(lake.reader, "sales", "orders").json()
    calls = lake.s3.assume_role_count()
    again = lake.load(lake.reader, "sales", "orders", "vended-credentials").json()
    assert lake.s3.assume_role_count() == calls
    key = first["storage-credentials"][0]["config"]["s3.access-key-id"]
    assert again["config"]["s3.access-key-id"] == key
    assert again["storage-credentials"][0]["config"]["s3.access-key-id"] == key


def test_load_without_the_header_or_with_if_none_match(lake: Lake, orders: str) -> None:
    plain = lake.load(lake.reader, "sales", "orders", None)
    assert plain.status_code == 200
    assert "s3.access-key-id" not in plain.json().get("config", {})
    assert "storage-credentials" not in plain.json()

    session = lake.gateway.session(lake.gateway.token(lake.reader))
    url = lake.gateway.catalog_url(f"namespaces/{lake.gateway.ns_path('sales')}/tables/orders")
    etag = plain.headers["ETag"]
    assert session.get(url, headers={"If-None-Match": etag}, timeout=30).status_code == 304
    # A request for credentials gets them, never a 304 (they are not part of the cached answer).
    asked = session.get(
        url, headers={"If-None-Match": etag, "X-Iceberg-Access-Delegation": "vended-credentials"}, timeout=30
    )
    assert asked.status_code == 200
    assert asked.json()["config"]["s3.access-key-id"].startswith("ASIA")
    lake.vended.append(asked.json()["config"])


def test_no_credentials_for_who_cannot_load_or_may_not_have_them(lake: Lake, orders: str) -> None:
    # An outsider cannot see the table: 404, as if absent, and nothing is vended.
    assert lake.credentials(lake.outsider, "sales", "orders").status_code == 404
    assert lake.load(lake.outsider, "sales", "orders", "vended-credentials").status_code == 404
    # A viewer may load the table, but Cedar forbids loadCredentials: 403 on the route, and the
    # load is answered without credentials.
    denied = lake.credentials(lake.viewer, "sales", "orders")
    assert denied.status_code == 403
    assert denied.json()["error"]["type"] == "ForbiddenException"
    loaded = lake.load(lake.viewer, "sales", "orders", "vended-credentials")
    assert loaded.status_code == 200
    assert "s3.access-key-id" not in loaded.json()["config"]
    assert "storage-credentials" not in loaded.json()

    records = lake.audit_records()
    refused = [r for r in records if r["principal"] == "key:viewer" and r["action"] == "loadCredentials"]
    assert len(refused) >= 2
    assert {r["decision"] for r in refused} == {"deny"}
    assert all(r["policy_ids"] == ["viewers-get-no-credentials"] for r in refused)


def test_no_file_access_for_who_may_read_only_through_restrictions(lake: Lake, orders: str) -> None:
    # `eu` may read the table, but only through @columns/@row_filter: the files hold every
    # column and row, so no credentials, no signatures; planning is the way in.
    denied = lake.credentials(lake.restricted, "sales", "orders")
    assert denied.status_code == 403, denied.text
    assert "restricted to some columns or rows" in denied.json()["error"]["message"]
    loaded = lake.load(lake.restricted, "sales", "orders", "vended-credentials")
    assert loaded.status_code == 200, loaded.text
    assert "s3.access-key-id" not in loaded.json()["config"]
    assert "storage-credentials" not in loaded.json()
    session = lake.gateway.session(lake.gateway.token(lake.restricted))
    key = f"{lake.prefix_of(orders)}/data/any.parquet"
    signed = session.post(
        lake.gateway.catalog_url("namespaces/sales/tables/orders/sign"),
        json={
            "region": REGION,
            "uri": f"{lake.s3.url}/{lake.s3.bucket}/{key}",
            "method": "GET",
            "headers": {},
        },
        timeout=30,
    )
    assert signed.status_code == 403, signed.text
    planned = session.post(
        lake.gateway.catalog_url("namespaces/sales/tables/orders/plan"), json={"select": ["id"]}, timeout=30
    )
    assert planned.status_code == 200, planned.text
    for task in planned.json()["file-scan-tasks"]:
        assert task["residual-filter"] == {"type": "eq", "term": "tag", "value": "eu"}
    refused = [
        r for r in lake.audit_records() if r["principal"] == "key:eu-analyst" and r["action"] == "signRequest"
    ]
    assert any("restricted" in (r.get("detail") or {}).get("reason", "") for r in refused), refused


def test_warehouse_without_vending_answers_no_credentials(lake: Lake) -> None:
    session = lake.gateway.session(lake.gateway.admin_key)
    root = f"{lake.gateway.url}/v1/files"
    assert session.post(f"{root}/namespaces", json={"namespace": ["n"]}, timeout=30).status_code == 200
    body = {"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": []}}
    assert session.post(f"{root}/namespaces/n/tables", json=body, timeout=30).status_code == 200
    answer = session.get(f"{root}/namespaces/n/tables/t/credentials", timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"storage-credentials": []}
    # The header on a warehouse that cannot vend changes nothing.
    loaded = session.get(
        f"{root}/namespaces/n/tables/t",
        headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
        timeout=30,
    )
    assert loaded.status_code == 200
    assert "storage-credentials" not in loaded.json()


def test_duckdb_reads_and_writes_with_vended_credentials_only(lake: Lake) -> None:
    con = lake.gateway.duckdb(lake.writer, warehouse="lake")
    try:
        con.execute("CREATE TABLE cat.sales.events (id INTEGER, kind VARCHAR)")
        con.execute("INSERT INTO cat.sales.events VALUES (1, 'click'), (2, 'view')")
        con.execute("INSERT INTO cat.sales.events VALUES (3, 'buy'), (4, 'oops')")
        con.execute("UPDATE cat.sales.events SET kind = 'seen' WHERE id = 2")
        con.execute("DELETE FROM cat.sales.events WHERE id = 4")
        rows = con.execute("SELECT id, kind FROM cat.sales.events ORDER BY id").fetchall()
        assert rows == [(1, "click"), (2, "seen"), (3, "buy")]
    finally:
        con.close()
    location = lake.load(lake.writer, "sales", "events", "vended-credentials").json()["metadata"]["location"]
    data = [k for k in lake.s3.keys(lake.prefix_of(location) + "/data/") if k.endswith(".parquet")]
    assert len(data) >= 2
    # The S3 server checks signatures: only the vended credentials can have written these files.
    with pytest.raises(urllib.error.HTTPError, match="403"):
        urllib.request.urlopen(f"{lake.s3.url}/{lake.s3.bucket}/{data[0]}", timeout=10)
    # pyiceberg, as a reader, sees what DuckDB wrote.
    catalog = lake.catalog(lake.reader)
    assert sorted(catalog.load_table("sales.events").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    catalog.close()


def test_register_with_the_header_vends_too(lake: Lake, orders: str) -> None:
    metadata_location = lake.load(lake.writer, "sales", "orders", None).json()["metadata-location"]
    session = lake.gateway.session(lake.gateway.token(lake.writer))
    session.headers["X-Iceberg-Access-Delegation"] = "vended-credentials"
    answer = session.post(
        lake.gateway.catalog_url(f"namespaces/{lake.gateway.ns_path('sales')}/register"),
        # Registering the table's own current metadata again (overwrite) changes nothing but answers.
        json={"name": "orders", "metadata-location": metadata_location, "overwrite": True},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    [credential] = answer.json()["storage-credentials"]
    assert credential["prefix"] == orders
    lake.vended.append(credential["config"])
    policy = json.loads(lake.s3.assumed_role(credential["config"]["s3.access-key-id"])["Policy"])
    assert policy["Statement"][-1]["Sid"] == "WriteTableFiles"


def test_vending_is_audited_and_no_secret_is_logged(lake: Lake, orders: str) -> None:
    lake.credentials(lake.writer, "sales", "orders")
    records = lake.audit_records()
    vended = [r for r in records if r["action"] == "vendCredentials"]
    assert {r["principal"] for r in vended} >= {"key:etl-bot", "key:analyst"}
    levels = {r["detail"]["level"] for r in vended}
    assert levels == {"read", "read-write"}
    assert all(r["detail"]["expires_at_ms"] > 0 and r["resource"] for r in vended)
    writes = [r for r in records if r["action"] == "writeTableData"]
    assert {(r["principal"], r["decision"]) for r in writes} >= {
        ("key:etl-bot", "allow"),
        ("key:analyst", "deny"),
    }

    assert lake.vended
    audit_text = lake.audit.read_text()
    log_text = lake.gateway.log_text()
    for config in lake.vended:
        for secret in (config["s3.secret-access-key"], config["s3.session-token"]):
            assert secret not in audit_text
            assert secret not in log_text
