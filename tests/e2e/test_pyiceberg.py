"""Store behaviour suite: the gateway driven by pyiceberg 0.12 ``RestCatalog`` (and plain HTTP where
pyiceberg has no public API), against both registry stores (SQLite and PostgreSQL).

Every test takes ``catalog_gateway``: a fresh gateway on a fresh SQLite file or PostgreSQL database
(local KEK), and on SQLite with each remote KEK provider (AWS KMS, Vault, GCP KMS, Azure Key Vault).
Assertions follow the Iceberg REST spec 1.11.0 (``shared/reference/rest-catalog-open-api-1.11.0.yaml``)
and, where the spec is silent, what the Java reference catalogs do.
"""

from __future__ import annotations

import os
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    TableAlreadyExistsError,
    ViewAlreadyExistsError,
)
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

HTTP_TIMEOUT = 30

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "category", StringType(), required=False),
)


def rows(ids: list[int], category: str = "a") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" for i in ids], pa.string()),
            "category": pa.array([category] * len(ids), pa.string()),
        }
    )


def read_ids(table: Table, **scan: Any) -> list[int]:
    return sorted(table.scan(**scan).to_arrow().column("id").to_pylist())


def local_path(location: str) -> Path:
    """A ``file:`` URI (``file:/x`` or ``file:///x``) or a bare path as a local ``Path``."""
    parsed = urllib.parse.urlparse(location)
    assert parsed.scheme in ("", "file"), location
    return Path(urllib.parse.unquote(parsed.path))


def files_under(path: Path) -> list[Path]:
    if not path.exists():
        return []
    return [Path(root) / name for root, _dirs, names in os.walk(path) for name in names]


def uuid7() -> str:
    """A UUIDv7 string (RFC 9562), as the spec asks of Idempotency-Key values."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (int.from_bytes(os.urandom(2), "big") & 0x0FFF) << 64
    value |= 0b10 << 62
    value |= int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


class Rest:
    """Plain HTTP against the gateway, for what pyiceberg 0.12 has no public API for."""

    def __init__(self, gateway: GatewayProcess, warehouse: str | None = None) -> None:
        self.gateway = gateway
        base_url = gateway.url
        self.session = requests.Session()
        query = {"warehouse": warehouse} if warehouse else None
        config = self.session.get(f"{base_url}/v1/config", params=query, timeout=HTTP_TIMEOUT)
        assert config.status_code == 200, config.text
        self.config = config.json()
        prefix = self.config.get("overrides", {}).get("prefix")
        self.root = f"{base_url}/v1/{prefix}" if prefix else f"{base_url}/v1"

    @staticmethod
    def ns(namespace: str | tuple[str, ...]) -> str:
        parts = (namespace,) if isinstance(namespace, str) else namespace
        return "%1F".join(urllib.parse.quote(p, safe="") for p in parts)

    def url(self, path: str) -> str:
        return f"{self.root}/{path.lstrip('/')}"

    def table_url(self, namespace: str | tuple[str, ...], table: str) -> str:
        return self.url(f"namespaces/{self.ns(namespace)}/tables/{urllib.parse.quote(table, safe='')}")

    def view_url(self, namespace: str | tuple[str, ...], view: str) -> str:
        return self.url(f"namespaces/{self.ns(namespace)}/views/{urllib.parse.quote(view, safe='')}")

    def get(self, url: str, **kw: Any) -> requests.Response:
        return self.session.get(url, timeout=HTTP_TIMEOUT, **kw)

    def post(self, url: str, body: Any = None, **kw: Any) -> requests.Response:
        return self.session.post(url, json=body, timeout=HTTP_TIMEOUT, **kw)

    def delete(self, url: str, **kw: Any) -> requests.Response:
        return self.session.delete(url, timeout=HTTP_TIMEOUT, **kw)

    def head(self, url: str, **kw: Any) -> requests.Response:
        return self.session.head(url, timeout=HTTP_TIMEOUT, **kw)

    def close(self) -> None:
        self.session.close()


def error_type(response: requests.Response) -> str:
    return response.json()["error"]["type"]


def assert_error(response: requests.Response, code: int, kind: str) -> None:
    assert response.status_code == code, (response.status_code, response.text)
    body = response.json()
    assert body["error"]["code"] == code, body
    assert body["error"]["type"] == kind, body


@pytest.fixture
def cat(catalog_gateway: Any) -> Iterator[RestCatalog]:
    catalog = make_catalog(catalog_gateway)
    yield catalog
    catalog.close()


@pytest.fixture
def rest(catalog_gateway: Any) -> Iterator[Rest]:
    client = Rest(catalog_gateway)
    yield client
    client.close()


def make_table(cat: RestCatalog, identifier: str, **kw: Any) -> Table:
    namespace = tuple(identifier.split(".")[:-1])
    if not cat.namespace_exists(namespace):
        cat.create_namespace(namespace)
    return cat.create_table(identifier, schema=SCHEMA, **kw)


# -- namespaces --------------------------------------------------------------------------------


def test_namespace_create_with_properties_load_and_exists(cat: RestCatalog) -> None:
    cat.create_namespace("sales", {"owner": "hank", "comment": "eu sales"})

    props = cat.load_namespace_properties("sales")
    assert props["owner"] == "hank"
    assert props["comment"] == "eu sales"
    assert cat.namespace_exists("sales")
    assert not cat.namespace_exists("nosuch")
    assert ("sales",) in cat.list_namespaces()

    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace("sales")
    with pytest.raises(NoSuchNamespaceError):
        cat.load_namespace_properties("nosuch")


def test_namespace_http_shapes(rest: Rest) -> None:
    created = rest.post(rest.url("namespaces"), {"namespace": ["hr"], "properties": {"owner": "ann"}})
    assert created.status_code == 200, created.text
    assert created.json()["namespace"] == ["hr"]
    assert created.json()["properties"]["owner"] == "ann"

    exists = rest.head(rest.url("namespaces/hr"))
    assert exists.status_code == 204
    assert rest.head(rest.url("namespaces/nosuch")).status_code == 404

    loaded = rest.get(rest.url("namespaces/hr"))
    assert loaded.status_code == 200
    assert loaded.json()["namespace"] == ["hr"]

    assert_error(rest.get(rest.url("namespaces/nosuch")), 404, "NoSuchNamespaceException")
    assert_error(rest.post(rest.url("namespaces"), {"namespace": ["hr"]}), 409, "AlreadyExistsException")


def test_nested_namespaces_and_list_with_parent(cat: RestCatalog, rest: Rest) -> None:
    cat.create_namespace("acct")
    cat.create_namespace(("acct", "tax"))
    cat.create_namespace(("acct", "pay"))
    cat.create_namespace(("acct", "tax", "paid"))
    cat.create_namespace("other")

    assert sorted(cat.list_namespaces()) == [("acct",), ("other",)]
    assert sorted(cat.list_namespaces("acct")) == [("acct", "pay"), ("acct", "tax")]
    assert cat.list_namespaces(("acct", "tax")) == [("acct", "tax", "paid")]
    assert cat.list_namespaces(("acct", "tax", "paid")) == []
    assert cat.namespace_exists(("acct", "tax", "paid"))
    assert not cat.namespace_exists(("acct", "nosuch"))

    listed = rest.get(rest.url("namespaces"), params={"parent": "acct\x1ftax"})
    assert listed.status_code == 200, listed.text
    assert listed.json()["namespaces"] == [["acct", "tax", "paid"]]

    assert_error(
        rest.get(rest.url("namespaces"), params={"parent": "nosuch"}), 404, "NoSuchNamespaceException"
    )
    with pytest.raises(NoSuchNamespaceError):
        cat.list_namespaces("nosuch")

    cat.update_namespace_properties(("acct", "tax"), updates={"k": "v"})
    assert cat.load_namespace_properties(("acct", "tax"))["k"] == "v"
    assert "k" not in cat.load_namespace_properties("acct")


def test_namespace_update_and_remove_properties(cat: RestCatalog, rest: Rest) -> None:
    cat.create_namespace("props", {"a": "1", "b": "2", "c": "3"})

    summary = cat.update_namespace_properties("props", removals={"a", "zz"}, updates={"b": "20", "d": "4"})
    assert sorted(summary.updated) == ["b", "d"]
    assert summary.removed == ["a"]
    assert summary.missing in (["zz"], None)  # reporting missing keys is optional

    props = cat.load_namespace_properties("props")
    assert "a" not in props
    assert props["b"] == "20"
    assert props["c"] == "3"
    assert props["d"] == "4"

    both = rest.post(rest.url("namespaces/props/properties"), {"removals": ["c"], "updates": {"c": "x"}})
    assert_error(both, 422, "UnprocessableEntityException")
    assert cat.load_namespace_properties("props")["c"] == "3"

    with pytest.raises(NoSuchNamespaceError):
        cat.update_namespace_properties("nosuch", updates={"x": "y"})


def test_drop_namespace_only_when_empty(cat: RestCatalog, rest: Rest) -> None:
    make_table(cat, "full.t")
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace("full")
    assert_error(rest.delete(rest.url("namespaces/full")), 409, "NamespaceNotEmptyException")
    assert cat.table_exists("full.t")

    cat.drop_table("full.t")
    cat.drop_namespace("full")
    assert not cat.namespace_exists("full")
    with pytest.raises(NoSuchNamespaceError):
        cat.drop_namespace("full")

    cat.create_namespace("parent")
    cat.create_namespace(("parent", "child"))
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace("parent")
    cat.drop_namespace(("parent", "child"))
    cat.drop_namespace("parent")
    assert cat.list_namespaces() == []


# -- tables ------------------------------------------------------------------------------------


def test_table_create_load_exists_list_drop(cat: RestCatalog) -> None:
    cat.create_namespace("db")
    table = cat.create_table("db.events", schema=SCHEMA, properties={"owner": "ops"})

    assert table.name() == ("db", "events")
    assert table.metadata.format_version == 2
    assert [f.name for f in table.schema().fields] == ["id", "name", "category"]
    assert table.properties["owner"] == "ops"
    assert table.current_snapshot() is None
    assert table.metadata_location

    loaded = cat.load_table("db.events")
    assert loaded.metadata.table_uuid == table.metadata.table_uuid
    assert loaded.metadata_location == table.metadata_location
    assert local_path(loaded.metadata_location).is_file()
    assert cat.table_exists("db.events")
    assert not cat.table_exists("db.nosuch")
    assert cat.list_tables("db") == [("db", "events")]

    with pytest.raises(TableAlreadyExistsError):
        cat.create_table("db.events", schema=SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        cat.create_table("nosuch.events", schema=SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables("nosuch")

    cat.drop_table("db.events")
    assert not cat.table_exists("db.events")
    assert cat.list_tables("db") == []
    with pytest.raises(NoSuchTableError):
        cat.load_table("db.events")
    with pytest.raises(NoSuchTableError):
        cat.drop_table("db.events")


def test_table_http_shapes(cat: RestCatalog, rest: Rest) -> None:
    make_table(cat, "db.t")
    assert rest.head(rest.table_url("db", "t")).status_code == 204
    assert rest.head(rest.table_url("db", "nosuch")).status_code == 404
    assert_error(rest.get(rest.table_url("db", "nosuch")), 404, "NoSuchTableException")
    missing_ns = rest.get(rest.table_url("nosuch", "t"))
    assert missing_ns.status_code == 404
    assert error_type(missing_ns) in ("NoSuchTableException", "NoSuchNamespaceException")
    loaded = rest.get(rest.table_url("db", "t"))
    assert loaded.status_code == 200
    body = loaded.json()
    assert body["metadata-location"] == cat.load_table("db.t").metadata_location
    assert body["metadata"]["format-version"] == 2
    assert isinstance(body.get("config", {}), dict)


def test_create_table_with_partition_spec_and_sort_order(cat: RestCatalog) -> None:
    cat.create_namespace("db")
    spec = PartitionSpec(
        PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="category"),
        PartitionField(source_id=1, field_id=1001, transform=BucketTransform(4), name="id_bucket"),
    )
    order = SortOrder(
        SortField(source_id=1, transform=IdentityTransform(), direction=SortDirection.DESC,
                  null_order=NullOrder.NULLS_LAST)
    )  # fmt: skip
    table = cat.create_table("db.parted", schema=SCHEMA, partition_spec=spec, sort_order=order)

    loaded = cat.load_table("db.parted")
    for t in (table, loaded):
        fields = [(f.source_id, str(f.transform), f.name) for f in t.spec().fields]
        assert fields == [(3, "identity", "category"), (1, "bucket[4]", "id_bucket")]
        assert t.spec().spec_id == t.metadata.default_spec_id
        sort = t.sort_order()
        assert sort.order_id == t.metadata.default_sort_order_id
        assert sort.order_id != 0
        assert [(f.source_id, f.direction, f.null_order) for f in sort.fields] == [
            (1, SortDirection.DESC, NullOrder.NULLS_LAST)
        ]

    loaded.append(pa.concat_tables([rows([1, 2, 3], "a"), rows([4, 5], "b")]))
    reloaded = cat.load_table("db.parted")
    assert read_ids(reloaded) == [1, 2, 3, 4, 5]
    assert read_ids(reloaded, row_filter=EqualTo("category", "b")) == [4, 5]
    partitions = {task.file.partition[0] for task in reloaded.scan().plan_files()}
    assert partitions == {"a", "b"}


@pytest.fixture
def plain_cat(catalog_gateway: Any) -> Iterator[RestCatalog]:
    """The gateway's unsealed warehouse ``plain``: engines own its metadata files."""
    catalog = make_catalog(catalog_gateway, warehouse="plain")
    yield catalog
    catalog.close()


@pytest.fixture
def plain_rest(catalog_gateway: Any) -> Iterator[Rest]:
    client = Rest(catalog_gateway, "plain")
    yield client
    client.close()


def test_drop_table_without_purge_keeps_files(plain_cat: RestCatalog) -> None:
    cat = plain_cat
    table = make_table(cat, "db.keep")
    table.append(rows([1, 2]))
    table = cat.load_table("db.keep")
    metadata = local_path(table.metadata_location)
    data_files = [local_path(task.file.file_path) for task in table.scan().plan_files()]
    assert metadata.is_file()
    assert data_files
    assert all(p.is_file() for p in data_files)

    cat.drop_table("db.keep")
    assert not cat.table_exists("db.keep")
    assert metadata.is_file()
    assert all(p.is_file() for p in data_files)


def test_drop_table_with_purge_removes_files(cat: RestCatalog) -> None:
    table = make_table(cat, "db.gone")
    table.append(rows([1, 2]))
    table.append(rows([3]))
    table = cat.load_table("db.gone")
    location = local_path(table.location())
    before = files_under(location)
    assert any(p.name.endswith(".parquet") for p in before), before
    assert any(p.name.endswith(".avro") for p in before), before
    assert local_path(table.metadata_location) in before

    cat.purge_table("db.gone")
    assert not cat.table_exists("db.gone")
    deadline = time.monotonic() + 15
    while files_under(location) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert files_under(location) == []


def test_rename_table_across_namespaces(cat: RestCatalog, rest: Rest) -> None:
    table = make_table(cat, "src.t")
    table.append(rows([1, 2, 3]))
    cat.create_namespace("dst")
    make_table(cat, "dst.taken")

    renamed = cat.rename_table("src.t", "dst.t2")
    assert renamed.name() == ("dst", "t2")
    assert renamed.metadata.table_uuid == table.metadata.table_uuid
    assert read_ids(renamed) == [1, 2, 3]
    assert not cat.table_exists("src.t")
    assert cat.list_tables("src") == []
    assert sorted(cat.list_tables("dst")) == [("dst", "t2"), ("dst", "taken")]

    renamed.append(rows([4]))
    assert read_ids(cat.load_table("dst.t2")) == [1, 2, 3, 4]

    with pytest.raises(TableAlreadyExistsError):
        cat.rename_table("dst.t2", "dst.taken")
    with pytest.raises(NoSuchTableError):
        cat.rename_table("src.nosuch", "dst.x")

    def rename(src: tuple[list[str], str], dst: tuple[list[str], str]) -> requests.Response:
        return rest.post(
            rest.url("tables/rename"),
            {"source": {"namespace": src[0], "name": src[1]},
             "destination": {"namespace": dst[0], "name": dst[1]}},
        )  # fmt: skip

    assert_error(rename((["dst"], "t2"), (["nosuch"], "t2")), 404, "NoSuchNamespaceException")
    assert_error(rename((["dst"], "nosuch"), (["src"], "x")), 404, "NoSuchTableException")
    assert_error(rename((["dst"], "t2"), (["dst"], "taken")), 409, "AlreadyExistsException")
    assert cat.table_exists("dst.t2")
    back = rename((["dst"], "t2"), (["src"], "t"))
    assert back.status_code == 204, back.text
    assert read_ids(cat.load_table("src.t")) == [1, 2, 3, 4]


def test_register_table_from_existing_metadata_file(plain_cat: RestCatalog, plain_rest: Rest) -> None:
    cat, rest = plain_cat, plain_rest
    table = make_table(cat, "db.orig")
    table.append(rows([1, 2, 3]))
    table = cat.load_table("db.orig")
    metadata_location = table.metadata_location
    snapshot_id = table.current_snapshot().snapshot_id

    cat.drop_table("db.orig")  # keeps the files
    registered = cat.register_table("db.orig", metadata_location)
    assert registered.metadata_location == metadata_location
    assert registered.metadata.table_uuid == table.metadata.table_uuid
    assert registered.current_snapshot().snapshot_id == snapshot_id
    assert read_ids(registered) == [1, 2, 3]

    registered.append(rows([4]))
    reloaded = cat.load_table("db.orig")
    assert reloaded.metadata_location != metadata_location
    assert read_ids(reloaded) == [1, 2, 3, 4]
    assert local_path(reloaded.metadata_location).is_file()

    with pytest.raises(TableAlreadyExistsError):
        cat.register_table("db.orig", metadata_location)

    # overwrite=true points the existing table back at the older metadata file.
    restored = cat.register_table("db.orig", metadata_location, overwrite=True)
    assert restored.metadata_location == metadata_location
    assert cat.load_table("db.orig").metadata_location == metadata_location
    assert read_ids(cat.load_table("db.orig")) == [1, 2, 3]

    missing = rest.post(
        rest.url("namespaces/nosuch/register"), {"name": "x", "metadata-location": metadata_location}
    )
    assert_error(missing, 404, "NoSuchNamespaceException")


def test_stage_create_then_commit_over_http(cat: RestCatalog, rest: Rest) -> None:
    cat.create_namespace("db")
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 2, "name": "s", "type": "string", "required": False},
        ],
    }
    staged = rest.post(
        rest.url("namespaces/db/tables"),
        {"name": "staged", "schema": schema, "stage-create": True, "properties": {"p": "1"}},
    )
    assert staged.status_code == 200, staged.text
    body = staged.json()
    assert body.get("metadata-location") is None
    metadata = body["metadata"]
    assert metadata["location"]
    assert not cat.table_exists("db.staged")
    assert cat.list_tables("db") == []

    current_schema = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    commit = {
        "requirements": [{"type": "assert-create"}],
        "updates": [
            {"action": "assign-uuid", "uuid": metadata["table-uuid"]},
            {"action": "upgrade-format-version", "format-version": metadata["format-version"]},
            {"action": "add-schema", "schema": current_schema, "last-column-id": metadata["last-column-id"]},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
            {"action": "set-default-spec", "spec-id": -1},
            {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
            {"action": "set-default-sort-order", "sort-order-id": -1},
            {"action": "set-location", "location": metadata["location"]},
            {"action": "set-properties", "updates": {"p": "1", "q": "2"}},
        ],
    }
    committed = rest.post(rest.table_url("db", "staged"), commit)
    assert committed.status_code == 200, committed.text
    assert committed.json()["metadata-location"]
    assert committed.json()["metadata"]["table-uuid"] == metadata["table-uuid"]

    table = cat.load_table("db.staged")
    assert table.metadata.table_uuid == uuid.UUID(metadata["table-uuid"])
    assert table.properties["q"] == "2"
    assert [f.name for f in table.schema().fields] == ["id", "s"]

    again = rest.post(rest.table_url("db", "staged"), commit)
    assert_error(again, 409, "CommitFailedException")


def test_create_table_transaction_with_data(cat: RestCatalog) -> None:
    cat.create_namespace("db")
    with cat.create_table_transaction("db.ctas", schema=SCHEMA) as txn:
        txn.append(rows([7, 8, 9]))
        assert not cat.table_exists("db.ctas")
    table = cat.load_table("db.ctas")
    assert read_ids(table) == [7, 8, 9]
    assert len(table.snapshots()) == 1


def test_names_with_special_characters(cat: RestCatalog, rest: Rest) -> None:
    namespace = ("spaced name", "ünï-çødé", "per%cent/slash")
    for depth in range(1, len(namespace) + 1):
        cat.create_namespace(namespace[:depth])
    identifier = (*namespace, "my table+1")
    table = cat.create_table(identifier, schema=SCHEMA)
    table.append(rows([1]))

    # pyiceberg 0.12 percent-encodes `parent` twice, so list children over HTTP (encoded once, as Java does).
    children = rest.get(rest.url("namespaces"), params={"parent": "\x1f".join(namespace[:2])})
    assert children.status_code == 200, children.text
    assert children.json()["namespaces"] == [list(namespace)]
    assert cat.list_tables(namespace) == [identifier]
    assert cat.table_exists(identifier)
    assert read_ids(cat.load_table(identifier)) == [1]
    listed = rest.get(rest.url(f"namespaces/{rest.ns(namespace)}/tables"))
    assert listed.status_code == 200, listed.text
    assert listed.json()["identifiers"] == [{"namespace": list(namespace), "name": "my table+1"}]
    cat.drop_table(identifier)
    assert not cat.table_exists(identifier)


# -- data: append, overwrite, delete ------------------------------------------------------------


def test_append_and_read_back(cat: RestCatalog) -> None:
    table = make_table(cat, "db.app")
    table.append(rows([1, 2, 3]))
    first = table.current_snapshot()
    table.append(rows([4, 5], "b"))
    second = table.current_snapshot()
    assert first is not None
    assert second is not None
    assert second.parent_snapshot_id == first.snapshot_id
    assert second.sequence_number > first.sequence_number

    loaded = cat.load_table("db.app")
    assert loaded.current_snapshot().snapshot_id == second.snapshot_id
    assert [s.snapshot_id for s in loaded.snapshots()] == [first.snapshot_id, second.snapshot_id]
    assert read_ids(loaded) == [1, 2, 3, 4, 5]
    assert read_ids(loaded, snapshot_id=first.snapshot_id) == [1, 2, 3]
    assert read_ids(loaded, row_filter=GreaterThanOrEqual("id", 3)) == [3, 4, 5]
    assert loaded.current_snapshot().summary["total-records"] == "5"
    result = loaded.scan(selected_fields=("id", "name")).to_arrow().sort_by("id")
    assert result.column("name").to_pylist() == ["n1", "n2", "n3", "n4", "n5"]
    assert [e.snapshot_id for e in loaded.metadata.snapshot_log] == [first.snapshot_id, second.snapshot_id]
    assert len(loaded.metadata.metadata_log) == 2


def test_overwrite(cat: RestCatalog) -> None:
    table = make_table(cat, "db.ow")
    table.append(rows([1, 2, 3]))
    table.overwrite(rows([10, 11]))
    assert read_ids(cat.load_table("db.ow")) == [10, 11]

    table.overwrite(rows([20], "b"), overwrite_filter=EqualTo("id", 10))
    loaded = cat.load_table("db.ow")
    assert read_ids(loaded) == [11, 20]
    operations = [s.summary.operation.value for s in loaded.snapshots()]
    assert operations[0] == "append"
    assert "overwrite" in operations or "delete" in operations
    assert loaded.current_snapshot().summary["total-records"] == "2"


def test_delete_rows(cat: RestCatalog) -> None:
    table = make_table(cat, "db.del")
    table.append(rows([1, 2, 3, 4]))
    table.delete(delete_filter=EqualTo("id", 2))
    assert read_ids(cat.load_table("db.del")) == [1, 3, 4]
    table.delete(delete_filter="id >= 3")
    loaded = cat.load_table("db.del")
    assert read_ids(loaded) == [1]
    assert loaded.current_snapshot().summary["total-records"] == "1"
    assert read_ids(loaded, snapshot_id=loaded.snapshots()[0].snapshot_id) == [1, 2, 3, 4]


def test_stale_commit_is_rejected(cat: RestCatalog) -> None:
    # pyiceberg 0.12 retries conflicting appends itself unless told not to.
    table = make_table(cat, "db.stale", properties={"commit.retry.num-retries": "0"})
    other = cat.load_table("db.stale")
    table.append(rows([1]))
    with pytest.raises(CommitFailedException):
        other.append(rows([2]))
    assert read_ids(cat.load_table("db.stale")) == [1]
    other.refresh()
    other.append(rows([2]))
    assert read_ids(cat.load_table("db.stale")) == [1, 2]


def test_conflicting_append_is_retried_by_pyiceberg(cat: RestCatalog) -> None:
    table = make_table(cat, "db.retry", properties={"commit.retry.min-wait-ms": "10"})
    other = cat.load_table("db.retry")
    table.append(rows([1]))
    other.append(rows([2]))  # 409 first, then pyiceberg refreshes and commits again
    loaded = cat.load_table("db.retry")
    assert read_ids(loaded) == [1, 2]
    first, second = loaded.snapshots()
    assert second.parent_snapshot_id == first.snapshot_id
    assert second.sequence_number == first.sequence_number + 1


# -- evolution -----------------------------------------------------------------------------------


def test_schema_evolution(cat: RestCatalog) -> None:
    table = make_table(cat, "db.evo")
    table.append(rows([1, 2]))

    with table.update_schema() as update:
        update.add_column("score", IntegerType(), doc="points")
    with table.update_schema() as update:
        update.rename_column("name", "label")
    with table.update_schema() as update:
        update.delete_column("category")

    loaded = cat.load_table("db.evo")
    assert [f.name for f in loaded.schema().fields] == ["id", "label", "score"]
    assert loaded.schema().find_field("score").field_id == 4
    assert loaded.schema().find_field("label").field_id == 2
    assert loaded.metadata.last_column_id == 4
    assert len(loaded.schemas()) == 4
    assert loaded.metadata.current_schema_id == 3

    loaded.append(
        pa.table(
            {
                "id": pa.array([3], pa.int64()),
                "label": pa.array(["x"], pa.string()),
                "score": pa.array([7], pa.int32()),
            }
        )
    )
    result = cat.load_table("db.evo").scan().to_arrow().sort_by("id").to_pylist()
    assert result == [
        {"id": 1, "label": "n1", "score": None},
        {"id": 2, "label": "n2", "score": None},
        {"id": 3, "label": "x", "score": 7},
    ]

    stale = cat.load_table("db.evo")
    with table.update_schema() as update:
        update.add_column("extra", StringType())
    with pytest.raises(CommitFailedException), stale.update_schema() as update:
        update.add_column("other", StringType())


def test_partition_evolution(cat: RestCatalog) -> None:
    table = make_table(cat, "db.pevo")
    table.append(rows([1, 2], "a"))
    with table.update_spec() as update:
        update.add_identity("category")
    table.append(rows([3, 4], "b"))

    loaded = cat.load_table("db.pevo")
    assert [s.spec_id for s in loaded.specs().values()] == [0, 1]
    assert loaded.metadata.default_spec_id == 1
    assert [f.name for f in loaded.spec().fields] == ["category"]
    assert read_ids(loaded) == [1, 2, 3, 4]
    assert read_ids(loaded, row_filter=EqualTo("category", "b")) == [3, 4]
    spec_ids = sorted(task.file.spec_id for task in loaded.scan().plan_files())
    assert spec_ids == [0, 1]

    with loaded.update_spec() as update:
        update.remove_field("category")
    reloaded = cat.load_table("db.pevo")
    assert reloaded.metadata.default_spec_id != 1
    assert list(reloaded.spec().fields) == []
    assert read_ids(reloaded) == [1, 2, 3, 4]


def test_snapshot_refs_branch_and_tag(cat: RestCatalog) -> None:
    table = make_table(cat, "db.refs")
    table.append(rows([1]))
    first = table.current_snapshot().snapshot_id
    table.append(rows([2]))
    second = table.current_snapshot().snapshot_id

    stale = cat.load_table("db.refs")
    table.manage_snapshots().create_tag(first, "v1").create_branch(second, "dev").commit()
    loaded = cat.load_table("db.refs")
    refs = loaded.refs()
    assert refs["main"].snapshot_id == second
    assert refs["v1"].snapshot_id == first
    assert refs["v1"].snapshot_ref_type.value == "tag"
    assert refs["dev"].snapshot_id == second
    assert refs["dev"].snapshot_ref_type.value == "branch"
    assert loaded.scan().use_ref("v1").to_arrow().column("id").to_pylist() == [1]
    assert read_ids(loaded, snapshot_id=loaded.snapshot_by_name("v1").snapshot_id) == [1]

    loaded.append(rows([3]), branch="dev")
    loaded = cat.load_table("db.refs")
    dev_head = loaded.refs()["dev"].snapshot_id
    assert dev_head not in (first, second)
    assert loaded.refs()["main"].snapshot_id == second
    assert read_ids(loaded) == [1, 2]
    assert read_ids(loaded, snapshot_id=dev_head) == [1, 2, 3]

    with pytest.raises(CommitFailedException):  # asserts that v1 does not exist yet
        stale.manage_snapshots().create_tag(second, "v1").commit()

    loaded.manage_snapshots().remove_tag("v1").remove_branch("dev").commit()
    assert set(cat.load_table("db.refs").refs()) == {"main"}

    table = cat.load_table("db.refs")
    table.manage_snapshots().rollback_to_snapshot(first).commit()
    assert read_ids(cat.load_table("db.refs")) == [1]


# -- multi-table transactions -----------------------------------------------------------------


def test_multi_table_transaction_is_all_or_nothing(cat: RestCatalog, rest: Rest) -> None:
    t1 = make_table(cat, "db.t1")
    t2 = make_table(cat, "db.t2")
    t2.append(rows([1]))
    t2 = cat.load_table("db.t2")
    loc1, loc2 = t1.metadata_location, t2.metadata_location
    stale_snapshot = 12345

    def change(name: str, requirements: list[dict[str, Any]], props: dict[str, str]) -> dict[str, Any]:
        return {
            "identifier": {"namespace": ["db"], "name": name},
            "requirements": requirements,
            "updates": [{"action": "set-properties", "updates": props}],
        }

    ok1 = change("t1", [{"type": "assert-table-uuid", "uuid": str(t1.metadata.table_uuid)}], {"k": "1"})
    bad2 = change(
        "t2", [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": stale_snapshot}], {"k": "2"}
    )
    failed = rest.post(rest.url("transactions/commit"), {"table-changes": [ok1, bad2]})
    assert_error(failed, 409, "CommitFailedException")
    assert cat.load_table("db.t1").metadata_location == loc1
    assert cat.load_table("db.t2").metadata_location == loc2
    assert "k" not in cat.load_table("db.t1").properties

    missing = change("nosuch", [], {"k": "3"})
    not_found = rest.post(rest.url("transactions/commit"), {"table-changes": [ok1, missing]})
    assert_error(not_found, 404, "NoSuchTableException")
    assert cat.load_table("db.t1").metadata_location == loc1

    good2 = change(
        "t2",
        [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": t2.current_snapshot().snapshot_id}],
        {"k": "2"},
    )
    done = rest.post(rest.url("transactions/commit"), {"table-changes": [ok1, good2]})
    assert done.status_code == 204, done.text
    n1, n2 = cat.load_table("db.t1"), cat.load_table("db.t2")
    assert n1.properties["k"] == "1"
    assert n2.properties["k"] == "2"
    assert n1.metadata_location != loc1
    assert n2.metadata_location != loc2
    assert local_path(n1.metadata_location).is_file()
    assert local_path(n2.metadata_location).is_file()
    assert read_ids(n2) == [1]


def test_table_commit_rejects_unknown_update(cat: RestCatalog, rest: Rest) -> None:
    table = make_table(cat, "db.unk")
    response = rest.post(
        rest.table_url("db", "unk"), {"requirements": [], "updates": [{"action": "frobnicate", "x": 1}]}
    )
    assert response.status_code == 400, response.text
    assert error_type(response) == "BadRequestException"
    assert cat.load_table("db.unk").metadata_location == table.metadata_location


# -- views ---------------------------------------------------------------------------------------


def view_version(
    sql: str, namespace: tuple[str, ...], version_id: int = 1, schema_id: int = 0
) -> ViewVersion:
    return ViewVersion(
        version_id=version_id,
        schema_id=schema_id,
        timestamp_ms=int(time.time() * 1000),
        summary={"engine-name": "pyiceberg"},
        representations=[SQLViewRepresentation(type="sql", sql=sql, dialect="spark")],
        default_namespace=namespace,
    )


VIEW_SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def test_views_with_pyiceberg(cat: RestCatalog) -> None:
    make_table(cat, "vdb.base")
    view = cat.create_view(
        "vdb.v1", VIEW_SCHEMA, view_version("SELECT id FROM vdb.base", ("vdb",)), properties={"a": "b"}
    )
    assert view.name() == ("vdb", "v1")
    assert view.metadata.current_version_id == 1
    assert view.metadata.properties["a"] == "b"
    assert cat.view_exists("vdb.v1")
    assert not cat.view_exists("vdb.nosuch")
    assert cat.list_views("vdb") == [("vdb", "v1")]
    assert cat.list_tables("vdb") == [("vdb", "base")]  # views are not tables

    loaded = cat.load_view("vdb.v1")
    assert loaded.metadata.view_uuid == view.metadata.view_uuid
    representation = loaded.metadata.versions[0].representations[0].root
    assert representation.sql == "SELECT id FROM vdb.base"

    with pytest.raises(ViewAlreadyExistsError):
        cat.create_view("vdb.v1", VIEW_SCHEMA, view_version("SELECT 1", ("vdb",)))
    with pytest.raises((ViewAlreadyExistsError, TableAlreadyExistsError)):
        cat.create_view("vdb.base", VIEW_SCHEMA, view_version("SELECT 1", ("vdb",)))
    with pytest.raises(TableAlreadyExistsError):
        cat.create_table("vdb.v1", schema=SCHEMA)

    cat.drop_table("vdb.base")
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace("vdb")
    cat.drop_view("vdb.v1")
    assert not cat.view_exists("vdb.v1")
    assert cat.list_views("vdb") == []
    with pytest.raises(NoSuchViewError):
        cat.drop_view("vdb.v1")
    with pytest.raises(NoSuchViewError):
        cat.load_view("vdb.v1")
    cat.drop_namespace("vdb")


def test_views_over_http_load_replace_rename_register(cat: RestCatalog, rest: Rest) -> None:
    cat.create_namespace("vdb")
    cat.create_namespace("vdb2")
    cat.create_view("vdb.v", VIEW_SCHEMA, view_version("SELECT 1 AS id", ("vdb",)))

    loaded = rest.get(rest.view_url("vdb", "v"))
    assert loaded.status_code == 200, loaded.text
    body = loaded.json()
    metadata = body["metadata"]
    first_location = body["metadata-location"]
    assert local_path(first_location).is_file()
    assert metadata["format-version"] == 1
    assert metadata["current-version-id"] == 1
    assert rest.head(rest.view_url("vdb", "v")).status_code == 204
    assert_error(rest.get(rest.view_url("vdb", "nosuch")), 404, "NoSuchViewException")

    new_schema = {
        "type": "struct",
        "schema-id": 1,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 2, "name": "label", "type": "string", "required": False},
        ],
    }
    replace = {
        "requirements": [{"type": "assert-view-uuid", "uuid": metadata["view-uuid"]}],
        "updates": [
            {"action": "add-schema", "schema": new_schema},
            {
                "action": "add-view-version",
                "view-version": {
                    "version-id": 2,
                    "schema-id": -1,
                    "timestamp-ms": int(time.time() * 1000),
                    "summary": {"engine-name": "test"},
                    "representations": [
                        {"type": "sql", "sql": "SELECT 2 AS id, 'x' AS label", "dialect": "spark"}
                    ],
                    "default-namespace": ["vdb"],
                },
            },
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
    }
    replaced = rest.post(rest.view_url("vdb", "v"), replace)
    assert replaced.status_code == 200, replaced.text
    new_meta = replaced.json()["metadata"]
    assert new_meta["current-version-id"] == 2
    assert replaced.json()["metadata-location"] != first_location
    current = next(v for v in new_meta["versions"] if v["version-id"] == 2)
    assert current["schema-id"] == 1
    assert current["representations"][0]["sql"] == "SELECT 2 AS id, 'x' AS label"
    assert [e["version-id"] for e in new_meta["version-log"]] == [1, 2]

    wrong_uuid = dict(replace, requirements=[{"type": "assert-view-uuid", "uuid": str(uuid.uuid4())}])
    assert_error(rest.post(rest.view_url("vdb", "v"), wrong_uuid), 409, "CommitFailedException")
    assert_error(rest.post(rest.view_url("vdb", "nosuch"), replace), 404, "NoSuchViewException")

    via_pyiceberg = cat.load_view("vdb.v")
    assert via_pyiceberg.metadata.current_version_id == 2

    def rename(src: tuple[str, str], dst: tuple[str, str]) -> requests.Response:
        return rest.post(
            rest.url("views/rename"),
            {"source": {"namespace": [src[0]], "name": src[1]},
             "destination": {"namespace": [dst[0]], "name": dst[1]}},
        )  # fmt: skip

    moved = rename(("vdb", "v"), ("vdb2", "w"))
    assert moved.status_code == 204, moved.text
    assert not cat.view_exists("vdb.v")
    assert cat.view_exists("vdb2.w")
    assert str(cat.load_view("vdb2.w").metadata.view_uuid) == metadata["view-uuid"]
    assert_error(rename(("vdb", "v"), ("vdb2", "x")), 404, "NoSuchViewException")
    assert_error(rename(("vdb2", "w"), ("nosuch", "w")), 404, "NoSuchNamespaceException")
    make_table(cat, "vdb.tbl")
    assert_error(rename(("vdb2", "w"), ("vdb", "tbl")), 409, "AlreadyExistsException")

    current_location = rest.get(rest.view_url("vdb2", "w")).json()["metadata-location"]
    dropped = rest.delete(rest.view_url("vdb2", "w"))
    assert dropped.status_code == 204
    assert_error(rest.delete(rest.view_url("vdb2", "w")), 404, "NoSuchViewException")
    # A sealing warehouse soft-deletes: the metadata file leaves its published location.
    assert not local_path(current_location).is_file()


def test_drop_view_then_register_its_metadata(plain_cat: RestCatalog, plain_rest: Rest) -> None:
    cat, rest = plain_cat, plain_rest
    cat.create_namespace("vdb2")
    cat.create_view("vdb2.w", VIEW_SCHEMA, view_version("SELECT 1 AS id", ("vdb2",)))
    replaced = rest.post(
        rest.view_url("vdb2", "w"),
        {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]},
    )
    assert replaced.status_code == 200, replaced.text
    metadata = replaced.json()["metadata"]
    current_location = replaced.json()["metadata-location"]
    assert rest.delete(rest.view_url("vdb2", "w")).status_code == 204
    assert local_path(current_location).is_file()  # an unsealed warehouse keeps a view's metadata

    registered = rest.post(
        rest.url("namespaces/vdb2/register-view"), {"name": "copy", "metadata-location": current_location}
    )
    assert registered.status_code == 200, registered.text
    assert registered.json()["metadata-location"] == current_location
    assert registered.json()["metadata"]["view-uuid"] == metadata["view-uuid"]
    assert registered.json()["metadata"]["current-version-id"] == metadata["current-version-id"]
    assert cat.view_exists("vdb2.copy")
    assert cat.list_views("vdb2") == [("vdb2", "copy")]
    again = rest.post(
        rest.url("namespaces/vdb2/register-view"), {"name": "copy", "metadata-location": current_location}
    )
    assert_error(again, 409, "AlreadyExistsException")
    missing_ns = rest.post(
        rest.url("namespaces/nosuch/register-view"), {"name": "x", "metadata-location": current_location}
    )
    assert_error(missing_ns, 404, "NoSuchNamespaceException")

    replaced_again = rest.post(
        rest.view_url("vdb2", "copy"),
        {"requirements": [], "updates": [{"action": "set-properties", "updates": {"after": "register"}}]},
    )
    assert replaced_again.status_code == 200, replaced_again.text
    assert cat.load_view("vdb2.copy").metadata.properties["after"] == "register"


# -- pagination ----------------------------------------------------------------------------------


def collect_pages(rest: Rest, url: str, key: str, page_size: int, between: Any = None) -> list[list[Any]]:
    """Follow ``next-page-token`` from an empty ``pageToken=``; ``between(i)`` runs after page ``i``."""
    pages: list[list[Any]] = []
    token = ""
    for _ in range(100):
        response = rest.get(url, params={"pageToken": token, "pageSize": page_size})
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(body[key])
        assert len(body[key]) <= page_size
        if between is not None:
            between(len(pages))
        token = body.get("next-page-token")
        if not token:
            return pages
    raise AssertionError("pagination did not end")


def test_pagination_of_namespaces(cat: RestCatalog, rest: Rest, catalog_gateway: Any) -> None:
    names = [f"ns{i:02d}" for i in range(25)]
    for name in names:
        cat.create_namespace(name)

    pages = collect_pages(rest, rest.url("namespaces"), "namespaces", 10)
    assert [len(p) for p in pages][:3] == [10, 10, 5]
    listed = [tuple(ns) for page in pages for ns in page]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == [(n,) for n in names]

    unpaged = rest.get(rest.url("namespaces"))
    assert unpaged.status_code == 200
    assert sorted(tuple(n) for n in unpaged.json()["namespaces"]) == [(n,) for n in names]
    assert unpaged.json().get("next-page-token") is None

    paged_client = make_catalog(catalog_gateway, **{"page-size": "7"})
    assert sorted(paged_client.list_namespaces()) == [(n,) for n in names]

    def insert_between(page_no: int) -> None:
        if page_no == 1:
            cat.create_namespace("ns00a")  # sorts into the page already read
            cat.create_namespace("ns99")  # sorts after everything
            cat.create_namespace("aaa")  # sorts before everything

    pages = collect_pages(rest, rest.url("namespaces"), "namespaces", 10, insert_between)
    listed = [tuple(ns) for page in pages for ns in page]
    assert len(listed) == len(set(listed)), "an item was repeated across pages"
    assert {(n,) for n in names} <= set(listed), "an item went missing across pages"
    assert set(listed) <= {(n,) for n in [*names, "ns00a", "ns99", "aaa"]}


def test_pagination_of_nested_namespaces_tables_and_views(
    cat: RestCatalog, rest: Rest, catalog_gateway: Any
) -> None:
    cat.create_namespace("p")
    for i in range(12):
        cat.create_namespace(("p", f"c{i:02d}"))
    pages = collect_pages(rest, rest.url("namespaces") + "?parent=p", "namespaces", 5)
    listed = [tuple(ns) for page in pages for ns in page]
    assert sorted(listed) == [("p", f"c{i:02d}") for i in range(12)]
    assert len(pages) == 3

    tables = [f"t{i:02d}" for i in range(25)]
    for name in tables:
        cat.create_table(f"p.{name}", schema=SCHEMA)
    for i in range(3):
        cat.create_view(f"p.v{i}", VIEW_SCHEMA, view_version("SELECT 1 AS id", ("p",)))

    def insert_between(page_no: int) -> None:
        if page_no == 2:
            cat.create_table("p.t00x", schema=SCHEMA)
            cat.create_table("p.t99", schema=SCHEMA)

    pages = collect_pages(rest, rest.url("namespaces/p/tables"), "identifiers", 10, insert_between)
    listed = [(tuple(i["namespace"]), i["name"]) for page in pages for i in page]
    assert len(listed) == len(set(listed))
    assert {(("p",), t) for t in tables} <= set(listed)
    assert set(listed) <= {(("p",), t) for t in [*tables, "t00x", "t99"]}

    # Dropping an item not yet listed (and one already listed) loses nothing else.
    tables = [*tables, "t00x", "t99"]

    def drop_between(page_no: int) -> None:
        if page_no == 1:
            cat.drop_table("p.t00")  # on the page just read
            cat.drop_table("p.t20")  # on a page still to come

    pages = collect_pages(rest, rest.url("namespaces/p/tables"), "identifiers", 10, drop_between)
    listed = [i["name"] for page in pages for i in page]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(t for t in tables if t != "t20")

    view_pages = collect_pages(rest, rest.url("namespaces/p/views"), "identifiers", 2)
    views = [i["name"] for page in view_pages for i in page]
    assert sorted(views) == ["v0", "v1", "v2"]

    paged_client = make_catalog(catalog_gateway, **{"page-size": "4"})
    assert len(paged_client.list_tables("p")) == 25
    assert len(paged_client.list_views("p")) == 3


# -- loadTable: ETag, snapshots=refs -------------------------------------------------------------


def test_etag_and_if_none_match(cat: RestCatalog, rest: Rest) -> None:
    table = make_table(cat, "db.etag")
    url = rest.table_url("db", "etag")

    first = rest.get(url)
    assert first.status_code == 200
    etag = first.headers.get("ETag")
    assert etag, "loadTable must send an ETag"
    assert rest.get(url).headers.get("ETag") == etag  # stable while unchanged

    not_modified = rest.get(url, headers={"If-None-Match": etag})
    assert not_modified.status_code == 304
    assert not_modified.content == b""

    other = rest.get(url, headers={"If-None-Match": '"something-else"'})
    assert other.status_code == 200
    assert other.json()["metadata-location"] == table.metadata_location

    table.append(rows([1]))
    table.append(rows([2]))
    changed = rest.get(url, headers={"If-None-Match": etag})
    assert changed.status_code == 200
    new_etag = changed.headers.get("ETag")
    assert new_etag
    assert new_etag != etag
    assert rest.get(url, headers={"If-None-Match": new_etag}).status_code == 304

    # Two snapshots, one referenced: the refs and all representations differ.
    refs = rest.get(url, params={"snapshots": "refs"})
    assert refs.status_code == 200
    assert len(refs.json()["metadata"]["snapshots"]) == 1
    refs_etag = refs.headers.get("ETag")
    assert refs_etag
    assert refs_etag != new_etag, "snapshots=refs and =all must have distinct ETags"
    again = rest.get(url, params={"snapshots": "refs"}, headers={"If-None-Match": refs_etag})
    assert again.status_code == 304
    assert rest.get(url, params={"snapshots": "all"}, headers={"If-None-Match": new_etag}).status_code == 304

    update = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"x": "y"}}]}
    commit = rest.post(url, update)
    assert commit.status_code == 200, commit.text
    if commit_etag := commit.headers.get("ETag"):
        assert rest.get(url, headers={"If-None-Match": commit_etag}).status_code == 304
    assert rest.get(url, headers={"If-None-Match": new_etag}).status_code == 200


def test_load_table_snapshots_refs_vs_all(cat: RestCatalog, rest: Rest, catalog_gateway: Any) -> None:
    table = make_table(cat, "db.snaps")
    for i in range(3):
        table.append(rows([i]))
    s1, s2, s3 = (s.snapshot_id for s in table.snapshots())
    table.manage_snapshots().create_branch(s1, "old").commit()

    url = rest.table_url("db", "snaps")
    everything = rest.get(url, params={"snapshots": "all"}).json()["metadata"]
    default = rest.get(url).json()["metadata"]
    referenced = rest.get(url, params={"snapshots": "refs"}).json()["metadata"]

    assert {s["snapshot-id"] for s in everything["snapshots"]} == {s1, s2, s3}
    assert {s["snapshot-id"] for s in default["snapshots"]} == {s1, s2, s3}
    assert {s["snapshot-id"] for s in referenced["snapshots"]} == {s1, s3}
    assert referenced["refs"] == everything["refs"]
    assert referenced["current-snapshot-id"] == s3

    bad = rest.get(url, params={"snapshots": "some"})
    assert_error(bad, 400, "BadRequestException")

    refs_client = make_catalog(catalog_gateway, **{"snapshot-loading-mode": "refs"})
    light = refs_client.load_table("db.snaps")
    assert {s.snapshot_id for s in light.snapshots()} == {s1, s3}
    assert read_ids(light) == [0, 1, 2]


# -- metrics ---------------------------------------------------------------------------------------


def test_metrics_reports(cat: RestCatalog, rest: Rest) -> None:
    table = make_table(cat, "db.metrics")
    table.append(rows([1, 2]))
    snapshot = table.current_snapshot()
    url = rest.table_url("db", "metrics") + "/metrics"
    counter = {"unit": "count", "value": 1}
    timer = {"count": 1, "time-unit": "nanoseconds", "total-duration": 2644235116}

    scan_report = {
        "report-type": "scan-report",
        "table-name": "cedarberg.db.metrics",
        "snapshot-id": snapshot.snapshot_id,
        "filter": True,  # what Java's ExpressionParser writes for alwaysTrue()
        "schema-id": 0,
        "projected-field-ids": [1, 2, 3],
        "projected-field-names": ["id", "name", "category"],
        "metrics": {"total-planning-duration": timer, "result-data-files": counter},
        "metadata": {"engine-name": "spark"},
    }
    response = rest.post(url, scan_report)
    assert response.status_code == 204, response.text

    spec_filter = dict(scan_report, filter={"type": "eq", "term": "id", "value": 1})
    assert rest.post(url, spec_filter).status_code == 204

    commit_report = {
        "report-type": "commit-report",
        "table-name": "cedarberg.db.metrics",
        "snapshot-id": snapshot.snapshot_id,
        "sequence-number": snapshot.sequence_number,
        "operation": "append",
        "metrics": {"total-duration": timer, "attempts": counter, "added-data-files": counter},
    }
    response = rest.post(url, commit_report)
    assert response.status_code == 204, response.text
    assert response.content == b""

    missing = rest.post(rest.table_url("db", "nosuch") + "/metrics", commit_report)
    assert_error(missing, 404, "NoSuchTableException")


# -- idempotency -------------------------------------------------------------------------------------


def test_config_advertises_idempotency_and_endpoints(rest: Rest) -> None:
    config = rest.config
    assert config["idempotency-key-lifetime"].startswith("P")
    endpoints = set(config["endpoints"])
    for endpoint in (
        "POST /v1/{prefix}/transactions/commit",
        "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/namespaces/{namespace}/register-view",
        "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/views/rename",
    ):
        assert endpoint in endpoints


def test_idempotent_create_namespace(cat: RestCatalog, rest: Rest) -> None:
    key = uuid7()
    body = {"namespace": ["idem"], "properties": {"owner": "x"}}
    first = rest.post(rest.url("namespaces"), body, headers={"Idempotency-Key": key})
    second = rest.post(rest.url("namespaces"), body, headers={"Idempotency-Key": key})
    assert first.status_code == 200, first.text
    assert second.status_code == 200, second.text
    assert second.json() == first.json()
    assert cat.list_namespaces() == [("idem",)]

    fresh = rest.post(rest.url("namespaces"), body, headers={"Idempotency-Key": uuid7()})
    assert_error(fresh, 409, "AlreadyExistsException")
    plain = rest.post(rest.url("namespaces"), body)
    assert_error(plain, 409, "AlreadyExistsException")

    # A finalized 4xx is replayed as well.
    conflict_key = uuid7()
    c1 = rest.post(rest.url("namespaces"), body, headers={"Idempotency-Key": conflict_key})
    assert_error(c1, 409, "AlreadyExistsException")
    cat.drop_namespace("idem")
    c2 = rest.post(rest.url("namespaces"), body, headers={"Idempotency-Key": conflict_key})
    assert_error(c2, 409, "AlreadyExistsException")
    assert not cat.namespace_exists("idem")

    # Replaying a drop does not fail on the second try.
    cat.create_namespace("gone")
    drop_key = uuid7()
    d1 = rest.delete(rest.url("namespaces/gone"), headers={"Idempotency-Key": drop_key})
    d2 = rest.delete(rest.url("namespaces/gone"), headers={"Idempotency-Key": drop_key})
    assert d1.status_code == 204
    assert d2.status_code == 204


def test_idempotent_table_commit_replay(catalog_gateway: Any, cat: RestCatalog, rest: Rest) -> None:
    make_table(cat, "db.idem")
    key = uuid7()
    keyed = make_catalog(catalog_gateway, **{"header.Idempotency-Key": key})
    captured: list[requests.PreparedRequest] = []

    def capture(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        request = response.request
        if request.method == "POST" and request.path_url.split("?")[0].endswith("/tables/idem"):
            captured.append(request)

    keyed._session.hooks["response"].append(capture)  # the commit request pyiceberg sends
    table = keyed.load_table("db.idem")
    table.append(rows([1, 2]))
    keyed.close()
    assert len(captured) == 1
    original = captured[0]
    assert original.headers["Idempotency-Key"] == key

    loaded = cat.load_table("db.idem")
    assert len(loaded.snapshots()) == 1
    location = loaded.metadata_location

    # The replay comes from the same principal: a record is bound to who sent it (another
    # principal's request with this key would run as its own).
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "Authorization": str(original.headers["Authorization"]),
    }
    replay = rest.session.post(original.url, data=original.body, headers=headers, timeout=HTTP_TIMEOUT)
    assert replay.status_code == 200, replay.text
    assert replay.json()["metadata-location"] == location
    after = cat.load_table("db.idem")
    assert len(after.snapshots()) == 1
    assert after.metadata_location == location
    assert read_ids(after) == [1, 2]

    # Without the key the same request is a new attempt, and its requirement now fails.
    stale = rest.session.post(
        original.url, data=original.body, headers={"Content-Type": "application/json"}, timeout=HTTP_TIMEOUT
    )
    assert_error(stale, 409, "CommitFailedException")
    assert len(cat.load_table("db.idem").snapshots()) == 1


def test_idempotent_multi_table_commit(cat: RestCatalog, rest: Rest) -> None:
    t1 = make_table(cat, "db.m1")
    body = {
        "table-changes": [
            {
                "identifier": {"namespace": ["db"], "name": "m1"},
                "requirements": [{"type": "assert-table-uuid", "uuid": str(t1.metadata.table_uuid)}],
                "updates": [{"action": "set-properties", "updates": {"n": "1"}}],
            }
        ]
    }
    key = uuid7()
    first = rest.post(rest.url("transactions/commit"), body, headers={"Idempotency-Key": key})
    assert first.status_code == 204, first.text
    location = cat.load_table("db.m1").metadata_location
    second = rest.post(rest.url("transactions/commit"), body, headers={"Idempotency-Key": key})
    assert second.status_code == 204, second.text
    after = cat.load_table("db.m1")
    assert after.metadata_location == location
    assert len(after.metadata.metadata_log) == 1


def test_idempotent_table_create_rename_and_drop(cat: RestCatalog, rest: Rest) -> None:
    cat.create_namespace("db")
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
    }
    create_key = uuid7()
    created = [
        rest.post(
            rest.url("namespaces/db/tables"),
            {"name": "t", "schema": schema},
            headers={"Idempotency-Key": create_key},
        )
        for _ in range(2)
    ]
    assert [r.status_code for r in created] == [200, 200], created[1].text
    assert created[1].json()["metadata-location"] == created[0].json()["metadata-location"]
    assert created[1].json()["metadata"]["table-uuid"] == created[0].json()["metadata"]["table-uuid"]
    assert cat.list_tables("db") == [("db", "t")]
    table_dir = local_path(created[0].json()["metadata"]["location"]) / "metadata"
    assert len([p for p in table_dir.iterdir() if ".metadata.json" in p.name]) == 1

    rename_key = uuid7()
    body = {"source": {"namespace": ["db"], "name": "t"}, "destination": {"namespace": ["db"], "name": "u"}}
    renamed = [
        rest.post(rest.url("tables/rename"), body, headers={"Idempotency-Key": rename_key}) for _ in range(2)
    ]
    assert [r.status_code for r in renamed] == [204, 204], renamed[1].text
    assert cat.list_tables("db") == [("db", "u")]

    drop_key = uuid7()
    dropped = [
        rest.delete(rest.table_url("db", "u"), headers={"Idempotency-Key": drop_key}) for _ in range(2)
    ]
    assert [r.status_code for r in dropped] == [204, 204], dropped[1].text
    assert cat.list_tables("db") == []
