"""Object directories on a real catalog (issue 27, section 5): objects placed before the rule keep
working and keep their places; only the roots they gain must lie in an object directory; namespace
names of the object-directory form are refused with nothing written.

"Before the rule" is a registry written by a catalog that admitted legacy layouts (the migration
setting on), then served by one with the setting off: the same registry, warehouse and keys.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import orjson
import pytest

from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.effects import Effect
from cedarberg.catalog.errors import InvalidRequestError, LocationNotAllowedError, NoSuchNamespaceError
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.tables import TableService
from cedarberg.catalog.views import ViewService
from tests.support.catalogs import WAREHOUSE, catalog_context

NAMESPACE = Namespace.of(["raw"])
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
VIEW_VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": 1,
    "summary": {},
    "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
    "default-namespace": ["raw"],
}


async def allow(_effects: Sequence[Effect]) -> None:
    """A gate that allows everything (authorization is not what is tested here)."""


@dataclasses.dataclass(frozen=True)
class Catalogs:
    legacy: CatalogContext  # admits legacy layouts: the data from before the rule
    strict: CatalogContext  # the same registry and warehouse under the rule
    namespace_dir: str


@pytest.fixture
async def catalogs(tmp_path: Path, registry_url: str) -> AsyncIterator[Catalogs]:
    async with catalog_context(tmp_path, url=registry_url) as strict:
        warehouse = strict.warehouses[WAREHOUSE]
        legacy = dataclasses.replace(
            strict,
            warehouses={WAREHOUSE: dataclasses.replace(warehouse, allow_locations_outside_namespace=True)},
        )
        await NamespaceService(strict).create(None, NAMESPACE, {}, None)
        yield Catalogs(legacy, strict, f"{warehouse.location}/raw")


async def commit(ctx: CatalogContext, name: str, updates: list[dict[str, object]]) -> dict[str, object]:
    request = req.parse(req.CommitTableRequest, {"requirements": [], "updates": updates})
    body = await TableService(ctx).commit(None, Identifier.of(NAMESPACE, name), request, None, allow)
    assert body is not None
    metadata: dict[str, object] = orjson.loads(body)["metadata"]
    return metadata


async def test_objects_placed_before_the_rule_keep_working_and_only_gained_roots_follow_it(
    catalogs: Catalogs,
) -> None:
    legacy_place = f"{catalogs.namespace_dir}/hr"  # the default directory of a future `raw.hr`
    create = req.parse(req.CreateTableRequest, {"name": "staff", "schema": SCHEMA, "location": legacy_place})
    await TableService(catalogs.legacy).create(None, NAMESPACE, create, None, allow)
    view = req.parse(
        req.CreateViewRequest,
        {
            "name": "staff_view",
            "schema": SCHEMA,
            "view-version": VIEW_VERSION,
            "location": f"{catalogs.namespace_dir}/views",
        },
    )
    await ViewService(catalogs.legacy).create(None, NAMESPACE, view, None, allow)
    strict = catalogs.strict
    tables = TableService(strict)

    # Under the rule the same place is refused to a new table...
    again = req.parse(
        req.CreateTableRequest, {"name": "other", "schema": SCHEMA, "location": f"{legacy_place}2"}
    )
    with pytest.raises(LocationNotAllowedError, match="not inside a table or view directory"):
        await tables.create(None, NAMESPACE, again, None, allow)
    # ...while the existing table and view load, commit and rename as before.
    _tag, loaded = await tables.load(None, Identifier.of(NAMESPACE, "staff"), "all", None)
    assert loaded is not None
    assert orjson.loads(loaded)["metadata"]["location"] == legacy_place
    committed = await commit(strict, "staff", [{"action": "set-properties", "updates": {"owner": "hr"}}])
    assert committed["properties"] == {"owner": "hr"}
    replace = req.parse(
        req.CommitViewRequest,
        {"requirements": [], "updates": [{"action": "set-properties", "updates": {"comment": "kept"}}]},
    )
    replaced = await ViewService(strict).replace(
        None, Identifier.of(NAMESPACE, "staff_view"), replace, None, allow
    )
    assert replaced is not None
    assert orjson.loads(replaced)["metadata"]["location"] == f"{catalogs.namespace_dir}/views"
    await tables.rename(
        None, Identifier.of(NAMESPACE, "staff"), Identifier.of(NAMESPACE, "people"), None, allow
    )

    # A root it gains follows the rule: not inside its legacy place, but in an object directory.
    with pytest.raises(LocationNotAllowedError, match="not inside a table or view directory"):
        await commit(
            strict,
            "people",
            [{"action": "set-properties", "updates": {"write.data.path": f"{legacy_place}/d"}}],
        )
    data_dir = f"{catalogs.namespace_dir}/people-data-{uuid.uuid4().hex}"
    gained = await commit(
        strict, "people", [{"action": "set-properties", "updates": {"write.data.path": data_dir}}]
    )
    assert gained["properties"] == {"owner": "hr", "write.data.path": data_dir}

    # The place the legacy table holds stays its own: that one child namespace needs a location.
    namespaces = NamespaceService(strict)
    with pytest.raises(LocationNotAllowedError, match="lies inside the location of a table or view"):
        await namespaces.create(None, Namespace.of(["raw", "hr"]), {}, None)
    await namespaces.create(
        None, Namespace.of(["raw", "hr"]), {"location": f"{catalogs.namespace_dir}/hr-namespace"}, None
    )
    await namespaces.create(None, Namespace.of(["raw", "finance"]), {}, None)


@pytest.mark.parametrize("name", [f"t-{uuid.uuid4().hex}", f"my table-{uuid.uuid4().hex}"])
async def test_a_namespace_named_like_an_object_directory_is_refused_with_nothing_written(
    catalogs: Catalogs, name: str
) -> None:
    namespaces = NamespaceService(catalogs.strict)
    child = Namespace.of(["raw", name])
    with pytest.raises(InvalidRequestError, match="reserved"):
        await namespaces.create(None, child, {}, None)
    with pytest.raises(NoSuchNamespaceError):
        await namespaces.load(None, child)
    # Control: an ordinary name beside it is created.
    await namespaces.create(None, Namespace.of(["raw", "hr"]), {}, None)


async def test_after_a_rename_gained_roots_lie_in_an_object_directory_of_the_new_namespace(
    catalogs: Catalogs,
) -> None:
    strict = catalogs.strict
    curated = Namespace.of(["curated"])
    await NamespaceService(strict).create(None, curated, {}, None)
    create = req.parse(req.CreateTableRequest, {"name": "moving", "schema": SCHEMA})
    await TableService(strict).create(None, NAMESPACE, create, None, allow)
    target = Identifier.of(curated, "moving")
    await TableService(strict).rename(None, Identifier.of(NAMESPACE, "moving"), target, None, allow)
    curated_dir = catalogs.namespace_dir.rsplit("/", 1)[0] + "/curated"

    async def set_location(place: str) -> dict[str, object]:
        request = req.parse(
            req.CommitTableRequest,
            {"requirements": [], "updates": [{"action": "set-location", "location": place}]},
        )
        body = await TableService(strict).commit(None, target, request, None, allow)
        assert body is not None
        metadata: dict[str, object] = orjson.loads(body)["metadata"]
        return metadata

    with pytest.raises(LocationNotAllowedError, match="not inside a table or view directory"):
        await set_location(f"{curated_dir}/hr")
    place = f"{curated_dir}/moving-{uuid.uuid4().hex}"
    assert (await set_location(place))["location"] == place
    await NamespaceService(strict).create(None, Namespace.of(["curated", "hr"]), {}, None)
