"""The console's Catalog page pages its listings as the REST API does, and `/console` without its
slash leads to the console (issue 30, P7), in a real headless Chromium against a real TLS gateway.

The gateway pages by two (`max_page_size = 2`), so every listing here spans several pages: the
top-level namespaces (four a reader of group `bi` may see, three it may not), and the tables,
views and dropped tables of namespace `paged`. Each listing's page token is the catalog's sealed
token, bound to the caller and the listing, carried by the page's "Next" link.

Attacks: a page token the admin was handed, opened by a reader; a token of one listing put in
another's parameter; the hidden namespaces never appear on any page.
Controls: every visible entry of each listing is reached through its Next links (and equals what
the REST API lists for the same principal); tables and views page independently of each other;
`/console` is a permanent redirect to `/console/`, which sends a browser without a session to sign
in.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.browser import screenshot
from tests.support.console import (
    SCHEMA,
    VIEW,
    Lake,
    listed,
    namespace_url,
    open_lake,
    rest_namespaces,
    sign_in_with_key,
)
from tests.support.secure import HTTP_TIMEOUT

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page, Response

PAGE_SIZE = 2
VISIBLE = {"pg_a", "pg_b", "paged"}  # besides `sales`, readable by group bi
HIDDEN = {"pg_hidden_1", "pg_hidden_2"}  # besides `secret`, admins only
TABLES = {f"t{i}" for i in range(1, 6)}
VIEWS = {f"v{i}" for i in range(1, 4)}
DROPPED = {"d1", "d2"}  # besides sales.old_orders


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    home = tmp_path_factory.mktemp("console-paging")
    with open_lake(home, config_overrides={"max_page_size": PAGE_SIZE}) as lake:
        gw = lake.gw
        for name in sorted(VISIBLE):
            gw.create_namespace(name, readers=["bi"])
        for name in sorted(HIDDEN):
            gw.create_namespace(name)
        admin = gw.admin_catalog()
        for name in sorted(TABLES | DROPPED):
            admin.create_table(("paged", name), schema=SCHEMA)
        for name in sorted(VIEWS):
            view = copy.deepcopy(VIEW)
            view["name"] = name
            created = gw.admin.post(gw.catalog_url("namespaces/paged/views"), json=view, timeout=HTTP_TIMEOUT)
            assert created.status_code == 200, created.text
        for name in sorted(DROPPED):
            dropped = gw.admin.delete(gw.catalog_url(f"namespaces/paged/tables/{name}"), timeout=HTTP_TIMEOUT)
            assert dropped.status_code == 204, dropped.text
        yield lake


def _next(page: Page, label: str) -> str | None:
    link = page.get_by_role("link", name=f"Next {label}", exact=True)
    return link.get_attribute("href") if link.count() else None


def _status(response: Response | None) -> int:
    assert response is not None  # a navigation, not an in-page jump
    return response.status


def _follow(page: Page, label: str) -> bool:
    """Click the "Next <label>" link if the page has one (False if not); the next page is a 200."""
    link = page.get_by_role("link", name=f"Next {label}", exact=True)
    if not link.count():
        return False
    with page.expect_navigation() as navigation:
        link.click()
    assert _status(navigation.value) == 200, page.url
    return True


def _every_page(page: Page, label: str, entries: str) -> list[set[str]]:
    """What each page of one listing shows, following its Next link from the page open now."""
    pages = [listed(page, entries)]
    while _follow(page, label):
        pages.append(listed(page, entries))
    return pages


def _rest_names(lake: Lake, credential: str, path: str) -> set[str]:
    answer = lake.gw.session(credential).get(lake.gw.catalog_url(path), timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    return {str(item["name"]) for item in answer.json()["identifiers"]}


def _token(href: str, listing: str) -> str:
    return parse_qs(urlsplit(href).query)[listing][0]


def test_a_reader_reaches_every_namespace_it_may_see_through_next_links_and_no_other(
    lake: Lake, context: BrowserContext
) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    page.goto(f"{lake.url}/console/catalog/default")
    pages = _every_page(page, "namespaces", "Namespaces")
    assert len(pages) >= 3  # seven namespaces by two, the hidden ones left out of their pages
    assert all(len(shown) <= PAGE_SIZE for shown in pages)
    seen = set().union(*pages)
    assert seen == rest_namespaces(lake, lake.reader_key) == VISIBLE | {"sales"}
    assert sum(len(shown) for shown in pages) == len(seen)  # no entry shown twice
    assert not seen & (HIDDEN | {"secret"})


def test_tables_and_views_each_page_on_their_own_to_the_end(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.reader_key)
    page.goto(namespace_url(lake.url, "paged"))
    first_views = listed(page, "Views")
    assert len(first_views) == PAGE_SIZE
    screenshot(page, "catalog-paging")
    table_pages = [listed(page, "Tables")]
    while _follow(page, "tables"):
        table_pages.append(listed(page, "Tables"))
        assert listed(page, "Views") == first_views  # the views stay on their page
    assert len(table_pages) == 3
    rest_tables = _rest_names(lake, lake.reader_key, "namespaces/paged/tables")
    assert set().union(*table_pages) == TABLES == rest_tables
    # On the tables' last page, the views page on from their first, and the tables stay put.
    last_tables = table_pages[-1]
    view_pages = [first_views]
    while (href := _next(page, "views")) is not None:
        assert "tables=" in href
        assert _follow(page, "views")
        view_pages.append(listed(page, "Views"))
        assert listed(page, "Tables") == last_tables
    assert set().union(*view_pages) == VIEWS == _rest_names(lake, lake.reader_key, "namespaces/paged/views")


def test_an_admin_pages_through_the_dropped_tables(lake: Lake, context: BrowserContext) -> None:
    page = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    page.goto(f"{lake.url}/console/catalog/default/dropped")
    names: list[str] = []
    while True:
        rows = page.locator("table tbody tr td:nth-child(1)").all_inner_texts()
        assert 0 < len(rows) <= PAGE_SIZE
        names += rows
        if not _follow(page, "dropped objects"):
            break
    assert sorted(names) == sorted(["sales.old_orders", "paged.d1", "paged.d2"])


def test_a_page_token_opens_only_for_its_caller_and_its_listing(lake: Lake, context: BrowserContext) -> None:
    admin = sign_in_with_key(context, lake.url, lake.gw.admin_key)
    admin.goto(f"{lake.url}/console/catalog/default")
    admins_next = _next(admin, "namespaces")
    assert admins_next is not None
    admin.goto(namespace_url(lake.url, "paged"))
    tables_next = _next(admin, "tables")
    assert tables_next is not None
    context.clear_cookies()

    reader = sign_in_with_key(context, lake.url, lake.reader_key)
    # The admin's token, in the reader's session: sealed for another caller, it does not open.
    assert _status(reader.goto(f"{lake.url}{admins_next}")) == 400
    assert listed(reader, "Namespaces") == set()
    # A token of the tables listing in the namespaces' parameter: bound to another listing.
    token = _token(tables_next, "tables")
    assert _status(reader.goto(f"{lake.url}/console/catalog/default?namespaces={token}")) == 400
    assert listed(reader, "Namespaces") == set()
    # The reader's own token opens (the same address shape, its own token).
    reader.goto(f"{lake.url}/console/catalog/default")
    own = _next(reader, "namespaces")
    assert own is not None
    assert _status(reader.goto(f"{lake.url}{own}")) == 200
    assert listed(reader, "Namespaces") <= VISIBLE | {"sales"}


def test_console_without_its_slash_is_a_permanent_redirect_to_the_console(
    lake: Lake, context: BrowserContext
) -> None:
    answer = lake.gw.session().get(f"{lake.url}/console", allow_redirects=False, timeout=HTTP_TIMEOUT)
    assert answer.status_code == 308
    assert answer.headers["Location"] == "/console/"
    assert answer.headers["X-Frame-Options"] == "DENY"
    page = context.new_page()
    page.goto(f"{lake.url}/console")  # no session yet: on to the console, then to sign in
    page.wait_for_url(f"{lake.url}/console/signin")
