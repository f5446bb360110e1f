"""The fast layer: the real application in process, driven by aiohttp's test client.

- ``template``: a data directory prepared once per session and store (``sqlite_template``,
  ``postgres_template``) as `cedarberg serve` prepares its own; the test's ``store_kind`` picks.
- ``make_gateway``: ``await make_gateway(anonymous=..., config=...) -> InProcessGateway``, a fresh
  application (own registry, KEK, audit file) served on loopback by ``aiohttp_client``.
- ``gw``: one with the anonymous test admin and generous limits (as ``GatewayProcess`` defaults).

Nothing is mocked: the same ``create_app`` as a worker, the same store, KMS, Cedar policies,
rate limiter and audit log. What these tests cannot see (forked workers, TLS, real engines, the
supervisor) stays with the process-based suites.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.web.app import create_app
from cedarberg.gateway.web.keys import ROUTE_TABLE, SECURITY
from cedarberg.gateway.web.route import Route
from tests.support.inprocess import Template, audit_records, fronted, inprocess_settings, prepare_template
from tests.support.postgres import PostgresServer

SCHEMA: dict[str, Any] = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


@dataclass
class InProcessGateway:
    """One application and a client of it; ``headers(key)`` makes bearer headers."""

    client: TestClient[web.Request, web.Application]
    settings: Settings
    keys: Mapping[str, str]

    def as_(self, principal: str) -> dict[str, str]:
        """Bearer headers of one of the template's API keys (`TEMPLATE_KEYS`)."""
        return bearer(self.keys[principal])

    @property
    def app(self) -> web.Application:
        return self.client.app

    async def audit(self) -> list[dict[str, Any]]:
        """Every audit record written so far (waits for the writer to catch up)."""
        await self.app[SECURITY].audit.aflush()
        return audit_records(self.settings)

    async def create_namespace(
        self, name: str, properties: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        answer = await self.client.post(
            "/v1/namespaces",
            json={"namespace": [name], "properties": dict(properties or {})},
            headers=headers,
        )
        assert answer.status == 200, await answer.text()

    async def create_table(self, namespace: str, name: str, headers: Mapping[str, str] | None = None) -> None:
        answer = await self.client.post(
            f"/v1/namespaces/{namespace}/tables", json={"name": name, "schema": SCHEMA}, headers=headers
        )
        assert answer.status == 200, await answer.text()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class MakeGateway(Protocol):
    def __call__(
        self,
        *,
        anonymous: bool = True,
        config: Mapping[str, Any] | None = None,
        extra_routes: Sequence[Route] = (),
    ) -> Awaitable[InProcessGateway]: ...


def add_routes(app: web.Application, routes: Sequence[Route]) -> None:
    """Register test routes as `create_app` registers its own: in the router and in the route
    table, so the middlewares find their operation and decide them like any other."""
    for route in routes:
        app.router.add_route(route.method, route.path, route.handler)
        app[ROUTE_TABLE][(route.method, route.path)] = route


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return prepare_template(tmp_path_factory.mktemp("inprocess-template") / "gw")


@pytest.fixture(scope="session")
def postgres_template(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer) -> Template:
    return prepare_template(tmp_path_factory.mktemp("inprocess-template-pg") / "gw", postgres_server)


@pytest.fixture
def template(request: pytest.FixtureRequest, store_kind: str) -> Template:
    """The prepared data directory of ``store_kind``'s store (tests/conftest.py: each test here
    runs on SQLite and on PostgreSQL)."""
    template: Template = request.getfixturevalue(f"{store_kind}_template")
    return template


@pytest.fixture
async def make_gateway(
    aiohttp_client: AiohttpClient, template: Template, tmp_path: Path
) -> AsyncIterator[MakeGateway]:
    count = 0
    thresholds = gc.get_threshold()

    async def make(
        *,
        anonymous: bool = True,
        config: Mapping[str, Any] | None = None,
        extra_routes: Sequence[Route] = (),
    ) -> InProcessGateway:
        nonlocal count
        count += 1
        settings = inprocess_settings(template, tmp_path / f"app{count}", anonymous=anonymous, config=config)
        app = create_app(settings)
        add_routes(app, extra_routes)
        client = await aiohttp_client(await fronted(app))
        return InProcessGateway(client, settings, template.keys)

    yield make
    # The application freezes its start-up heap (gc.freeze) and sets the collector's thresholds,
    # as a server process does; this process goes on running other tests, so give the collector
    # its objects and its thresholds back.
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.fixture
async def gw(make_gateway: MakeGateway) -> InProcessGateway:
    return await make_gateway()
