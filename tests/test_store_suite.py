"""One behaviour suite on both stores: no store behaviour module starts a gateway on SQLite alone
by accident.

A module in ``STORE_BEHAVIOUR`` (tests/conftest.py) runs once per store only if every gateway,
catalog and offline `keys create` it starts is given the store of a store fixture. This test reads
each such module with `ast` and fails on a call to ``GatewayProcess``, ``SecureGateway``,
``keys_create`` or ``catalog_context`` that names no store (``store_url=`` / ``url=``, or
``GatewayProcess``'s second positional argument), unless the test or fixture around it is in
``SQLITE_BY_CONSTRUCTION`` below, with the reason it cannot run on PostgreSQL.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import is_store_behaviour

TESTS_DIR = Path(__file__).resolve().parent

# The calls that start a gateway, a catalog or write to a store, and the keyword naming the store.
STORE_KEYWORD = {
    "GatewayProcess": "store_url",
    "SecureGateway": "store_url",
    "keys_create": "store_url",
    "catalog_context": "url",
}
# Calls whose store may also be given positionally: the index of that argument.
STORE_POSITION = {"GatewayProcess": 1}

# (module relative to tests/, top-level test or fixture) -> why it runs on SQLite only.
SQLITE_BY_CONSTRUCTION: dict[tuple[str, str], str] = {
    ("e2e/test_scan_planning.py", "test_planning_beyond_the_concurrency_bound_is_refused_not_queued"): (
        "holds the SQLite registry file locked to keep plans pending: a SQLite lock by construction"
    ),
    ("gateway/test_serve_lifecycle.py", "test_workers_share_the_port_and_are_replaced_when_they_die"): (
        "the supervisor's workers, killed and replaced: process lifecycle"
    ),
    (
        "gateway/test_serve_lifecycle.py",
        "test_connections_are_spread_over_the_workers_by_how_many_each_has_open",
    ): ("which worker process holds which connection: process lifecycle"),
    ("gateway/test_serve_lifecycle.py", "test_sighup_reloads_the_policies_of_every_worker"): (
        "a signal reaching every worker process: process lifecycle"
    ),
    ("gateway/test_serve_lifecycle.py", "test_a_killed_supervisor_takes_its_workers_with_it"): (
        "a SIGKILLed supervisor's workers exit: process lifecycle"
    ),
    ("gateway/test_serve_lifecycle.py", "test_serve_upgrades_an_outdated_registry_by_default"): (
        "a schema upgrade of a SQLite file written in the previous release's shape"
    ),
    (
        "gateway/test_sqlite_writer.py",
        "test_eight_writers_through_two_workers_share_one_writer_without_busy_waits",
    ): ("the registry writer process that owns a SQLite file's one writer connection: SQLite only"),
    ("gateway/test_sqlite_writer.py", "test_a_killed_writer_loses_nothing_acknowledged_and_is_replaced"): (
        "kills the SQLite registry writer process: SQLite only (PostgreSQL has no writer process)"
    ),
    ("gateway/test_serve_port.py", "test_the_freed_port_serves_and_says_so_once_listening"): (
        "binding a freed listening port: process lifecycle"
    ),
    ("gateway/test_store_stack.py", "test_a_gateway_serving_on_sqlite_never_imports_the_async_stack"): (
        "watches what a gateway on SQLite imports: SQLite's driver stack by construction"
    ),
    ("gateway/test_observability.py", "test_ready_follows_the_kms"): (
        "readiness of the remote KMS (one OpenBao per session); the store's has its own test"
    ),
}


@dataclass(frozen=True)
class StorelessCall:
    """A call that starts something without naming its store."""

    module: str
    function: str  # the top-level test, fixture or helper around the call
    call: str
    line: int


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _names_a_store(call: ast.Call, name: str) -> bool:
    """Whether the call gives a store: the keyword (not the literal ``None``) or its position."""
    keyword = STORE_KEYWORD[name]
    for given in call.keywords:
        if given.arg == keyword:
            return not (isinstance(given.value, ast.Constant) and given.value.value is None)
    position = STORE_POSITION.get(name)
    return position is not None and len(call.args) > position


def storeless_calls(source: str, module: str) -> list[StorelessCall]:
    """Every call in `source` that starts a gateway, a catalog or a `keys create` naming no store,
    with the top-level function (or ``Class.method``) around it (``<module>`` at top level)."""
    found: list[StorelessCall] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and function == "<module>":
                inner = child.name
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and function.startswith("class "):
                inner = f"{function.removeprefix('class ')}.{child.name}"
            elif isinstance(child, ast.ClassDef) and function == "<module>":
                inner = f"class {child.name}"
            if isinstance(child, ast.Call):
                name = _called_name(child)
                if name in STORE_KEYWORD and not _names_a_store(child, name):
                    found.append(StorelessCall(module, inner.removeprefix("class "), name, child.lineno))
            visit(child, inner)

    visit(ast.parse(source), "<module>")
    return found


def _store_behaviour_modules() -> list[Path]:
    return sorted(path for path in TESTS_DIR.rglob("test_*.py") if is_store_behaviour(path))


def test_every_store_behaviour_module_names_its_stores() -> None:
    modules = _store_behaviour_modules()
    assert len(modules) > 50, "STORE_BEHAVIOUR names fewer modules than the suite has"
    unexplained = []
    allowed_seen = set()
    for path in modules:
        module = path.relative_to(TESTS_DIR).as_posix()
        for call in storeless_calls(path.read_text(encoding="utf-8"), module):
            key = (call.module, call.function)
            if key in SQLITE_BY_CONSTRUCTION:
                allowed_seen.add(key)
            else:
                unexplained.append(
                    f"{call.module}:{call.line} {call.function}: {call.call}(...) names no store"
                )
    assert not unexplained, (
        "these run on SQLite only: give them a store fixture's store (module_store_url, fresh_store_url, "
        "registry_url, ...) or, if SQLite-specific by construction, list them in SQLITE_BY_CONSTRUCTION:\n"
        + "\n".join(unexplained)
    )
    # An entry that no longer matches a call is a stale excuse: remove it.
    assert allowed_seen == set(SQLITE_BY_CONSTRUCTION), set(SQLITE_BY_CONSTRUCTION) - allowed_seen


SYNTHETIC = """
@pytest.fixture(scope="module")
def shared(tmp_path_factory, module_store_url):
    with GatewayProcess(tmp_path_factory.mktemp("g"){store}) as gw:
        yield gw


def test_offline_key(tmp_path, fresh_store_url):
    key = keys_create(tmp_path, "root", ["admins"]{key_store})


class Helper:
    async def open(self, tmp_path, registry_url):
        async with catalog_context(tmp_path{catalog_store}) as ctx:
            return ctx
"""


def test_the_check_flags_a_gateway_key_and_catalog_started_without_a_store() -> None:
    source = SYNTHETIC.format(store="", key_store="", catalog_store="")
    found = storeless_calls(source, "gateway/test_synthetic.py")
    assert [(call.function, call.call) for call in found] == [
        ("shared", "GatewayProcess"),
        ("test_offline_key", "keys_create"),
        ("Helper.open", "catalog_context"),
    ]
    # A literal None is no store either.
    nothing = SYNTHETIC.format(store=", store_url=None", key_store="", catalog_store=", url=None")
    assert len(storeless_calls(nothing, "gateway/test_synthetic.py")) == 3


@pytest.mark.parametrize(
    ("store", "key_store", "catalog_store"),
    [
        (", store_url=module_store_url", ", store_url=fresh_store_url", ", url=registry_url"),
        (", module_store_url", ", store_url=fresh_store_url", ", url=registry_url"),  # positional
    ],
)
def test_the_check_passes_the_same_source_with_its_stores(
    store: str, key_store: str, catalog_store: str
) -> None:
    source = SYNTHETIC.format(store=store, key_store=key_store, catalog_store=catalog_store)
    assert storeless_calls(source, "gateway/test_synthetic.py") == []
