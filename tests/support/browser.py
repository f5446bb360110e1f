"""A real headless Chromium for the console's tests, driven by Playwright.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, installed by
``scripts/install-test-deps.sh``); Playwright's own browser download is never used. It trusts the
test gateway's certificate by its public key (``--ignore-certificate-errors-spki-list``: that key
and no other, so a TLS problem with anything else still fails), and starts with the flags that
let it run on the project's machines (TEST-SERVERS.md).

Headless Chromium is slow to start on two cores: a module shares one browser (`launch`) and opens
a fresh context (cookies, storage) per test.

Screenshots are test artefacts: `screenshot(page, name)` writes ``tests/.artifacts/console/NAME.png``
(git-ignored), and the ones the documentation shows are copied to ``docs/console/`` by
``python -m tests.support.browser --update-docs``.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright, ViewportSize

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / ".artifacts" / "console"
DOCS_SHOTS = ROOT / "docs" / "console"
# The pages docs/console.md shows (artefact name -> what it shows).
DOC_SCREENSHOTS = (
    "signin",
    "catalog",
    "namespace",
    "table",
    "dropped",
    "reader-namespace",
    "access",
    "access-warning",
    "explain",
    "audit",
    "policies",
    "policy-file",
    "preview",
    "keys",
    "key-created",
    "users",
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}  # a laptop screen


class BrowserMissingError(RuntimeError):
    """Chromium is not installed where the tests expect it."""


def spki_pin(cert_pem: Path) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)) of a PEM certificate: what Chromium's
    ``--ignore-certificate-errors-spki-list`` names."""
    cert = x509.load_pem_x509_certificate(cert_pem.read_bytes())
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode("ascii")


@contextmanager
def launch(server_cert: Path, ca_cert: Path) -> Iterator[Browser]:
    """A headless Chromium that trusts `server_cert`'s key; closed on exit. Requests made outside
    the page (a context's `request`, which Playwright's driver sends) trust `ca_cert`."""
    if not CHROMIUM.exists():
        raise BrowserMissingError(f"{CHROMIUM} is missing: make test-deps installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    # Read by the driver (Node.js) when it starts, and only then.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NODE_EXTRA_CA_CERTS", str(ca_cert))
        driver = sync_playwright().start()
    with _stopping(driver) as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[*FLAGS, f"--ignore-certificate-errors-spki-list={spki_pin(server_cert)}"],
        )
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def _stopping(driver: Playwright) -> Iterator[Playwright]:
    try:
        yield driver
    finally:
        driver.stop()


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save the page as ``tests/.artifacts/console/NAME.png`` (the whole page, or what the window
    shows when not `full_page`: for a long page, its top is what a reader sees first); returns
    the path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def update_docs() -> list[Path]:
    """Copy the screenshots the documentation shows from the artefacts to docs/console/."""
    DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in DOC_SCREENSHOTS:
        source = ARTIFACTS / f"{name}.png"
        if not source.exists():
            raise FileNotFoundError(f"{source}: run tests/e2e/test_console*.py first")
        copied.append(Path(shutil.copy2(source, DOCS_SHOTS / f"{name}.png")))
    return copied


if __name__ == "__main__":
    if sys.argv[1:] != ["--update-docs"]:
        sys.exit("usage: python -m tests.support.browser --update-docs")
    for path in update_docs():
        print(path.relative_to(ROOT))
