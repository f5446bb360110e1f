"""Remote signing for an S3 warehouse: pyiceberg's FsspecFileIO with the REST signer reads and writes
through requests the gateway signs (the client holds no S3 keys; the moto S3 server checks every
signature), and the sign route refuses whatever leaves the table's location or writes without
writeTableData, auditing why."""

from __future__ import annotations

import hashlib
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import SignError
from s3fs import S3FileSystem

from tests.support.audit import flushed_audit_log
from tests.support.s3 import REGION, MotoS3Server, moto_s3_server
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import TestPki

FSSPEC = "pyiceberg.io.fsspec.FsspecFileIO"


class Lake:
    def __init__(self, gateway: SecureGateway, s3: MotoS3Server, audit: Path) -> None:
        self.gateway = gateway
        self.s3 = s3
        self.audit = audit
        self.writer = gateway.token(gateway.create_key("etl-bot", ["etl"]))
        self.reader = gateway.token(gateway.create_key("analyst", ["bi"]))

    def catalog(self, token: str) -> RestCatalog:
        return self.gateway.catalog(
            token=token,
            warehouse="lake",
            **{"py-io-impl": FSSPEC, "header.X-Iceberg-Access-Delegation": "remote-signing"},
        )

    def sign(
        self,
        token: str,
        table: str,
        method: str,
        uri: str,
        body: str | None = None,
        headers: dict[str, list[str]] | None = None,
    ) -> Any:
        session = self.gateway.session(token)
        payload: dict[str, Any] = {"region": REGION, "uri": uri, "method": method, "headers": headers or {}}
        if body is not None:
            payload["body"] = body
        path = f"namespaces/{self.gateway.ns_path('sales')}/tables/{table}/sign"
        return session.post(self.gateway.catalog_url(path), json=payload, timeout=30)

    def object_uri(self, key: str) -> str:
        return f"{self.s3.url}/{self.s3.bucket}/{key}"

    def audit_records(self) -> list[dict[str, Any]]:
        return flushed_audit_log(self.audit)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[Lake]:
    base = tmp_path_factory.mktemp("signing")
    audit = base / "audit.jsonl"
    with pytest.MonkeyPatch.context() as env, moto_s3_server() as s3:
        # pyiceberg's signer posts with its own requests session, which trusts REQUESTS_CA_BUNDLE.
        for name in AMBIENT_CA_VARIABLES:
            env.delenv(name, raising=False)
        env.setenv("REQUESTS_CA_BUNDLE", str(session_pki.ca_cert))
        # pyiceberg 0.12's FsspecFileIO builds its s3fs filesystem once per thread, and every build
        # unregisters and re-registers the signer on the one s3fs client fsspec's instance cache
        # shares between them: a request emitted meanwhile goes out unsigned, and S3 refuses it
        # (403). Uncached, each build has a client (and a signer) of its own.
        env.setattr(S3FileSystem, "cachable", False)
        config = {
            "default_warehouse": "lake",
            "warehouses": {"lake": s3.warehouse("lake")},
            "audit": {"destination": str(audit)},
        }
        with SecureGateway(base / "gw", pki=session_pki, config=config) as gateway:
            gateway.create_namespace("sales", readers=["bi"], writers=["etl"])
            yield Lake(gateway, s3, audit)


@pytest.fixture(scope="module")
def orders(lake: Lake) -> str:
    """sales.orders written by pyiceberg through signed requests only; its key prefix."""
    catalog = lake.catalog(lake.writer)
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "tag": pa.array(["a", "b", "c"])})
    table = catalog.create_table("sales.orders", schema=data.schema)
    assert table.io.properties["s3.signer"] == "S3V4RestSigner"
    assert "s3.access-key-id" not in table.io.properties
    table.append(data)
    table.append(pa.table({"id": pa.array([4], pa.int64()), "tag": pa.array(["d"])}))
    catalog.close()
    return table.location().removeprefix(f"s3://{lake.s3.bucket}/")


def test_pyiceberg_reads_and_appends_through_signed_requests(lake: Lake, orders: str) -> None:
    data_files = [k for k in lake.s3.keys(orders + "/data/") if k.endswith(".parquet")]
    assert len(data_files) == 2
    reader = lake.catalog(lake.reader)
    table = reader.load_table("sales.orders")
    assert table.io.properties["s3.signer.endpoint"] == "v1/lake/namespaces/sales/tables/orders/sign"
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]
    # The reader's signed GETs work, its PUTs are refused: the append fails before any commit.
    with pytest.raises(SignError):
        table.append(pa.table({"id": pa.array([5], pa.int64()), "tag": pa.array(["e"])}))
    assert len(reader.load_table("sales.orders").snapshots()) == 2
    reader.close()


def test_load_answers_remote_signing_config_beside_the_signer_keys(lake: Lake, orders: str) -> None:
    """The newer `remote-signing-config` (main-branch spec) for clients that read it; the
    `s3.signer*` config keys still there for Iceberg 1.10 and pyiceberg."""
    session = lake.gateway.session(lake.reader)
    path = f"namespaces/{lake.gateway.ns_path('sales')}/tables/orders"
    plain = session.get(lake.gateway.catalog_url(path), timeout=30).json()
    assert "remote-signing-config" not in plain  # not asked for: no signer settings at all
    answer = session.get(
        lake.gateway.catalog_url(path), headers={"X-Iceberg-Access-Delegation": "remote-signing"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["remote-signing-config"] == {"properties": {}, "headers": {}}
    assert body["config"]["s3.remote-signing-enabled"] == "true"
    assert body["config"]["s3.signer"] == "S3V4RestSigner"
    assert body["config"]["s3.signer.endpoint"] == "v1/lake/namespaces/sales/tables/orders/sign"


def test_a_signature_is_valid_for_the_s3_server(lake: Lake, orders: str) -> None:
    [key, *_] = [k for k in lake.s3.keys(orders + "/data/") if k.endswith(".parquet")]
    answer = lake.sign(lake.reader, "orders", "GET", lake.object_uri(key))
    assert answer.status_code == 200, answer.text
    signed = answer.json()
    assert signed["uri"] == lake.object_uri(key)
    assert signed["headers"]["Authorization"][0].startswith("AWS4-HMAC-SHA256 Credential=")
    request = urllib.request.Request(signed["uri"], headers={k: v[0] for k, v in signed["headers"].items()})
    with urllib.request.urlopen(request, timeout=10) as got:
        assert got.read() == lake.s3.read(key)


@pytest.mark.parametrize(
    ("who", "method", "path", "reason"),
    [
        ("writer", "GET", "{other}/data/x.parquet", "outside the table location"),
        ("writer", "GET", "{table}0/data/x.parquet", "outside the table location"),
        ("writer", "GET", "{table}/../{other}/x", "not in canonical form"),
        ("writer", "GET", "{table}/%2e%2e/%2E%2E/x", "not in canonical form"),
        ("writer", "GET", "{table}//x", "not in canonical form"),
        ("writer", "GET", "{table}/a%5Cb", "not in canonical form"),
        ("writer", "GET", "{table}/x?acl", "sub-resource 'acl'"),
        ("writer", "PUT", "{table}/x?tagging", "sub-resource 'tagging'"),
        ("writer", "GET", "?list-type=2", "prefix inside the table location"),
        ("writer", "GET", "?list-type=2&prefix={table}0", "prefix inside the table location"),
        ("writer", "DELETE", "", "bucket-level requests"),
        ("writer", "POST", "?delete", "only with its body"),
        ("writer", "OPTIONS", "{table}/x", "never signed"),
        ("reader", "PUT", "{table}/data/new.parquet", "needs writeTableData"),
        ("reader", "DELETE", "{table}/data/x.parquet", "needs writeTableData"),
    ],
)
def test_requests_leaving_the_table_are_refused_and_audited(
    lake: Lake, orders: str, who: str, method: str, path: str, reason: str
) -> None:
    table_prefix = orders
    other = table_prefix.rsplit("/", 1)[0] + "/other-table"
    uri = f"{lake.s3.url}/{lake.s3.bucket}/" + path.format(table=table_prefix, other=other)
    if path.startswith("?"):
        uri = f"{lake.s3.url}/{lake.s3.bucket}" + path.format(table=table_prefix)
    answer = lake.sign(getattr(lake, who), "orders", method, uri)
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["type"] == "ForbiddenException"
    assert error["code"] == 403
    assert reason in error["message"]
    refusals = [
        r
        for r in lake.audit_records()
        if r["action"] == "signRequest"
        and r["decision"] == "deny"
        and reason in (r["detail"] or {}).get("reason", "")
    ]
    assert refusals
    assert refusals[-1]["detail"]["method"] == method
    assert refusals[-1]["principal"] == {"writer": "key:etl-bot", "reader": "key:analyst"}[who]
    assert refusals[-1]["detail"]["path"] == urllib.parse.urlsplit(uri).path


def test_requests_inside_the_table_are_signed(lake: Lake, orders: str) -> None:
    inside = f"{orders}/data/a.parquet"
    assert lake.sign(lake.writer, "orders", "PUT", lake.object_uri(inside)).status_code == 200
    assert lake.sign(lake.writer, "orders", "DELETE", lake.object_uri(inside)).status_code == 200
    listing = f"{lake.s3.url}/{lake.s3.bucket}?list-type=2&prefix={orders}/data/"
    assert lake.sign(lake.reader, "orders", "GET", listing).status_code == 200
    virtual = f"http://{lake.s3.bucket}.{lake.s3.url.removeprefix('http://')}/{inside}"
    assert lake.sign(lake.reader, "orders", "HEAD", virtual).status_code == 200
    delete = (
        f"<Delete><Object><Key>{inside}</Key></Object><Object><Key>{orders}/data/b</Key></Object></Delete>"
    )
    assert (
        lake.sign(lake.writer, "orders", "POST", f"{lake.s3.url}/{lake.s3.bucket}?delete", delete).status_code
        == 200
    )
    outside = delete.replace(f"{orders}/data/b", "lake/elsewhere/b")
    refused = lake.sign(lake.writer, "orders", "POST", f"{lake.s3.url}/{lake.s3.bucket}?delete", outside)
    assert refused.status_code == 403
    assert "outside the table location" in refused.json()["error"]["message"]
    other_host = lake.sign(lake.writer, "orders", "GET", f"http://example.com/{lake.s3.bucket}/{inside}")
    assert other_host.status_code == 403


def test_a_delete_signature_covers_the_checked_body_only(lake: Lake, orders: str) -> None:
    # The engine shows an innocent list of keys but declares the hash of another body, one that
    # names an object outside the table: the gateway signs the hash of the body it checked, so S3
    # refuses the other body (XAmzContentSHA256Mismatch). moto does not compare payload hashes
    # with bodies, so the test checks what was signed.
    innocent = f"<Delete><Object><Key>{orders}/data/none.parquet</Key></Object></Delete>"
    evil = "<Delete><Object><Key>lake/elsewhere/victim</Key></Object></Delete>"
    session = lake.gateway.session(lake.writer)
    path = f"namespaces/{lake.gateway.ns_path('sales')}/tables/orders/sign"
    payload = {
        "region": REGION,
        "uri": f"{lake.s3.url}/{lake.s3.bucket}?delete",
        "method": "POST",
        "headers": {"x-amz-content-sha256": [hashlib.sha256(evil.encode()).hexdigest()]},
        "body": innocent,
    }
    answer = session.post(lake.gateway.catalog_url(path), json=payload, timeout=30)
    assert answer.status_code == 200, answer.text
    signed = {name: values[0] for name, values in answer.json()["headers"].items()}
    assert signed["X-Amz-Content-SHA256"] == hashlib.sha256(innocent.encode()).hexdigest()
    assert "x-amz-content-sha256" in signed["Authorization"].split("SignedHeaders=")[1].split(",")[0]


def _send_signed(answer: Any) -> bytes:
    """Send a signed request to the S3 server (which checks the signature); its response body."""
    assert answer.status_code == 200, answer.text
    signed = answer.json()
    request = urllib.request.Request(signed["uri"], headers={k: v[0] for k, v in signed["headers"].items()})
    with urllib.request.urlopen(request, timeout=10) as got:
        return bytes(got.read())


def test_a_listing_with_a_repeated_prefix_is_not_signed(lake: Lake, orders: str) -> None:
    """S3 reads the first `prefix` (an empty one: the whole bucket), a dict the last (the table's):
    a reader must not get a signed listing of another namespace's keys."""
    lake.s3.client().put_object(Bucket=lake.s3.bucket, Key="hidden/ns/secret.parquet", Body=b"x")
    bucket = f"{lake.s3.url}/{lake.s3.bucket}"
    own = urllib.parse.quote(orders + "/", safe="")
    for query in (
        f"?list-type=2&prefix=&prefix={own}",
        f"?list-type=2&prefix=hidden%2F&prefix={own}",
        f"?list-type=2&prefix=&%70refix={own}",
        f"?list-type=2&Prefix=&prefix={own}",
    ):
        answer = lake.sign(lake.reader, "orders", "GET", bucket + query)
        assert answer.status_code == 403, (query, answer.text)
        assert answer.json()["error"]["type"] == "ForbiddenException"
        assert "is repeated" in answer.json()["error"]["message"]
    refusals = [r for r in lake.audit_records() if r["action"] == "signRequest" and r["decision"] == "deny"]
    assert "'prefix' is repeated" in refusals[-1]["detail"]["reason"]
    # The listing of the table's own prefix is signed, valid for S3, and lists only the table.
    listing = _send_signed(lake.sign(lake.reader, "orders", "GET", f"{bucket}?list-type=2&prefix={own}"))
    assert f"<Key>{orders}/".encode() in listing
    assert b"hidden/" not in listing


def test_repeated_scope_headers_are_not_signed(lake: Lake, orders: str) -> None:
    target = lake.object_uri(f"{orders}/data/copy.parquet")
    inside = f"{lake.s3.bucket}/{orders}/data/a.parquet"
    outside = f"{lake.s3.bucket}/hidden/ns/secret.parquet"
    for headers in (
        {"x-amz-copy-source": [inside, outside]},
        {"x-amz-copy-source": [inside], "X-Amz-Copy-Source": [outside]},
    ):
        answer = lake.sign(lake.writer, "orders", "PUT", target, headers=headers)
        assert answer.status_code == 403, answer.text
        assert "x-amz-copy-source" in answer.json()["error"]["message"]
    # A signature for one bucket's host cannot be carried to another host.
    host = {"Host": ["other-bucket.example.com"]}
    own_object = lake.object_uri(f"{orders}/data/a.parquet")
    refused = lake.sign(lake.reader, "orders", "GET", own_object, headers=host)
    assert refused.status_code == 403
    assert "Host header" in refused.json()["error"]["message"]
    signed = lake.sign(lake.writer, "orders", "PUT", target, headers={"x-amz-copy-source": [inside]})
    assert signed.status_code == 200, signed.text


def test_an_object_with_an_encoded_name_is_signed_as_s3_reads_it(lake: Lake, orders: str) -> None:
    key = f"{orders}/data/a+b c.txt"
    lake.s3.client().put_object(Bucket=lake.s3.bucket, Key=key, Body=b"plus and space")
    encoded = lake.object_uri(urllib.parse.quote(key, safe="/"))
    assert _send_signed(lake.sign(lake.reader, "orders", "GET", encoded)) == b"plus and space"
    raw_plus = lake.sign(lake.reader, "orders", "GET", lake.object_uri(f"{orders}/data/a+b%20c.txt"))
    assert raw_plus.status_code == 403
    assert "must be percent-encoded" in raw_plus.json()["error"]["message"]


def test_a_sign_request_with_two_uris_is_a_400(lake: Lake, orders: str) -> None:
    """One parser would check the first `uri`, another sign the last: neither happens."""
    session = lake.gateway.session(lake.reader)
    path = f"namespaces/{lake.gateway.ns_path('sales')}/tables/orders/sign"
    inside = lake.object_uri(f"{orders}/data/a.parquet")
    outside = lake.object_uri("hidden/ns/secret.parquet")
    body = (
        f'{{"region":"{REGION}","method":"GET","headers":{{}},"uri":"{inside}","uri":"{outside}"}}'
    ).encode()
    answer = session.post(
        lake.gateway.catalog_url(path), data=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "BadRequestException"
    assert error["message"] == "request body is not valid JSON: duplicate field 'uri'"
