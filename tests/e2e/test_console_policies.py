"""The console's Policies page and change preview in a real headless Chromium against a real TLS
gateway (issue 30, page 5).

One gateway (the console on, its policies a copy of the bundled ones with their fixtures) and one
browser serve the module; each test opens a fresh browser context. Everything the pages show is
checked against the admin API's answer for the same principal and the same input
(`GET /admin/v1/policies`, `POST /admin/v1/policies/preview`).

Attacks: the preview form posted without its CSRF token, an upload past
`authz.preview.max_body_bytes`, a reader opening the Policies pages and posting the preview form
with her own session's token, a preview taken for a change that went live.
Controls: the active set and its fixtures as the API shows them, a refused set with its FILE:LINE
problems, a pasted edit whose flips are exactly the API's, an edit that flips nothing, an invalid
file, an upload.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.browser import screenshot
from tests.support.console import Lake, open_lake, sign_in_with_key
from tests.support.gateway import REPO_ROOT
from tests.support.secure import HTTP_TIMEOUT

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

POLICIES = "/console/policies"
PREVIEW = "/console/policies/preview"
API_PREVIEW = "/admin/v1/policies/preview"
DECISIONS = 2000  # more than the module's audit log holds: every decision is decided again
READERS_PERMIT = """@id("readers-read-granted")
permit (principal, action in Cedarberg::Action::"read", resource)
when { principal.groups.containsAny(resource.readers) };
"""
# Grants a group nobody belongs to: a change no audited decision notices.
NOBODY_PERMIT = """@id("nobody-loads-orders")
permit (principal in Cedarberg::Group::"nobody",
        action == Cedarberg::Action::"loadTable",
        resource == Cedarberg::Table::"default/sales/orders");
"""
BROKEN = """// a policy with a typo on line 3
@id("broken")
permit (principal, action == Cedarberg::Action::"loadTable", resource)
when { principal.groups.containsAny(resource.readerz) };
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    home = tmp_path_factory.mktemp("console-policies")
    policies = home / "policies"
    shutil.copytree(REPO_ROOT / "policies", policies)
    with open_lake(home, policy_dir=policies) as opened:
        yield opened


# -- helpers --------------------------------------------------------------------------------------


def policy_dir(lake: Lake) -> Path:
    return lake.audit.parent / "policies"


def api_policies(lake: Lake) -> dict[str, Any]:
    shown = lake.gw.admin.get(f"{lake.url}/admin/v1/policies", timeout=HTTP_TIMEOUT)
    assert shown.status_code == 200, shown.text
    document: dict[str, Any] = shown.json()
    return document


def api_preview(lake: Lake, body: dict[str, Any]) -> dict[str, Any]:
    answer = lake.gw.admin.post(f"{lake.url}{API_PREVIEW}", json=body, timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


def api_flips(answer: dict[str, Any]) -> list[tuple[str, ...]]:
    return sorted(
        (
            f["request_id"],
            f["principal"],
            f["action"],
            f["resource"],
            f["current"]["decision"],
            ",".join(f["current"]["policy_ids"]),
            f["candidate"]["decision"],
            ",".join(f["candidate"]["policy_ids"]),
        )
        for f in answer["decisions"]["flips"]
    )


def page_flips(page: Page) -> list[tuple[str, ...]]:
    """The flips table of a preview page, as the same tuples as `api_flips`."""
    found = []
    for row in page.locator("table.flips tbody tr").all():
        cells = row.locator("td")
        rulings = row.locator("td.ruling")
        current, candidate = rulings.nth(0), rulings.nth(1)
        found.append(
            (
                cells.nth(6).inner_text().strip(),
                cells.nth(1).inner_text().strip(),
                cells.nth(2).inner_text().strip(),
                cells.nth(3).inner_text().strip(),
                current.locator("strong").inner_text().strip(),
                ",".join(current.locator("code").all_inner_texts()),
                candidate.locator("strong").inner_text().strip(),
                ",".join(candidate.locator("code").all_inner_texts()),
            )
        )
    return sorted(found)


def preview_in_page(page: Page, lake: Lake, name: str, text: str) -> None:
    page.goto(f"{lake.url}{PREVIEW}")
    page.fill("#name", name)
    page.fill("#text", text)
    page.fill("#decisions", str(DECISIONS))
    page.get_by_role("button", name="Preview").click()
    page.wait_for_load_state()


def reader_requests(lake: Lake) -> None:
    """Decisions for the audit log: rita (group bi) reads sales.orders and is refused secret's
    table; the admin reads both."""
    rita = lake.gw.session(lake.reader_key)
    assert (
        rita.get(lake.gw.catalog_url("namespaces/sales/tables/orders"), timeout=HTTP_TIMEOUT).status_code
        == 200
    )
    assert (
        rita.get(lake.gw.catalog_url("namespaces/secret/tables/payroll"), timeout=HTTP_TIMEOUT).status_code
        == 404
    )
    for path in ("namespaces/sales/tables/orders", "namespaces/secret/tables/payroll"):
        assert lake.gw.admin.get(lake.gw.catalog_url(path), timeout=HTTP_TIMEOUT).status_code == 200


def preview_token(page: Page) -> str:
    return str(page.locator("form.preview input[name=csrf_token]").get_attribute("value"))


# -- the Policies page ----------------------------------------------------------------------------


def test_the_policies_page_shows_the_active_set_and_its_fixtures_as_the_api_does(
    lake: Lake, context: BrowserContext
) -> None:
    shown = api_policies(lake)
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.get_by_role("link", name="Policies", exact=True).click()
    page.wait_for_url(f"{lake.url}{POLICIES}")
    screenshot(page, "policies")
    assert page.inner_text("#active-version") == shown["version"]
    listed = page.locator("table.policy-files tbody tr td:first-child a").all_inner_texts()
    assert sorted(listed) == sorted(shown["files"])
    rows = page.locator("ul.policy-list li").all_inner_texts()
    located = {row.split()[1]: row.split()[-1] for row in rows}
    assert located == shown["policies"]  # every policy, at its FILE:LINE
    effects = {row.split()[1]: row.split()[0].lower() for row in rows}
    assert effects["readers-read-granted"] == "permit"
    assert set(effects.values()) <= {"permit", "forbid"}
    # The fixtures of the directory, run against the active set: as many as the directory holds.
    fixtures = sorted(str(p.relative_to(policy_dir(lake))) for p in policy_dir(lake).glob("tests/*/*.json"))
    assert sorted(page.locator("table.fixtures tbody td:nth-child(2)").all_text_contents()) == fixtures
    assert page.inner_text("p.fixture-summary").startswith(f"{len(fixtures)} passed, 0 failed")
    assert page.locator("section.refused").count() == 0
    # A policy's link opens its file at its line, the line marked with its id.
    page.locator("ul.policy-list a", has_text="readers-read-granted").click()
    file_name, line = shown["policies"]["readers-read-granted"].split(":")
    page.wait_for_url(f"{lake.url}{POLICIES}/files/{file_name}#L{line}")
    marked = page.locator(f"tr#L{line}")
    assert marked.get_attribute("class") == "starts"
    assert marked.locator("td.policy-id").inner_text() == "readers-read-granted"
    source = "\n".join(page.locator("table.source td pre").all_inner_texts())
    assert source + "\n" == shown["sources"][file_name]
    screenshot(page, "policy-file")


def test_a_reader_gets_no_policies_entry_and_is_refused_at_every_address(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    sections = page.locator("header nav a").all_inner_texts()
    assert "Catalog" in sections
    assert "Policies" not in sections
    for path in (POLICIES, f"{POLICIES}/files/grants.cedar", PREVIEW, f"{PREVIEW}?file=grants.cedar"):
        answer = page.goto(f"{lake.url}{path}")
        assert answer is not None
        assert answer.status == 403, path
        assert "readers-read-granted" not in page.inner_text("body")
    # Her own session's token does not make the preview hers: the policies decide, and refuse.
    page.goto(f"{lake.url}/console/catalog")
    token = str(page.locator("form.signout input[name=csrf_token]").get_attribute("value"))
    posted = context.request.post(
        f"{lake.url}{PREVIEW}",
        multipart={"csrf_token": token, "name": "grants.cedar", "text": READERS_PERMIT, "decisions": "10"},
        headers={"Origin": lake.url},
    )
    assert posted.status == 403
    refusals = [
        r
        for r in lake.records()
        if r["principal"] == "key:rita" and r["action"] in {"showPolicies", "previewPolicies"}
    ]
    assert refusals
    assert all(r["decision"] == "deny" for r in refusals)
    assert {r["action"] for r in refusals} == {"showPolicies", "previewPolicies"}


# -- the change preview ---------------------------------------------------------------------------


def test_the_preview_lists_exactly_the_decisions_an_edit_flips_as_the_api_does_and_nothing_goes_live(
    lake: Lake, context: BrowserContext
) -> None:
    reader_requests(lake)
    before = api_policies(lake)
    grants = before["sources"]["grants.cedar"]
    assert READERS_PERMIT in grants
    edited = grants.replace(READERS_PERMIT, "")
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    # The file's page starts the preview from its text.
    page.goto(f"{lake.url}{POLICIES}/files/grants.cedar")
    page.get_by_role("link", name="Preview a change to this file").click()
    assert page.input_value("#name") == "grants.cedar"
    assert page.input_value("#text") == grants
    page.fill("#text", edited)
    page.fill("#decisions", str(DECISIONS))
    page.get_by_role("button", name="Preview").click()
    page.wait_for_load_state()
    screenshot(page, "preview")
    assert page.inner_text("#candidate-state") == "valid"
    shown = page_flips(page)
    answer = api_preview(lake, {"files": {"grants.cedar": edited}, "decisions": DECISIONS})
    assert answer["decisions"]["complete"] is True
    assert shown == api_flips(answer)
    # What the edit takes away: rita's read of sales.orders, and only reads granted through it.
    assert any(
        f[1:5] == ("key:rita", "loadTable", 'Cedarberg::Table::"default/sales/orders"', "allow")
        for f in shown
    )
    assert all(f[4:8] == ("allow", "readers-read-granted", "deny", "") for f in shown)
    assert page.inner_text("#allow-to-deny") == str(answer["decisions"]["allow_to_deny"])
    assert page.inner_text("#deny-to-allow") == "0"
    assert page.locator("#incomplete").count() == 0
    # The fixtures that rely on the permit fail under the candidate, on the page as in the API.
    failed = sorted(r["path"] for r in answer["fixtures"]["results"] if not r["passed"])
    assert failed
    assert (
        sorted(page.locator("table[aria-label='Failed fixtures'] tbody td:nth-child(2)").all_inner_texts())
        == failed
    )
    # Nothing went live: the same version, the same files, and rita still reads.
    assert api_policies(lake)["version"] == before["version"]
    assert (policy_dir(lake) / "grants.cedar").read_text() == grants
    rita = lake.gw.session(lake.reader_key)
    assert (
        rita.get(lake.gw.catalog_url("namespaces/sales/tables/orders"), timeout=HTTP_TIMEOUT).status_code
        == 200
    )


def test_an_edit_that_flips_nothing_says_so_as_the_api_does(lake: Lake, context: BrowserContext) -> None:
    reader_requests(lake)
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    preview_in_page(page, lake, "nobody.cedar", NOBODY_PERMIT)
    answer = api_preview(lake, {"files": {"nobody.cedar": NOBODY_PERMIT}, "decisions": DECISIONS})
    assert answer["valid"] is True
    assert answer["decisions"]["flips"] == []
    assert answer["decisions"]["re_decided"] > 0
    assert page.inner_text("#candidate-state") == "valid"
    assert page.inner_text("#no-flips") == "No decision would flip."
    assert page.locator("table.flips").count() == 0
    assert "nobody.cedar added" in page.inner_text("section.preview-result")
    assert answer["fixtures"]["failed"] == 0
    assert page.inner_text("section.preview-result p.fixture-summary").startswith(
        f"{answer['fixtures']['passed']} passed, 0 failed"
    )


def test_an_invalid_file_shows_its_file_line_problems_as_the_api_does(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    preview_in_page(page, lake, "broken.cedar", BROKEN)
    answer = api_preview(lake, {"files": {"broken.cedar": BROKEN}, "decisions": 10})
    assert answer["valid"] is False
    assert answer["problems"]
    assert all(p.startswith("broken.cedar:4:") for p in answer["problems"])
    assert page.inner_text("#candidate-state") == "refused"
    assert page.locator("ul.problems li").all_inner_texts() == answer["problems"]
    assert page.locator("table.flips").count() == 0  # a refused set decides nothing
    # A mistake in the form itself is shown on the form, 400, nothing previewed.
    page.fill("#name", "../grants.cedar")
    page.fill("#text", NOBODY_PERMIT)
    with page.expect_response(lambda r: r.url.endswith(PREVIEW) and r.request.method == "POST") as posted:
        page.get_by_role("button", name="Preview").click()
    assert posted.value.status == 400
    assert "not a policy file name" in page.inner_text("#preview-error")
    assert page.input_value("#text") == NOBODY_PERMIT  # what was entered is kept
    assert page.locator("section.preview-result").count() == 0


def test_an_uploaded_file_is_previewed_as_the_same_text_pasted(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}{PREVIEW}")
    page.set_input_files(
        "#upload",
        files=[{"name": "nobody.cedar", "mimeType": "text/plain", "buffer": NOBODY_PERMIT.encode()}],
    )
    page.fill("#decisions", "10")
    page.get_by_role("button", name="Preview").click()
    page.wait_for_load_state()
    answer = api_preview(lake, {"files": {"nobody.cedar": NOBODY_PERMIT}, "decisions": 10})
    assert page.inner_text("#candidate-state") == "valid"
    assert answer["candidate_version"] in page.inner_text("section.preview-result")
    assert "nobody.cedar added" in page.inner_text("section.preview-result")
    assert page.input_value("#name") == "nobody.cedar"


def test_the_preview_form_without_its_csrf_token_or_past_its_bound_is_refused(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}{PREVIEW}")
    token = preview_token(page)
    fields = {"name": "nobody.cedar", "text": NOBODY_PERMIT, "decisions": "10"}
    without = context.request.post(f"{lake.url}{PREVIEW}", multipart=fields, headers={"Origin": lake.url})
    assert without.status == 403
    assert "CSRF" in without.text()
    refused = [
        (r["principal"], r["status"])
        for r in lake.records()
        if r["action"] == "previewPolicies" and r["decision"] == "deny" and r["principal"] != "key:rita"
    ]
    assert refused == [("key:bootstrap-admin", 403)]
    # Past authz.preview.max_body_bytes (2 MiB by default): 413 from the Content-Length, a page.
    large = {**fields, "csrf_token": token, "text": "x" * (2 * 1024 * 1024)}
    too_large = context.request.post(f"{lake.url}{PREVIEW}", multipart=large, headers={"Origin": lake.url})
    assert too_large.status == 413
    assert "too large" in too_large.text()
    assert too_large.headers["content-type"].startswith("text/html")
    # The preview's bound is its own: every other console form keeps the console's 16 KiB.
    undrop = f"{lake.url}/console/catalog/default/dropped/any/undrop"
    short_form = {"csrf_token": token, "padding": "x" * (17 * 1024)}
    assert context.request.post(undrop, form=short_form, headers={"Origin": lake.url}).status == 413
    # The control: the same form with its token.
    done = context.request.post(
        f"{lake.url}{PREVIEW}", multipart={**fields, "csrf_token": token}, headers={"Origin": lake.url}
    )
    assert done.status == 200
    assert "nobody.cedar" in done.text()


def test_a_refused_set_shows_its_problems_and_the_version_that_keeps_deciding(
    lake: Lake, context: BrowserContext
) -> None:
    active = api_policies(lake)["version"]
    broken = policy_dir(lake) / "broken.cedar"
    broken.write_text(BROKEN)
    try:
        deadline = time.monotonic() + 30
        shown = api_policies(lake)
        while shown["refused"] is None and time.monotonic() < deadline:
            time.sleep(0.2)
            shown = api_policies(lake)
        assert shown["refused"] is not None
        assert shown["version"] == active
        page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
        page.goto(f"{lake.url}{POLICIES}")
        assert page.inner_text("#active-version") == active
        problems = page.locator("ul.problems li").all_inner_texts()
        assert problems == shown["refused"]["problems"]
        assert all(p.startswith("broken.cedar:4:") for p in problems)
        assert shown["refused"]["version"] in page.inner_text("section.refused")
        screenshot(page, "policies-refused")
    finally:
        broken.unlink()
    deadline = time.monotonic() + 30
    while api_policies(lake)["refused"] is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert api_policies(lake)["refused"] is None
