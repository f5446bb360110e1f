"""The admin API's OpenAPI document (`gateway/web/routes/openapi/`): a valid OpenAPI 3.1 document,
exactly the admin routes the gateway registers, and the committed copies in docs/ current.

Its answers are checked against a real gateway in tests/gateway/test_admin_api_conformance.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web
from openapi_spec_validator import validate

from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.web.app import ALL_ROUTES, create_app
from cedarberg.gateway.web.keys import ROUTE_TABLE
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.openapi.document import PREFIX, AdminApiDocumentError, build

REPO_ROOT = Path(__file__).resolve().parents[2]


async def _handler(request: web.Request) -> web.Response:
    return web.Response(status=204)


def test_the_document_is_valid_openapi_3_1() -> None:
    document = build(ALL_ROUTES)
    validate(document)  # raises OpenAPIValidationError
    assert document["openapi"] == "3.1.0"


def test_the_document_has_exactly_the_registered_admin_routes() -> None:
    app = create_app(Settings())
    registered = {
        (r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None and r.resource.canonical.startswith(PREFIX + "/")
    }
    document = build(app[ROUTE_TABLE].values())
    documented = {(method.upper(), path) for path, methods in document["paths"].items() for method in methods}
    assert documented == registered
    # Not vacuous: keys 5, policies/explain/review 3, dropped 2, kms 1, users 4, this document 1.
    assert len(registered) >= 16
    assert ("GET", f"{PREFIX}/openapi.json") in registered


def test_every_operation_names_its_cedar_action_and_its_errors() -> None:
    document = build(ALL_ROUTES)
    for methods in document["paths"].values():
        for operation in methods.values():
            assert operation["x-cedar-action"] == operation["operationId"]
            statuses = set(operation["responses"])
            assert {"401", "403", "429", "503"} <= statuses, operation["operationId"]
    not_found = document["components"]["schemas"]["Error404"]["properties"]["error"]["properties"]
    assert {"NotFoundException", "NoSuchWarehouseException"} <= set(not_found["type"]["enum"])


def test_a_route_without_documentation_is_refused() -> None:
    undocumented = Route("POST", f"{PREFIX}/api-keys/{{key_id}}/extend", _handler, "extendApiKey", False)
    with pytest.raises(AdminApiDocumentError, match="route without documentation: extendApiKey"):
        build((*ALL_ROUTES, undocumented))


def test_documentation_without_a_route_is_refused() -> None:
    remaining = [route for route in ALL_ROUTES if route.operation != "showKms"]
    with pytest.raises(AdminApiDocumentError, match="documented operation without a route: showKms"):
        build(remaining)


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cedarberg.gateway.cli", "admin-openapi", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_committed_openapi_document_is_current() -> None:
    printed = _cli()
    assert json.loads(printed) == build(ALL_ROUTES)
    committed = REPO_ROOT / "docs" / "admin-openapi.json"
    assert committed.read_text() == printed, "run: cedarberg admin-openapi > docs/admin-openapi.json"


def test_the_committed_reference_page_is_current() -> None:
    printed = _cli("--format", "markdown")
    for operation_id in ("createApiKey", "reviewAccess", "undropObject", "putDirectoryUser", "showAdminApi"):
        assert f"### {operation_id}" in printed
    committed = REPO_ROOT / "docs" / "admin-api.md"
    assert committed.read_text() == printed, (
        "run: cedarberg admin-openapi --format markdown > docs/admin-api.md"
    )
