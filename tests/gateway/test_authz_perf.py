"""Cost of a Cedar decision through the engine (reported, not asserted: this machine is shared).

Run with `-s` to see the numbers, e.g. `.venv/bin/pytest tests/gateway/test_authz_perf.py -s`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz.authorizer import authorize, filter_visible
from cedarberg.gateway.authz.context import ChangeSummary, RequestContext
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import (
    child_table,
    namespace_resource,
)
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR

N = 500


def _micros(fn: Callable[[], object], n: int = N) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def test_decision_cost_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    cached = PolicyEngine(BUNDLED_POLICY_DIR)
    cached.load()
    uncached = PolicyEngine(BUNDLED_POLICY_DIR, entity_cache_size=0)
    uncached.load()
    writer = Principal("erin", PrincipalKind.SERVICE, frozenset({"etl"}), AuthMethod.API_KEY)
    ns = namespace_resource("default", ["sales", "eu"], [{"cedarberg.writers": "etl"}])
    table = child_table(ns, "orders")
    context = RequestContext.of(
        writer, "127.0.0.1", ChangeSummary(frozenset({"set-snapshot-ref"}), frozenset({"main"}))
    )
    assert cached.decide(writer, "updateTable", table, context).allowed

    results = {
        "decide, cached entities": _micros(lambda: cached.decide(writer, "updateTable", table, context)),
        "decide, entities parsed each time": _micros(
            lambda: uncached.decide(writer, "updateTable", table, context)
        ),
        "authorize(updateTable)": _micros(lambda: authorize(cached, writer, "updateTable", context, table)),
        "build table resource + decide": _micros(
            lambda: cached.decide(writer, "loadTable", child_table(ns, "orders"), context)
        ),
    }
    tables = [child_table(ns, f"t{i}") for i in range(100)]
    per_entry = _micros(lambda: filter_visible(cached, writer, context, tables), 20) / len(tables)
    results["filter_visible, per entry of 100"] = per_entry
    with capsys.disabled():
        print()
        for name, micros in results.items():
            print(f"  authz {name:36} {micros:8.1f} µs")
