"""Architecture invariants: import direction and the middleware order."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def test_catalog_and_kms_know_nothing_of_http_serving_or_gateway() -> None:
    for package in ("catalog", "kms"):
        for module, names in _imports(package).items():
            bad = {n for n in names if n.split(".")[0] in {"gateway", "cedarpy"}}
            # KMS providers may be HTTP *clients* of their KMS (Vault), never servers.
            bad |= {n for n in names if n.startswith("aiohttp") and not module.startswith("kms/providers/")}
            bad |= {n for n in names if n.startswith("aiohttp.web")}
            assert not bad, f"{module} imports {bad}"


def test_kms_never_imports_catalog() -> None:
    for module, names in _imports("kms").items():
        assert not {n for n in names if n.split(".")[0] == "catalog"}, module


def test_middleware_order_is_one_constant() -> None:
    from gateway.web import middlewares as pipeline
    from gateway.web.middlewares import MIDDLEWARES, request_id_and_errors

    assert (
        request_id_and_errors,
        pipeline.limit_by_address,
        pipeline.authenticate,
        pipeline.authorize,
    ) == MIDDLEWARES


def test_only_gateway_authz_imports_cedarpy() -> None:
    for package in ("gateway", "catalog", "kms"):
        for module, names in _imports(package).items():
            if "cedarpy" in {n.split(".")[0] for n in names}:
                assert module.startswith("gateway/authz/"), module


def test_every_registered_route_is_in_the_authorization_table() -> None:
    from gateway.authz.operations import OPERATIONS
    from gateway.config.settings import Settings
    from gateway.web.app import create_app
    from gateway.web.keys import ROUTE_TABLE

    app = create_app(Settings())
    registered = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    table = app[ROUTE_TABLE]
    assert registered == set(table)
    assert all(route.operation in OPERATIONS for route in table.values())


def test_endpoints_advertise_exactly_the_registered_operations() -> None:
    from gateway.web.app import ALL_ROUTES

    advertised = {route.endpoint for route in ALL_ROUTES if route.advertised}
    assert "POST /v1/{prefix}/transactions/commit" in advertised
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan" in advertised
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials" in advertised
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign" in advertised
    assert len(advertised) == len([r for r in ALL_ROUTES if r.advertised])
