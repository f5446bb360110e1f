"""Bad input is a 400, never a 500: what a body's parsing fails on, against a real gateway over TLS.

Attacks: the inputs of issue 27 §6 (a principal with no grants got 500s, before any decision, from
`bucket[-3]`, `decimal(99,2)`, `fixed[-1]` and a struct nested 150 deep, each writing a ~100 KB
traceback to the log) and a 13 KB request, sent by a stranger, a reader and a writer to every
route that parses a schema or a transform: each is a 400 ErrorModel, the same for all three, the
catalog is unchanged and the log gains no traceback and only bounded lines.

Controls: valid nested schemas (20 levels of structs, lists, maps) and every valid partition and
sort transform still create tables; bodies nested exactly `max_body_depth` deep in the shapes
whose parsers recurse the most (nested lists, structs and maps, a schema added in a transaction,
a left-deep scan filter) are served, one level more is refused before parsing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson
import pytest
import requests

from cedarberg.gateway.config.settings import MAX_BODY_DEPTH
from cedarberg.gateway.logs import MAX_MESSAGE_CHARS
from tests.support.iceberg_types import left_deep_filter, nested_type, schema_of
from tests.support.secure import GENEROUS_RATE_LIMITS, SecureGateway
from tests.support.tls import TestPki

TIMEOUT = 30
NS = "bi"
TABLE = "t"
VIEW = "v"
# A line of the gateway's JSON log: the bounded message plus its structured fields.
MAX_LOG_LINE_CHARS = MAX_MESSAGE_CHARS + 1024


class Callers:
    """Sessions of a stranger (no grants), a reader and a writer of namespace `NS`."""

    def __init__(self, gw: SecureGateway) -> None:
        self.gw = gw
        self.stranger = gw.session(gw.create_key("stranger", ["nobody"]))
        self.reader = gw.session(gw.create_key("reader", ["analysts"]))
        self.writer = gw.session(gw.create_key("writer", ["etl"]))

    def each(self) -> Iterator[tuple[str, requests.Session]]:
        yield from (("stranger", self.stranger), ("reader", self.reader), ("writer", self.writer))


@pytest.fixture(scope="module")
def gw(
    tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki, module_store_url: str | None
) -> Iterator[SecureGateway]:
    config = {"rate_limits": GENEROUS_RATE_LIMITS}
    directory = tmp_path_factory.mktemp("parse-failures")
    with SecureGateway(directory, pki=session_pki, config=config, store_url=module_store_url) as gateway:
        gateway.create_namespace(NS, readers=["analysts"], writers=["etl"])
        created = gateway.admin.post(
            gateway.catalog_url(f"namespaces/{NS}/tables"),
            json={"name": TABLE, "schema": schema_of("long", "string")},
            timeout=TIMEOUT,
        )
        assert created.status_code == 200, created.text
        yield gateway


@pytest.fixture(scope="module")
def callers(gw: SecureGateway) -> Callers:
    return Callers(gw)


def url(gw: SecureGateway, path: str) -> str:
    return gw.catalog_url(path)


def error_of(response: requests.Response, status: int) -> tuple[int, str, str]:
    """The response's (status, type, message), after checking it is an ErrorModel of `status`."""
    request = response.request
    where = f"{request.method} {request.url} -> {response.status_code} {response.text[:300]}"
    assert response.status_code == status, where
    body = response.json()
    assert set(body) == {"error"}, where
    error = body["error"]
    assert set(error) == {"message", "type", "code"}, where
    assert error["code"] == status, where
    assert isinstance(error["message"], str), where
    assert 0 < len(error["message"]) <= 600, where  # names the problem, never echoes the body
    return status, error["type"], error["message"]


def tables(gw: SecureGateway) -> list[str]:
    listed = gw.admin.get(url(gw, f"namespaces/{NS}/tables"), timeout=TIMEOUT)
    assert listed.status_code == 200, listed.text
    return sorted(item["name"] for item in listed.json()["identifiers"])


def schema_with(field_type: Any) -> dict[str, Any]:
    return schema_of("long", field_type)


def bucket_spec(transform: str) -> dict[str, Any]:
    field = {"source-id": 1000, "field-id": 1000, "name": "p", "transform": transform}
    return {"spec-id": 0, "fields": [field]}


def sort_order(transform: str) -> dict[str, Any]:
    field = {"source-id": 1000, "transform": transform, "direction": "asc", "null-order": "nulls-first"}
    return {"order-id": 1, "fields": [field]}


DEEP_STRUCT = schema_with(nested_type("struct", 150))


def thirteen_kb_schema() -> dict[str, Any]:
    """A wide schema of 13 KB whose last column has an impossible decimal: the whole document is
    read before the refusal."""
    columns = [f"decimal({p % 38 + 1},{p % 38 // 2})" for p in range(300)]
    return schema_of(*columns, "decimal(99,2)")


def add_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requirements": [], "updates": [{"action": "add-schema", "schema": schema}]}


def view_body(schema: dict[str, Any]) -> dict[str, Any]:
    version = {
        "version-id": 1,
        "timestamp-ms": 1_700_000_000_000,
        "schema-id": 0,
        "summary": {"engine-name": "test"},
        "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
        "default-namespace": [NS],
    }
    return {"name": VIEW, "schema": schema, "view-version": version}


def transaction(schema: dict[str, Any]) -> dict[str, Any]:
    change = {"identifier": {"namespace": [NS], "name": TABLE}, **add_schema(schema)}
    return {"table-changes": [change]}


CREATE = f"namespaces/{NS}/tables"
BUCKET_MINUS_3 = {"name": "n", "schema": schema_with("long"), "partition-spec": bucket_spec("bucket[-3]")}
ISSUE_INPUTS = [
    pytest.param(BUCKET_MINUS_3, id="bucket[-3]"),
    pytest.param({"name": "n", "schema": schema_with("decimal(99,2)")}, id="decimal(99,2)"),
    pytest.param({"name": "n", "schema": schema_with("fixed[-1]")}, id="fixed[-1]"),
    pytest.param({"name": "n", "schema": DEEP_STRUCT}, id="struct-150-deep"),
    pytest.param({"name": "n", "schema": thirteen_kb_schema()}, id="13-KB"),
]  # fmt: skip


@pytest.mark.parametrize("body", ISSUE_INPUTS)
def test_issue_inputs_are_a_400_for_everyone_with_a_bounded_log(
    gw: SecureGateway, callers: Callers, body: dict[str, Any]
) -> None:
    """Attack: the issue's inputs to createTable. A stranger gets the same 400 as a writer (the
    body is refused before any decision), nothing is created, and no traceback is logged."""
    existing = tables(gw)
    log_before = len(gw.log_text())
    answers = {}
    for who, session in callers.each():
        answers[who] = error_of(session.post(url(gw, CREATE), json=body, timeout=TIMEOUT), 400)
    assert answers["stranger"] == answers["reader"] == answers["writer"]
    assert answers["stranger"][1] == "BadRequestException"
    assert tables(gw) == existing
    logged = gw.log_text()[log_before:]
    assert "Traceback" not in logged
    assert all(len(line) <= MAX_LOG_LINE_CHARS for line in logged.splitlines())


def test_the_13_kb_request_is_13_kb() -> None:
    assert len(orjson.dumps({"name": "n", "schema": thirteen_kb_schema()})) >= 13 * 1024


def test_issue_inputs_name_what_was_expected(gw: SecureGateway, callers: Callers) -> None:
    """Attack: the refusals say what is wrong, in the Java reference's words where it has them
    (the stranger's answers; the same for everyone)."""
    expected = {
        "bucket[-3]": "expected format bucket[22]",
        "decimal(99,2)": "Decimals with precision larger than 38 are not supported: 99",
        "fixed[-1]": "Cannot parse type string to primitive: fixed[-1]",
    }
    for name, wording in expected.items():
        body = BUCKET_MINUS_3 if name.startswith("bucket") else {"name": "n", "schema": schema_with(name)}
        answer = callers.stranger.post(url(gw, CREATE), json=body, timeout=TIMEOUT)
        assert wording in error_of(answer, 400)[2]
    deep = callers.stranger.post(url(gw, CREATE), json={"name": "n", "schema": DEEP_STRUCT}, timeout=TIMEOUT)
    assert error_of(deep, 400)[2] == f"request body is nested deeper than {MAX_BODY_DEPTH} levels"


BAD_SCHEMAS = [
    pytest.param(schema_with("decimal(99,2)"), id="decimal(99,2)"),
    pytest.param(schema_with("fixed[-1]"), id="fixed[-1]"),
    pytest.param(DEEP_STRUCT, id="struct-150-deep"),
]
SCHEMA_ROUTES = [
    pytest.param("POST", f"namespaces/{NS}/tables/{TABLE}", add_schema, id="updateTable"),
    pytest.param("POST", "transactions/commit", transaction, id="commitTransaction"),
    pytest.param("POST", f"namespaces/{NS}/views", view_body, id="createView"),
]


@pytest.mark.parametrize(("method", "path", "wrap"), SCHEMA_ROUTES)
@pytest.mark.parametrize("schema", BAD_SCHEMAS)
def test_bad_schemas_on_every_route_are_a_400_for_everyone(
    gw: SecureGateway, callers: Callers, method: str, path: str, wrap: Any, schema: dict[str, Any]
) -> None:
    """Attack: the same inputs in a table commit, a transaction and a view: 400 before any
    decision, identical for a stranger, a reader and a writer; the table keeps its schema."""
    before = gw.admin.get(url(gw, f"namespaces/{NS}/tables/{TABLE}"), timeout=TIMEOUT).json()["metadata"]
    log_before = len(gw.log_text())
    answers = {
        who: error_of(session.request(method, url(gw, path), json=wrap(schema), timeout=TIMEOUT), 400)
        for who, session in callers.each()
    }
    assert answers["stranger"] == answers["reader"] == answers["writer"]
    after = gw.admin.get(url(gw, f"namespaces/{NS}/tables/{TABLE}"), timeout=TIMEOUT).json()["metadata"]
    assert after == before
    views = gw.admin.get(url(gw, f"namespaces/{NS}/views"), timeout=TIMEOUT).json()["identifiers"]
    assert views == []
    assert "Traceback" not in gw.log_text()[log_before:]


BAD_TRANSFORMS = [
    "bucket[-3]",
    "bucket[0]",
    "truncate[0]",
    "truncate[-1]",
    "truncate[x]",
    "bucket",
    "bucket[1,2]",
]


@pytest.mark.parametrize(
    "transform", [*BAD_TRANSFORMS, "bucket[99999999999999999999]", "truncate[2147483648]"]
)
def test_bad_sort_and_partition_transforms_are_a_400(
    gw: SecureGateway, callers: Callers, transform: str
) -> None:
    """Attack: impossible transforms in a partition spec and in a write order."""
    existing = tables(gw)
    for body in (
        {"name": "n", "schema": schema_with("long"), "partition-spec": bucket_spec(transform)},
        {"name": "n", "schema": schema_with("long"), "write-order": sort_order(transform)},
    ):
        answers = {
            who: error_of(session.post(url(gw, CREATE), json=body, timeout=TIMEOUT), 400)
            for who, session in callers.each()
        }
        assert answers["stranger"] == answers["writer"]
    assert tables(gw) == existing


# -- controls --------------------------------------------------------------------------------------


def create(gw: SecureGateway, session: requests.Session, name: str, **body: Any) -> dict[str, Any]:
    response = session.post(url(gw, CREATE), json={"name": name, **body}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text[:500]
    loaded = session.get(url(gw, f"{CREATE}/{name}"), timeout=TIMEOUT)
    assert loaded.status_code == 200, loaded.text[:500]
    return dict(loaded.json()["metadata"])


def test_schemas_nested_twenty_deep_create_tables(gw: SecureGateway, callers: Callers) -> None:
    """Control: real nested schemas, 20 levels of structs, of lists, of maps and of all three
    mixed, create tables and load back with every level."""
    mixed: Any = "string"
    for level in range(20):
        mixed = nested_type(("struct", "list", "map")[level % 3], 1, mixed, first_id=2 + 2 * level)
    lists, maps = nested_type("list", 20, first_id=100), nested_type("map", 20, first_id=200)
    schema = schema_of(nested_type("struct", 20), lists, maps, mixed)
    metadata = create(gw, callers.writer, "nested20", schema=schema)
    loaded = metadata["schemas"][0]["fields"]
    assert [field["name"] for field in loaded] == ["c0", "c1", "c2", "c3"]
    struct = loaded[0]["type"]
    for _ in range(19):
        struct = struct["fields"][0]["type"]
    assert struct["fields"][0]["type"] == "long"


VALID_TRANSFORMS = [
    ("identity", "long"),
    ("bucket[16]", "long"),
    ("bucket[1]", "string"),
    ("truncate[4]", "string"),
    ("truncate[10]", "long"),
    ("year", "timestamp"),
    ("month", "timestamptz"),
    ("day", "date"),
    ("hour", "timestamp"),
    ("void", "long"),
]


@pytest.mark.parametrize(("transform", "source_type"), VALID_TRANSFORMS)
def test_every_valid_transform_creates_a_table(
    gw: SecureGateway, callers: Callers, transform: str, source_type: str
) -> None:
    """Control: each transform, in a partition spec and in a write order, creates a table."""
    name = "tr_" + transform.replace("[", "_").replace("]", "")
    metadata = create(
        gw,
        callers.writer,
        name,
        schema=schema_of(source_type),
        **{"partition-spec": bucket_spec(transform), "write-order": sort_order(transform)},
    )
    assert metadata["partition-specs"][0]["fields"][0]["transform"] == transform
    assert metadata["sort-orders"][-1]["fields"][0]["transform"] == transform


def depth_of(document: Any) -> int:
    if isinstance(document, dict):
        return 1 + max((depth_of(value) for value in document.values()), default=0)
    if isinstance(document, list):
        return 1 + max((depth_of(value) for value in document), default=0)
    return 0


# Nested types per level of JSON: a struct is three (struct, fields, field), a list or a map one.
# createTable puts a schema's field type 4 levels deep, a transaction's add-schema 8.
AT_THE_LIMIT = [
    pytest.param("list", MAX_BODY_DEPTH - 4, id="lists"),
    pytest.param("map", MAX_BODY_DEPTH - 4, id="maps"),
    pytest.param("struct", (MAX_BODY_DEPTH - 4) // 3, id="structs"),
]


@pytest.mark.parametrize(("kind", "levels"), AT_THE_LIMIT)
def test_a_schema_nested_to_the_limit_is_served(
    gw: SecureGateway, callers: Callers, kind: Any, levels: int
) -> None:
    """Control: a schema as deep as `max_body_depth` admits creates a table (its parsers do not
    run out of stack), in a create and in a transaction's add-schema; one level more is refused
    before parsing."""
    body = {"name": f"limit_{kind}", "schema": schema_of(nested_type(kind, levels))}
    assert depth_of(body) == MAX_BODY_DEPTH
    create(gw, callers.writer, body["name"], schema=body["schema"])
    deeper = {"name": f"over_{kind}", "schema": schema_of(nested_type(kind, levels + 1))}
    refused = callers.writer.post(url(gw, CREATE), json=deeper, timeout=TIMEOUT)
    assert error_of(refused, 400)[2] == f"request body is nested deeper than {MAX_BODY_DEPTH} levels"

    per_level = 3 if kind == "struct" else 1
    added = transaction({**schema_of(nested_type(kind, (MAX_BODY_DEPTH - 8) // per_level)), "schema-id": 1})
    added["table-changes"][0]["identifier"]["name"] = body["name"]
    assert MAX_BODY_DEPTH - per_level < depth_of(added) <= MAX_BODY_DEPTH
    committed = callers.writer.post(url(gw, "transactions/commit"), json=added, timeout=TIMEOUT)
    assert committed.status_code == 204, committed.text[:500]
    loaded = callers.writer.get(url(gw, f"{CREATE}/{body['name']}"), timeout=TIMEOUT)
    assert loaded.status_code == 200
    assert len(loaded.json()["metadata"]["schemas"]) == 2


def test_a_scan_filter_nested_to_the_limit_is_served(gw: SecureGateway, callers: Callers) -> None:
    """Control: a left-deep filter as deep as `max_body_depth` admits is planned; one predicate
    more is refused before parsing."""
    plan = url(gw, f"{CREATE}/{TABLE}/plan")
    body = {"filter": left_deep_filter(MAX_BODY_DEPTH - 1)}
    assert depth_of(body) == MAX_BODY_DEPTH
    planned = callers.reader.post(plan, json=body, timeout=TIMEOUT)
    assert planned.status_code == 200, planned.text[:500]
    assert planned.json()["status"] == "completed"
    deeper = callers.reader.post(plan, json={"filter": left_deep_filter(MAX_BODY_DEPTH)}, timeout=TIMEOUT)
    assert error_of(deeper, 400)[2] == f"request body is nested deeper than {MAX_BODY_DEPTH} levels"


BAD_FILTERS = [
    pytest.param(left_deep_filter(150), id="150-predicates-deep"),
    pytest.param({"type": "and", "left": {"type": "true"}}, id="and-without-right"),
    pytest.param({"type": "in", "term": "c0", "values": [[1]]}, id="nested-values"),
    pytest.param({"type": "no-such-expression"}, id="unknown-type"),
]


@pytest.mark.parametrize("expression", BAD_FILTERS)
def test_bad_scan_filters_are_a_400_for_everyone(
    gw: SecureGateway, callers: Callers, expression: dict[str, Any]
) -> None:
    """Attack: planTableScan's body is parsed before the decision like every other body: a
    stranger gets the reader's 400, not a 404 that depends on what it may see."""
    plan = url(gw, f"{CREATE}/{TABLE}/plan")
    answers = {
        who: error_of(session.post(plan, json={"filter": expression}, timeout=TIMEOUT), 400)
        for who, session in callers.each()
    }
    assert answers["stranger"] == answers["reader"] == answers["writer"]


def registered_copy(gw: SecureGateway, name: str, field_type: Any) -> str:
    """A metadata file beside table `t`'s: its metadata under a new uuid and location, with its
    first column of `field_type`, in an object directory of its own (as every table's root must
    be). Returns the file's location."""
    metadata = gw.admin.get(url(gw, f"{CREATE}/{TABLE}"), timeout=TIMEOUT).json()["metadata"]
    location = f"{metadata['location'].rsplit('/', 1)[0]}/{name}-{uuid.uuid4().hex}"
    metadata.update({"table-uuid": str(uuid.uuid4()), "location": location})
    metadata["schemas"][0]["fields"][0]["type"] = field_type
    file_location = f"{location}/metadata/00000-{uuid.uuid4()}.metadata.json"
    path = Path(urlparse(file_location).path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(metadata))  # orjson refuses to write the deepest
    return file_location


def test_registered_metadata_files_are_read_as_requests(gw: SecureGateway, callers: Callers) -> None:
    """Attack: a registered file is the client's too: one nested past the parsers' stack and one
    with a type pyiceberg refuses are 400s, not 500s, and register nothing. Control: the same
    file with a valid type registers."""
    existing = tables(gw)
    register = url(gw, f"namespaces/{NS}/register")
    refusals = {
        "reg_deep": (nested_type("list", 150), "table metadata file is nested deeper than"),
        "reg_decimal": ("decimal(99,2)", "not valid Iceberg table metadata"),
        "reg_fixed": ("fixed[-1]", "not valid Iceberg table metadata"),
    }
    for name, (field_type, wording) in refusals.items():
        body = {"name": name, "metadata-location": registered_copy(gw, name, field_type)}
        refused = callers.writer.post(register, json=body, timeout=TIMEOUT)
        assert wording in error_of(refused, 400)[2]
    assert tables(gw) == existing
    body = {"name": "reg_ok", "metadata-location": registered_copy(gw, "reg_ok", nested_type("list", 20))}
    registered = callers.writer.post(register, json=body, timeout=TIMEOUT)
    assert registered.status_code == 200, registered.text[:500]
    assert "reg_ok" in tables(gw)
