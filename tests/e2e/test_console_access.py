"""The console's Access page ("Who can access this") in a real headless Chromium against a real
TLS gateway (issue 30, page 2).

The gateway runs the bundled policies plus `bi-sales-two-columns`, an `@columns` permit for group
`bi` on `default/sales`, whose namespace grants `bi` as readers: the grant lifts the restriction
(`readers-read-granted` allows the same reads unrestricted), a restriction that cannot bind.

Attacks: a reader (rita, group `bi`) opening the page by its address, with and without an object
named; the page refuses it (403) before reading anything, and the refusal is audited as hers.
Controls: an admin reaches the page from the catalog's table, view and namespace pages and
through its form; what the page lists (principals and groups per action, determining policies
with their source lines, conditions left, the findings of restrictions that cannot bind) is what
`GET /admin/v1/review` answers for the same object; a malformed or absent object is answered with
the API's status.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.browser import ARTIFACTS, screenshot
from tests.support.console import Lake, namespace_url, open_lake, sign_in_with_key
from tests.support.secure import HTTP_TIMEOUT

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Locator, Page

RESTRICTED = "bi-sales-two-columns"
GRANT = "readers-read-granted"
RESTRICTED_PERMIT = f"""
@id("{RESTRICTED}")
@columns("order_id, region")
permit (
  principal in Cedarberg::Group::"bi",
  action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],
  resource in Cedarberg::Namespace::"default/sales"
);
"""
ORDERS = "default/sales/orders"


def _policies(home: Path) -> Path:
    policy_dir = home / "policies"
    shutil.copytree(BUNDLED_POLICY_DIR, policy_dir, ignore=shutil.ignore_patterns("tests", "*.md"))
    (policy_dir / "sales-columns.cedar").write_text(RESTRICTED_PERMIT)
    return policy_dir


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    home = tmp_path_factory.mktemp("console-access")
    with open_lake(home, policy_dir=_policies(home)) as opened:
        yield opened


# -- what the page says, and what the API says ------------------------------------------------------


def _api_review(lake: Lake, **params: str) -> dict[str, Any]:
    answer = lake.gw.admin.get(f"{lake.url}/admin/v1/review", params=params, timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _api_locations(lake: Lake) -> dict[str, str]:
    answer = lake.gw.admin.get(f"{lake.url}/admin/v1/policies", timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    locations: dict[str, str] = answer.json()["policies"]
    return locations


def _policy_ids(item: Locator) -> list[str]:
    return [str(p.get_attribute("data-policy")) for p in item.locator(".via .policy").all()]


def _page_actions(page: Page) -> dict[str, dict[str, Any]]:
    """Per action row: principals and groups with their determining policies, conditions left."""
    found: dict[str, dict[str, Any]] = {}
    for row in page.locator("table.access tbody tr").all():
        action = str(row.get_attribute("data-action"))
        found[action] = {
            "principals": {
                str(li.get_attribute("data-principal")): _policy_ids(li)
                for li in row.locator("li.principal").all()
            },
            "groups": {
                str(li.get_attribute("data-group")): _policy_ids(li) for li in row.locator("li.group").all()
            },
            "conditions": sorted(
                str(li.get_attribute("data-policy")) for li in row.locator("li.condition").all()
            ),
            "no_group": row.locator("li.no-group").count() == 1,
        }
    return found


def _api_actions(review: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        a["action"]: {
            "principals": {p["id"]: p["policy_ids"] for p in a["principals"]},
            "groups": {g["group"]: g["policy_ids"] for g in a["groups"]},
            "conditions": sorted(c["policy_id"] for c in a["conditions"]),
            "no_group": a["members_of_no_group"],
        }
        for a in review["actions"]
    }


def _nobody(page: Page) -> set[str]:
    return set(page.locator("p.nobody code").all_inner_texts())


def _assert_page_is_the_review(page: Page, review: dict[str, Any]) -> None:
    shown = _page_actions(page)
    api = _api_actions(review)
    nobody = {action for action, who in api.items() if not any(who.values())}
    assert _nobody(page) == nobody
    assert shown == {action: who for action, who in api.items() if action not in nobody}
    assert page.locator("h2.reviewed code").inner_text() == review["resource"]


# -- controls ---------------------------------------------------------------------------------------


def test_the_page_of_a_table_lists_what_the_review_endpoint_answers(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    assert "Access" in page.locator("header nav").inner_text()
    page.goto(namespace_url(lake.url, "sales") + "/tables/orders")
    page.get_by_role("link", name="Who can access this").click()
    page.wait_for_load_state()
    assert page.url.endswith("/console/access?warehouse=default&namespace=sales&name=orders&type=table")

    review = _api_review(lake, resource=ORDERS, type="table")
    _assert_page_is_the_review(page, review)
    # The page shows the reader's grant and the admins' permit, as the endpoint does.
    load = _page_actions(page)["loadTable"]
    assert GRANT in load["groups"]["bi"]
    assert load["principals"]["key:rita"] == _api_actions(review)["loadTable"]["principals"]["key:rita"]
    assert "key:bootstrap-admin" in load["principals"]

    # Every determining policy shown carries its source line, as the policy set gives it.
    locations = _api_locations(lake)
    shown = page.locator("table.access .policy").all()
    assert shown
    for item in shown:
        policy_id = str(item.get_attribute("data-policy"))
        assert item.locator(".where").inner_text() == locations[policy_id]
    assert locations[RESTRICTED] == "sales-columns.cedar:2"
    screenshot(page, "access", full_page=False)

    # The page is the admin's reviewAccess request, audited as the admin's.
    opened = [
        r
        for r in lake.records()
        if r["action"] == "reviewAccess"
        and r["principal"] == "key:bootstrap-admin"
        and r["decision"] == "allow"
    ]
    assert opened


def test_a_restriction_that_cannot_bind_is_shown_with_both_policies(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/access?warehouse=default&namespace=sales&name=orders&type=table")
    review = _api_review(lake, resource=ORDERS, type="table")
    expected = {(f["kind"], f["policy_id"], f["message"]) for f in review["restrictions_not_binding"]}
    assert ("lifted", RESTRICTED) in {(kind, policy) for kind, policy, _ in expected}

    section = page.locator("section.not-binding")
    assert section.locator("h2").inner_text() == "Restrictions that cannot bind"
    findings = section.locator("li.finding").all()
    shown = {
        (str(f.get_attribute("data-kind")), str(f.get_attribute("data-policy")), f.locator("p").inner_text())
        for f in findings
    }
    assert shown == {(kind, policy, f"{kind}: {message}") for kind, policy, message in expected}
    lifted = section.locator("li.finding[data-kind='lifted']")
    assert lifted.locator("dd .policy").first.get_attribute("data-policy") == RESTRICTED
    assert GRANT in lifted.locator("dd .policy").nth(1).inner_text()
    assert "sales-columns.cedar:2" in lifted.inner_text()
    # Shown before the table of who may do what: the first thing read after the object.
    assert page.locator("main h2").nth(1).inner_text() == "Restrictions that cannot bind"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    section.screenshot(path=str(ARTIFACTS / "access-warning.png"))


def test_the_view_namespace_and_warehouse_pages_link_to_their_review(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(namespace_url(lake.url, "sales") + "/views/eu_orders")
    page.get_by_role("link", name="Who can access this").click()
    page.wait_for_load_state()
    _assert_page_is_the_review(page, _api_review(lake, resource="default/sales/eu_orders", type="view"))

    page.goto(namespace_url(lake.url, "sales"))
    page.get_by_role("link", name="Who can access this").click()
    page.wait_for_load_state()
    _assert_page_is_the_review(page, _api_review(lake, resource="default/sales"))

    page.goto(f"{lake.url}/console/catalog/default")
    page.get_by_role("link", name="Who can access this").click()
    page.wait_for_load_state()
    _assert_page_is_the_review(page, _api_review(lake, resource="default"))


def test_the_form_picks_an_object_with_the_keyboard(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.get_by_role("link", name="Access", exact=True).click()
    page.wait_for_load_state()
    assert page.locator("table.access").count() == 0  # nothing picked yet: the form alone
    page.get_by_label("Warehouse").select_option("default")
    page.get_by_label("Namespace").fill("secret")
    page.get_by_label("Table or view").fill("payroll")
    page.get_by_label("Kind").select_option("table")
    page.get_by_label("Table or view").press("Enter")
    page.wait_for_load_state()
    _assert_page_is_the_review(page, _api_review(lake, resource="default/secret/payroll", type="table"))
    # No group reads payroll: the admins' permit, and nobody else by name.
    assert set(_page_actions(page)["loadTable"]["principals"]) == {"key:bootstrap-admin"}


@pytest.mark.parametrize(
    ("query", "resource", "status"),
    [
        ("namespace=sales&name=no_such_table", "default/sales/no_such_table", 404),
        ("namespace=no_such_namespace", "default/no_such_namespace", 404),
        ("namespace=sales..eu", "default/sales..eu", 400),
        ("namespace=sales&name=orders&type=index", None, 400),
    ],
)
def test_an_object_the_api_refuses_is_refused_with_its_status(
    lake: Lake, context: BrowserContext, query: str, resource: str | None, status: int
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    answer = page.goto(f"{lake.url}/console/access?warehouse=default&{query}")
    assert answer is not None
    assert answer.status == status
    assert page.locator("p.problem[role=alert]").count() == 1
    assert page.get_by_label("Namespace").count() == 1  # the form, to correct it
    assert page.locator("table.access").count() == 0
    params = {"resource": resource} if resource is not None else {"resource": ORDERS, "type": "index"}
    api = lake.gw.admin.get(f"{lake.url}/admin/v1/review", params=params, timeout=HTTP_TIMEOUT)
    assert api.status_code == status, api.text


def test_a_slash_in_the_namespace_field_is_refused_not_read_as_a_table(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    answer = page.goto(f"{lake.url}/console/access?warehouse=default&namespace=sales%2Forders")
    assert answer is not None
    assert answer.status == 400
    assert "levels joined by '.'" in page.locator("p.problem[role=alert]").inner_text()
    assert page.locator("table.access").count() == 0


# -- attacks ----------------------------------------------------------------------------------------


def test_a_reader_gets_no_access_section_and_a_403_at_its_address(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    assert "key:rita" in page.inner_text("header")
    assert "Access" not in page.locator("header nav").inner_text()
    page.goto(namespace_url(lake.url, "sales") + "/tables/orders")
    assert page.locator("h1").inner_text() == "Table orders"  # she may read it
    assert page.get_by_role("link", name="Who can access this").count() == 0

    for query in ("", "?warehouse=default&namespace=sales&name=orders&type=table", "?warehouse=default"):
        answer = page.goto(f"{lake.url}/console/access{query}")
        assert answer is not None
        assert answer.status == 403
        assert page.locator("h1").inner_text() == "Not allowed"
        assert page.locator("table.access").count() == 0
        assert "bi-sales-two-columns" not in page.content()
    refused = [
        r
        for r in lake.records()
        if r["action"] == "reviewAccess" and r["principal"] == "key:rita" and r["decision"] == "deny"
    ]
    assert len(refused) == 3
    assert {r["status"] for r in refused} == {403}
    # The API refuses her the same review.
    api = lake.gw.session(lake.reader_key).get(
        f"{lake.url}/admin/v1/review", params={"resource": ORDERS}, timeout=HTTP_TIMEOUT
    )
    assert api.status_code == 403
