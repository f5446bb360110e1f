"""The console's end-to-end set-up, shared by the console's test modules: a TLS gateway with the
console on (`open_lake`), and what a test does in the browser (`sign_in_with_key`, `listed`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, StructType

from tests.support.audit import flushed_audit_log
from tests.support.gateway import bundled_policies
from tests.support.idp import OidcProviderMock
from tests.support.secure import AMBIENT_CA_VARIABLES, HTTP_TIMEOUT, SecureGateway

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CLIENT_ID = "cedarberg-console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
    NestedField(
        3,
        "customer",
        StructType(NestedField(4, "name", StringType(), required=False)),
        required=False,
    ),
)
VIEW: dict[str, Any] = {
    "name": "eu_orders",
    "schema": {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "order_id", "type": "long", "required": False}],
    },
    "view-version": {
        "version-id": 1,
        "schema-id": 0,
        "timestamp-ms": 1_700_000_000_000,
        "summary": {},
        "representations": [
            {
                "type": "sql",
                "sql": "SELECT order_id FROM sales.orders WHERE region = 'eu'",
                "dialect": "spark",
            }
        ],
        "default-namespace": ["sales"],
    },
    "properties": {},
}
SESSION_COOKIE = "__Host-cedarberg-console"


@dataclass
class Lake:
    gw: SecureGateway
    idp: OidcProviderMock
    reader_key: str
    service_key: str
    audit: Path

    @property
    def url(self) -> str:
        return self.gw.url

    def records(self) -> list[dict[str, Any]]:
        return flushed_audit_log(self.audit)


@contextmanager
def open_lake(
    home: Path,
    *,
    policy_dir: Path | None = None,
    policies: Mapping[str, str] | None = None,
    config_overrides: Mapping[str, Any] | None = None,
) -> Iterator[Lake]:
    """A TLS gateway with the console on and the OIDC mock issuer as its sign-in issuer, holding
    namespaces `sales` (readable by group `bi`; table `orders` with rows, view `eu_orders`, dropped
    table `old_orders`) and `secret` (table `payroll`, admins only); a person key `rita` in `bi`
    and a service key `etl-bot`; the OIDC user `dana` in `bi`. Its policies are the bundled ones;
    or those of `policy_dir`; or, with `policies` (policy files, name -> Cedar text), a copy of the
    bundled ones in `home/policies` with those files added. `config_overrides`: top-level settings
    set beside these (e.g. a small `max_page_size`)."""
    if policy_dir is not None and policies is not None:
        raise ValueError("give open_lake a policy_dir or policies, not both")
    idp = OidcProviderMock()
    idp.start()
    audit = home / "audit.jsonl"
    config = {
        "audit": {"destination": str(audit)},
        "oidc": {
            "issuers": [
                {
                    "issuer": idp.issuer,
                    "alias": "corp",
                    "audiences": ["cedarberg"],
                    "algorithms": ["RS256"],
                    "groups_allowed": ["bi"],
                }
            ]
        },
        "console": {
            "enabled": True,
            "oidc_issuer": "corp",
            "client_id": CLIENT_ID,
            "client_secret": "console-secret",
        },
        **(config_overrides or {}),
    }
    if policies is not None:
        policy_dir = bundled_policies(home / "policies", policies)
    if policy_dir is not None:
        config["authz"] = {"policy_dir": str(policy_dir)}
    gw = SecureGateway(home / "lake", config=config)
    ambient = pytest.MonkeyPatch()  # pyiceberg's requests would trust the system CAs instead of ours
    for name in AMBIENT_CA_VARIABLES:
        ambient.delenv(name, raising=False)
    try:
        gw.start()
        gw.create_namespace("sales", readers=["bi"], properties={"cedarberg.protected-refs": "main"})
        gw.create_namespace("secret")
        admin = gw.admin_catalog()
        orders = admin.create_table(("sales", "orders"), schema=SCHEMA)
        orders.append(
            pa.table(
                {
                    "order_id": pa.array([1, 2], pa.int64()),
                    "region": ["eu", "us"],
                    "customer": [{"name": "a"}, {"name": "b"}],
                },
                schema=orders.schema().as_arrow(),
            )
        )
        admin.create_table(("secret", "payroll"), schema=SCHEMA)
        admin.create_table(("sales", "old_orders"), schema=SCHEMA)
        created = gw.admin.post(gw.catalog_url("namespaces/sales/views"), json=VIEW, timeout=HTTP_TIMEOUT)
        assert created.status_code == 200, created.text
        dropped = gw.admin.delete(gw.catalog_url("namespaces/sales/tables/old_orders"), timeout=HTTP_TIMEOUT)
        assert dropped.status_code == 204, dropped.text
        idp.set_user("dana", {"groups": ["bi"]})
        yield Lake(
            gw,
            idp,
            reader_key=gw.create_key("rita", ["bi"], kind="user"),
            service_key=gw.create_key("etl-bot", ["etl"], kind="service"),
            audit=audit,
        )
    finally:
        gw.stop()
        idp.close()
        ambient.undo()


def sign_in_with_key(ctx: BrowserContext, url: str, key: str) -> Page:
    page = ctx.new_page()
    page.goto(f"{url}/console/signin")
    page.fill("#api_key", key)
    page.locator("form[action='/console/signin/key'] button[type=submit]").click()
    page.wait_for_load_state()
    return page


def session_cookie(ctx: BrowserContext) -> dict[str, Any]:
    found = [cookie for cookie in ctx.cookies() if cookie["name"] == SESSION_COOKIE]
    assert len(found) == 1, ctx.cookies()
    return dict(found[0])


def rest_namespaces(lake: Lake, credential: str) -> set[str]:
    answer = lake.gw.session(credential).get(lake.gw.catalog_url("namespaces"), timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, answer.text
    return {".".join(levels) for levels in answer.json()["namespaces"]}


def listed(page: Page, label: str) -> set[str]:
    return set(page.locator(f"ul[aria-label='{label}'] a").all_inner_texts())


def namespace_url(url: str, *levels: str) -> str:
    return f"{url}/console/catalog/default/namespaces/{quote(chr(0x1F).join(levels), safe='')}"
