"""Property-based fuzzing of what the gateway parses hardest: nested types, primitive types with
arguments, and partition and sort transforms, posted through a real gateway over TLS.

Schemathesis (tests/fuzz/test_schemathesis.py) draws bodies from the OpenAPI spec, whose schemas
describe a type as "any string" and a transform as "any string": it rarely produces a struct
nested past the parsers' stack, a `decimal(99,2)`, a `fixed[-1]` or a `bucket[-3]`, which were
500s until issue 27 §6. The strategies here produce them on purpose:

- nested types: structs, lists and maps, wide (random trees) and deep (chains up to well past
  `max_body_depth`), with field ids that may collide;
- primitive types: every name of the spec, `decimal(P,S)` and `fixed[N]` with negative, zero,
  in-range and out-of-range arguments, and near-miss spellings;
- transforms: identity/year/month/day/hour/void, `bucket[N]` / `truncate[N]` with any N, and
  malformed names and arguments;

in createTable (as a create and a stage-create), a table commit (add-schema, add-spec,
add-sort-order) and createView, sent with an admin key so that every body reaches the catalog.

Checks: every answer is a 2xx or a 4xx ErrorModel whose code is its status, never a 5xx; the
gateway's log gains no traceback and no line past its bound (`gateway.logs`).

Bounded and reproducible like the Schemathesis run: derandomized generation from a fixed seed,
`MAX_EXAMPLES` examples per test, no example database.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import hypothesis
import orjson
import pytest
import requests
from hypothesis import strategies as st

from cedarberg.gateway.logs import MAX_MESSAGE_CHARS
from tests.support.iceberg_types import nested_type, schema_of
from tests.support.secure import GENEROUS_RATE_LIMITS, SecureGateway
from tests.support.tls import TestPki

HTTP_TIMEOUT = 30
MAX_EXAMPLES = 60
NAMESPACE = "nt"
TABLE = "t"
SETTINGS = hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        hypothesis.HealthCheck.too_slow,
        hypothesis.HealthCheck.data_too_large,
        hypothesis.HealthCheck.large_base_example,
    ],
)

# -- strategies ----------------------------------------------------------------------------------

PRIMITIVE_NAMES = [
    "boolean", "int", "long", "float", "double", "date", "time", "timestamp", "timestamptz",
    "timestamp_ns", "timestamptz_ns", "string", "uuid", "binary", "unknown", "variant",
]  # fmt: skip
# Arguments on both sides of every bound: negative, zero, Iceberg's range (decimal precision
# 1-38, scale <= precision), Java's int range, and far past it.
ARGUMENTS = st.one_of(
    st.integers(-3, 40), st.sampled_from([-(2**31), 2**31 - 1, 2**31, 2**63, 10**30]), st.integers()
)
SPACING = st.sampled_from(["", " "])


@st.composite
def decimal_type(draw: st.DrawFn) -> str:
    gap = draw(SPACING)
    return f"decimal({draw(ARGUMENTS)},{gap}{draw(ARGUMENTS)})"


@st.composite
def fixed_type(draw: st.DrawFn) -> str:
    return f"fixed[{draw(ARGUMENTS)}]"


NEAR_MISSES = st.sampled_from(
    ["decimal(", "decimal(1)", "decimal(1,2,3)", "decimal(a,b)", "fixed[", "fixed[]", "fixed", "FIXED[4]",
     "Decimal(9,2)", "list", "struct", "map", "", " long"]
)  # fmt: skip
PRIMITIVES = st.one_of(
    st.sampled_from(PRIMITIVE_NAMES),
    decimal_type(),
    fixed_type(),
    NEAR_MISSES,
    st.text(max_size=12),
)
FIELD_IDS = st.integers(-2, 60)


def _struct(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    field = st.fixed_dictionaries(
        {
            "id": FIELD_IDS,
            "name": st.text(min_size=1, max_size=6),
            "type": children,
            "required": st.booleans(),
        }
    )
    return st.builds(lambda fields: {"type": "struct", "fields": fields}, st.lists(field, max_size=4))


def _list(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {
            "type": st.just("list"),
            "element-id": FIELD_IDS,
            "element": children,
            "element-required": st.booleans(),
        }
    )


def _map(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {
            "type": st.just("map"),
            "key-id": FIELD_IDS,
            "key": st.one_of(st.just("string"), children),
            "value-id": FIELD_IDS,
            "value": children,
            "value-required": st.booleans(),
        }
    )


WIDE_TYPES = st.recursive(
    PRIMITIVES, lambda children: st.one_of(_struct(children), _list(children), _map(children)), max_leaves=25
)
# Chains from shallow to far past the body's depth bound (100 levels of JSON).
DEEP_TYPES = st.builds(
    nested_type,
    st.sampled_from(["struct", "list", "map"]),
    st.integers(0, 180),
    st.sampled_from(["long", "decimal(99,2)", "fixed[-1]"]),
)
FIELD_TYPES = st.one_of(WIDE_TYPES, DEEP_TYPES)

SIMPLE_TRANSFORMS = ["identity", "year", "month", "day", "hour", "void"]


@st.composite
def sized_transform(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(["bucket", "truncate"]))
    return f"{name}[{draw(ARGUMENTS)}]"


TRANSFORMS = st.one_of(
    st.sampled_from(SIMPLE_TRANSFORMS),
    sized_transform(),
    st.sampled_from(
        ["bucket", "bucket[", "bucket[]", "bucket[1,2]", "truncate[x]", "identity[1]", "year[2]", "BUCKET[4]"]
    ),
    st.text(max_size=12),
)
SOURCE_IDS = st.integers(-1, 1003)  # the schemas' columns are 1000 up


def partition_spec(transforms: st.SearchStrategy[str] = TRANSFORMS) -> st.SearchStrategy[Any]:
    field = st.fixed_dictionaries(
        {
            "source-id": SOURCE_IDS,
            "field-id": st.integers(999, 1003),
            "name": st.text(min_size=1, max_size=6),
            "transform": transforms,
        }
    )
    return st.fixed_dictionaries({"spec-id": st.integers(0, 2), "fields": st.lists(field, max_size=3)})


def sort_order() -> st.SearchStrategy[Any]:
    field = st.fixed_dictionaries(
        {
            "source-id": SOURCE_IDS,
            "transform": TRANSFORMS,
            "direction": st.sampled_from(["asc", "desc"]),
            "null-order": st.sampled_from(["nulls-first", "nulls-last"]),
        }
    )
    return st.fixed_dictionaries({"order-id": st.integers(0, 2), "fields": st.lists(field, max_size=3)})


SCHEMAS = st.builds(lambda types: schema_of(*types), st.lists(FIELD_TYPES, min_size=1, max_size=3))
_NAMES = itertools.count()


@st.composite
def create_table_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"name": f"f{next(_NAMES)}", "schema": draw(SCHEMAS)}
    if draw(st.booleans()):
        body["partition-spec"] = draw(partition_spec())
    if draw(st.booleans()):
        body["write-order"] = draw(sort_order())
    body["stage-create"] = draw(st.booleans())
    return body


UPDATES = st.one_of(
    st.builds(lambda s: {"action": "add-schema", "schema": {**s, "schema-id": 1}}, SCHEMAS),
    st.builds(lambda spec: {"action": "add-spec", "spec": spec}, partition_spec()),
    st.builds(lambda order: {"action": "add-sort-order", "sort-order": order}, sort_order()),
)

# -- the gateway -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[SecureGateway]:
    with SecureGateway(
        tmp_path_factory.mktemp("fuzz-types"), pki=session_pki, config={"rate_limits": GENEROUS_RATE_LIMITS}
    ) as gateway:
        gateway.create_namespace(NAMESPACE)
        created = gateway.admin.post(
            gateway.catalog_url(f"namespaces/{NAMESPACE}/tables"),
            json={"name": TABLE, "schema": schema_of("long", "string", "timestamp")},
            timeout=HTTP_TIMEOUT,
        )
        assert created.status_code == 200, created.text
        yield gateway


@pytest.fixture(scope="module")
def log_start(gw: SecureGateway) -> int:
    return len(gw.log_text())


def wire(body: Any) -> bytes:
    """The body's JSON (the standard library's encoder: orjson refuses to write the deepest)."""
    return json.dumps(body).encode()


def answered_without_failure(response: requests.Response) -> None:
    """A 2xx, or a 4xx ErrorModel whose code is its status; never a 5xx."""
    sent = response.request.body or b""
    where = f"{response.status_code} {response.text[:300]} for {sent[:300]!r}"
    assert response.status_code < 500, where
    if response.status_code < 400:
        return
    document = response.json()
    assert set(document) == {"error"}, where
    assert set(document["error"]) == {"message", "type", "code"}, where
    assert document["error"]["code"] == response.status_code, where
    assert document["error"]["message"], where


@SETTINGS
@hypothesis.given(body=create_table_body())
def test_create_table(gw: SecureGateway, log_start: int, body: dict[str, Any]) -> None:
    url = gw.catalog_url(f"namespaces/{NAMESPACE}/tables")
    answered_without_failure(
        gw.admin.post(
            url, data=wire(body), timeout=HTTP_TIMEOUT, headers={"Content-Type": "application/json"}
        )
    )


@SETTINGS
@hypothesis.given(updates=st.lists(UPDATES, min_size=1, max_size=3))
def test_commit_table(gw: SecureGateway, log_start: int, updates: list[Any]) -> None:
    url = gw.catalog_url(f"namespaces/{NAMESPACE}/tables/{TABLE}")
    body = wire({"requirements": [], "updates": updates})
    answered_without_failure(
        gw.admin.post(url, data=body, timeout=HTTP_TIMEOUT, headers={"Content-Type": "application/json"})
    )


@SETTINGS
@hypothesis.given(schema=SCHEMAS)
def test_create_view(gw: SecureGateway, log_start: int, schema: dict[str, Any]) -> None:
    version = {
        "version-id": 1,
        "timestamp-ms": 1_700_000_000_000,
        "schema-id": 0,
        "summary": {"engine-name": "fuzz"},
        "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
        "default-namespace": [NAMESPACE],
    }
    body = {"name": f"v{next(_NAMES)}", "schema": schema, "view-version": version}
    url = gw.catalog_url(f"namespaces/{NAMESPACE}/views")
    answered_without_failure(
        gw.admin.post(
            url, data=wire(body), timeout=HTTP_TIMEOUT, headers={"Content-Type": "application/json"}
        )
    )


def test_the_log_stayed_bounded(gw: SecureGateway, log_start: int) -> None:
    """After the runs above (this test runs last in the module): no traceback, no long line."""
    logged = gw.log_text()[log_start:]
    assert "Traceback" not in logged
    # The process log's lines (the audit log shares the stream: it has no "logger").
    lines = [orjson.loads(line) for line in logged.splitlines() if line.startswith("{")]
    records = [line for line in lines if "logger" in line]
    assert all("exception" not in record for record in records)
    assert all(len(record["message"]) <= MAX_MESSAGE_CHARS + 40 for record in records)
