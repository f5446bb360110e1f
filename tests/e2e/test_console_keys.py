"""The console's Keys page and user directory in a real headless Chromium against a real TLS
gateway (issue 30, page 6).

Attacks: a reader (rita, group `bi`) opening the Keys and Users pages by address, the create form
posted without its CSRF token, a created or rotated secret looked for again (reload, back, the
audit log, the gateway's log), a revoked key or a rotated-away secret used against the REST API,
bad owners, groups, expiries and overlaps.
Controls: an admin creating a key whose shown forms work against the REST API, listing, rotating
(with and without an overlap) and revoking it; adding, changing and removing a directory user, as
`GET /admin/v1/users` lists them.
"""

from __future__ import annotations

import html
import re
import shlex
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.browser import screenshot
from tests.support.console import CSP, Lake, open_lake, rest_namespaces, sign_in_with_key
from tests.support.secure import HTTP_TIMEOUT

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with open_lake(tmp_path_factory.mktemp("console-keys")) as opened:
        yield opened


KEY = re.compile(r"cbk_[A-Za-z0-9_-]+")


def _keys_of(lake: Lake, owner: str) -> list[dict[str, Any]]:
    answer = lake.gw.admin.get(
        f"{lake.url}/admin/v1/api-keys", params={"principal": owner}, timeout=HTTP_TIMEOUT
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["api-keys"])


def _status_with(lake: Lake, key: str) -> int:
    """The REST API's answer to listing namespaces with `key` as the bearer token."""
    answer = lake.gw.session(key).get(lake.gw.catalog_url("namespaces"), timeout=HTTP_TIMEOUT)
    return answer.status_code


def _create_in_browser(page: Page, lake: Lake, owner: str, kind: str, groups: str, days: str = "") -> str:
    page.goto(f"{lake.url}/console/keys")
    page.get_by_role("link", name="Create a key").click()
    page.fill("#principal", owner)
    page.locator(f"input[name=kind][value={kind}]").check()
    page.fill("#groups", groups)
    page.fill("#expires_in_days", days)
    with page.expect_response(f"{lake.url}/console/keys") as answer:
        page.get_by_role("button", name="Create the key").click()
    assert answer.value.status == 201
    assert answer.value.headers["cache-control"] == "no-store"
    assert answer.value.headers["content-security-policy"] == CSP
    shown = page.inner_text("#api-key").strip()
    assert KEY.fullmatch(shown), shown
    return shown


def _logs(lake: Lake) -> str:
    return lake.audit.read_text() + lake.gw.log_text()


# -- create, list, revoke -------------------------------------------------------------------------


def test_an_admin_creates_a_key_that_works_is_listed_and_stops_when_revoked(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    assert "Keys" in page.locator("nav[aria-label=Sections] a").all_inner_texts()
    key = _create_in_browser(page, lake, "carla", "user", "bi, analysts", days="30")
    lake.gw.issued_secrets.append(key)
    screenshot(page, "key-created")
    key_id = key[4:20]
    main = page.inner_text("main")
    assert "A personal key for carla, in analysts, bi." in main
    # The forms engines take, built from the gateway's address and its default warehouse.
    forms = page.locator("pre.engine-form").all_inner_texts()
    spark, trino, pyiceberg, curl = forms
    credential = f"{key_id}:{key[21:]}"
    assert f"spark.sql.catalog.lake.credential={credential}" in spark.splitlines()
    assert f"spark.sql.catalog.lake.uri={lake.url}" in spark.splitlines()
    assert f"spark.sql.catalog.lake.oauth2-server-uri={lake.url}/v1/oauth/tokens" in spark.splitlines()
    assert f"iceberg.rest-catalog.oauth2.credential={credential}" in trino.splitlines()
    assert "iceberg.rest-catalog.warehouse=default" in trino.splitlines()
    assert f'credential="{credential}",' in pyiceberg
    # The key works against the REST API as the reader it was made for, and so does the curl line.
    assert rest_namespaces(lake, key) == {"sales"}
    words = shlex.split(curl)
    assert words[:3] == ["curl", "--cacert", "ca.pem"]
    assert words[4] == f"Authorization: Bearer {key}"
    by_curl = lake.gw.session().get(
        words[5], headers={"Authorization": words[4].split(": ", 1)[1]}, timeout=HTTP_TIMEOUT
    )
    assert by_curl.status_code == 200
    assert by_curl.json()["namespaces"] == [["sales"]]
    # The list shows it as GET /admin/v1/api-keys does.
    (record,) = _keys_of(lake, "carla")
    assert record["id"] == key_id
    page.goto(f"{lake.url}/console/keys")
    row = page.locator("table[aria-label='API keys'] tbody tr").filter(has_text=key_id)
    cells = row.locator("td").all_inner_texts()
    assert cells[1:3] == ["carla", "person"]
    assert row.locator("td").nth(3).locator(".tag").all_inner_texts() == ["analysts", "bi"]
    assert cells[5].startswith(record["expires_at"][:10])
    assert cells[6:] == ["never rotated", "active"]
    screenshot(page, "keys")
    # Revoking needs the confirmation box: without it the form comes back and the key still works.
    page.get_by_role("link", name=key_id).click()
    page.wait_for_url(f"{lake.url}/console/keys/{key_id}")
    with page.expect_response(f"{lake.url}/console/keys/{key_id}/revoke") as unconfirmed:
        page.get_by_role("button", name="Revoke the key").click()
    assert unconfirmed.value.status == 400
    assert "Tick the box to confirm" in page.inner_text("main")
    screenshot(page, "key")
    assert _status_with(lake, key) == 200
    page.get_by_label("I understand").check()
    page.get_by_role("button", name="Revoke the key").click()
    page.wait_for_url(f"{lake.url}/console/keys/{key_id}")
    assert "revoked" in page.inner_text("dl.facts")
    assert page.get_by_role("button", name="Revoke the key").count() == 0
    assert _status_with(lake, key) == 401
    (record,) = _keys_of(lake, "carla")
    assert record["revoked_at"] is not None
    # A revoked key offers no rotation, and a rotation posted anyway is refused with the reason.
    assert page.get_by_role("button", name="Rotate the key").count() == 0
    token = str(page.locator("form.signout input[name=csrf_token]").get_attribute("value"))
    rotated = context.request.post(
        f"{lake.url}/console/keys/{key_id}/rotate", form={"csrf_token": token}, headers={"Origin": lake.url}
    )
    assert rotated.status == 409
    assert "a revoked key cannot be rotated" in rotated.text()
    assert _status_with(lake, key) == 401
    # Both changes are the admin's, audited; the mutation record names the key, never its secret.
    records = lake.records()
    made = [
        r
        for r in records
        if r["action"] == "createApiKey"
        and r["event"] == "mutation"
        and (r["detail"] or {}).get("key_id") == key_id
    ]
    assert [(r["principal"], r["outcome"], r["detail"]["key_principal"]) for r in made] == [
        ("key:bootstrap-admin", "success", "key:carla")
    ]
    revoked = [
        r
        for r in records
        if r["action"] == "revokeApiKey" and r["event"] == "mutation" and key_id in r["resource"]
    ]
    assert [(r["principal"], r["status"]) for r in revoked] == [
        ("key:bootstrap-admin", 400),
        ("key:bootstrap-admin", 303),
    ]
    assert key[21:] not in _logs(lake)


def test_a_created_key_is_shown_once(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    key = _create_in_browser(page, lake, "once-bot", "service", "etl")
    lake.gw.issued_secrets.append(key)
    assert key not in page.url
    page.goto(f"{lake.url}/console/keys")
    page.go_back()  # to the answer of the form
    assert key not in page.content()
    page.reload()
    assert key not in page.content()
    page.goto(f"{lake.url}/console/keys/{key[4:20]}")
    assert key[21:] not in page.content()
    # Going back and reloading made no second key, and the secret is in no log.
    assert len(_keys_of(lake, "once-bot")) == 1
    assert key[21:] not in _logs(lake)
    assert _status_with(lake, key) == 200


# -- rotate ---------------------------------------------------------------------------------------


def _rotate_in_browser(page: Page, lake: Lake, key_id: str, overlap: str) -> tuple[int, str]:
    page.goto(f"{lake.url}/console/keys/{key_id}")
    page.fill("#overlap_seconds", overlap)
    with page.expect_response(f"{lake.url}/console/keys/{key_id}/rotate") as answer:
        page.get_by_role("button", name="Rotate the key").click()
    status = answer.value.status
    return status, page.inner_text("#api-key").strip() if status == 200 else page.inner_text("main")


def test_rotating_shows_a_new_secret_once_and_the_old_one_works_only_for_the_overlap(
    lake: Lake, context: BrowserContext
) -> None:
    first = lake.gw.create_key("rotor", ["bi"], kind="service")
    key_id = first[4:20]
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    # No overlap: the old secret stops at once.
    status, second = _rotate_in_browser(page, lake, key_id, "0")
    assert status == 200, second
    lake.gw.issued_secrets.append(second)
    assert second[4:20] == key_id
    assert second != first
    assert "Never rotated" not in page.inner_text("main")
    assert (_status_with(lake, second), _status_with(lake, first)) == (200, 401)
    # An overlap the settings do not allow is refused with the form and its reason; nothing changes.
    status, text = _rotate_in_browser(page, lake, key_id, "90000")
    assert status == 400
    assert "overlap_seconds must be from 0 to 86400" in text.lower()
    assert _status_with(lake, second) == 200
    status, text = _rotate_in_browser(page, lake, key_id, "soon")
    assert (status, "whole number of seconds" in text) == (400, True)
    # A short overlap: the previous secret works until it ends, then stops.
    # (Timed from before the form is sent and after it is answered: the window opens in between.)
    overlap = 15
    sent = time.monotonic()
    status, third = _rotate_in_browser(page, lake, key_id, str(overlap))
    answered = time.monotonic()
    assert status == 200, third
    lake.gw.issued_secrets.append(third)
    assert "the previous secret works until" in page.inner_text("main")
    assert (_status_with(lake, third), _status_with(lake, second)) == (200, 200)
    assert time.monotonic() - sent < overlap  # the checks above ran inside the window
    time.sleep(max(0.0, overlap + 1 - (time.monotonic() - answered)))
    assert (_status_with(lake, third), _status_with(lake, second)) == (200, 401)
    assert second[21:] not in _logs(lake)
    assert third[21:] not in _logs(lake)
    rotations = [
        r
        for r in lake.records()
        if r["action"] == "rotateApiKey" and r["event"] == "mutation" and key_id in r["resource"]
    ]
    assert [r["status"] for r in rotations] == [200, 400, 400, 200]


# -- who may, and forms that may not --------------------------------------------------------------


def test_a_reader_gets_no_keys_entry_and_no_keys_or_users_page(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    assert "Keys" not in page.locator("nav[aria-label=Sections] a").all_inner_texts()
    for path in (
        "/console/keys",
        "/console/keys/new",
        "/console/users",
        f"/console/keys/{lake.reader_key[4:20]}",
    ):
        answer = page.goto(lake.url + path)
        assert answer is not None
        assert answer.status == 403, path
        assert "Not allowed" in page.inner_text("h1"), path
    # Posting the forms directly, with her own session's CSRF token, is decided as the admin API's
    # actions are: refused, and nothing is created or listed.
    page.goto(f"{lake.url}/console/catalog")
    token = str(page.locator("form.signout input[name=csrf_token]").get_attribute("value"))
    posts = {
        "/console/keys": {"principal": "rita-admin", "kind": "user", "groups": "admins"},
        "/console/users": {"name": "rita-admin", "groups": "admins"},
        f"/console/keys/{lake.reader_key[4:20]}/rotate": {"overlap_seconds": "0"},
    }
    for path, fields in posts.items():
        answer = context.request.post(
            lake.url + path, form={**fields, "csrf_token": token}, headers={"Origin": lake.url}
        )
        assert answer.status == 403, path
    assert _keys_of(lake, "rita-admin") == []
    assert "rita-admin" not in _directory(lake)
    assert _status_with(lake, lake.reader_key) == 200  # not rotated
    denied = [r for r in lake.records() if r["principal"] == "key:rita" and r["decision"] == "deny"]
    assert {
        "listApiKeys",
        "listDirectoryUsers",
        "getApiKey",
        "createApiKey",
        "putDirectoryUser",
        "rotateApiKey",
    } <= {r["action"] for r in denied}


def test_the_create_form_without_its_csrf_token_is_refused_and_creates_nothing(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/keys/new")
    token = str(page.locator("form.key-form input[name=csrf_token]").get_attribute("value"))
    fields = {"principal": "forged", "kind": "service", "groups": "admins"}
    without = context.request.post(f"{lake.url}/console/keys", form=fields, headers={"Origin": lake.url})
    elsewhere = context.request.post(
        f"{lake.url}/console/keys",
        form={**fields, "csrf_token": token},
        headers={"Origin": "https://evil.example"},
    )
    assert (without.status, elsewhere.status) == (403, 403)
    assert _keys_of(lake, "forged") == []
    refused = [
        r
        for r in lake.records()
        if r["action"] == "createApiKey"
        and r["decision"] == "deny"
        and r["principal"] == "key:bootstrap-admin"
    ]
    assert [r["status"] for r in refused] == [403, 403]
    assert {r["detail"]["reason"] for r in refused} == {
        "the form does not carry the session's CSRF token",
        "the form was not sent from the console's origin",
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"principal": " padded", "kind": "user"}, "Principal must be 1-256 characters, not padded."),
        (
            {"principal": "", "kind": "user"},
            "Invalid request: principal: must be at least 1 character(s) long.",
        ),
        ({"principal": "ok", "kind": "robot"}, "Say whom the key is for: a person or a service."),
        (
            {"principal": "ok", "kind": "user", "groups": "bi, \x01x"},
            "Group must not contain control characters.",
        ),
        (
            {"principal": "ok", "kind": "user", "expires_in_days": "0"},
            "Expires in days must be a whole number",
        ),
        (
            {"principal": "ok", "kind": "user", "expires_in_days": "soon"},
            "Expires in days must be a whole number",
        ),
        (
            {"principal": "ok", "kind": "user", "expires_in_days": "99999"},
            "Expires in days must be a whole number",
        ),
    ],
)
def test_bad_input_gets_the_form_back_with_its_message(
    lake: Lake, context: BrowserContext, fields: dict[str, str], message: str
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/keys/new")
    token = str(page.locator("form.key-form input[name=csrf_token]").get_attribute("value"))
    answer = context.request.post(
        f"{lake.url}/console/keys", form={**fields, "csrf_token": token}, headers={"Origin": lake.url}
    )
    assert answer.status == 400
    body = answer.text()
    alert = re.search(r'<p class="problem" role="alert">([^<]*)</p>', body)
    assert alert is not None, body
    assert message in html.unescape(alert.group(1))
    assert 'action="/console/keys"' in body  # the form, back
    assert _keys_of(lake, "ok") == []
    assert _keys_of(lake, " padded") == []


def test_bad_input_in_the_browser_keeps_what_was_typed(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/keys/new")
    page.fill("#principal", "later-bot")
    page.locator("input[name=kind][value=service]").check()
    page.fill("#groups", "etl")
    page.fill("#expires_in_days", "next week")
    with page.expect_response(f"{lake.url}/console/keys") as answer:
        page.get_by_role("button", name="Create the key").click()
    assert answer.value.status == 400
    assert "Expires in days must be a whole number" in page.get_by_role("alert").inner_text()
    assert (page.input_value("#principal"), page.input_value("#groups")) == ("later-bot", "etl")
    assert page.locator("input[name=kind][value=service]").is_checked()
    page.fill("#expires_in_days", "7")
    page.get_by_role("button", name="Create the key").click()
    key = page.inner_text("#api-key").strip()
    lake.gw.issued_secrets.append(key)
    (record,) = _keys_of(lake, "later-bot")
    assert (record["kind"], record["groups"], record["id"]) == ("service", ["etl"], key[4:20])


def test_the_keys_pages_carry_the_strict_policy_and_no_inline_code(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text))
    for path in (
        "/console/keys",
        "/console/keys/new",
        "/console/users",
        f"/console/keys/{lake.reader_key[4:20]}",
    ):
        answer = context.request.get(lake.url + path)
        assert answer.status == 200, path
        headers = answer.headers
        assert headers["content-security-policy"] == CSP, path
        assert headers["cache-control"] == "no-store", path
        assert headers["x-frame-options"] == "DENY", path
        body = answer.text()
        for inline in ("<script", "<style", " style="):
            assert inline not in body, path
        page.goto(lake.url + path)
    assert not [v for v in violations if "Content Security Policy" in v], violations


# -- the user directory ---------------------------------------------------------------------------


def _directory(lake: Lake) -> dict[str, list[str]]:
    answer = lake.gw.admin.get(f"{lake.url}/admin/v1/users", timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    return {user["name"]: user["groups"] for user in answer.json()["users"]}


def _shown_users(page: Page) -> dict[str, list[str]]:
    rows = page.locator("table[aria-label=Users] tbody tr")
    shown = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        shown[row.locator("td").first.inner_text()] = (
            row.locator("td").nth(1).locator(".tag").all_inner_texts()
        )
    return shown


def test_an_admin_adds_changes_and_removes_a_directory_user(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/keys")
    page.get_by_role("link", name="User directory (delegation)").click()
    page.wait_for_url(f"{lake.url}/console/users")
    for name, groups in (("tess", "bi, analysts"), ("uma", "finance")):
        page.fill("#user-name", name)
        page.fill("#user-groups", groups)
        page.get_by_role("button", name="Save the user").click()
        page.wait_for_url(f"{lake.url}/console/users")
    assert _shown_users(page) == _directory(lake) == {"tess": ["analysts", "bi"], "uma": ["finance"]}
    screenshot(page, "users")
    # Replacing the groups; a group the directory refuses gets the form back, nothing changed.
    page.fill("#user-name", "tess")
    page.fill("#user-groups", "bi, corp/bi")
    with page.expect_response(f"{lake.url}/console/users") as refused:
        page.get_by_role("button", name="Save the user").click()
    assert refused.value.status == 400
    assert "without control characters or '/'" in page.get_by_role("alert").inner_text()
    assert page.input_value("#user-groups") == "bi, corp/bi"
    assert _directory(lake)["tess"] == ["analysts", "bi"]
    page.fill("#user-groups", "bi")
    page.get_by_role("button", name="Save the user").click()
    page.wait_for_url(f"{lake.url}/console/users")
    assert _shown_users(page) == _directory(lake) == {"tess": ["bi"], "uma": ["finance"]}
    # Removing needs the confirmation box.
    with page.expect_response(f"{lake.url}/console/users/delete") as unconfirmed:
        page.get_by_role("button", name="Remove uma").click()
    assert unconfirmed.value.status == 400
    assert "uma" in _directory(lake)
    page.get_by_label("Remove uma from the directory").check()
    page.get_by_role("button", name="Remove the user").click()
    page.wait_for_url(f"{lake.url}/console/users")
    page.get_by_label("Confirm removing tess").check()
    page.get_by_role("button", name="Remove tess").click()
    page.wait_for_url(f"{lake.url}/console/users")
    assert _shown_users(page) == _directory(lake) == {}
    assert "No users in the directory." in page.inner_text("main")
    changes = [
        (r["action"], r["status"])
        for r in lake.records()
        if r["event"] == "mutation" and r["action"] in {"putDirectoryUser", "deleteDirectoryUser"}
    ]
    assert changes == [
        ("putDirectoryUser", 303),
        ("putDirectoryUser", 303),
        ("putDirectoryUser", 400),
        ("putDirectoryUser", 303),
        ("deleteDirectoryUser", 400),
        ("deleteDirectoryUser", 303),
        ("deleteDirectoryUser", 303),
    ]
