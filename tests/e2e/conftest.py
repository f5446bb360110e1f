"""Fixtures of the console's browser tests (tests/e2e/test_console*.py).

Each console module defines its own module-scoped `lake` (tests.support.console.open_lake, with
the policies and settings it needs); these fixtures give it one headless Chromium trusting that
lake's certificate (`browser`, one per module: Chromium is slow to start on two cores) and a fresh
browser context per test (`context`: its own cookies, a laptop's window).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.browser import VIEWPORT, launch
from tests.support.console import Lake

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext


@pytest.fixture(scope="module")
def browser(lake: Lake) -> Iterator[Browser]:
    with launch(lake.gw.pki.server_cert, lake.gw.ca_cert) as chromium:
        yield chromium


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport=VIEWPORT)
    yield ctx
    ctx.close()
