"""Bad input over plain HTTP against a real gateway process.

Every class of malformed, impossible or refused request must be answered with the right 4xx (or 501)
status and an Iceberg ``ErrorModel`` body ``{"error": {"message", "type", "code"}}`` whose ``code`` equals
the status, and must leave the catalog exactly as it was: the same namespaces (and their properties),
tables and views (and their metadata), and the same files in the warehouse directory.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests

from tests.support.gateway import GatewayProcess

TIMEOUT = 30
SEP = "\x1f"
NS = ["bi"]
TABLE = "events"
VIEW = "events_view"
OTHER = "other"
OTHER_VIEW = "other_view"

_NO_BODY = object()


# --------------------------------------------------------------------------------------------------
# Request builders
# --------------------------------------------------------------------------------------------------


def schema_json(schema_id: int = 0) -> dict[str, Any]:
    return {
        "type": "struct",
        "schema-id": schema_id,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 2, "name": "data", "type": "string", "required": False},
        ],
    }


def create_table_body(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "schema": schema_json(), **extra}


def create_view_body(name: str, namespace: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schema": schema_json(),
        "view-version": {
            "version-id": 1,
            "timestamp-ms": int(time.time() * 1000),
            "schema-id": 0,
            "summary": {"engine-name": "bad-input-test"},
            "representations": [{"type": "sql", "sql": "SELECT 1 AS id, 'a' AS data", "dialect": "spark"}],
            "default-namespace": namespace,
        },
        "properties": {},
        **extra,
    }


def set_props(**props: str) -> dict[str, Any]:
    return {"action": "set-properties", "updates": props}


def commit_body(updates: list[Any], requirements: list[Any] | None = None) -> dict[str, Any]:
    return {"requirements": requirements or [], "updates": updates}


def ident(namespace: list[str], name: str) -> dict[str, Any]:
    return {"namespace": namespace, "name": name}


def tx_body(*changes: tuple[list[str], str, list[Any], list[Any]]) -> dict[str, Any]:
    """``changes``: (namespace, table, requirements, updates) tuples."""
    return {
        "table-changes": [
            {"identifier": ident(ns, name), "requirements": reqs, "updates": ups}
            for ns, name, reqs, ups in changes
        ]
    }


def enc_ns(levels: list[str]) -> str:
    return quote(SEP.join(levels), safe="")


def ns_path(levels: list[str]) -> str:
    return f"/namespaces/{enc_ns(levels)}"


def table_path(levels: list[str], name: str) -> str:
    return f"{ns_path(levels)}/tables/{quote(name, safe='')}"


def view_path(levels: list[str], name: str) -> str:
    return f"{ns_path(levels)}/views/{quote(name, safe='')}"


NS_PATH = ns_path(NS)
TABLE_PATH = table_path(NS, TABLE)
VIEW_PATH = view_path(NS, VIEW)


# --------------------------------------------------------------------------------------------------
# Client and catalog state
# --------------------------------------------------------------------------------------------------


class Client:
    """A thin ``requests`` wrapper rooted at ``/v1/{prefix}`` of one gateway."""

    def __init__(self, base_url: str, warehouse_dir: Path) -> None:
        self.base = base_url.rstrip("/")
        self.warehouse_dir = Path(warehouse_dir)
        resp = requests.get(f"{self.base}/v1/config", timeout=TIMEOUT)
        assert resp.status_code == 200, resp.text
        self.config: dict[str, Any] = resp.json()
        prefix = self.config.get("overrides", {}).get("prefix")
        self.root = f"{self.base}/v1/{quote(prefix, safe='')}" if prefix else f"{self.base}/v1"

    def request(
        self,
        method: str,
        path: str,
        body: Any = _NO_BODY,
        *,
        data: Any = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        absolute: bool = False,
    ) -> requests.Response:
        url = (self.base + path) if absolute else (self.root + path)
        hdrs = dict(headers or {})
        if body is not _NO_BODY:
            return requests.request(method, url, json=body, headers=hdrs, params=params, timeout=TIMEOUT)
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        return requests.request(method, url, data=data, headers=hdrs, params=params, timeout=TIMEOUT)

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = _NO_BODY, **kw: Any) -> requests.Response:
        return self.request("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> requests.Response:
        return self.request("DELETE", path, **kw)

    # -- set-up helpers (all must succeed) ---------------------------------------------------------

    def create_namespace(self, levels: list[str], properties: dict[str, str] | None = None) -> None:
        resp = self.post("/namespaces", {"namespace": levels, "properties": properties or {}})
        assert resp.status_code == 200, resp.text

    def create_table(self, levels: list[str], name: str) -> dict[str, Any]:
        resp = self.post(f"{ns_path(levels)}/tables", create_table_body(name))
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def create_view(self, levels: list[str], name: str) -> dict[str, Any]:
        resp = self.post(f"{ns_path(levels)}/views", create_view_body(name, levels))
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def load_table(self, levels: list[str], name: str) -> dict[str, Any]:
        resp = self.get(table_path(levels, name))
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    # -- state ---------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything observable: namespaces and properties, tables and views with their metadata, and
        the warehouse files. Failures are recorded, not raised, so one server bug cannot cascade into
        every later test that shares the gateway."""
        catalog: dict[tuple[str, ...], Any] = {}

        def walk(parent: list[str]) -> None:
            params = {"parent": SEP.join(parent)} if parent else None
            listed = self.get("/namespaces", params=params)
            if listed.status_code != 200:
                catalog[("<list>", *parent)] = listed.status_code
                return
            for levels in listed.json()["namespaces"]:
                key = tuple(levels)
                if key in catalog or len(key) > 8:
                    continue
                loaded = self.get(ns_path(levels))
                entry: dict[str, Any] = {
                    "namespace": (loaded.status_code, loaded.json().get("properties") if loaded.ok else None)
                }
                for kind in ("tables", "views"):
                    objs = self.get(f"{ns_path(levels)}/{kind}")
                    if not objs.ok:
                        entry[kind] = objs.status_code
                        continue
                    entry[kind] = {}
                    for oid in objs.json()["identifiers"]:
                        obj = self.get(f"{ns_path(levels)}/{kind}/{quote(oid['name'], safe='')}")
                        entry[kind][oid["name"]] = (
                            (obj.json()["metadata-location"], obj.json()["metadata"])
                            if obj.ok
                            else obj.status_code
                        )
                catalog[key] = entry
                walk(levels)

        walk([])
        return {"catalog": catalog, "files": tree(self.warehouse_dir)}


def tree(root: Path) -> list[tuple[str, int]]:
    if not root.exists():
        return []
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file())


def assert_error(resp: requests.Response, status: int, error_type: str | tuple[str, ...] | None) -> None:
    """The response is ``status`` with an Iceberg ErrorModel body of type ``error_type`` (if given)."""
    where = f"{resp.request.method} {resp.request.url} -> {resp.status_code} {resp.text[:600]!r}"
    assert resp.status_code == status, where
    ctype = resp.headers.get("Content-Type", "")
    assert ctype.split(";")[0].strip() == "application/json", f"content-type {ctype!r}: {where}"
    body = resp.json()
    assert isinstance(body, dict), where
    assert set(body) == {"error"}, where
    err = body["error"]
    assert isinstance(err, dict), where
    assert set(err) == {"message", "type", "code"}, f"unexpected ErrorModel keys: {where}"
    assert isinstance(err["message"], str), where
    assert err["message"], where
    assert isinstance(err["type"], str), where
    assert err["type"], where
    assert type(err["code"]) is int, where
    assert err["code"] == status, where
    if isinstance(error_type, str):
        assert err["type"] == error_type, where
    elif error_type is not None:
        assert err["type"] in error_type, where


def assert_unchanged(client: Client, before: dict[str, Any]) -> None:
    after = client.state()
    assert after["catalog"] == before["catalog"], "catalog changed by a rejected request"
    assert after["files"] == before["files"], "warehouse files changed by a rejected request"


# --------------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_gateway(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[GatewayProcess]:
    """One gateway for the many read-only cases: every test compares the whole catalog state before and
    after its bad request, so sharing is safe, and it saves a process start per parameter."""
    with GatewayProcess(tmp_path_factory.mktemp("bad-input") / "gateway", store_url=module_store_url) as gw:
        yield gw


@pytest.fixture(scope="module")
def seeded(shared_gateway: GatewayProcess) -> Client:
    """Namespaces ``bi`` (owner=alice) and ``ops`` (empty); tables ``bi.events`` and ``bi.other``; views
    ``bi.events_view`` and ``bi.other_view``."""
    client = Client(shared_gateway.url, shared_gateway.warehouse_dir)
    client.create_namespace(NS, {"owner": "alice"})
    client.create_namespace(["ops"])
    client.create_table(NS, TABLE)
    client.create_table(NS, OTHER)
    client.create_view(NS, VIEW)
    client.create_view(NS, OTHER_VIEW)
    return client


@pytest.fixture
def fresh(gateway: GatewayProcess) -> Client:
    """An empty gateway of its own, for tests that make valid changes first."""
    return Client(gateway.url, gateway.warehouse_dir)


# --------------------------------------------------------------------------------------------------
# Malformed JSON and wrong types
# --------------------------------------------------------------------------------------------------

BODY_TARGETS = [
    pytest.param("/namespaces", id="create-namespace"),
    pytest.param(f"{NS_PATH}/properties", id="namespace-properties"),
    pytest.param(f"{NS_PATH}/tables", id="create-table"),
    pytest.param(TABLE_PATH, id="commit-table"),
    pytest.param("/transactions/commit", id="transactions-commit"),
    pytest.param("/tables/rename", id="rename-table"),
    pytest.param(f"{NS_PATH}/register", id="register-table"),
]

MALFORMED = [
    pytest.param(b"{", id="truncated"),
    pytest.param(b"not json", id="not-json"),
    pytest.param(b"", id="empty"),
    pytest.param(b'{"namespace": ["x"],}', id="trailing-comma"),
    pytest.param(b"{'namespace': ['x']}", id="single-quotes"),
    pytest.param(b'\xff\xfe{"namespace": ["x"]}', id="not-utf8"),
    pytest.param(b'{"namespace": ["x"], "properties": {"k": NaN}}', id="nan"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deeply-nested"),
]

NOT_AN_OBJECT = [
    pytest.param(b"[]", id="array"),
    pytest.param(b"null", id="null"),
    pytest.param(b"42", id="number"),
    pytest.param(b'"text"', id="string"),
]


@pytest.mark.parametrize("path", BODY_TARGETS)
@pytest.mark.parametrize("data", MALFORMED + NOT_AN_OBJECT)
def test_malformed_json_body(seeded: Client, path: str, data: bytes) -> None:
    before = seeded.state()
    resp = seeded.post(path, data=data)
    assert_error(resp, 400, "BadRequestException")
    assert_unchanged(seeded, before)


WRONG_TYPES = [
    # create namespace
    pytest.param("/namespaces", {"namespace": "new_ns"}, id="ns-not-a-list"),
    pytest.param("/namespaces", {"namespace": ["new_ns", 1]}, id="ns-level-not-a-string"),
    pytest.param("/namespaces", {"namespace": None}, id="ns-null"),
    pytest.param("/namespaces", {"properties": {}}, id="ns-missing"),
    pytest.param("/namespaces", {"namespace": ["new_ns"], "properties": {"k": 1}}, id="ns-prop-int"),
    pytest.param("/namespaces", {"namespace": ["new_ns"], "properties": {"k": None}}, id="ns-prop-null"),
    pytest.param("/namespaces", {"namespace": ["new_ns"], "properties": {"k": ["v"]}}, id="ns-prop-list"),
    pytest.param("/namespaces", {"namespace": ["new_ns"], "properties": ["k"]}, id="ns-props-a-list"),
    # namespace properties
    pytest.param(f"{NS_PATH}/properties", {"updates": {"k": 1}}, id="props-update-int"),
    pytest.param(f"{NS_PATH}/properties", {"updates": ["k"]}, id="props-updates-a-list"),
    pytest.param(f"{NS_PATH}/properties", {"removals": "owner"}, id="props-removals-a-string"),
    pytest.param(f"{NS_PATH}/properties", {"removals": [1]}, id="props-removal-int"),
    # create table
    pytest.param(f"{NS_PATH}/tables", {"name": "new_t"}, id="table-schema-missing"),
    pytest.param(f"{NS_PATH}/tables", {"schema": schema_json()}, id="table-name-missing"),
    pytest.param(f"{NS_PATH}/tables", {"name": 7, "schema": schema_json()}, id="table-name-int"),
    pytest.param(f"{NS_PATH}/tables", {"name": "new_t", "schema": {"type": "struct"}}, id="schema-no-fields"),
    pytest.param(f"{NS_PATH}/tables", {"name": "new_t", "schema": []}, id="schema-a-list"),
    pytest.param(
        f"{NS_PATH}/tables",
        {
            "name": "new_t",
            "schema": {"type": "struct", "fields": [{"name": "a", "type": "int", "required": False}]},
        },
        id="field-no-id",
    ),
    pytest.param(
        f"{NS_PATH}/tables",
        {
            "name": "new_t",
            "schema": {"type": "struct", "fields": [{"id": 1, "name": "a", "required": False}]},
        },
        id="field-no-type",
    ),
    pytest.param(
        f"{NS_PATH}/tables",
        {
            "name": "new_t",
            "schema": {"type": "struct", "fields": [{"id": 1, "type": "int", "required": False}]},
        },
        id="field-no-name",
    ),
    pytest.param(
        f"{NS_PATH}/tables",
        {"name": "new_t", "schema": {"type": "struct", "fields": [{"id": 1, "name": "a", "type": "int"}]}},
        id="field-no-required",
    ),
    pytest.param(
        f"{NS_PATH}/tables",
        {
            "name": "new_t",
            "schema": {
                "type": "struct",
                "fields": [{"id": 1, "name": "a", "type": "varchar2", "required": False}],
            },
        },
        id="field-unknown-type",
    ),
    pytest.param(
        f"{NS_PATH}/tables",
        {
            "name": "new_t",
            "schema": {
                "type": "struct",
                "fields": [{"id": "one", "name": "a", "type": "int", "required": False}],
            },
        },
        id="field-id-a-string",
    ),
    pytest.param(
        f"{NS_PATH}/tables",
        {
            "name": "new_t",
            "schema": {
                "type": "struct",
                "fields": [{"id": 1, "name": "a", "type": "int", "required": "yes"}],
            },
        },
        id="field-required-a-string",
    ),
    pytest.param(f"{NS_PATH}/tables", create_table_body("new_t", properties={"k": 1}), id="table-prop-int"),
    pytest.param(f"{NS_PATH}/tables", create_table_body("new_t", properties=["k"]), id="table-props-a-list"),
    pytest.param(f"{NS_PATH}/tables", create_table_body("new_t", location=5), id="table-location-int"),
    pytest.param(
        f"{NS_PATH}/tables", create_table_body("new_t", **{"stage-create": "yes"}), id="stage-create-str"
    ),
    pytest.param(
        f"{NS_PATH}/tables",
        create_table_body("new_t", **{"partition-spec": {"fields": [{"source-id": 1}]}}),
        id="partition-field-incomplete",
    ),
    # commit table
    pytest.param(TABLE_PATH, {"requirements": {}, "updates": []}, id="commit-requirements-an-object"),
    pytest.param(TABLE_PATH, {"requirements": [], "updates": {}}, id="commit-updates-an-object"),
    pytest.param(
        TABLE_PATH, commit_body([{"action": "set-properties", "updates": {"k": 1}}]), id="commit-prop-int"
    ),
    pytest.param(TABLE_PATH, commit_body([{"action": "set-properties"}]), id="commit-update-missing-field"),
    pytest.param(TABLE_PATH, commit_body([{"updates": {"k": "v"}}]), id="commit-update-no-action"),
    pytest.param(TABLE_PATH, commit_body([], [{"type": "assert-table-uuid"}]), id="requirement-missing-uuid"),
    pytest.param(TABLE_PATH, commit_body([], [{"uuid": str(uuid.uuid4())}]), id="requirement-no-type"),
    pytest.param(
        TABLE_PATH,
        commit_body([{"action": "remove-properties", "removals": "owner"}]),
        id="commit-removals-a-string",
    ),
    # transactions
    pytest.param("/transactions/commit", {"table-changes": {}}, id="tx-changes-an-object"),
    pytest.param("/transactions/commit", {}, id="tx-changes-missing"),
    pytest.param("/transactions/commit", {"table-changes": []}, id="tx-changes-empty"),
    pytest.param(
        "/transactions/commit",
        {"table-changes": [commit_body([set_props(k="v")])]},
        id="tx-change-without-identifier",
    ),
    pytest.param(
        "/transactions/commit",
        {
            "table-changes": [
                {"identifier": {"namespace": "bi", "name": TABLE}, **commit_body([set_props(k="v")])}
            ]
        },
        id="tx-identifier-ns-a-string",
    ),
    # rename
    pytest.param(
        "/tables/rename",
        {"source": {"namespace": "bi", "name": TABLE}, "destination": ident(NS, "renamed")},
        id="rename-ns-a-string",
    ),
    pytest.param("/tables/rename", {"source": ident(NS, TABLE)}, id="rename-destination-missing"),
    pytest.param(
        "/tables/rename",
        {"source": ident(NS, TABLE), "destination": {"namespace": NS}},
        id="rename-destination-name-missing",
    ),
]


@pytest.mark.parametrize(("path", "body"), WRONG_TYPES)
def test_wrong_types(seeded: Client, path: str, body: Any) -> None:
    # Fresh names per case: one wrongly accepted create must not turn the next case into a 409.
    suffix = uuid.uuid4().hex[:8]
    data = json.dumps(body).replace('"new_t"', f'"new_t_{suffix}"').replace('"new_ns"', f'"new_ns_{suffix}"')
    before = seeded.state()
    resp = seeded.post(path, data=data.encode())
    assert_error(resp, 400, "BadRequestException")
    assert_unchanged(seeded, before)


def test_wrong_types_create_view(seeded: Client) -> None:
    before = seeded.state()
    good = create_view_body("new_v", NS)
    bad_bodies = [
        {k: v for k, v in good.items() if k != "view-version"},
        {**good, "view-version": {**good["view-version"], "representations": {}}},
        {**good, "view-version": {**good["view-version"], "default-namespace": "bi"}},
        {**good, "view-version": {k: v for k, v in good["view-version"].items() if k != "schema-id"}},
        {**good, "properties": {"k": 1}},
    ]
    for body in bad_bodies:
        assert_error(seeded.post(f"{NS_PATH}/views", body), 400, "BadRequestException")
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Unknown updates and requirements
# --------------------------------------------------------------------------------------------------

UNKNOWN_CHANGES = [
    pytest.param([{"action": "frobnicate"}], [], id="unknown-action"),
    pytest.param([set_props(k="v"), {"action": "frobnicate", "x": 1}], [], id="valid-then-unknown-action"),
    pytest.param([{"action": "set-current-view-version", "view-version-id": -1}], [], id="view-only-action"),
    pytest.param([set_props(k="v")], [{"type": "assert-frobnicated"}], id="unknown-requirement"),
    pytest.param(
        [set_props(k="v")],
        [{"type": "assert-view-uuid", "uuid": str(uuid.uuid4())}],
        id="view-only-requirement",
    ),
]


@pytest.mark.parametrize(("updates", "requirements"), UNKNOWN_CHANGES)
def test_unknown_update_or_requirement_in_table_commit(
    seeded: Client, updates: list[Any], requirements: list[Any]
) -> None:
    before = seeded.state()
    resp = seeded.post(TABLE_PATH, commit_body(updates, requirements))
    assert_error(resp, 400, "BadRequestException")
    assert_unchanged(seeded, before)


@pytest.mark.parametrize(("updates", "requirements"), UNKNOWN_CHANGES)
def test_unknown_update_or_requirement_in_transaction(
    seeded: Client, updates: list[Any], requirements: list[Any]
) -> None:
    before = seeded.state()
    body = tx_body((NS, OTHER, [], [set_props(k="v")]), (NS, TABLE, requirements, updates))
    resp = seeded.post("/transactions/commit", body)
    assert_error(resp, 400, "BadRequestException")
    assert_unchanged(seeded, before)


def test_unknown_update_or_requirement_in_view_replace(seeded: Client) -> None:
    before = seeded.state()
    bodies = [
        {"requirements": [], "updates": [{"action": "frobnicate"}]},
        {"requirements": [], "updates": [{"action": "add-snapshot", "snapshot": {}}]},
        {"requirements": [{"type": "assert-frobnicated"}], "updates": [set_props(k="v")]},
        {"requirements": [{"type": "assert-table-uuid", "uuid": str(uuid.uuid4())}], "updates": []},
    ]
    for body in bodies:
        assert_error(seeded.post(VIEW_PATH, body), 400, "BadRequestException")
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Identifiers
# --------------------------------------------------------------------------------------------------

BAD_LEVELS = [
    pytest.param([], id="no-levels"),
    pytest.param([""], id="empty-level"),
    pytest.param(["a", ""], id="empty-last-level"),
    pytest.param(["", "a"], id="empty-first-level"),
    pytest.param(["a\x00b"], id="nul"),
    pytest.param(["a\nb"], id="newline"),
    pytest.param(["a\rb"], id="carriage-return"),
    pytest.param(["a\tb"], id="tab"),
    pytest.param(["a\x1bb"], id="escape"),
    pytest.param(["a\x7fb"], id="del"),
    pytest.param(["a\x1fb"], id="separator-inside-level"),
    pytest.param(["bi", "x\x1fy"], id="separator-inside-second-level"),
]

BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("t\x00", id="nul"),
    pytest.param("t\nx", id="newline"),
    pytest.param("t\rx", id="carriage-return"),
    pytest.param("t\x1bx", id="escape"),
    pytest.param("t\x7f", id="del"),
    pytest.param("t\x1fx", id="separator"),
]


@pytest.mark.parametrize("levels", BAD_LEVELS)
def test_bad_namespace_identifier_in_body(seeded: Client, levels: list[str]) -> None:
    before = seeded.state()
    assert_error(seeded.post("/namespaces", {"namespace": levels}), 400, "BadRequestException")
    if levels:
        rename = {"source": ident(NS, TABLE), "destination": ident(levels, "moved")}
        assert_error(seeded.post("/tables/rename", rename), 400, "BadRequestException")
    # In a path the levels are joined with the separator, so a separator inside a level reads as two
    # valid levels there; the other cases are still invalid (an empty path segment cannot be routed).
    in_path = SEP.join(levels).split(SEP)
    if SEP.join(levels) and any(part == "" or not part.isprintable() for part in in_path):
        assert_error(
            seeded.post(f"{ns_path(levels)}/tables", create_table_body("t")), 400, "BadRequestException"
        )
    assert_unchanged(seeded, before)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_table_or_view_name_in_body(seeded: Client, name: str) -> None:
    before = seeded.state()
    assert_error(seeded.post(f"{NS_PATH}/tables", create_table_body(name)), 400, "BadRequestException")
    assert_error(seeded.post(f"{NS_PATH}/views", create_view_body(name, NS)), 400, "BadRequestException")
    assert_error(
        seeded.post("/tables/rename", {"source": ident(NS, TABLE), "destination": ident(NS, name)}),
        400,
        "BadRequestException",
    )
    assert_error(
        seeded.post("/views/rename", {"source": ident(NS, VIEW), "destination": ident(NS, name)}),
        400,
        "BadRequestException",
    )
    assert_unchanged(seeded, before)


BAD_PATHS = [
    pytest.param("GET", "/namespaces/" + quote("bi" + SEP, safe=""), id="ns-trailing-separator"),
    pytest.param("GET", "/namespaces/" + quote(SEP + "bi", safe=""), id="ns-leading-separator"),
    pytest.param("GET", "/namespaces/" + quote("bi" + SEP + SEP + "x", safe=""), id="ns-double-separator"),
    pytest.param("GET", "/namespaces/" + quote("b\x00i", safe=""), id="ns-nul"),
    pytest.param("GET", "/namespaces/" + quote("b\ni", safe=""), id="ns-newline"),
    pytest.param("DELETE", "/namespaces/" + quote("bi" + SEP, safe=""), id="drop-ns-trailing-separator"),
    pytest.param("GET", table_path(NS, "t\x00"), id="table-nul"),
    pytest.param("GET", table_path(NS, "t\nx"), id="table-newline"),
    pytest.param("DELETE", table_path(NS, "t\nx"), id="drop-table-newline"),
    pytest.param("GET", view_path(NS, "v\x00"), id="view-nul"),
    pytest.param("POST", f"/namespaces/{quote('bi' + SEP, safe='')}/tables", id="create-table-in-bad-ns"),
]


@pytest.mark.parametrize(("method", "path"), BAD_PATHS)
def test_bad_identifier_in_path(seeded: Client, method: str, path: str) -> None:
    before = seeded.state()
    body = create_table_body("new_t") if method == "POST" else _NO_BODY
    assert_error(seeded.request(method, path, body), 400, "BadRequestException")
    assert_unchanged(seeded, before)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("..", id="dotdot"),
        pytest.param("../escape", id="dotdot-slash"),
        pytest.param("../../escape", id="dotdot-dotdot"),
        pytest.param("a/b", id="slash"),
        pytest.param(".", id="dot"),
    ],
)
def test_path_like_names_never_escape_the_warehouse(fresh: Client, name: str) -> None:
    """Table and namespace names that look like paths are either refused (4xx ErrorModel) or stored
    with a location inside the warehouse; no directory appears outside the warehouse."""
    wh = fresh.warehouse_dir.resolve()
    data_dir = wh.parent

    def dirs_outside() -> set[Path]:
        found = {p for p in data_dir.parent.iterdir() if p.is_dir()}
        found |= {p for p in data_dir.rglob("*") if p.is_dir() and not p.resolve().is_relative_to(wh)}
        return found

    # A first valid table, so that whatever the server creates lazily already exists.
    fresh.create_namespace(["wh"])
    fresh.create_table(["wh"], "baseline")
    before = dirs_outside()
    for levels, tname in ((["wh"], name), ([name], "t"), (["wh", name], "t")):
        if levels != ["wh"]:
            made = fresh.post("/namespaces", {"namespace": levels})
            if made.status_code != 200:
                assert 400 <= made.status_code < 500, made.text
                assert_error(made, made.status_code, None)
                continue
        resp = fresh.post(f"{ns_path(levels)}/tables", create_table_body(tname))
        if resp.status_code != 200:
            assert 400 <= resp.status_code < 500, resp.text
            assert_error(resp, resp.status_code, None)
            continue
        for location in (resp.json()["metadata"]["location"], resp.json()["metadata-location"]):
            # Engines (Hadoop Path, pyarrow) take the path of a location literally, without decoding
            # percent escapes, so an encoded name such as %2E%2E is a harmless file name.
            local = Path(location.removeprefix("file://").removeprefix("file:"))
            assert local.resolve().is_relative_to(wh), f"{location} escapes the warehouse {wh}"
    assert dirs_outside() == before


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/namespaces", {"namespace": ["n" * 10_000]}, id="namespace-level-10k"),
        pytest.param(
            "/namespaces", {"namespace": [f"l{i}" for i in range(1000)]}, id="namespace-1000-levels"
        ),
        pytest.param(f"{NS_PATH}/tables", create_table_body("t" * 10_000), id="table-name-10k"),
        pytest.param(f"{NS_PATH}/views", create_view_body("v" * 10_000, NS), id="view-name-10k"),
        pytest.param(
            "/tables/rename",
            {"source": ident(NS, TABLE), "destination": ident(NS, "t" * 10_000)},
            id="rename-to-10k",
        ),
    ],
)
def test_overlong_identifiers(seeded: Client, path: str, body: Any) -> None:
    before = seeded.state()
    assert_error(seeded.post(path, body), 400, "BadRequestException")
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Body size limit
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def small_gateway(tmp_path: Path, fresh_store_url: str | None) -> Iterator[GatewayProcess]:
    config = {"max_body_bytes": 4096}
    with GatewayProcess(tmp_path / "gateway", store_url=fresh_store_url, config=config) as gw:
        yield gw


def test_body_over_limit_is_413(small_gateway: GatewayProcess) -> None:
    client = Client(small_gateway.url, small_gateway.warehouse_dir)
    client.create_namespace(NS)
    client.create_table(NS, TABLE)
    before = client.state()
    blob = "x" * 10_240

    resp = client.post("/namespaces", {"namespace": ["big"], "properties": {"blob": blob}})
    assert_error(resp, 413, None)
    resp = client.post(f"{NS_PATH}/tables", create_table_body("big", properties={"blob": blob}))
    assert_error(resp, 413, None)
    resp = client.post(TABLE_PATH, commit_body([set_props(blob=blob)]))
    assert_error(resp, 413, None)

    # Without Content-Length (chunked transfer encoding) the limit still applies.
    payload = ('{"namespace": ["big"], "properties": {"blob": "' + blob + '"}}').encode()
    chunks = (payload[i : i + 1024] for i in range(0, len(payload), 1024))
    resp = client.post("/namespaces", data=chunks)
    assert_error(resp, 413, None)
    assert_unchanged(client, before)

    # A body under the limit is accepted: the limit, not the content, caused the 413s.
    small = client.post("/namespaces", {"namespace": ["small"], "properties": {"blob": "x" * 2048}})
    assert small.status_code == 200, small.text


# --------------------------------------------------------------------------------------------------
# Unknown warehouse
# --------------------------------------------------------------------------------------------------


def test_unknown_warehouse(seeded: Client) -> None:
    before = seeded.state()
    resp = requests.get(f"{seeded.base}/v1/config", params={"warehouse": "nope"}, timeout=TIMEOUT)
    assert_error(resp, 404, "NoSuchWarehouseException")
    for method, path, body in (
        ("GET", "/v1/nope/namespaces", _NO_BODY),
        ("POST", "/v1/nope/namespaces", {"namespace": ["created_in_nope"]}),
        ("GET", f"/v1/nope{TABLE_PATH}", _NO_BODY),
        ("POST", f"/v1/nope{NS_PATH}/tables", create_table_body("t2")),
        ("POST", "/v1/nope/transactions/commit", tx_body((NS, TABLE, [], [set_props(k="v")]))),
    ):
        resp = seeded.request(method, path, body, absolute=True)
        assert_error(resp, 404, "NoSuchWarehouseException")
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Not found
# --------------------------------------------------------------------------------------------------

MISSING_NS = ns_path(["missing"])

NOT_FOUND = [
    # namespaces
    pytest.param("GET", MISSING_NS, _NO_BODY, "NoSuchNamespaceException", id="load-ns"),
    pytest.param("DELETE", MISSING_NS, _NO_BODY, "NoSuchNamespaceException", id="drop-ns"),
    pytest.param(
        "POST",
        f"{MISSING_NS}/properties",
        {"updates": {"k": "v"}},
        "NoSuchNamespaceException",
        id="ns-properties",
    ),
    pytest.param("GET", f"{MISSING_NS}/tables", _NO_BODY, "NoSuchNamespaceException", id="list-tables"),
    pytest.param("GET", f"{MISSING_NS}/views", _NO_BODY, "NoSuchNamespaceException", id="list-views"),
    pytest.param(
        "POST",
        f"{MISSING_NS}/tables",
        create_table_body("t"),
        "NoSuchNamespaceException",
        id="create-table-in-missing-ns",
    ),
    pytest.param(
        "POST",
        f"{MISSING_NS}/views",
        create_view_body("v", ["missing"]),
        "NoSuchNamespaceException",
        id="create-view-in-missing-ns",
    ),
    pytest.param("GET", ns_path([*NS, "missing"]), _NO_BODY, "NoSuchNamespaceException", id="load-child-ns"),
    # tables
    pytest.param("GET", table_path(NS, "missing"), _NO_BODY, "NoSuchTableException", id="load-table"),
    pytest.param("DELETE", table_path(NS, "missing"), _NO_BODY, "NoSuchTableException", id="drop-table"),
    pytest.param(
        "POST",
        table_path(NS, "missing"),
        commit_body([set_props(k="v")]),
        "NoSuchTableException",
        id="commit-table",
    ),
    pytest.param(
        "POST",
        "/transactions/commit",
        tx_body((NS, "missing", [], [set_props(k="v")])),
        "NoSuchTableException",
        id="transaction-missing-table",
    ),
    pytest.param(
        "POST",
        "/transactions/commit",
        tx_body((NS, TABLE, [], [set_props(k="v")]), (NS, "missing", [], [set_props(k="v")])),
        "NoSuchTableException",
        id="transaction-one-table-missing",
    ),
    pytest.param(
        "POST",
        "/tables/rename",
        {"source": ident(NS, "missing"), "destination": ident(NS, "x")},
        "NoSuchTableException",
        id="rename-table-source-missing",
    ),
    pytest.param(
        "POST",
        "/tables/rename",
        {"source": ident(NS, TABLE), "destination": ident(["missing"], "x")},
        "NoSuchNamespaceException",
        id="rename-table-target-ns-missing",
    ),
    pytest.param("GET", table_path(NS, VIEW), _NO_BODY, "NoSuchTableException", id="load-view-as-table"),
    pytest.param("DELETE", table_path(NS, VIEW), _NO_BODY, "NoSuchTableException", id="drop-view-as-table"),
    # views
    pytest.param("GET", view_path(NS, "missing"), _NO_BODY, "NoSuchViewException", id="load-view"),
    pytest.param("DELETE", view_path(NS, "missing"), _NO_BODY, "NoSuchViewException", id="drop-view"),
    pytest.param(
        "POST",
        view_path(NS, "missing"),
        {"requirements": [], "updates": [set_props(k="v")]},
        "NoSuchViewException",
        id="replace-view",
    ),
    pytest.param(
        "POST",
        "/views/rename",
        {"source": ident(NS, "missing"), "destination": ident(NS, "x")},
        "NoSuchViewException",
        id="rename-view-source-missing",
    ),
    pytest.param(
        "POST",
        "/views/rename",
        {"source": ident(NS, VIEW), "destination": ident(["missing"], "x")},
        "NoSuchNamespaceException",
        id="rename-view-target-ns-missing",
    ),
    pytest.param("GET", view_path(NS, TABLE), _NO_BODY, "NoSuchViewException", id="load-table-as-view"),
    pytest.param("DELETE", view_path(NS, TABLE), _NO_BODY, "NoSuchViewException", id="drop-table-as-view"),
]


@pytest.mark.parametrize(("method", "path", "body", "error_type"), NOT_FOUND)
def test_not_found(seeded: Client, method: str, path: str, body: Any, error_type: str) -> None:
    before = seeded.state()
    assert_error(seeded.request(method, path, body), 404, error_type)
    assert_unchanged(seeded, before)


def test_not_found_list_namespaces_parent(seeded: Client) -> None:
    resp = seeded.get("/namespaces", params={"parent": "missing"})
    assert_error(resp, 404, "NoSuchNamespaceException")


@pytest.mark.parametrize(
    "path", [MISSING_NS, table_path(NS, "missing"), view_path(NS, "missing")], ids=["ns", "table", "view"]
)
def test_not_found_head(seeded: Client, path: str) -> None:
    resp = seeded.request("HEAD", path)
    assert resp.status_code == 404, resp.status_code


# --------------------------------------------------------------------------------------------------
# Already exists / not empty
# --------------------------------------------------------------------------------------------------

ALREADY_EXISTS = [
    pytest.param("/namespaces", {"namespace": NS}, id="namespace"),
    pytest.param(f"{NS_PATH}/tables", create_table_body(TABLE), id="table"),
    pytest.param(f"{NS_PATH}/tables", create_table_body(VIEW), id="table-over-view"),
    pytest.param(f"{NS_PATH}/tables", create_table_body(TABLE, **{"stage-create": True}), id="staged-table"),
    pytest.param(f"{NS_PATH}/views", create_view_body(VIEW, NS), id="view"),
    pytest.param(f"{NS_PATH}/views", create_view_body(TABLE, NS), id="view-over-table"),
    pytest.param(
        "/tables/rename",
        {"source": ident(NS, TABLE), "destination": ident(NS, OTHER)},
        id="rename-table-onto-table",
    ),
    pytest.param(
        "/tables/rename",
        {"source": ident(NS, TABLE), "destination": ident(NS, VIEW)},
        id="rename-table-onto-view",
    ),
    pytest.param(
        "/views/rename",
        {"source": ident(NS, VIEW), "destination": ident(NS, OTHER_VIEW)},
        id="rename-view-onto-view",
    ),
    pytest.param(
        "/views/rename",
        {"source": ident(NS, VIEW), "destination": ident(NS, TABLE)},
        id="rename-view-onto-table",
    ),
    pytest.param(TABLE_PATH, commit_body([], [{"type": "assert-create"}]), id="assert-create-on-existing"),
]


@pytest.mark.parametrize(("path", "body"), ALREADY_EXISTS)
def test_already_exists(seeded: Client, path: str, body: Any) -> None:
    before = seeded.state()
    resp = seeded.post(path, body)
    expected = "CommitFailedException" if path == TABLE_PATH else "AlreadyExistsException"
    assert_error(resp, 409, expected)
    assert_unchanged(seeded, before)


@pytest.mark.parametrize("content", ["table", "view", "child-namespace"])
def test_drop_non_empty_namespace(fresh: Client, content: str) -> None:
    fresh.create_namespace(["full"])
    if content == "table":
        fresh.create_table(["full"], "t")
    elif content == "view":
        fresh.create_view(["full"], "v")
    else:
        fresh.create_namespace(["full", "child"])
    before = fresh.state()
    assert_error(fresh.delete(ns_path(["full"])), 409, "NamespaceNotEmptyException")
    assert_unchanged(fresh, before)


# --------------------------------------------------------------------------------------------------
# Failed commit requirements
# --------------------------------------------------------------------------------------------------


def test_failed_requirements_without_snapshots(seeded: Client) -> None:
    meta = seeded.load_table(NS, TABLE)["metadata"]
    before = seeded.state()
    failing = [
        [{"type": "assert-table-uuid", "uuid": str(uuid.uuid4())}],
        [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 123456789}],
        [{"type": "assert-current-schema-id", "current-schema-id": meta["current-schema-id"] + 7}],
        [{"type": "assert-last-assigned-field-id", "last-assigned-field-id": meta["last-column-id"] + 7}],
        [{"type": "assert-default-spec-id", "default-spec-id": meta["default-spec-id"] + 7}],
        [
            {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
            {
                "type": "assert-default-sort-order-id",
                "default-sort-order-id": meta["default-sort-order-id"] + 7,
            },
        ],
    ]
    for reqs in failing:
        resp = seeded.post(TABLE_PATH, commit_body([set_props(k="v")], reqs))
        assert_error(resp, 409, "CommitFailedException")
        # Atomic across tables: the valid change to the other table is not applied either.
        resp = seeded.post(
            "/transactions/commit", tx_body((NS, OTHER, [], [set_props(k="v")]), (NS, TABLE, reqs, []))
        )
        assert_error(resp, 409, "CommitFailedException")
    assert_unchanged(seeded, before)


def test_failed_requirements_with_snapshots(
    fresh: Client, gateway: GatewayProcess, pyiceberg_catalog: Any
) -> None:
    fresh.create_namespace(NS)
    fresh.create_table(NS, TABLE)
    table = pyiceberg_catalog(gateway).load_table(f"{NS[0]}.{TABLE}")
    arrow = pa.table({"id": pa.array([1, 2], pa.int64()), "data": pa.array(["a", "b"], pa.string())})
    table.append(arrow)
    first = table.refresh().current_snapshot()
    assert first is not None
    table.append(arrow)
    second = table.refresh().current_snapshot()
    assert second is not None
    assert second.snapshot_id != first.snapshot_id

    before = fresh.state()
    failing = [
        [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": first.snapshot_id}],
        [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}],
        [{"type": "assert-ref-snapshot-id", "ref": "no-such-branch", "snapshot-id": second.snapshot_id}],
    ]
    for reqs in failing:
        resp = fresh.post(TABLE_PATH, commit_body([set_props(k="v")], reqs))
        assert_error(resp, 409, "CommitFailedException")
        resp = fresh.post("/transactions/commit", tx_body((NS, TABLE, reqs, [set_props(k="v")])))
        assert_error(resp, 409, "CommitFailedException")
    assert_unchanged(fresh, before)
    # The right snapshot id passes: the requirement, not the request shape, was refused.
    ok = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": second.snapshot_id}]
    resp = fresh.post(TABLE_PATH, commit_body([set_props(k="v")], ok))
    assert resp.status_code == 200, resp.text


SEMANTICALLY_INVALID = [
    pytest.param([{"action": "set-current-schema", "schema-id": 99}], id="set-current-schema-unknown"),
    pytest.param([{"action": "set-default-spec", "spec-id": 99}], id="set-default-spec-unknown"),
    pytest.param(
        [{"action": "set-default-sort-order", "sort-order-id": 99}], id="set-default-sort-order-unknown"
    ),
    pytest.param(
        [{"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 424242}],
        id="set-ref-unknown-snapshot",
    ),
    pytest.param([{"action": "upgrade-format-version", "format-version": 1}], id="downgrade-format-version"),
    pytest.param([{"action": "upgrade-format-version", "format-version": 99}], id="unknown-format-version"),
    pytest.param(
        [
            {
                "action": "add-spec",
                "spec": {"fields": [{"source-id": 99, "transform": "identity", "name": "p"}]},
            }
        ],
        id="add-spec-unknown-source",
    ),
    pytest.param(
        [
            {
                "action": "add-sort-order",
                "sort-order": {
                    "order-id": 1,
                    "fields": [
                        {
                            "source-id": 99,
                            "transform": "identity",
                            "direction": "asc",
                            "null-order": "nulls-first",
                        }
                    ],
                },
            }
        ],
        id="add-sort-order-unknown-source",
    ),
    pytest.param([{"action": "assign-uuid", "uuid": str(uuid.uuid4())}], id="reassign-uuid"),
]


@pytest.mark.parametrize("updates", SEMANTICALLY_INVALID)
def test_semantically_invalid_updates(seeded: Client, updates: list[Any]) -> None:
    """Well-formed updates that cannot apply to the table are refused with 400; nothing is written."""
    before = seeded.state()
    assert_error(seeded.post(TABLE_PATH, commit_body(updates)), 400, "BadRequestException")
    assert_error(
        seeded.post(
            "/transactions/commit", tx_body((NS, OTHER, [], [set_props(k="v")]), (NS, TABLE, [], updates))
        ),
        400,
        "BadRequestException",
    )
    assert_unchanged(seeded, before)


@pytest.mark.parametrize(
    ("body", "id_"),
    [
        ({"partition-spec": {"fields": [{"source-id": 99, "transform": "identity", "name": "p"}]}}, "spec"),
        (
            {
                "write-order": {
                    "order-id": 1,
                    "fields": [
                        {
                            "source-id": 99,
                            "transform": "identity",
                            "direction": "asc",
                            "null-order": "nulls-first",
                        }
                    ],
                }
            },
            "sort-order",
        ),
        (
            {"partition-spec": {"fields": [{"source-id": 1, "transform": "frobnicate", "name": "p"}]}},
            "transform",
        ),
        ({"properties": {"format-version": "99"}}, "format-version"),
    ],
    ids=["spec-unknown-source", "sort-order-unknown-source", "spec-unknown-transform", "format-version-99"],
)
def test_semantically_invalid_create_table(seeded: Client, body: dict[str, Any], id_: str) -> None:
    before = seeded.state()
    resp = seeded.post(f"{NS_PATH}/tables", create_table_body(f"invalid_{id_.replace('-', '_')}", **body))
    assert_error(resp, 400, "BadRequestException")
    assert_unchanged(seeded, before)


def test_view_failed_requirement_and_invalid_updates(seeded: Client) -> None:
    """A wrong assert-view-uuid is 409 CommitFailedException; updates that cannot apply to the view
    are 400; the view is unchanged either way."""
    before = seeded.state()
    wrong_uuid = [{"type": "assert-view-uuid", "uuid": str(uuid.uuid4())}]
    resp = seeded.post(VIEW_PATH, {"requirements": wrong_uuid, "updates": [set_props(k="v")]})
    assert_error(resp, 409, "CommitFailedException")
    for updates in (
        [{"action": "set-current-view-version", "view-version-id": 99}],
        [{"action": "assign-uuid", "uuid": str(uuid.uuid4())}],
        [{"action": "upgrade-format-version", "format-version": 99}],
        [{"action": "set-properties", "updates": {"k": 1}}],
    ):
        resp = seeded.post(VIEW_PATH, {"requirements": [], "updates": updates})
        assert_error(resp, 400, "BadRequestException")
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Locations outside the warehouse
# --------------------------------------------------------------------------------------------------

LOCATION_REFUSALS = (400, 403)
LOCATION_TYPES = ("BadRequestException", "ForbiddenException")


def outside_locations(client: Client, tag: str) -> list[tuple[str, Path | None]]:
    """(location, local directory it would create) pairs, all outside the warehouse."""
    wh = client.warehouse_dir.resolve()
    elsewhere = Path("/tmp") / f"cedarberg-elsewhere-{tag}"
    sibling = Path(str(wh) + "-evil") / tag
    escape = wh.parent / f"escape-{tag}"
    return [
        (elsewhere.as_uri(), elsewhere),
        (f"file:{elsewhere}", elsewhere),
        (str(elsewhere), elsewhere),
        (f"{wh.as_uri()}/../escape-{tag}", escape),
        (f"{wh.as_uri()}/{NS[0]}/../../escape-{tag}", escape),
        (sibling.as_uri(), sibling),
        (f"s3://some-bucket/{tag}", None),
    ]


def assert_location_refused(resp: requests.Response) -> None:
    assert resp.status_code in LOCATION_REFUSALS, f"{resp.status_code} {resp.text[:500]}"
    assert_error(resp, resp.status_code, LOCATION_TYPES)


def test_create_table_location_outside_warehouse(seeded: Client) -> None:
    tag = uuid.uuid4().hex
    before = seeded.state()
    for location, local in outside_locations(seeded, tag):
        for stage in (False, True):
            body = create_table_body("elsewhere", location=location, **{"stage-create": stage})
            assert_location_refused(seeded.post(f"{NS_PATH}/tables", body))
            if local is not None:
                assert not local.exists(), f"{local} was created for {location}"
    assert_unchanged(seeded, before)


def test_create_view_location_outside_warehouse(seeded: Client) -> None:
    tag = uuid.uuid4().hex
    before = seeded.state()
    for location, local in outside_locations(seeded, tag):
        assert_location_refused(
            seeded.post(f"{NS_PATH}/views", create_view_body("elsewhere", NS, location=location))
        )
        if local is not None:
            assert not local.exists(), f"{local} was created for {location}"
    assert_unchanged(seeded, before)


def test_set_location_outside_warehouse(seeded: Client) -> None:
    tag = uuid.uuid4().hex
    before = seeded.state()
    for location, local in outside_locations(seeded, tag):
        update = [{"action": "set-location", "location": location}]
        assert_location_refused(seeded.post(TABLE_PATH, commit_body(update)))
        assert_location_refused(seeded.post("/transactions/commit", tx_body((NS, TABLE, [], update))))
        if local is not None:
            assert not local.exists(), f"{local} was created for {location}"
    assert_unchanged(seeded, before)


def test_register_foreign_or_missing_metadata(seeded: Client, tmp_path: Path) -> None:
    """Registering a metadata file outside the warehouse, a non-metadata file or a missing one is a
    4xx ErrorModel (never a 500), and registers nothing."""
    foreign = tmp_path / "foreign.metadata.json"
    foreign.write_text("{}")
    wh = seeded.warehouse_dir.resolve()
    before = seeded.state()
    for location in (
        "file:///etc/passwd",
        foreign.as_uri(),
        f"{wh.as_uri()}/{NS[0]}/missing/metadata/00000-{uuid.uuid4()}.metadata.json",
        f"{wh.as_uri()}/../catalog.db",
        "",
    ):
        resp = seeded.post(f"{NS_PATH}/register", {"name": "registered", "metadata-location": location})
        assert 400 <= resp.status_code < 500, f"{location}: {resp.status_code} {resp.text[:300]}"
        assert_error(resp, resp.status_code, None)
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Bad query parameters
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        pytest.param("GET", TABLE_PATH, {"snapshots": "bogus"}, id="load-snapshots-bogus"),
        pytest.param("DELETE", TABLE_PATH, {"purgeRequested": "maybe"}, id="drop-purge-maybe"),
        pytest.param("DELETE", TABLE_PATH, {"purgeRequested": "2"}, id="drop-purge-2"),
        pytest.param("GET", "/namespaces", {"parent": "bi" + SEP}, id="list-parent-trailing-separator"),
        pytest.param("GET", "/namespaces", {"parent": "b\x00i"}, id="list-parent-nul"),
    ],
)
def test_bad_query_parameters(seeded: Client, method: str, path: str, params: dict[str, str]) -> None:
    before = seeded.state()
    assert_error(seeded.request(method, path, params=params), 400, "BadRequestException")
    assert_unchanged(seeded, before)


def test_namespace_location_outside_warehouse(fresh: Client) -> None:
    """A namespace ``location`` property outside the warehouse is refused, or at least never leads a
    table outside it: creating a table there is refused or lands inside the warehouse."""
    tag = uuid.uuid4().hex
    wh = fresh.warehouse_dir.resolve()
    for location, local in outside_locations(fresh, tag):
        levels = [f"ns_{uuid.uuid4().hex[:8]}"]
        made = fresh.post("/namespaces", {"namespace": levels, "properties": {"location": location}})
        if made.status_code != 200:
            assert 400 <= made.status_code < 500, made.text
            assert_error(made, made.status_code, None)
            continue
        resp = fresh.post(f"{ns_path(levels)}/tables", create_table_body("t"))
        if resp.status_code != 200:
            assert 400 <= resp.status_code < 500, resp.text
            assert_error(resp, resp.status_code, None)
        else:
            table_location = resp.json()["metadata"]["location"]
            path = Path(table_location.removeprefix("file://").removeprefix("file:"))
            assert table_location.startswith("file:"), table_location
            assert path.resolve().is_relative_to(wh), f"{table_location} is outside {wh}"
        if local is not None:
            assert not local.exists(), f"{local} was created for namespace location {location}"


# --------------------------------------------------------------------------------------------------
# Namespace properties: key in both removals and updates
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["owner", "absent"])
def test_namespace_properties_key_in_removals_and_updates(seeded: Client, key: str) -> None:
    before = seeded.state()
    body = {"removals": [key, "other"], "updates": {key: "bob", "unrelated": "x"}}
    assert_error(seeded.post(f"{NS_PATH}/properties", body), 422, "UnprocessableEntityException")
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Data access on a warehouse without S3 storage
# --------------------------------------------------------------------------------------------------

DATA_ACCESS = [
    pytest.param(
        "POST",
        f"{TABLE_PATH}/sign",
        {"region": "us-east-1", "uri": "s3://b/k", "method": "GET", "headers": {}},
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
        "not an S3 warehouse",
        id="sign",
    ),
]


def test_load_credentials_on_a_warehouse_without_vending_answers_none(seeded: Client) -> None:
    """Advertised, and answered with no credentials (the spec's answer), not an error."""
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials" in seeded.config["endpoints"]
    answer = seeded.request("GET", f"{TABLE_PATH}/credentials", _NO_BODY)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"storage-credentials": []}
    assert answer.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(("method", "path", "body", "endpoint", "message"), DATA_ACCESS)
def test_data_access_on_a_local_warehouse(
    seeded: Client, method: str, path: str, body: Any, endpoint: str, message: str
) -> None:
    """Advertised, and a 400 on a warehouse that has no S3 storage to vend or sign for."""
    assert endpoint in seeded.config["endpoints"]
    before = seeded.state()
    answer = seeded.request(method, path, body)
    assert_error(answer, 400, "BadRequestException")
    assert message in answer.json()["error"]["message"]
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Pagination parameters
# --------------------------------------------------------------------------------------------------

LISTINGS = [
    pytest.param("/namespaces", id="namespaces"),
    pytest.param(f"{NS_PATH}/tables", id="tables"),
    pytest.param(f"{NS_PATH}/views", id="views"),
]

BAD_PAGING = [
    pytest.param({"pageToken": "garbage!!"}, id="token-garbage"),
    pytest.param({"pageToken": "eyJ4IjoxfQ"}, id="token-foreign-base64-json"),
    pytest.param({"pageToken": "\x00"}, id="token-nul"),
    pytest.param({"pageSize": "0"}, id="size-zero"),
    pytest.param({"pageSize": "-1"}, id="size-negative"),
    pytest.param({"pageSize": "abc"}, id="size-not-a-number"),
    pytest.param({"pageSize": "1.5"}, id="size-fraction"),
    pytest.param({"pageToken": "", "pageSize": "0"}, id="empty-token-size-zero"),
]


@pytest.mark.parametrize("path", LISTINGS)
@pytest.mark.parametrize("params", BAD_PAGING)
def test_bad_paging(seeded: Client, path: str, params: dict[str, str]) -> None:
    assert_error(seeded.get(path, params=params), 400, "BadRequestException")
    # Contrast: an empty pageToken starts a valid paginated listing.
    ok = seeded.get(path, params={"pageToken": ""})
    assert ok.status_code == 200, ok.text


# --------------------------------------------------------------------------------------------------
# Idempotency-Key format
# --------------------------------------------------------------------------------------------------

BAD_KEYS = [
    pytest.param("not-a-uuid", id="words"),
    pytest.param("0190b1c2d3e47a6bb7c8d9e0f1a2b3c4", id="no-hyphens"),
    pytest.param("zzzzzzzz-zzzz-7zzz-zzzz-zzzzzzzzzzzz", id="not-hex"),
    pytest.param("0190b1c2-d3e4-7a6b-b7c8-d9e0f1a2b3c4x", id="too-long"),
    pytest.param("{0190b1c2-d3e4-7a6b-b7c8-d9e0f1a2b3c4}", id="braces"),
]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_idempotency_key(seeded: Client, key: str) -> None:
    before = seeded.state()
    headers = {"Idempotency-Key": key}
    for method, path, body in (
        ("POST", "/namespaces", {"namespace": ["idem"]}),
        ("POST", f"{NS_PATH}/tables", create_table_body("idem")),
        ("POST", TABLE_PATH, commit_body([set_props(k="v")])),
        ("POST", "/transactions/commit", tx_body((NS, TABLE, [], [set_props(k="v")]))),
        ("POST", f"{NS_PATH}/properties", {"updates": {"k": "v"}}),
        ("DELETE", TABLE_PATH, _NO_BODY),
        ("DELETE", ns_path(["ops"]), _NO_BODY),
    ):
        resp = seeded.request(method, path, body, headers=headers)
        assert_error(resp, 400, "BadRequestException")
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Unknown routes and wrong methods
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "absolute"),
    [
        pytest.param("GET", "/nope", True, id="root-level"),
        pytest.param("GET", "/v1/nope/nope/nope", True, id="deep-v1"),
        pytest.param("GET", "/v2/config", True, id="v2"),
        pytest.param("GET", f"{TABLE_PATH}/nonsense", False, id="under-table"),
        pytest.param("POST", "/frobnicate", False, id="under-prefix"),
    ],
)
def test_unknown_route(seeded: Client, method: str, path: str, absolute: bool) -> None:
    before = seeded.state()
    body = {} if method == "POST" else _NO_BODY
    assert_error(seeded.request(method, path, body, absolute=absolute), 404, None)
    assert_unchanged(seeded, before)


@pytest.mark.parametrize(
    ("method", "path", "absolute"),
    [
        pytest.param("PUT", "/v1/config", True, id="put-config"),
        pytest.param("DELETE", "/namespaces", False, id="delete-namespaces"),
        pytest.param("PATCH", TABLE_PATH, False, id="patch-table"),
        pytest.param("PUT", NS_PATH, False, id="put-namespace"),
        pytest.param("GET", "/transactions/commit", False, id="get-transactions"),
        pytest.param("GET", "/tables/rename", False, id="get-rename"),
        pytest.param("DELETE", f"{NS_PATH}/properties", False, id="delete-properties"),
    ],
)
def test_wrong_method(seeded: Client, method: str, path: str, absolute: bool) -> None:
    before = seeded.state()
    resp = seeded.request(method, path, {} if method in ("PUT", "PATCH") else _NO_BODY, absolute=absolute)
    assert_error(resp, 405, None)
    assert resp.headers.get("Allow"), "405 must carry an Allow header (RFC 9110 15.5.6)"
    assert_unchanged(seeded, before)


# --------------------------------------------------------------------------------------------------
# Field defaults that cannot be decoded for their type
# --------------------------------------------------------------------------------------------------


def schema_with_default(field_type: Any, key: str, value: Any, schema_id: int = 0) -> dict[str, Any]:
    schema = schema_json(schema_id)
    field = {"id": 3, "name": "extra", "type": field_type, "required": False, key: value}
    return {**schema, "fields": [*schema["fields"], field]}


UNDECODABLE_DEFAULTS = [
    pytest.param("decimal(9,2)", "write-default", {}, id="decimal-object"),
    pytest.param("decimal(9,2)", "initial-default", "abc", id="decimal-not-a-number"),
    pytest.param("int", "write-default", "abc", id="int-string"),
    pytest.param("date", "initial-default", "not-a-date", id="date-garbage"),
    pytest.param("uuid", "write-default", "zz", id="uuid-garbage"),
    pytest.param("binary", "write-default", 5, id="binary-number"),
    pytest.param("timestamptz", "write-default", "2024-01-01T00:00:00", id="timestamptz-without-zone"),
    pytest.param({"type": "struct", "fields": []}, "write-default", 3, id="struct-number"),
]


@pytest.mark.parametrize(("field_type", "key", "value"), UNDECODABLE_DEFAULTS)
def test_undecodable_field_default(seeded: Client, field_type: Any, key: str, value: Any) -> None:
    """A default that does not decode for its field's type is a 400 naming the field, never a 500
    (pyiceberg raises TypeError / InvalidOperation for some), wherever a schema is sent."""
    before = seeded.state()
    schema = schema_with_default(field_type, key, value)
    add_schema = [{"action": "add-schema", "schema": schema_with_default(field_type, key, value, 1)}]
    view = create_view_body("bad_default_view", NS)
    attempts = [
        seeded.post(f"{NS_PATH}/tables", {**create_table_body("bad_default"), "schema": schema}),
        seeded.post(f"{NS_PATH}/views", {**view, "schema": schema}),
        seeded.post(TABLE_PATH, commit_body(add_schema)),
        seeded.post(
            "/transactions/commit", tx_body((NS, OTHER, [], [set_props(k="v")]), (NS, TABLE, [], add_schema))
        ),
        seeded.post(VIEW_PATH, commit_body(add_schema)),
    ]
    for resp in attempts:
        assert_error(resp, 400, "BadRequestException")
        message = resp.json()["error"]["message"]
        assert f"fields.2.{key}" in message, message
        assert not any(internal in message for internal in ("Error", "<class", "Traceback")), message
    assert_unchanged(seeded, before)


def test_decodable_field_default_is_accepted(fresh: Client) -> None:
    """The control: defaults that decode for their types are accepted."""
    fresh.create_namespace(NS)
    for field_type, value in (("date", "2024-01-02"), ("decimal(9,2)", "1.50"), ("long", 7)):
        schema = schema_with_default(field_type, "write-default", value)
        name = f"with_default_{field_type.split('(')[0]}"
        resp = fresh.post(f"{NS_PATH}/tables", {**create_table_body(name), "schema": schema})
        assert resp.status_code == 200, resp.text
        assert [f["name"] for f in resp.json()["metadata"]["schemas"][0]["fields"]][2] == "extra"


# --------------------------------------------------------------------------------------------------
# Names with braces are addressable
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "name"), [(["a{b}"], "t{1}"), (["{", "}}"], "}{"), (["plain"], "plain")]
)
def test_names_with_braces_are_addressable(fresh: Client, namespace: list[str], name: str) -> None:
    """Route variables match any character but '/', so a namespace, table or view whose name holds
    a brace is loaded, listed, changed and dropped like any other (the control: plain names)."""
    for depth in range(1, len(namespace) + 1):
        fresh.create_namespace(namespace[:depth])
    loaded = fresh.get(ns_path(namespace))
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["namespace"] == namespace
    assert fresh.request("HEAD", ns_path(namespace)).status_code == 204
    fresh.create_table(namespace, name)
    assert fresh.load_table(namespace, name)["metadata"]["current-schema-id"] == 0
    listed = fresh.get(f"{ns_path(namespace)}/tables")
    assert listed.json()["identifiers"] == [{"namespace": namespace, "name": name}]
    committed = fresh.post(table_path(namespace, name), commit_body([set_props(k="v")]))
    assert committed.status_code == 200, committed.text
    view = f"{name}_view"
    fresh.create_view(namespace, view)
    assert fresh.get(view_path(namespace, view)).status_code == 200
    assert fresh.delete(view_path(namespace, view)).status_code == 204
    assert fresh.delete(table_path(namespace, name)).status_code == 204
    assert_error(fresh.get(table_path(namespace, name)), 404, "NoSuchTableException")
    assert fresh.delete(ns_path(namespace)).status_code == 204
    assert_error(fresh.get(ns_path(namespace)), 404, "NoSuchNamespaceException")


def test_advertised_endpoints_spell_the_spec_paths(seeded: Client) -> None:
    """Route variables carry a pattern when registered, never in the advertised endpoints."""
    endpoints = seeded.config["endpoints"]
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in endpoints
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}" in endpoints
    assert not [endpoint for endpoint in endpoints if ":" in endpoint or "[" in endpoint]


def test_create_namespace_under_a_missing_parent_is_400(seeded: Client) -> None:
    """createNamespace lists no 404: a missing parent is a 400 naming the problem (the control:
    the same child under an existing parent is created)."""
    before = seeded.state()
    resp = seeded.post("/namespaces", {"namespace": ["no_such_parent", "child"], "properties": {}})
    assert_error(resp, 400, "BadRequestException")
    message = resp.json()["error"]["message"]
    assert "parent namespace does not exist" in message, message
    assert "no_such_parent" in message, message
    assert_unchanged(seeded, before)
    seeded.create_namespace([*NS, "child_of_existing"])
    assert seeded.get(ns_path([*NS, "child_of_existing"])).status_code == 200
    assert seeded.delete(ns_path([*NS, "child_of_existing"])).status_code == 204
