"""Trusted engines: which clients may receive the files of a table a principal reads only with
column/row restrictions is a Cedar decision (`readRestrictedData`), anchored here on the client
certificate's subject, the principal and the authentication method.

A real gateway over HTTPS asking for (optional) client certificates of its own test CA, real API
keys and gateway tokens, the bundled policies plus `trust.cedar`, and a real moto S3 + STS server
that checks every signature. The trusted client (the `trino` key, through gateway tokens, with the
`trino-coordinator` certificate) gets vended credentials and signatures that S3 accepts; every
other way of asking (no certificate, a certificate whose subject only resembles the trusted one,
one from another CA with the very same subject, the raw API key, another principal holding the
trusted certificate, a restricted permit that happens to cover every action) gets none of them on
any path to the files, and keeps server-side planning. Request plans (replay) are keyed by the TLS
subject and the credential, so an answer decided for the trusted client is never replayed to
another.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
import requests

from tests.support.audit import flushed_audit_log
from tests.support.gateway import bundled_policies
from tests.support.s3 import REGION, MotoS3Server, moto_s3_server
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import ClientCert, TestPki, make_pki

TIMEOUT = 30
TRUSTED_CN, TRUSTED_OU, TRUSTED_O = "trino-coordinator", "Data Platform", "Cedarberg Tests"
TRUSTED_SUBJECT = f"CN={TRUSTED_CN},OU={TRUSTED_OU},O={TRUSTED_O}"
TRUST_POLICY_ID = "trino-coordinator-enforces-restrictions"
ORDERS = 'Cedarberg::Table::"lake/sales/orders"'
TRUST = f"""
// `eu` may read sales.orders only through plans restricted to two columns and EU rows.
@id("eu-orders-restricted")
@columns("id, tag")
@row_filter("tag = 'eu'")
permit (principal in Cedarberg::Group::"eu", action in Cedarberg::Action::"read", resource == {ORDERS});

// The Trino coordinator: its own key, through gateway tokens, with its own certificate.
@id("{TRUST_POLICY_ID}")
permit (
  principal == Cedarberg::Service::"key:trino",
  action == Cedarberg::Action::"readRestrictedData",
  resource in Cedarberg::Namespace::"lake/sales"
)
when {{
  context.auth_method == "gateway-token" &&
  context has tls_subject &&
  context.tls_subject == "{TRUSTED_SUBJECT}"
}};

// A restricted permit scoped to every action covers readRestrictedData too: it says which scans
// `sly` may plan, and must not make its client trusted.
@id("sly-orders-restricted-everything")
@columns("id")
permit (principal == Cedarberg::Service::"key:sly", action, resource == {ORDERS});

// `bound` (a reader) may use its key only with the trusted certificate, through gateway tokens.
@id("bound-key-needs-its-certificate")
forbid (principal == Cedarberg::Service::"key:bound", action, resource)
unless {{
  context.auth_method == "gateway-token" &&
  context has tls_subject &&
  context.tls_subject == "{TRUSTED_SUBJECT}"
}};
"""
RESTRICTED_MESSAGE = "restricted to some columns or rows"


def _issue(pki: TestPki, name: str, cn: str, ou: str | None, o: str = TRUSTED_O) -> ClientCert:
    """A client certificate of `pki` under files of its own (`issue_client` names them by CN)."""
    issued = pki.issue_client(cn, organization=o, organizational_unit=ou)
    cert, key = (
        issued.cert.rename(pki.directory / f"{name}.pem"),
        issued.key.rename(pki.directory / f"{name}-key.pem"),
    )
    return ClientCert(cert=cert, key=key, subject=issued.subject)


@dataclass
class Lake:
    gateway: SecureGateway
    s3: MotoS3Server
    audit: Path
    keys: dict[str, str]
    certs: dict[str, ClientCert]
    orders: str  # the table's location

    def session(self, who: str, cert: str | None = None, *, raw_key: bool = False) -> requests.Session:
        """A session of `who`: a gateway token for its key (or the key itself, with `raw_key`),
        presenting the client certificate `cert` if given."""
        key = self.keys[who]
        session = self.gateway.session(key if raw_key else self.gateway.token(key))
        if cert is not None:
            session.cert = (str(self.certs[cert].cert), str(self.certs[cert].key))
        return session

    def table_url(self, suffix: str = "") -> str:
        return self.gateway.catalog_url(f"namespaces/sales/tables/orders{suffix}")

    def prefix(self) -> str:
        return self.orders.removeprefix(f"s3://{self.s3.bucket}/")

    def data_file(self) -> str:
        [key, *_] = [k for k in self.s3.keys(self.prefix() + "/data/") if k.endswith(".parquet")]
        return key

    def sign(self, session: requests.Session, method: str, key: str) -> requests.Response:
        payload = {
            "region": REGION,
            "uri": f"{self.s3.url}/{self.s3.bucket}/{key}",
            "method": method,
            "headers": {},
        }
        return session.post(self.table_url("/sign"), json=payload, timeout=TIMEOUT)

    def load(self, session: requests.Session, delegation: str | None) -> requests.Response:
        headers = {"X-Iceberg-Access-Delegation": delegation} if delegation else {}
        return session.get(self.table_url(), headers=headers, timeout=TIMEOUT)

    def audit_records(self, principal: str, action: str, since: int = 0) -> list[dict[str, Any]]:
        """`principal`'s audit records of `action`, from the `since`-th record of the log on."""
        return [
            r
            for r in flushed_audit_log(self.audit)[since:]
            if r["principal"] == f"key:{principal}" and r["action"] == action
        ]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    base = tmp_path_factory.mktemp("trusted")
    pki = make_pki(base / "pki")
    certs = {
        "trusted": _issue(pki, "trusted", TRUSTED_CN, TRUSTED_OU),
        # Subjects that only resemble the trusted one.
        "dev": _issue(pki, "dev", TRUSTED_CN + "-dev", TRUSTED_OU),
        "other-org": _issue(pki, "other-org", TRUSTED_CN, TRUSTED_OU, o=TRUSTED_O + " Ltd"),
        "no-ou": _issue(pki, "no-ou", TRUSTED_CN, None),
    }
    assert certs["trusted"].subject == TRUSTED_SUBJECT
    policies = base / "policies"
    bundled_policies(policies, {"trust.cedar": TRUST})
    audit = base / "audit.jsonl"
    with pytest.MonkeyPatch.context() as env, moto_s3_server() as s3:
        for name in AMBIENT_CA_VARIABLES:  # pyiceberg/requests trust only the given CA
            env.delenv(name, raising=False)
        config = {
            "tls": {
                "cert_file": str(pki.server_cert),
                "key_file": str(pki.server_key),
                "client_ca_file": str(pki.ca_cert),
            },
            "default_warehouse": "lake",
            "warehouses": {"lake": s3.warehouse("lake", vending=True)},
            "audit": {"destination": str(audit)},
            "authz": {"policy_dir": str(policies)},
        }
        with SecureGateway(base / "gw", pki=pki, config=config) as gateway:
            gateway.create_namespace("sales", readers=["bi"], writers=["etl"])
            keys = {
                name: gateway.create_key(name, groups)
                for name, groups in (
                    ("etl-bot", ["etl"]),
                    ("trino", ["eu"]),
                    ("eva", ["eu"]),
                    ("sly", []),
                    ("ann", ["bi"]),
                    ("bound", ["bi"]),
                )
            }
            writer = gateway.catalog(credential=gateway.credential(keys["etl-bot"]), warehouse="lake")
            data = pa.table(
                {
                    "id": pa.array([1, 2, 3], pa.int64()),
                    "tag": pa.array(["eu", "us", "eu"]),
                    "amount": pa.array([10.0, 20.0, 30.0]),  # a column `eu` may not scan
                }
            )
            table = writer.create_table("sales.orders", schema=data.schema)
            table.append(data)
            writer.close()
            yield Lake(gateway, s3, audit, keys, certs, table.location())


# -- the trusted client ---------------------------------------------------------------------------


def test_the_trusted_client_gets_read_credentials_that_s3_accepts(lake: Lake) -> None:
    session = lake.session("trino", "trusted")
    answer = session.get(lake.table_url("/credentials"), timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    [credential] = answer.json()["storage-credentials"]
    assert credential["prefix"] == lake.orders
    config = credential["config"]
    # Exactly what an unrestricted reader gets: read-only, scoped to the table's location.
    statements = json.loads(lake.s3.assumed_role(config["s3.access-key-id"])["Policy"])["Statement"]
    assert [s["Sid"] for s in statements] == ["ReadTableFiles", "ListTableFiles", "LocateBucket"]
    assert statements[0]["Resource"] == [f"arn:aws:s3:::{lake.s3.bucket}/{lake.prefix()}/*"]
    s3 = boto3.session.Session().client(
        "s3",
        region_name=REGION,
        endpoint_url=lake.s3.url,
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"],
    )
    key = lake.data_file()
    assert s3.get_object(Bucket=lake.s3.bucket, Key=key)["Body"].read() == lake.s3.read(key)

    # The decision and the vending are audited: files went out under restrictions to enforce.
    [trusted, *_] = lake.audit_records("trino", "readRestrictedData")
    assert trusted["decision"] == "allow"
    assert trusted["policy_ids"] == [TRUST_POLICY_ID]
    assert trusted["resource"] == ORDERS
    vended = lake.audit_records("trino", "vendCredentials")
    assert vended[-1]["detail"]["restrictions"] == "enforced-by-client"
    assert vended[-1]["detail"]["level"] == "read"


def test_the_trusted_client_gets_credentials_on_load_and_signatures_s3_accepts(lake: Lake) -> None:
    session = lake.session("trino", "trusted")
    loaded = lake.load(session, "vended-credentials")
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["config"]["s3.access-key-id"].startswith("ASIA")
    assert loaded.json()["storage-credentials"][0]["prefix"] == lake.orders

    signing = lake.load(session, "remote-signing").json()
    assert signing["config"]["s3.signer"] == "S3V4RestSigner"
    key = lake.data_file()
    signed = lake.sign(session, "GET", key)
    assert signed.status_code == 200, signed.text
    headers = {name: values[0] for name, values in signed.json()["headers"].items()}
    fetched = requests.get(signed.json()["uri"], headers=headers, timeout=TIMEOUT)
    assert fetched.status_code == 200
    assert fetched.content == lake.s3.read(key)
    # Trust is about reading: a write still needs writeTableData, which `trino` does not have.
    refused = lake.sign(session, "PUT", f"{lake.prefix()}/data/new.parquet")
    assert refused.status_code == 403
    assert "writeTableData" in refused.json()["error"]["message"]


def test_the_trusted_client_still_plans_under_its_restrictions(lake: Lake) -> None:
    session = lake.session("trino", "trusted")
    planned = session.post(lake.table_url("/plan"), json={"select": ["id"]}, timeout=TIMEOUT)
    assert planned.status_code == 200, planned.text
    tasks = planned.json()["file-scan-tasks"]
    assert tasks
    assert all(t["residual-filter"] == {"type": "eq", "term": "tag", "value": "eu"} for t in tasks)
    assert "storage-credentials" not in planned.json()  # plans carry no file credentials
    forbidden = session.post(lake.table_url("/plan"), json={"select": ["id", "amount"]}, timeout=TIMEOUT)
    assert forbidden.status_code == 403


# -- everyone else ----------------------------------------------------------------------------------

UNTRUSTED = {
    # label: (principal, certificate, raw API key instead of a gateway token)
    "no client certificate": ("trino", None, False),
    "a subject with another common name": ("trino", "dev", False),
    "a subject with another organization": ("trino", "other-org", False),
    "a subject without the unit": ("trino", "no-ou", False),
    "the raw API key, not a gateway token": ("trino", "trusted", True),
    "another restricted principal with the trusted certificate": ("eva", "trusted", False),
    "a restricted permit covering every action": ("sly", "trusted", False),
}


@pytest.mark.parametrize("label", list(UNTRUSTED))
def test_an_untrusted_restricted_client_gets_no_file_access_on_any_path(lake: Lake, label: str) -> None:
    principal, cert, raw_key = UNTRUSTED[label]
    session = lake.session(principal, cert, raw_key=raw_key)
    vended_before, audited_before = lake.s3.assume_role_count(), len(flushed_audit_log(lake.audit))

    credentials = session.get(lake.table_url("/credentials"), timeout=TIMEOUT)
    assert credentials.status_code == 403, credentials.text
    assert credentials.json()["error"]["type"] == "ForbiddenException"
    assert RESTRICTED_MESSAGE in credentials.json()["error"]["message"]

    for delegation in ("vended-credentials", "remote-signing", "vended-credentials,remote-signing"):
        loaded = lake.load(session, delegation)
        assert loaded.status_code == 200, loaded.text  # the table still loads
        body = loaded.json()
        assert not any(
            k.startswith(("s3.access-key-id", "s3.secret", "s3.session", "s3.signer")) for k in body["config"]
        )
        assert "storage-credentials" not in body
        assert "remote-signing-config" not in body

    signed = lake.sign(session, "GET", lake.data_file())
    assert signed.status_code == 403, signed.text
    assert RESTRICTED_MESSAGE in signed.json()["error"]["message"]
    assert lake.s3.assume_role_count() == vended_before  # nothing was vended

    planned = session.post(lake.table_url("/plan"), json={"select": ["id"]}, timeout=TIMEOUT)
    assert planned.status_code == 200, planned.text  # server-side planning, as before
    assert "storage-credentials" not in planned.json()

    decisions = lake.audit_records(principal, "readRestrictedData", since=audited_before)
    denials = [r for r in decisions if r["decision"] == "deny"]
    assert denials
    if principal == "sly":
        # Cedar allowed it through a restricted permit only: the gateway refuses, and says why.
        assert {tuple(r["policy_ids"]) for r in decisions if r["decision"] == "allow"} == {
            ("sly-orders-restricted-everything",)
        }
        assert all(
            "only by permits carrying column/row restrictions" in r["detail"]["reason"] for r in denials
        )
    else:
        assert denials == decisions


def test_a_certificate_of_another_ca_with_the_trusted_subject_is_refused_at_the_handshake(
    lake: Lake, tmp_path: Path
) -> None:
    rogue = _issue(make_pki(tmp_path / "rogue", ca_name="Rogue CA"), "rogue", TRUSTED_CN, TRUSTED_OU)
    assert rogue.subject == TRUSTED_SUBJECT
    session = lake.gateway.session(lake.gateway.token(lake.keys["trino"]))
    session.cert = (str(rogue.cert), str(rogue.key))
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        session.get(lake.table_url("/credentials"), timeout=TIMEOUT)


def test_an_unrestricted_reader_is_unaffected(lake: Lake) -> None:
    session = lake.session("ann")  # no certificate: a reader needs no trust
    answer = session.get(lake.table_url("/credentials"), timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert lake.load(session, "vended-credentials").json()["config"]["s3.access-key-id"].startswith("ASIA")
    assert lake.sign(session, "GET", lake.data_file()).status_code == 200
    assert lake.audit_records("ann", "readRestrictedData") == []  # never decided for it
    vended = lake.audit_records("ann", "vendCredentials")
    assert vended
    assert all("restrictions" not in r["detail"] for r in vended)


# -- request plans --------------------------------------------------------------------------------


def test_an_answer_decided_for_one_certificate_is_never_replayed_to_another(lake: Lake) -> None:
    token = lake.gateway.token(lake.keys["bound"])

    def load(cert: str | None, credential: str = token) -> int:
        session = lake.gateway.session(credential)
        if cert is not None:
            session.cert = (str(lake.certs[cert].cert), str(lake.certs[cert].key))
        return lake.load(session, None).status_code

    # The same token, path and address: replayable reads (a plan is recorded and replayed).
    assert load("trusted") == 200
    assert load("trusted") == 200
    # The answer depends on the TLS subject and the auth method: decided again, not replayed.
    assert load("dev") == 404
    assert load("other-org") == 404
    assert load(None) == 404
    assert load("trusted", lake.keys["bound"]) == 404  # the raw key: another auth method
    assert load("trusted") == 200
    # A file path is never answered from a plan: each is decided with its own client.
    trusted = lake.session("trino", "trusted")
    other = lake.session("trino", "dev")
    other.headers["Authorization"] = trusted.headers["Authorization"]  # the very same token
    assert "s3.access-key-id" in lake.load(trusted, "vended-credentials").json()["config"]
    assert "s3.access-key-id" not in lake.load(other, "vended-credentials").json()["config"]
    assert lake.sign(other, "GET", lake.data_file()).status_code == 403
