"""The console in a real headless Chromium against a real TLS gateway (issue 30, console core and
the Catalog page).

One gateway (TLS, no anonymous access, the console on, the OIDC mock issuer as its sign-in
issuer) and one browser serve the module; each test opens a fresh browser context (its own
cookies). A second, small gateway with two workers and a short idle timeout serves the tests of
where a session lives and when it ends. Screenshots of each page land in tests/.artifacts/console/
(docs/console.md shows copies of them, from docs/console/).

Attacks: a hidden namespace typed into the address bar, a form without its CSRF token or from
another origin, a bearer token presented to the console and the session cookie to the REST API,
a signed-out or revoked session's cookie used again, a service key using the console.
Controls: signing in through the issuer and with an API key, browsing what the REST API shows the
same principal, an admin undropping a table with the form.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import requests

from tests.support.browser import screenshot
from tests.support.console import (
    CSP,
    SESSION_COOKIE,
    Lake,
    listed,
    namespace_url,
    open_lake,
    rest_namespaces,
    session_cookie,
    sign_in_with_key,
)
from tests.support.secure import HTTP_TIMEOUT, SecureGateway

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with open_lake(tmp_path_factory.mktemp("console")) as opened:
        yield opened


# -- signing in -----------------------------------------------------------------------------------


def test_a_person_signs_in_at_the_issuer_as_the_principal_a_bearer_token_names(
    lake: Lake, context: BrowserContext
) -> None:
    page = context.new_page()
    page.goto(f"{lake.url}/console/catalog")  # no session: sent to sign in
    page.wait_for_url(f"{lake.url}/console/signin")
    page.get_by_role("link", name="Sign in with corp").click()
    assert page.url.startswith(f"{lake.idp.issuer}/oauth2/authorize?")
    assert "code_challenge_method=S256" in page.url
    page.fill("input[name=sub]", "dana")
    page.locator("button[type=submit]").first.click()
    page.wait_for_url(f"{lake.url}/console/catalog")
    assert "oidc:corp/dana" in page.inner_text("header")
    cookie = session_cookie(context)
    assert (cookie["httpOnly"], cookie["secure"], cookie["sameSite"], cookie["path"]) == (
        True,
        True,
        "Strict",
        "/",
    )
    assert cookie["domain"] == "127.0.0.1"  # host-only, as __Host- requires
    assert "__Host-cedarberg-signin" not in {c["name"] for c in context.cookies()}  # served once
    screenshot(page, "catalog")
    # What the console shows dana is what the REST API shows a bearer id_token of the same subject.
    page.get_by_role("link", name="default", exact=True).click()
    bearer = lake.idp.id_token("dana", "cedarberg")
    assert listed(page, "Namespaces") == rest_namespaces(lake, bearer) == {"sales"}
    signed_in = [r for r in lake.records() if r["action"] == "consoleSignIn"]
    assert any(r["principal"] == "oidc:corp/dana" and r["auth_method"] == "jwt" for r in signed_in)


def test_a_sign_in_callback_not_started_in_this_browser_is_refused(
    lake: Lake, context: BrowserContext
) -> None:
    page = context.new_page()
    page.goto(f"{lake.url}/console/signin/callback?state={'x' * 43}&code=stolen")
    assert "This sign-in has expired or was not started here" in page.inner_text("main")
    assert SESSION_COOKIE not in {c["name"] for c in context.cookies()}


def test_an_api_key_signs_in_and_a_wrong_one_does_not(lake: Lake, context: BrowserContext) -> None:
    page = context.new_page()
    page.goto(f"{lake.url}/console/signin")
    screenshot(page, "signin")
    page.fill("#api_key", lake.reader_key[:-4] + "AAAA")
    page.locator("form[action='/console/signin/key'] button[type=submit]").click()
    assert "That API key was not accepted." in page.inner_text("main")
    assert SESSION_COOKIE not in {c["name"] for c in context.cookies()}
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    assert page.url == f"{lake.url}/console/catalog"
    assert "key:rita" in page.inner_text("header")
    # The navigation shows the pages that exist, and the skip link leads to the content.
    assert page.locator("nav[aria-label=Sections] a").all_inner_texts() == ["Catalog"]
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"


# -- what a reader sees ---------------------------------------------------------------------------


def test_a_reader_browses_what_the_rest_api_shows_it_and_no_more(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    page.get_by_role("link", name="default", exact=True).click()
    assert listed(page, "Namespaces") == rest_namespaces(lake, lake.reader_key) == {"sales"}
    assert page.get_by_role("link", name="Dropped tables and views").count() == 0
    page.get_by_role("link", name="sales", exact=True).click()
    assert listed(page, "Tables") == {"orders"}  # old_orders is dropped
    assert listed(page, "Views") == {"eu_orders"}
    screenshot(page, "reader-namespace")
    page.get_by_role("link", name="orders", exact=True).click()
    main = page.inner_text("main")
    for shown in ("order_id", "customer.name", "long", "append", "main"):
        assert shown in main
    assert page.locator("td:has-text('main') .tag").inner_text() == "protected"
    page.go_back()
    page.get_by_role("link", name="eu_orders").click()
    assert "SELECT order_id FROM sales.orders" in page.inner_text("main")


def test_a_hidden_namespace_typed_in_is_absent_as_one_that_does_not_exist(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    hidden = page.goto(namespace_url(lake.url, "secret"))
    assert hidden is not None
    hidden_text = page.inner_text("main")
    missing = page.goto(namespace_url(lake.url, "no-such-namespace"))
    assert missing is not None
    assert (hidden.status, missing.status) == (404, 404)
    assert hidden_text == page.inner_text("main")
    table = page.goto(namespace_url(lake.url, "secret") + "/tables/payroll")
    assert table is not None
    assert table.status == 404
    assert "payroll" not in page.content()
    denied = [
        r
        for r in lake.records()
        if r["principal"] == "key:rita" and r["decision"] == "deny" and "secret" in r["resource"]
    ]
    assert {r["action"] for r in denied} >= {"loadNamespaceMetadata", "loadTable"}
    assert {r["status"] for r in denied} == {404}


def test_the_dropped_objects_are_for_admins_only(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    answer = page.goto(f"{lake.url}/console/catalog/default/dropped")
    assert answer is not None
    assert answer.status == 403
    assert "old_orders" not in page.content()


def test_a_service_key_may_not_use_the_console(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.service_key)
    assert page.url == f"{lake.url}/console/catalog"
    assert "Not allowed: useConsole" in page.inner_text("main")
    assert "default" not in listed(page, "Namespaces")


def test_a_service_key_allowed_an_admin_action_gains_no_console_page_by_signing_in(lake: Lake) -> None:
    bot = lake.gw.create_key("audit-bot", ["audit-readers"], kind="service")
    person = lake.gw.create_key("aude", ["audit-readers"], kind="user")
    # Through the API the service may read the audit log (audit-readers)...
    api = lake.gw.session(bot).get(f"{lake.url}/admin/v1/audit?pageSize=1", timeout=HTTP_TIMEOUT)
    assert api.status_code == 200, api.text
    # ...but the console is for people: its session opens no page of the same action. The control:
    # a person in the same group opens it.
    statuses = {}
    for name, key in (("audit-bot", bot), ("aude", person)):
        cookie = _key_session(lake.gw, key)
        answer = lake.gw.session().get(
            f"{lake.url}/console/audit",
            headers={"Cookie": f"{SESSION_COOKIE}={cookie}"},
            timeout=HTTP_TIMEOUT,
        )
        statuses[name] = answer.status_code
        if name == "audit-bot":
            assert "Not allowed: useConsole" in answer.text
    assert statuses == {"audit-bot": 403, "aude": 200}
    refused = [r for r in lake.records() if r["principal"] == "key:audit-bot" and r["decision"] == "deny"]
    assert [(r["action"], r["status"]) for r in refused] == [("useConsole", 403)]


# -- headers and forms ----------------------------------------------------------------------------


def test_every_console_answer_carries_a_strict_policy_and_no_inline_code(
    lake: Lake, context: BrowserContext
) -> None:
    violations: list[str] = []
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.on("console", lambda message: violations.append(message.text))
    for path in (
        "/console/catalog",
        "/console/catalog/default",
        "/console/catalog/default/namespaces/sales",
        "/console/catalog/default/namespaces/sales/tables/orders",
        "/console/catalog/default/dropped",
        "/console/signin",
        "/console/catalog/default/namespaces/nothing",
        "/console/static/console.css",
    ):
        answer = context.request.get(lake.url + path)
        headers = answer.headers
        assert headers["content-security-policy"] == CSP, path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["referrer-policy"] == "no-referrer", path
        if path.endswith(".css"):
            continue
        assert headers["cache-control"] == "no-store", path
        body = answer.text()
        for inline in ("<script", "<style", " style="):
            assert inline not in body, path
        page.goto(lake.url + path)
    assert not [v for v in violations if "Content Security Policy" in v], violations


def test_a_form_without_its_csrf_token_or_from_elsewhere_is_refused_and_the_real_one_works(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/catalog/default/dropped")
    screenshot(page, "dropped")
    form = page.locator("form:has(button[aria-label='Undrop sales.old_orders'])")
    action = lake.url + str(form.get_attribute("action"))
    token = str(form.locator("input[name=csrf_token]").get_attribute("value"))
    without_token = context.request.post(action, form={}, headers={"Origin": lake.url}, max_redirects=0)
    wrong_token = context.request.post(
        action, form={"csrf_token": token[:-2] + "AA"}, headers={"Origin": lake.url}, max_redirects=0
    )
    elsewhere = context.request.post(
        action, form={"csrf_token": token}, headers={"Origin": "https://evil.example"}, max_redirects=0
    )
    assert (without_token.status, wrong_token.status, elsewhere.status) == (403, 403, 403)
    still = lake.gw.admin.get(f"{lake.url}/admin/v1/warehouses/default/dropped", timeout=HTTP_TIMEOUT)
    assert [d["name"] for d in still.json()["dropped"]] == ["old_orders"]
    # The control: the page's own form, from the page.
    form.locator("button").click()
    page.wait_for_url(f"{lake.url}/console/catalog/default/dropped")
    assert "Nothing dropped here." in page.inner_text("main")
    loaded = lake.gw.admin.get(
        lake.gw.catalog_url("namespaces/sales/tables/old_orders"), timeout=HTTP_TIMEOUT
    )
    assert loaded.status_code == 200
    records = lake.records()
    refused = [r for r in records if r["action"] == "undropObject" and r["decision"] == "deny"]
    assert len(refused) == 3
    assert all(r["principal"] == "key:bootstrap-admin" and r["status"] == 403 for r in refused)
    done = [r for r in records if r["action"] == "undropObject" and r["event"] == "mutation"]
    assert [(r["principal"], r["outcome"]) for r in done] == [("key:bootstrap-admin", "success")]
    page.goto(namespace_url(lake.url, "sales"))
    screenshot(page, "namespace")
    page.get_by_role("link", name="orders", exact=True).click()
    screenshot(page, "table")


def test_a_bearer_token_is_no_console_credential_and_the_cookie_no_api_credential(
    lake: Lake, context: BrowserContext
) -> None:
    sign_in_with_key(context, lake.url, lake.gw.admin_key)
    cookie = session_cookie(context)["value"]
    with_bearer = lake.gw.session(lake.gw.admin_key).get(f"{lake.url}/console/catalog", timeout=HTTP_TIMEOUT)
    assert with_bearer.status_code == 401
    assert 'http-equiv="refresh" content="0;url=/console/signin"' in with_bearer.text
    with_cookie = lake.gw.session().get(
        lake.gw.catalog_url("namespaces"),
        headers={"Cookie": f"{SESSION_COOKIE}={cookie}"},
        timeout=HTTP_TIMEOUT,
    )
    assert with_cookie.status_code == 401
    assert with_cookie.json()["error"]["type"] == "NotAuthorizedException"


# -- when a session ends --------------------------------------------------------------------------


def test_signing_out_ends_the_session_for_its_cookie_too(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    cookie = session_cookie(context)["value"]
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{lake.url}/console/signin")
    assert SESSION_COOKIE not in {c["name"] for c in context.cookies()}
    replayed = lake.gw.session().get(
        f"{lake.url}/console/catalog", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"}, timeout=HTTP_TIMEOUT
    )
    assert replayed.status_code == 401
    outs = [r for r in lake.records() if r["action"] == "consoleSignOut"]
    assert any(r["principal"] == "key:rita" and r["outcome"] == "success" for r in outs)


def test_revoking_the_key_ends_the_sessions_it_opened(lake: Lake, context: BrowserContext) -> None:
    key = lake.gw.create_key("ruth", ["bi"], kind="user")
    page = sign_in_with_key(context, lake.url, key)
    assert page.url == f"{lake.url}/console/catalog"
    key_id = key[4:20]
    revoked = lake.gw.admin.delete(f"{lake.url}/admin/v1/api-keys/{key_id}", timeout=HTTP_TIMEOUT)
    assert revoked.status_code == 200
    page.reload()
    page.wait_for_url(f"{lake.url}/console/signin")
    assert "Sign in" in page.inner_text("h1")


# -- two workers, a short idle timeout ------------------------------------------------------------


IDLE_SECONDS = 5


@pytest.fixture(scope="module")
def busy(lake: Lake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureGateway]:
    """Two workers and a short idle timeout; the same certificate as `lake` (the browser trusts it)."""
    config = {"workers": 2, "console": {"enabled": True, "idle_timeout_seconds": IDLE_SECONDS}}
    with SecureGateway(tmp_path_factory.mktemp("console-workers"), pki=lake.gw.pki, config=config) as gw:
        yield gw


def _key_session(gw: SecureGateway, key: str | None = None) -> str:
    """The session cookie of a sign-in with `key` (the admin's by default), made without a browser."""
    answer = gw.session().post(
        f"{gw.url}/console/signin/key",
        data={"api_key": key or gw.admin_key},
        headers={"Origin": gw.url},
        allow_redirects=False,
        timeout=HTTP_TIMEOUT,
    )
    assert answer.status_code == 303, answer.text
    match = re.match(rf"{SESSION_COOKIE}=([A-Za-z0-9_-]+);", answer.headers["Set-Cookie"])
    assert match is not None
    return match.group(1)


def test_a_session_works_on_either_worker(busy: SecureGateway) -> None:
    assert len(re.findall(r"worker \d+ started", busy.log_text())) == 2
    cookie = _key_session(busy)
    statuses = []
    for _ in range(16):  # a new connection each time: the kernel spreads them over both workers
        with requests.Session() as fresh:
            fresh.verify = str(busy.ca_cert)
            answer = fresh.get(
                f"{busy.url}/console/catalog",
                headers={"Cookie": f"{SESSION_COOKIE}={cookie}", "Connection": "close"},
                timeout=HTTP_TIMEOUT,
            )
            statuses.append(answer.status_code)
    assert statuses == [200] * 16


def test_an_idle_session_is_sent_to_sign_in(busy: SecureGateway, context: BrowserContext) -> None:
    page = sign_in_with_key(context, busy.url, busy.admin_key)
    assert page.url == f"{busy.url}/console/catalog"
    time.sleep(IDLE_SECONDS + 1)
    page.reload()
    page.wait_for_url(f"{busy.url}/console/signin")
    assert SESSION_COOKIE in {
        c["name"] for c in context.cookies()
    }  # the browser kept it: the server ended it
