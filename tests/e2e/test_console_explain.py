"""The console's Explain page in a real headless Chromium against a real TLS gateway (issue 30,
page 3).

One gateway for the module: the console on, the bundled policies plus a restricted permit for
group `analysts` on `sales.orders` (so an explanation carries restrictions, and, the warehouse
being a local directory, a warning that they do not bind), and one browser; each test opens a
fresh browser context.

Controls: an admin's explanation agrees with `POST /admin/v1/explain` for the same request
(decision, determining policies, restrictions, warnings, grants), its marked lines are the
policy's lines in its file on disk, and a link built from an audit record shows that record's
decision. Attacks: a reader (no `explainDecision`) finds no Explain entry and gets 403 at the
address, however its fields are filled; bad input gets the form back with a message, never a 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest

from cedarberg.gateway.authz.entities import EntityUid
from tests.support.browser import screenshot
from tests.support.console import CSP, Lake, open_lake, sign_in_with_key
from tests.support.secure import HTTP_TIMEOUT

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

RESTRICTED = "analysts-eu-orders"
RESTRICTED_PERMIT = f"""
// Analysts read EU orders only: two columns, EU rows, the region masked.
@id("{RESTRICTED}")
@columns("order_id, region")
@row_filter("region = 'eu'")
@mask("region: show-first-4")
permit (
  principal in Cedarberg::Group::"analysts",
  action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],
  resource == Cedarberg::Table::"default/sales/orders"
);
"""
EXPLAIN = "/console/explain"
ORDERS = 'Cedarberg::Table::"default/sales/orders"'


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with open_lake(
        tmp_path_factory.mktemp("console-explain"), policies={"analysts.cedar": RESTRICTED_PERMIT}
    ) as opened:
        yield opened


# -- what the page shows, and what the API answers ---------------------------------------------------


def _api_explain(lake: Lake, body: dict[str, Any]) -> dict[str, Any]:
    answer = lake.gw.admin.post(f"{lake.url}/admin/v1/explain", json=body, timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    explained: dict[str, Any] = answer.json()
    return explained


def _shown(page: Page) -> dict[str, Any]:
    """The explanation as the page shows it, in the API's terms."""
    policies = page.locator("section.policy")
    restrictions = page.locator("table.restrictions tbody tr")
    warnings = page.locator("ul.warnings li")
    grants = page.locator("table.grants tbody tr")
    return {
        "decision": page.inner_text("#decision").lower(),
        "principal": page.inner_text("#answer-principal"),
        "action": page.inner_text("#answer-action"),
        "resource": page.inner_text("#answer-resource"),
        "policy_ids": [policies.nth(i).get_attribute("data-policy-id") for i in range(policies.count())],
        "restrictions": [
            {
                "policy_id": restrictions.nth(i).get_attribute("data-policy-id"),
                "columns": restrictions.nth(i).locator("td.columns").inner_text(),
                "row_filter": restrictions.nth(i).locator("td.rows").inner_text(),
                "masks": restrictions.nth(i).locator("td.masks").inner_text(),
            }
            for i in range(restrictions.count())
        ],
        "warnings": [
            (warnings.nth(i).get_attribute("data-kind"), warnings.nth(i).get_attribute("data-policy-id"))
            for i in range(warnings.count())
        ],
        "grants": [
            {
                "resource": grants.nth(i).get_attribute("data-resource"),
                "readers": grants.nth(i).locator("td.readers").inner_text(),
                "writers": grants.nth(i).locator("td.writers").inner_text(),
                "protected_refs": grants.nth(i).locator("td.protected").inner_text(),
                "schema_locked": grants.nth(i).locator("td.locked").inner_text(),
            }
            for i in range(grants.count())
        ],
    }


def _expected(api: dict[str, Any]) -> dict[str, Any]:
    """The API's answer as the page words it."""

    def names(values: list[str]) -> str:
        return ", ".join(values) or "none"

    return {
        "decision": api["decision"],
        "principal": api["principal"],
        "action": api["action"],
        "resource": api["resource"],
        "policy_ids": api["policy_ids"],
        "restrictions": [
            {
                "policy_id": r["policy_id"],
                "columns": ", ".join(r["columns"]) if r["columns"] is not None else "all",
                "row_filter": r["row_filter"] or "all",
                "masks": ", ".join(f"{c}: {m}" for c, m in sorted(r["masks"].items())) or "none",
            }
            for r in api["restrictions"]
        ],
        "warnings": [(w["kind"], w["policy_id"]) for w in api["restrictions_not_binding"]],
        "grants": [
            {
                "resource": g["resource"],
                "readers": names(g["readers"]),
                "writers": names(g["writers"]),
                "protected_refs": names(g["protected_refs"]),
                "schema_locked": "yes" if g["schema_locked"] else "no",
            }
            for g in api["grants"]
        ],
    }


def _fill(page: Page, principal: str, groups: str, action: str, namespace: str, table: str) -> None:
    """The form filled in with the keyboard's fields (the resource by its parts), then sent."""
    page.fill("#principal", principal)
    page.fill("#groups", groups)
    page.select_option("#action", action)
    page.select_option("#type", "table")
    page.fill("#namespace", namespace)
    page.fill("#name", table)
    page.get_by_role("button", name="Explain").click()
    page.wait_for_load_state()


@pytest.mark.parametrize(
    ("principal", "groups", "namespace", "table", "decision"),
    [
        ("key:rita", "bi", "sales", "orders", "allow"),
        ("key:rita", "bi", "secret", "payroll", "deny"),
        ("key:ana", "analysts", "sales", "orders", "allow"),
    ],
)
def test_the_page_explains_what_the_explain_endpoint_answers(
    lake: Lake,
    context: BrowserContext,
    principal: str,
    groups: str,
    namespace: str,
    table: str,
    decision: str,
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.get_by_role("link", name="Explain", exact=True).click()
    page.wait_for_url(f"{lake.url}{EXPLAIN}")
    _fill(page, principal, groups, "loadTable", namespace, table)
    api = _api_explain(
        lake,
        {
            "principal": principal,
            "groups": [groups],
            "action": "loadTable",
            "resource": {"type": "table", "namespace": [namespace], "name": table},
        },
    )
    assert api["decision"] == decision
    shown = _shown(page)
    assert shown == _expected(api)
    # The grants are the registry's, node by node: sales grants bi and protects main.
    assert api["grants_from"] == "catalog"
    assert [g["resource"] for g in api["grants"]] == [
        'Cedarberg::Warehouse::"default"',
        f'Cedarberg::Namespace::"default/{namespace}"',
    ]
    assert api["grants"][-1]["readers"] == (["bi"] if namespace == "sales" else [])
    if principal == "key:ana":
        assert [r["policy_id"] for r in api["restrictions"]] == [RESTRICTED]
        assert ("local-warehouse", RESTRICTED) in shown["warnings"]
        screenshot(page, "explain")
    elif decision == "deny":
        assert shown["policy_ids"] == []
        assert "denied by default" in page.inner_text("#default-deny")
        assert shown["restrictions"] == []


def _policy_directory(lake: Lake) -> Path:
    answer = lake.gw.admin.get(f"{lake.url}/admin/v1/policies", timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    return Path(answer.json()["directory"])


@pytest.mark.parametrize(
    ("principal", "groups", "policy_id"),
    [("key:rita", "bi", "readers-read-granted"), ("key:ana", "analysts", RESTRICTED)],
)
def test_the_marked_lines_are_the_policys_lines_in_its_file(
    lake: Lake, context: BrowserContext, principal: str, groups: str, policy_id: str
) -> None:
    query = {"principal": principal, "groups": groups, "action": "loadTable"}
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}{EXPLAIN}?{urlencode({**query, 'resource': ORDERS})}")
    (location,) = [
        p["location"]
        for p in _api_explain(lake, _body(query, "sales", "orders"))["policies"]
        if p["id"] == policy_id
    ]
    file, line = location.rsplit(":", 1)
    on_disk = (_policy_directory(lake) / file).read_text().split("\n")
    section = page.locator(f"section.policy[data-policy-id='{policy_id}']")
    shown = section.locator("pre.source .line")
    numbers = [int(shown.nth(i).get_attribute("data-line") or "0") for i in range(shown.count())]
    # Every line shown is that line of the file, numbered as in the file.
    for i, number in enumerate(numbers):
        text = shown.nth(i).inner_text()
        assert text == f"{number}{on_disk[number - 1]}", (number, text)
    marked = section.locator("pre.source .line.marked")
    marked_numbers = [int(marked.nth(i).get_attribute("data-line") or "0") for i in range(marked.count())]
    # The marked lines run from the policy's location to the `;` that ends it, and hold the policy.
    assert marked_numbers == list(range(int(line), marked_numbers[-1] + 1))
    policy_text = "\n".join(on_disk[n - 1] for n in marked_numbers)
    assert policy_text.startswith(f'@id("{policy_id}")')
    assert policy_text.rstrip().endswith(";")
    assert policy_text.count(";") == 1  # one statement: nothing of the next policy is marked
    before = on_disk[marked_numbers[0] - 2].strip() if marked_numbers[0] > 1 else ""
    assert before == "" or before.startswith("//") or before.endswith(";")  # nothing of it left out


def _body(query: dict[str, str], namespace: str, table: str) -> dict[str, Any]:
    return {
        "principal": query["principal"],
        "groups": query["groups"].split(","),
        "action": query["action"],
        "resource": {"type": "table", "namespace": [namespace], "name": table},
    }


# -- from an audit line -------------------------------------------------------------------------------


def _groups(record: dict[str, Any]) -> list[str]:
    """The principal's groups as the record's Cedar request states them (its entity's parents)."""
    request = record["cedar_request"]
    principal = request["principal"]
    (entity,) = [
        e
        for part in request["entities"]  # [the principal and its groups], [the resource's chain]
        for e in part
        if e["uid"]["type"] == principal["type"] and e["uid"]["id"] == principal["id"]
    ]
    return sorted(parent["id"] for parent in entity["parents"] if parent["type"] == "Cedarberg::Group")


def _audit_link(record: dict[str, Any]) -> str:
    """The address the Audit trail page links a decision line to (the explain body's fields)."""
    fields = {
        "principal": record["principal"],
        "kind": record["principal_kind"],
        "auth_method": record["auth_method"],
        "client_address": record["client_address"],
        "groups": ",".join(_groups(record)),
        "action": record["action"],
        "resource": record["resource"],
    }
    return f"{EXPLAIN}?{urlencode(fields)}"


def test_an_address_built_from_an_audit_record_shows_that_records_decision(
    lake: Lake, context: BrowserContext
) -> None:
    rita = lake.gw.session(lake.reader_key)
    for path, status in (("namespaces/sales/tables/orders", 200), ("namespaces/secret/tables/payroll", 404)):
        assert rita.get(lake.gw.catalog_url(path), timeout=HTTP_TIMEOUT).status_code == status
    records = [
        r
        for r in lake.records()
        if r["event"] == "decision" and r["principal"] == "key:rita" and r["action"] == "loadTable"
    ]
    orders = [r for r in records if r["resource"] == ORDERS]
    payroll = [r for r in records if r["resource"] == 'Cedarberg::Table::"default/secret/payroll"']
    assert orders
    assert payroll
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    for record, decision in ((orders[-1], "allow"), (payroll[-1], "deny")):
        assert record["decision"] == decision
        answer = page.goto(f"{lake.url}{_audit_link(record)}")
        assert answer is not None
        assert answer.status == 200
        shown = _shown(page)
        assert (shown["decision"], shown["principal"], shown["action"]) == (
            decision,
            str(EntityUid(**record["cedar_request"]["principal"])),
            "loadTable",
        )
        assert shown["resource"] == record["resource"]
        assert shown["policy_ids"] == record["policy_ids"]
        # The form is filled in with the record's request, ready to change and explain again.
        assert page.input_value("#resource") == record["resource"]
        assert page.input_value("#groups") == "bi"
        assert page.input_value("#client_address") == record["client_address"]
        assert page.input_value("#auth_method") == record["auth_method"]


# -- who may explain ------------------------------------------------------------------------------------


def test_a_reader_gets_no_explain_entry_and_is_refused_at_the_address(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    assert "Explain" not in page.locator("nav[aria-label=Sections] a").all_inner_texts()
    query = urlencode(
        {
            "principal": "key:root",
            "groups": "admins",
            "action": "loadTable",
            "resource": 'Cedarberg::Table::"default/secret/payroll"',
        }
    )
    for address in (EXPLAIN, f"{EXPLAIN}?{query}"):
        answer = page.goto(f"{lake.url}{address}")
        assert answer is not None
        assert answer.status == 403
        assert "Not allowed: explainDecision" in page.inner_text("main")
        assert "payroll" not in page.inner_text("main")
    refused = [
        r
        for r in lake.records()
        if r["principal"] == "key:rita" and r["action"] == "explainDecision" and r["decision"] == "deny"
    ]
    assert len(refused) >= 2
    assert {r["status"] for r in refused} == {403}


def test_an_admin_finds_explain_in_the_navigation_and_its_use_is_audited(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    # An admin's navigation holds every section, in the order.
    assert page.locator("nav[aria-label=Sections] a").all_inner_texts() == [
        "Catalog",
        "Access",
        "Explain",
        "Audit trail",
        "Policies",
        "Keys",
    ]
    fields = {"principal": "key:rita", "groups": "bi", "action": "getConfig", "type": "warehouse"}
    page.goto(f"{lake.url}{EXPLAIN}?{urlencode(fields)}")
    assert page.inner_text("#decision") == "ALLOW"
    assert page.inner_text("#answer-resource") == 'Cedarberg::Warehouse::"default"'
    allowed = [
        r
        for r in lake.records()
        if r["action"] == "explainDecision" and r["principal"] == f"key:{lake.gw.admin_principal}"
    ]
    assert allowed
    assert allowed[-1]["decision"] == "allow"


def test_the_page_carries_the_consoles_headers_and_every_field_has_a_label(
    lake: Lake, context: BrowserContext
) -> None:
    violations: list[str] = []
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.on("console", lambda message: violations.append(message.text))
    fields = {"principal": "key:ana", "groups": "analysts", "action": "loadTable", "resource": ORDERS}
    answer = page.goto(f"{lake.url}{EXPLAIN}?{urlencode(fields)}")
    assert answer is not None
    assert answer.status == 200
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["cache-control"] == "no-store"
    assert page.locator("section.policy pre.source .line.marked").count() > 0  # the page rendered
    assert violations == []
    assert page.locator("script, [style]").count() == 0
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('main input, main select')]"
        ".filter(e => e.type !== 'hidden' && e.labels.length === 0).map(e => e.name)"
    )
    assert unlabelled == []
    # The form is usable with the keyboard: Tab goes from the principal to the kind.
    page.focus("#principal")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "kind"


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        (
            {"principal": "key:rita", "action": "stealTable", "type": "catalog"},
            400,
            "action: expected one of the Cedar actions (e.g. loadTable), not 'stealTable'",
        ),
        (
            {
                "principal": "key:rita",
                "action": "loadTable",
                "resource": "Cedarberg::Table::default/sales/orders",
            },
            400,
            f"resource: expected a Cedar uid as audit records write it, e.g. {ORDERS}",
        ),
        (
            {"principal": "k" * 300, "action": "loadTable", "resource": ORDERS},
            400,
            "invalid request: principal: must be at most 256 characters long",
        ),
        (
            {"principal": "key:rita", "action": "loadTable", "groups": "analysts," * 460, "type": "catalog"},
            400,
            "groups: expected at most 4096 characters",
        ),
        (
            {
                "principal": "key:rita",
                "action": "loadTable",
                "resource": ORDERS,
                "type": "table",
                "name": "payroll",
            },
            400,
            "give the resource either as a Cedar uid or as type, warehouse, namespace and name, not both",
        ),
        (
            {"principal": "key:rita", "action": "loadTable", "type": "namespace", "namespace": "sales"},
            400,
            "loadTable decides on a table resource, not a namespace",
        ),
        (
            {
                "principal": "key:rita",
                "action": "loadTable",
                "auth_method": "magic",
                "type": "table",
                "namespace": "sales",
                "name": "orders",
            },
            400,
            "auth_method must be one of",
        ),
        (
            {
                "principal": "key:rita",
                "action": "loadTable",
                "type": "table",
                "warehouse": "nowhere",
                "namespace": "sales",
                "name": "orders",
            },
            404,
            "warehouse does not exist: nowhere",
        ),
    ],
)
def test_bad_input_gets_the_form_back_with_what_was_expected(
    lake: Lake, context: BrowserContext, fields: dict[str, str], status: int, message: str
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    answer = page.goto(f"{lake.url}{EXPLAIN}?{urlencode(fields)}")
    assert answer is not None
    assert answer.status == status
    assert message in page.inner_text("#problem")
    assert page.locator("#decision").count() == 0  # no answer shown
    assert page.locator("form.explain").count() == 1  # the form, to correct it
    if len(fields["principal"]) < 256:
        assert page.input_value("#principal") == fields["principal"]


def test_a_repeated_field_is_refused(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    answer = page.goto(
        f"{lake.url}{EXPLAIN}?principal=key:rita&action=loadTable&action=getConfig&type=catalog"
    )
    assert answer is not None
    assert answer.status == 400
    assert "query parameter 'action' is repeated" in page.inner_text("#problem")
