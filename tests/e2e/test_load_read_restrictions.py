"""loadTable tells a restricted reader its read restrictions in the Iceberg REST spec's form
(`read-restrictions`, apache/iceberg PR #13879), derived from the Cedar permits that allowed the
load; an unrestricted reader's answer is unchanged.

A real gateway over HTTPS with the bundled policies plus restricted permits, real gateway tokens
(so answers are recorded as request plans and replayed), every restricted answer validated
against the spec's ReadRestrictions schema (tests/support/read_restrictions_schema.yaml).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests.support.gateway import bundled_policies
from tests.support.read_restrictions import validate
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import TestPki

TIMEOUT = 30
PEOPLE = 'Cedarberg::Table::"default/hr/people"'
READ = (
    '[Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan", '
    'Cedarberg::Action::"fetchPlanningResult", Cedarberg::Action::"fetchScanTasks", '
    'Cedarberg::Action::"loadCredentials"]'
)
POLICIES = f"""
@id("hr-auditors-people")
@columns("id, region, ssn, email")
@row_filter("region = 'eu'")
@mask("ssn: show-last-4, email: mask-alphanum")
permit (principal in Cedarberg::Group::"hr-auditors", action in {READ}, resource == {PEOPLE});

@id("hr-broken-mask")
@mask("id: show-last-4")
permit (principal in Cedarberg::Group::"hr-broken", action in {READ}, resource == {PEOPLE});
"""
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ssn", StringType(), required=False),
    NestedField(4, "email", StringType(), required=False),
    NestedField(5, "salary", LongType(), required=False),
)


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki, module_store_url: str | None
) -> Iterator[SecureGateway]:
    root = tmp_path_factory.mktemp("read-restrictions")
    policy_dir = root / "policies"
    bundled_policies(policy_dir, {"restrictions.cedar": POLICIES})
    config = {"authz": {"policy_dir": str(policy_dir)}}
    with (
        pytest.MonkeyPatch.context() as env,
        SecureGateway(root / "gw", pki=session_pki, config=config, store_url=module_store_url) as gw,
    ):
        for name in AMBIENT_CA_VARIABLES:  # pyiceberg/requests trust only the test CA
            env.delenv(name, raising=False)
        gw.create_namespace("hr", readers=["hr-readers"])
        gw.admin_catalog().create_table(("hr", "people"), SCHEMA)
        yield gw


def _session(gw: SecureGateway, principal: str, group: str) -> requests.Session:
    # A gateway token (not the API key itself): its reads are recorded as plans and replayed.
    return gw.session(gw.token(gw.create_key(principal, [group])))


def _load(gw: SecureGateway, session: requests.Session, etag: str | None = None) -> requests.Response:
    headers = {"If-None-Match": etag} if etag else {}
    return session.get(gw.catalog_url("namespaces/hr/tables/people"), headers=headers, timeout=TIMEOUT)


def _ids(body: dict[str, Any]) -> dict[str, int]:
    schema = body["metadata"]["schemas"][-1]
    return {field["name"]: field["id"] for field in schema["fields"]}


def test_a_restricted_reader_is_told_its_restrictions_in_the_specs_form(gateway: SecureGateway) -> None:
    answer = _load(gateway, _session(gateway, "ida", "hr-auditors"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    restrictions = body["read-restrictions"]
    validate(restrictions)
    ids = _ids(body)
    assert restrictions == {
        "required-column-projections": [
            {"field-id": ids["ssn"], "action": "show-last-4"},
            {"field-id": ids["email"], "action": "mask-alphanum"},
            {"field-id": ids["salary"], "action": "replace-with-null"},  # not in @columns
        ],
        "required-row-filter": {
            "type": "eq",
            "left": {"type": "reference", "id": ids["region"]},
            "right": {"type": "literal", "value": "eu"},
        },
    }


def test_an_unrestricted_reader_sees_no_restrictions(gateway: SecureGateway) -> None:
    answer = _load(gateway, _session(gateway, "ron", "hr-readers"))
    assert answer.status_code == 200, answer.text
    assert "read-restrictions" not in answer.json()


def test_restricted_and_unrestricted_readers_alternating_each_get_their_own_answer(
    gateway: SecureGateway,
) -> None:
    auditor = _session(gateway, "ivy", "hr-auditors")
    reader = _session(gateway, "rex", "hr-readers")
    answers = [_load(gateway, who) for who in (auditor, reader, auditor, reader, auditor)]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    restricted, unrestricted = answers[0], answers[1]
    assert "read-restrictions" in restricted.json()
    assert "read-restrictions" not in unrestricted.json()
    for again in answers[2::2]:  # replayed from the auditor's plan or recomputed: the same view
        assert again.json() == restricted.json()
        assert again.headers["ETag"] == restricted.headers["ETag"]
    assert answers[3].json() == unrestricted.json()
    assert restricted.headers["ETag"] != unrestricted.headers["ETag"]

    # Attack: the auditor presents the unrestricted reader's ETag; "not modified" would let it
    # keep an unrestricted body. It gets its own, restricted answer.
    probed = _load(gateway, auditor, unrestricted.headers["ETag"])
    assert probed.status_code == 200
    assert probed.json()["read-restrictions"] == restricted.json()["read-restrictions"]
    # Control: each reader's own ETag is answered 304.
    assert _load(gateway, auditor, restricted.headers["ETag"]).status_code == 304
    assert _load(gateway, reader, unrestricted.headers["ETag"]).status_code == 304
    # And the unrestricted reader sent the auditor's ETag is answered in full, unrestricted.
    crossed = _load(gateway, reader, restricted.headers["ETag"])
    assert crossed.status_code == 200
    assert "read-restrictions" not in crossed.json()


def test_a_mask_the_table_cannot_honour_refuses_the_load(gateway: SecureGateway) -> None:
    # show-last-4 applies to strings; id is a long. Telling readers nothing would leave it clear.
    answer = _load(gateway, _session(gateway, "bo", "hr-broken"))
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["type"] == "ForbiddenException"
    assert "show-last-4" in error["message"]
    assert "id" in error["message"]


def test_planning_refuses_masked_columns_and_restricted_readers_get_no_files(gateway: SecureGateway) -> None:
    auditor = _session(gateway, "ike", "hr-auditors")
    plan = gateway.catalog_url("namespaces/hr/tables/people/plan")
    masked = auditor.post(plan, json={"select": ["id", "ssn"]}, timeout=TIMEOUT)
    assert masked.status_code == 403, masked.text
    assert "ssn" in masked.json()["error"]["message"]
    clear = auditor.post(plan, json={"select": ["id", "region"]}, timeout=TIMEOUT)
    assert clear.status_code == 200, clear.text
    credentials = auditor.get(gateway.catalog_url("namespaces/hr/tables/people/credentials"), timeout=TIMEOUT)
    assert credentials.status_code == 403, credentials.text


def test_the_admin_explain_shows_the_masks_a_decision_carries(gateway: SecureGateway) -> None:
    table = {"type": "table", "namespace": ["hr"], "name": "people"}
    url = f"{gateway.url}/admin/v1/explain"

    def explain(group: str) -> dict[str, Any]:
        body = {"principal": "ida", "groups": [group], "action": "loadTable", "resource": table}
        answer = gateway.admin.post(url, json=body, timeout=TIMEOUT)
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result

    assert explain("hr-auditors")["restrictions"] == [
        {
            "policy_id": "hr-auditors-people",
            "columns": ["email", "id", "region", "ssn"],
            "row_filter": "region = 'eu'",
            "masks": {"email": "mask-alphanum", "ssn": "show-last-4"},
        }
    ]
    assert explain("hr-readers")["restrictions"] == []
