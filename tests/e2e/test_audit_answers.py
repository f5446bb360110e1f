"""An audit log people can use: a real gateway, real requests, and the questions of
docs/operations.md ("A day's questions answered from the audit log") answered by the exact jq
commands printed there.

One scenario runs against one gateway process (module fixture): keys created, rotated and revoked
through the admin API and with the offline `cedarberg keys` command; a restricted analyst loading
and planning a scan; denials answered 404 and 403; a flood of 1,000 requests with made-up API
keys from one address (first 401, then 429 once the address's failure budget is spent) and a flood
of reads over one principal's budget (429). The gateway is then stopped, so the last interval's
counts are written, and the tests read its audit file.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.audit import audit_log
from tests.support.gateway import REPO_ROOT, GatewayProcess, bundled_policies

TIMEOUT = 30
FLOOD = 1000
READ_FLOOD = 300
ORDERS = 'Cedarberg::Table::"default/shop/orders"'
PLANNING = (
    '[Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan", '
    'Cedarberg::Action::"fetchPlanningResult", Cedarberg::Action::"fetchScanTasks"]'
)
RESTRICTIONS = f"""
@id("eu-analysts-orders")
@columns("order_id, region")
@row_filter("region = 'eu'")
permit (principal in Cedarberg::Group::"eu-analysts", action in {PLANNING}, resource == {ORDERS});
"""
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "order_id", "type": "long", "required": False},
        {"id": 2, "name": "region", "type": "string", "required": False},
        {"id": 3, "name": "ssn", "type": "string", "required": False},
    ],
}
DOC = REPO_ROOT / "docs" / "operations.md"
SECTION = "## A day's questions answered from the audit log"


@dataclass
class Scenario:
    """What the requests were, to check the audit log against."""

    audit_file: Path
    keys: dict[str, str] = field(default_factory=dict)  # principal -> plaintext key
    key_ids: dict[str, str] = field(default_factory=dict)  # what happened -> key id
    secrets_sent: list[str] = field(default_factory=list)  # every key plaintext the test used
    fake_key_id: str = ""
    statuses: Counter[int] = field(default_factory=Counter)  # the 1,000 bad-credential answers
    read_statuses: Counter[int] = field(default_factory=Counter)  # the read flood's answers

    def records(self) -> list[dict[str, Any]]:
        return audit_log(self.audit_file)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _create_key(gw: GatewayProcess, principal: str, groups: list[str]) -> dict[str, Any]:
    answer = requests.post(
        f"{gw.url}/admin/v1/api-keys",
        json={"principal": principal, "kind": "service", "groups": groups},
        timeout=TIMEOUT,
    )
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _run_scenario(gw: GatewayProcess, scenario: Scenario) -> None:
    url = gw.url
    assert requests.post(f"{url}/v1/namespaces", json={"namespace": ["shop"]}, timeout=TIMEOUT).ok
    created = requests.post(
        f"{url}/v1/namespaces/shop/tables", json={"name": "orders", "schema": SCHEMA}, timeout=TIMEOUT
    )
    assert created.status_code == 200, created.text
    # Keys through the admin API: created, rotated, revoked.
    for principal, groups in (("analyst", ["eu-analysts"]), ("nobody", []), ("flooder", [])):
        body = _create_key(gw, principal, groups)
        scenario.keys[principal] = body["key"]
        scenario.secrets_sent.append(body["key"])
    rotated = _create_key(gw, "rotated-bot", [])
    scenario.secrets_sent.append(rotated["key"])
    again = requests.post(f"{url}/admin/v1/api-keys/{rotated['id']}/rotate", timeout=TIMEOUT)
    assert again.status_code == 200, again.text
    scenario.secrets_sent.append(again.json()["key"])
    gone = requests.delete(f"{url}/admin/v1/api-keys/{rotated['id']}", timeout=TIMEOUT)
    assert gone.status_code == 200, gone.text
    scenario.key_ids.update(created=scenario_key(scenario, "analyst"), rotated=rotated["id"])
    # Keys with the offline command, on the same store and audit file.
    made = gw.cli("keys", "create", "--principal", "cli-bot", "--kind", "service", "--no-engine-forms")
    assert made.returncode == 0, made.stderr
    cli_key = made.stdout.strip().splitlines()[0]
    scenario.secrets_sent.append(cli_key)
    cli_key_id = cli_key[4:20]
    revoked = gw.cli("keys", "revoke", cli_key_id)
    assert revoked.returncode == 0, revoked.stderr
    scenario.key_ids.update(cli=cli_key_id)
    # The restricted analyst reads: a load and a scan plan, both narrowed by the permit.
    analyst = _bearer(scenario.keys["analyst"])
    table = f"{url}/v1/namespaces/shop/tables/orders"
    assert requests.get(table, headers=analyst, timeout=TIMEOUT).status_code == 200
    plan = requests.post(f"{table}/plan", json={"select": ["order_id"]}, headers=analyst, timeout=TIMEOUT)
    assert plan.status_code == 200, plan.text
    # Denials: hidden from a principal with no grant (404), forbidden to one who sees it (403).
    nobody = requests.get(table, headers=_bearer(scenario.keys["nobody"]), timeout=TIMEOUT)
    assert nobody.status_code == 404, nobody.text
    refused = requests.post(
        f"{url}/v1/namespaces", json={"namespace": ["scratch"]}, headers=analyst, timeout=TIMEOUT
    )
    assert refused.status_code == 403, refused.text
    # A read flood over one principal's budget (`rate_limits.read`).
    flooder = _bearer(scenario.keys["flooder"])
    with requests.Session() as session:
        for _ in range(READ_FLOOD):
            scenario.read_statuses[
                session.get(f"{url}/v1/namespaces", headers=flooder, timeout=TIMEOUT).status_code
            ] += 1
    # Made-up API keys, well-formed, from one address: 401 until the address's failure budget
    # is spent, then 429 (nothing verified any more).
    scenario.fake_key_id = "abcdefghijklmnop"
    with requests.Session() as session:
        for _ in range(FLOOD):
            fake = f"cbk_{scenario.fake_key_id}_{secrets.token_urlsafe(32)[:43]}"
            scenario.secrets_sent.append(fake)
            answer = session.get(f"{url}/v1/namespaces", headers=_bearer(fake), timeout=TIMEOUT)
            scenario.statuses[answer.status_code] += 1


def scenario_key(scenario: Scenario, principal: str) -> str:
    return scenario.keys[principal][4:20]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    root = tmp_path_factory.mktemp("audit-answers")
    policy_dir = bundled_policies(root / "policies", {"restrictions.cedar": RESTRICTIONS})
    audit_file = root / "audit" / "audit.jsonl"
    config = {
        "authz": {"policy_dir": str(policy_dir)},
        # An interval longer than the test: the summaries are written when the gateway stops.
        "audit": {"destination": str(audit_file), "refusal_interval_seconds": 3600},
        "rate_limits": {
            "per_address": "1000000/minute",
            "read": "100/minute",
            "write": "1000000/minute",
            "admin": "1000000/minute",
            "token": "1000000/minute",
            "auth_failures_per_address": "200/minute",
        },
    }
    gw = GatewayProcess(root / "gw", config=config)
    result = Scenario(audit_file)
    with gw:
        _run_scenario(gw, result)
    assert gw.process is not None
    assert gw.process.returncode == 0, gw.log_text()
    return result


# -- the records ---------------------------------------------------------------------------------


def test_a_flood_of_bad_credentials_is_a_bounded_number_of_records_with_exact_counts(
    scenario: Scenario,
) -> None:
    assert scenario.statuses[401] >= 200, scenario.statuses
    assert scenario.statuses[429] > 0, scenario.statuses
    assert scenario.statuses[401] + scenario.statuses[429] == FLOOD
    records = [
        r
        for r in scenario.records()
        if r["event"] in {"auth_failure", "throttled"} and r["principal"] is None
    ]
    failures = [r for r in records if r["event"] == "auth_failure"]
    throttled = [r for r in records if r["event"] == "throttled"]
    # One source each: at most the first record and the interval's summary.
    assert 1 <= len(failures) <= 2, records
    assert 1 <= len(throttled) <= 2, records
    assert sum(r["detail"]["count"] for r in failures) == scenario.statuses[401]
    assert sum(r["detail"]["count"] for r in throttled) == scenario.statuses[429]
    for record in failures:
        assert record["status"] == 401
        assert record["client_address"] == "127.0.0.1"
        assert record["action"] == "listNamespaces"
        assert record["detail"]["reason"] == "credential refused"
        assert record["detail"]["presented_key_id"] == scenario.fake_key_id
    assert {r["detail"]["reason"] for r in throttled} == {"too many failed authentications from this address"}
    assert all(r["status"] == 429 for r in throttled)
    first = [r for r in failures if r["detail"]["first_in_window"]]
    assert len(first) == 1
    assert first[0]["detail"]["count"] == 1
    assert first[0]["request_id"]


def test_a_read_flood_over_a_principals_budget_is_counted_under_that_principal(scenario: Scenario) -> None:
    assert scenario.read_statuses[429] > 0, scenario.read_statuses
    # The budget's reads were answered (404: the flooder has no grant, so no warehouse to list).
    assert scenario.read_statuses[404] > 0, scenario.read_statuses
    records = [r for r in scenario.records() if r["event"] == "throttled" and r["principal"] == "key:flooder"]
    assert 1 <= len(records) <= 2, records
    assert sum(r["detail"]["count"] for r in records) == scenario.read_statuses[429]
    assert {r["detail"]["reason"] for r in records} == {"principal over its rate limit"}


def test_no_secret_reaches_the_audit_log(scenario: Scenario) -> None:
    text = scenario.audit_file.read_text()
    assert len(scenario.secrets_sent) > FLOOD
    for key in scenario.secrets_sent:
        assert key[21:] not in text  # the secret part of every key the test used or was given


def test_key_creation_rotation_and_revocation_name_the_key(scenario: Scenario) -> None:
    records = scenario.records()
    created = scenario.key_ids["created"]
    rotated = scenario.key_ids["rotated"]
    mutations = [r for r in records if r["event"] == "mutation" and r["action"].endswith("ApiKey")]
    made = [r for r in mutations if r["action"] == "createApiKey" and r["detail"]["key_id"] == created]
    assert len(made) == 1
    assert made[0]["principal"] == "anonymous:test-admin"
    assert made[0]["detail"]["key_principal"] == "key:analyst"
    resource = f'Cedarberg::ApiKey::"{rotated}"'
    assert [r["action"] for r in mutations if r["resource"] == resource] == ["rotateApiKey", "revokeApiKey"]
    cli = [r for r in mutations if r["resource"] == f'Cedarberg::ApiKey::"{scenario.key_ids["cli"]}"']
    assert [r["action"] for r in cli] == ["createApiKey", "revokeApiKey"]
    assert all(r["principal"] is None and r["detail"]["via"] == "cedarberg keys (offline)" for r in cli)


def test_denials_carry_the_status_the_client_got_and_why(scenario: Scenario) -> None:
    denials = [r for r in scenario.records() if r["event"] == "decision" and r["decision"] == "deny"]
    hidden = [r for r in denials if r["principal"] == "key:nobody" and r["action"] == "loadTable"]
    assert [(r["status"], r["resource"], r["detail"]["reason"]) for r in hidden] == [
        (404, ORDERS, "no policy permits it")
    ]
    forbidden = [r for r in denials if r["principal"] == "key:analyst" and r["action"] == "createNamespace"]
    assert [(r["status"], r["detail"]["reason"]) for r in forbidden] == [(403, "no policy permits it")]


def test_a_restricted_load_and_plan_record_the_restriction_that_applied(scenario: Scenario) -> None:
    allowed = [
        r
        for r in scenario.records()
        if r["event"] == "decision" and r["decision"] == "allow" and r["principal"] == "key:analyst"
    ]
    expected = [
        {
            "policy_id": "eu-analysts-orders",
            "columns": ["order_id", "region"],
            "row_filter": "region = 'eu'",
            "masks": {},
        }
    ]
    by_action = {r["action"]: r["detail"] for r in allowed if r["resource"] == ORDERS}
    assert by_action["loadTable"] == {"restrictions": expected}
    assert by_action["planTableScan"] == {"restrictions": expected}
    # An unrestricted reader's load carries none.
    admin_loads = [r for r in scenario.records() if r["action"] == "createTable" and r["decision"] == "allow"]
    assert admin_loads
    assert all(r["detail"] is None or "restrictions" not in r["detail"] for r in admin_loads)


def test_audit_lines_say_their_stream_and_share_the_logs_field_names(scenario: Scenario) -> None:
    records = scenario.records()
    assert {r["stream"] for r in records} == {"audit"}
    assert all({"time", "request_id", "principal"} <= r.keys() for r in records)


# -- the documented questions, with the documented commands ----------------------------------------


def _documented_commands() -> dict[str, str]:
    """Question -> the jq command under it, from the operations guide's section."""
    text = DOC.read_text()
    section = text[text.index(SECTION) :]
    section = (
        section[: section.find("\n## ", len(SECTION))] if "\n## " in section[len(SECTION) :] else section
    )
    pairs = re.findall(r"\*\*(.+?)\*\*\n+```sh\n(.*?)```", section, re.S)
    return {question: command for question, command in pairs}


def _run(command: str, scenario: Scenario, **variables: str) -> str:
    env = {**os.environ, "AUDIT": str(scenario.audit_file), **variables}
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_guide_answers_a_days_questions_with_jq(scenario: Scenario) -> None:
    commands = _documented_commands()
    assert len(commands) == 6, list(commands)
    (read, denied, keys, failed, throttled, restricted) = commands.values()

    readers = _run(read, scenario, TABLE=ORDERS)
    assert re.findall(r"^\s*(\d+) (\S+)$", readers, re.M) == [("2", "key:analyst")], readers

    refusals = [line for line in _run(denied, scenario, PRINCIPAL="key:analyst").splitlines() if line]
    assert len(refusals) == 1, refusals
    assert '"action":"createNamespace"' in refusals[0]
    assert '"status":403' in refusals[0]

    changes = _run(keys, scenario).splitlines()
    rotated = scenario.key_ids["rotated"]
    assert any('"action":"rotateApiKey"' in line and f'"key":"{rotated}"' in line for line in changes), (
        changes
    )
    assert any(
        '"action":"revokeApiKey"' in line and f'"key":"{scenario.key_ids["cli"]}"' in line for line in changes
    )
    assert sum(f'"key":"{scenario.key_ids["created"]}"' in line for line in changes) == 1

    sources = [line for line in _run(failed, scenario).splitlines() if line]
    assert sources == [
        '{"client_address":"127.0.0.1","presented_key_id":"abcdefghijklmnop",'
        f'"reason":"credential refused","failures":{scenario.statuses[401]}}}'
    ]

    limited = [line for line in _run(throttled, scenario).splitlines() if line]
    expected = f'"refused":{scenario.read_statuses[429]}'
    assert f'"principal":"key:flooder","reason":"principal over its rate limit",{expected}' in "\n".join(
        limited
    )

    narrowed = [line for line in _run(restricted, scenario).splitlines() if line]
    assert len(narrowed) == 2, narrowed
    assert all('"policy_id":"eu-analysts-orders"' in line for line in narrowed)
