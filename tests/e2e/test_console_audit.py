"""The console's Audit trail page in a real headless Chromium against a real TLS gateway (issue 30,
page 4): the audit log as `GET /admin/v1/audit` answers it, filtered, paged, followed as it is
written, with each decision's way into Explain.

Attacks: a reader opening the page or its follow route by address (403, audited), the follow
route asked without the session (a bearer key, no cookie: 401) or with a token it was not given.
Controls: an admin's filter finds a denial just made and answers what the API answers, a new line
appears at the top without a reload (and, without script, behind "Newer lines"), the Explain
link carries the record's fields, Older pages back as the API's page token does, a filter the
endpoint refuses is shown with the form.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

import pytest

from tests.support.browser import screenshot
from tests.support.console import CSP, Lake, open_lake, session_cookie, sign_in_with_key
from tests.support.secure import HTTP_TIMEOUT

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

PAYROLL = 'Cedarberg::Table::"default/secret/payroll"'
FOLLOW_SECONDS = 20  # a followed line appears within one poll (the gateway writes within milliseconds)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with open_lake(tmp_path_factory.mktemp("console-audit")) as opened:
        yield opened


def _rita(lake: Lake, path: str) -> tuple[int, str]:
    """A REST request of rita (a reader of `sales`); its status and request id."""
    answer = lake.gw.session(lake.reader_key).get(lake.gw.catalog_url(path), timeout=HTTP_TIMEOUT)
    return answer.status_code, answer.headers["X-Request-ID"]


def _api(lake: Lake, **params: str) -> dict[str, Any]:
    answer = lake.gw.admin.get(f"{lake.url}/admin/v1/audit", params=params, timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _lines(page: Page) -> list[tuple[str, str, str]]:
    """The page's lines: (time, request id, action), top to bottom."""
    rows = page.locator("#audit-lines tbody tr")
    return [
        (cells[0], cells[7], cells[3])
        for cells in (rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count()))
    ]


def _records(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["time"], r["request_id"], r["action"]) for r in body["records"]]


def _admin_page(context: BrowserContext, lake: Lake, query: str = "") -> Page:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/audit{query}")
    return page


def test_a_filter_finds_a_denial_just_made_and_answers_what_the_api_does(
    lake: Lake, context: BrowserContext
) -> None:
    status, denied = _rita(lake, "namespaces/secret/tables/payroll")
    assert status == 404  # a table rita may not see is absent
    assert _rita(lake, "namespaces/sales/tables/orders")[0] == 200
    page = _admin_page(context, lake, "?pageSize=12")
    assert "Audit trail" in page.locator("nav[aria-label=Sections] a").all_inner_texts()
    screenshot(page, "audit")
    page.fill("#f-principal", "key:rita")
    page.fill("#f-since", (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_role("button", name="Filter").click()
    page.wait_for_load_state()
    assert {line[2] for line in _lines(page)} >= {"loadTable"}
    assert {row for row in page.locator("#audit-lines tbody td:nth-child(3)").all_inner_texts()} == {
        "key:rita"
    }
    page.select_option("#f-decision", "deny")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_load_state()
    query = dict(parse_qsl(urlsplit(page.url).query))
    assert (query["principal"], query["decision"]) == ("key:rita", "deny")
    row = page.locator("#audit-lines tbody tr", has=page.locator(f"code.request-id:text-is('{denied}')"))
    cells = row.locator("td").all_inner_texts()
    assert cells[1:8] == ["decision", "key:rita", "loadTable", PAYROLL, "deny", "404", denied]
    # The same question to the API answers the same records, in the same order.
    api = _api(lake, principal="key:rita", decision="deny", since=query["since"] + "Z")
    assert _lines(page) == _records(api)
    assert all(line[1] != "" for line in _lines(page))
    assert page.input_value("#f-principal") == "key:rita"  # the form shows the filter it applied


def test_a_new_line_appears_at_the_top_without_a_reload(lake: Lake, context: BrowserContext) -> None:
    page = _admin_page(context, lake, "?principal=key:rita")
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text))
    page.evaluate("window.notReloaded = true")
    before = _lines(page)
    status, made = _rita(lake, "namespaces/sales/tables/orders")
    assert status == 200
    fresh = page.locator(
        "#audit-lines tbody tr.fresh", has=page.locator(f"code.request-id:text-is('{made}')")
    )
    fresh.wait_for(timeout=FOLLOW_SECONDS * 1000)
    lines = _lines(page)
    assert lines[0][1] == made  # at the top
    assert lines[1:] == before  # the lines it had, below
    assert page.evaluate("window.notReloaded") is True
    assert "1 new line" in page.inner_text("#audit-live")
    newer = str(page.locator("#audit-newer").get_attribute("href"))
    assert dict(parse_qsl(urlsplit(newer).query))["principal"] == "key:rita"
    assert not [v for v in violations if "Content Security Policy" in v], violations


def test_without_script_newer_lines_shows_what_was_written_since(lake: Lake, browser: Browser) -> None:
    plain = browser.new_context(viewport={"width": 1280, "height": 800}, java_script_enabled=False)
    try:
        page = _admin_page(plain, lake, "?principal=key:rita")
        status, made = _rita(lake, "namespaces/sales/tables/orders")
        assert status == 200
        assert made not in [line[1] for line in _lines(page)]  # nothing followed it in
        page.get_by_role("link", name="Newer lines").click()
        page.wait_for_load_state()
        assert [(line[1], line[2]) for line in _lines(page)] == [(made, "loadTable")]
        page.get_by_role("link", name="Newer lines").click()
        page.wait_for_load_state()
        assert _lines(page) == []
        assert "No line matches yet." in page.inner_text("main")
    finally:
        plain.close()


def test_the_explain_link_carries_the_records_fields(lake: Lake, context: BrowserContext) -> None:
    _status, denied = _rita(lake, "namespaces/secret/tables/payroll")
    page = _admin_page(context, lake, f"?principal=key:rita&resource={PAYROLL}")
    row = page.locator("#audit-lines tbody tr", has=page.locator(f"code.request-id:text-is('{denied}')"))
    href = str(
        row.get_by_role("link", name=f"Explain the decision of request {denied}").get_attribute("href")
    )
    [record] = [
        r for r in _api(lake, principal="key:rita", resource=PAYROLL)["records"] if r["request_id"] == denied
    ]
    explain = record["explain"]
    assert explain["groups"] == ["bi"]  # rita's key's groups, as the API finds them
    link = urlsplit(href)
    assert link.path == "/console/explain"
    assert parse_qsl(link.query) == [
        ("principal", "key:rita"),
        ("kind", explain["kind"]),
        ("auth_method", explain["auth_method"]),
        ("client_address", explain["client_address"]),
        ("groups", "bi"),
        ("action", "loadTable"),
        ("resource", PAYROLL),
    ]


def test_older_pages_back_as_the_apis_page_token_does(lake: Lake, context: BrowserContext) -> None:
    for _ in range(4):
        _rita(lake, "namespaces/sales")
    page = _admin_page(context, lake, "?principal=key:rita&pageSize=3")
    first = _lines(page)
    page.get_by_role("link", name="Older", exact=True).click()
    page.wait_for_load_state()
    second = _lines(page)
    api_first = _api(lake, principal="key:rita", pageSize="3")
    api_second = _api(lake, principal="key:rita", pageSize="3", pageToken=api_first["next-page-token"])
    assert (first, second) == (_records(api_first), _records(api_second))
    assert len(first) == len(second) == 3
    assert first[-1][0] >= second[0][0]  # older, newest first


def test_a_filter_the_endpoint_refuses_is_shown_with_the_form(lake: Lake, context: BrowserContext) -> None:
    page = _admin_page(context, lake)
    # since with a zone (as a link may carry it), until without (as the form sends it: UTC)
    since = quote("2026-11-27T11:00:30+01:00")
    answer = page.goto(f"{lake.url}/console/audit?since={since}&until=2026-11-27T10:00:00")
    assert answer is not None
    assert answer.status == 400
    assert "since is after until" in page.inner_text("[role=alert]")
    assert page.input_value("#f-since") == "2026-11-27T10:00:30"  # shown in UTC
    tampered = page.goto(f"{lake.url}/console/audit?pageToken=not-a-token")
    assert tampered is not None
    assert tampered.status == 400
    assert "invalid pageToken" in page.inner_text("[role=alert]")


def test_a_reader_gets_no_audit_trail(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    assert page.locator("nav[aria-label=Sections] a").all_inner_texts() == ["Catalog"]
    for path in (
        "/console/audit",
        "/console/audit?principal=key:rita",
        "/console/audit/follow?after=x&wait=1",
    ):
        answer = page.goto(lake.url + path)
        assert answer is not None
        assert answer.status == 403, path
        assert "Not allowed: readAuditLog" in page.inner_text("main")
    refused = [
        r
        for r in lake.records()
        if r["principal"] == "key:rita" and r["action"] == "readAuditLog" and r["decision"] == "deny"
    ]
    assert len(refused) >= 3
    assert {r["status"] for r in refused} == {403}


def test_the_follow_route_answers_only_the_session_and_its_own_tokens(
    lake: Lake, context: BrowserContext
) -> None:
    page = _admin_page(context, lake)
    token = str(page.locator("#audit-lines").get_attribute("data-after"))
    follow = f"{lake.url}/console/audit/follow?after={token}&wait=0"
    # The bootstrap admin's key is no console credential, and no cookie is no session.
    with_key = lake.gw.session(lake.gw.admin_key).get(follow, timeout=HTTP_TIMEOUT)
    anonymous = lake.gw.session().get(follow, timeout=HTTP_TIMEOUT)
    assert (with_key.status_code, anonymous.status_code) == (401, 401)
    assert 'content="0;url=/console/signin"' in with_key.text
    # The session: its own token is followed; a forged or altered one, or none, is a 400.
    answer = context.request.get(follow)
    assert answer.status == 200
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["cache-control"] == "no-store"
    assert set(answer.json()) == {"html", "count", "follow-token"}
    cookie = session_cookie(context)["value"]
    assert cookie not in answer.text()
    for after in ("forged", token[:-4] + "AAAA"):
        assert context.request.get(f"{lake.url}/console/audit/follow?after={after}").status == 400
    assert context.request.get(f"{lake.url}/console/audit/follow").status == 400  # no token
    script = context.request.get(f"{lake.url}/console/static/audit.js")
    assert script.status == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.headers["content-security-policy"] == CSP
    # The page's one script is that file, nothing inline, and it may connect to the gateway only.
    audit_page = context.request.get(f"{lake.url}/console/audit")
    assert audit_page.headers["content-security-policy"] == CSP + "; connect-src 'self'"
    html = audit_page.text()
    assert html.count("<script") == html.count('<script src="/console/static/audit.js" defer></script>') == 1
    for inline in ("<style", " style=", " onclick=", " onload="):
        assert inline not in html
