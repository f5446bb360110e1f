"""Architecture invariants: the layers of gateway/, import direction and the middleware order.

The layers and the graph come from `scripts/import_graph.py`, so what this test enforces is what
``python scripts/import_graph.py`` prints.
"""

import ast
from pathlib import Path

from scripts import import_graph as graph

ROOT = Path(__file__).resolve().parent.parent
# The longest import chain of gateway/ (16 modules when the layers were drawn, 17 before; 18 once
# the admin API's document imported its handlers for their request models and the CLI's catalog
# commands the web application for `open_catalog`, until both moved out); a new level needs a
# reason, and this number is where that reason gets written down. 17: a console page calls its
# admin endpoint's own functions so that the two cannot disagree (`routes.console_audit` ->
# `routes.audit_trail`, whose lookup of a key's groups is the access review's, `review_sources`).
MAX_GATEWAY_DEPTH = 17
# The longest import chain of catalog/ (17 modules before issue 32 put the registry's statements
# one module per table, the lookups in `catalog.lookups`, `PARKING_DIR` with the location rules
# and typed the context's idempotency service by a protocol): an operation (tables, views,
# planning) -> the changes it plans -> the commit engine -> confinement -> the context -> the
# sealer -> file IO (or the store's pool) -> ... -> errors. Operation modules import
# `catalog.lookups`, not each other; a new level needs a reason written here.
MAX_CATALOG_DEPTH = 10


def _imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(graph.local_name(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(graph.local_name(node.module))
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


def test_the_security_pipeline_is_the_one_middleware() -> None:
    from cedarberg.gateway.web.middlewares import MIDDLEWARES, pipeline

    assert (pipeline,) == MIDDLEWARES


# The pipeline's stages, outermost first (`gateway.web.middlewares.STAGES`).
PIPELINE_STAGES = [
    "answer",  # request id; every exception an ErrorModel; counted and logged
    "limit_address",
    "replay_plan",
    "route",  # public routes go straight to their handler from here
    "record",
    "authenticate",
    "limit_principal",
    "parse_body",
    "authorize",
    "handle",
]
# (before, after): what each boundary promises (docs/threat-model.md, "The pipeline's stages").
STAGE_ORDER = [
    ("answer", "limit_address"),  # even a refusal by the limiter is an ErrorModel with an id
    ("limit_address", "authenticate"),  # a flood never reaches a token or hash check
    ("limit_address", "replay_plan"),  # a replayed read is limited like any other
    ("authenticate", "limit_principal"),  # a budget is spent only by a proven principal
    ("limit_principal", "authorize"),  # a principal over its budget costs no Cedar decision
    ("parse_body", "authorize"),  # decided on the body the handler applies
    ("authenticate", "authorize"),
    ("authorize", "handle"),  # nothing reaches a handler undecided
]


def test_the_pipeline_is_one_sequence_of_named_stages_in_order() -> None:
    from cedarberg.gateway.web.middlewares import STAGES

    names = [stage.__name__ for stage in STAGES]
    assert names == PIPELINE_STAGES
    for before, after in STAGE_ORDER:
        assert names.index(before) < names.index(after), (before, after)


def test_only_gateway_authz_imports_cedarpy() -> None:
    for package in ("gateway", "catalog", "kms"):
        for module, names in _imports(package).items():
            if "cedarpy" in {n.split(".")[0] for n in names}:
                assert module.startswith("gateway/authz/"), module


def test_every_registered_route_is_in_the_authorization_table() -> None:
    from cedarberg.gateway.authz.operations import OPERATIONS
    from cedarberg.gateway.config.settings import Settings
    from cedarberg.gateway.web.app import create_app
    from cedarberg.gateway.web.keys import ROUTE_TABLE

    app = create_app(Settings())
    registered = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    table = app[ROUTE_TABLE]
    assert registered == set(table)
    assert all(route.operation in OPERATIONS for route in table.values())


def test_endpoints_advertise_exactly_the_registered_operations() -> None:
    from cedarberg.gateway.web.app import ALL_ROUTES

    advertised = {route.endpoint for route in ALL_ROUTES if route.advertised}
    assert "POST /v1/{prefix}/transactions/commit" in advertised
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan" in advertised
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials" in advertised
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign" in advertised
    assert len(advertised) == len([r for r in ALL_ROUTES if r.advertised])


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    """Nothing below web/ imports gateway.web or aiohttp.web; web/ never imports cli/ or serve/;
    middlewares and access decisions never import routes/ (the layers in `LAYERS`)."""
    for name in ("gateway", "catalog", "kms"):
        found = graph.upward(graph.package(ROOT, name).imports)
        assert not found, "\n".join(f"{i.source}:{i.line} imports {i.target}" for i in found)


def test_nothing_below_web_imports_it() -> None:
    for imp in graph.package(ROOT, "gateway").imports:
        if not imp.source.startswith(("gateway.web", "gateway.cli", "gateway.serve")):
            assert not imp.target.startswith("gateway.web"), f"{imp.source}:{imp.line} imports {imp.target}"


def test_cli_and_serve_are_imported_by_nothing_else() -> None:
    for imp in graph.package(ROOT, "gateway").imports:
        if imp.target.startswith(("gateway.cli", "gateway.serve")):
            assert imp.source.startswith(("gateway.cli", "gateway.serve")), (
                f"{imp.source}:{imp.line} imports {imp.target}"
            )


def test_only_web_and_serve_import_aiohttp_web() -> None:
    for name in ("gateway", "catalog", "kms"):
        for imp in graph.package(ROOT, name).imports:
            if imp.target == "aiohttp.web" or imp.target.startswith("aiohttp.web."):
                assert imp.source.startswith(("gateway.web", "gateway.serve")), (
                    f"{imp.source}:{imp.line} imports {imp.target}"
                )


def test_no_import_cycles_deferred_imports_included() -> None:
    for name in ("gateway", "catalog", "kms"):
        assert graph.cycles(graph.package(ROOT, name).graph) == [], name


def test_gateway_import_depth_is_bounded() -> None:
    length, chain = graph.depth(graph.package(ROOT, "gateway").graph)
    assert length <= MAX_GATEWAY_DEPTH, " -> ".join(chain)


def test_catalog_import_depth_is_bounded() -> None:
    length, chain = graph.depth(graph.package(ROOT, "catalog").graph)
    assert length <= MAX_CATALOG_DEPTH, " -> ".join(chain)


def test_the_depth_is_the_longest_chain_deferred_imports_included(tmp_path: Path) -> None:
    """The bounds above would pass vacuously if `depth` missed a level: a chain of three modules
    measures 3 (control); one deferred import from its bottom onto another module measures 4
    (attack: deepening the graph inside a function is still deepening it)."""
    package = tmp_path / "catalog"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "top.py").write_text("from catalog.middle import f\n")
    (package / "middle.py").write_text("from catalog import bottom\n\ndef f():\n    return bottom\n")
    (package / "bottom.py").write_text("")
    (package / "beside.py").write_text("from catalog import bottom\n")
    length, chain = graph.depth(graph.package(tmp_path, "catalog").graph)
    assert (length, chain) == (3, ["catalog.top", "catalog.middle", "catalog.bottom"])

    (package / "deeper.py").write_text("")
    (package / "bottom.py").write_text("def g():\n    from catalog import deeper\n")
    length, chain = graph.depth(graph.package(tmp_path, "catalog").graph)
    assert (length, chain) == (4, ["catalog.top", "catalog.middle", "catalog.bottom", "catalog.deeper"])


def _statement_style_breaches(store: Path) -> list[str]:
    """Where the registry's statements leave their one style (issue 32): free functions, one
    module per table, each taking the transaction first. A breach is a method on `StoreTx`
    beyond its `dialect`, or a public module-level `async def` of a module that imports `StoreTx`
    whose first parameter is not `tx: StoreTx`."""
    found = []
    for path in sorted(store.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "StoreTx":
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
                found += [
                    f"{path.name}: StoreTx.{name}" for name in sorted(methods - {"__init__", "dialect"})
                ]
        imports_tx = any(
            isinstance(node, ast.ImportFrom) and any(alias.name == "StoreTx" for alias in node.names)
            for node in tree.body
        )
        for node in tree.body:
            if not imports_tx or not isinstance(node, ast.AsyncFunctionDef) or node.name.startswith("_"):
                continue
            first = node.args.args[0] if node.args.args else None
            if (
                first is None
                or first.arg != "tx"
                or ast.unparse(first.annotation or ast.Name("")) != "StoreTx"
            ):
                found.append(f"{path.name}: {node.name}")
    return found


def test_the_registry_statements_are_free_functions_taking_the_transaction() -> None:
    assert _statement_style_breaches(ROOT / "catalog" / "store") == []


def test_the_statement_style_check_finds_a_method_and_a_function_without_the_transaction(
    tmp_path: Path,
) -> None:
    """Control: free functions taking `tx: StoreTx` first pass. Attack: a statement put back on
    the transaction as a method, and one taking the store instead, are both found."""
    (tmp_path / "tx.py").write_text(
        "class StoreTx:\n    def __init__(self, conn):\n        self.connection = conn\n\n"
        "    @property\n    def dialect(self):\n        return 'sqlite'\n"
    )
    (tmp_path / "rows.py").write_text(
        "from cedarberg.catalog.store.tx import StoreTx\n\n"
        "async def get_row(tx: StoreTx, key: str) -> None: ...\n\n"
        "async def _helper(conn) -> None: ...\n"
    )
    assert _statement_style_breaches(tmp_path) == []

    (tmp_path / "tx.py").write_text("class StoreTx:\n    async def get_row(self, key):\n        ...\n")
    (tmp_path / "rows.py").write_text(
        "from cedarberg.catalog.store.tx import StoreTx\n\nasync def get_row(store, key: str) -> None: ...\n"
    )
    assert _statement_style_breaches(tmp_path) == ["rows.py: get_row", "tx.py: StoreTx.get_row"]


def test_the_graph_sees_deferred_imports_and_cycles(tmp_path: Path) -> None:
    """The checks above would pass vacuously if the graph missed imports inside functions."""
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "__init__.py").write_text("")
    (tmp_path / "gateway" / "a.py").write_text("from gateway.b import f\n")
    (tmp_path / "gateway" / "b.py").write_text("def f():\n    from gateway import a\n")
    (tmp_path / "gateway" / "low.py").write_text("from aiohttp import web\n")
    found = graph.package(tmp_path, "gateway")
    assert graph.cycles(found.graph) == [["gateway.a", "gateway.b"]]
    assert [(i.source, i.target) for i in graph.upward(found.imports)] == [("gateway.low", "aiohttp.web")]


def test_the_product_is_imported_only_through_the_cedarberg_namespace() -> None:
    """`gateway.x` and `cedarberg.gateway.x` would be two copies of one module (two registries of
    app keys, two error tables): the source tree imports only the installed names."""
    bare = {"gateway", "catalog", "kms", "pipelines"}
    for top in ("gateway", "catalog", "kms", "pipelines", "tests", "scripts", "bench"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                found = [n for n in names if n.split(".")[0] in bare]
                assert not found, f"{path.relative_to(ROOT)}:{node.lineno} imports {found}"


def test_every_gateway_settings_model_lives_in_config_and_imports_no_owner() -> None:
    """Issue 16: `gateway/config/` is the one home of settings. A settings model elsewhere in
    gateway/ would be a second home; a config module importing the module that uses its settings
    would tie the layers back together (only the principal's kinds sit below config)."""
    for path in (ROOT / "gateway").rglob("*.py"):
        if path.is_relative_to(ROOT / "gateway" / "config"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                assert "FrozenSettings" not in bases, f"{path.relative_to(ROOT)}: {node.name}"
    for imp in graph.package(ROOT, "gateway").imports:
        if imp.source.startswith("gateway.config") and imp.target.startswith("gateway."):
            assert imp.target.startswith(("gateway.config", "gateway.authn.principal")), (
                f"{imp.source}:{imp.line} imports {imp.target}"
            )
