"""Locations are exclusive and every path belongs to its object (issue 15, sections 2-4).

A production-like gateway (TLS, API keys, the bundled Cedar policies) with three local warehouses:
`lake` (sealed: drops are soft deletes), `plain` (plain metadata files: drop with purge deletes at
once) and `mig` (locations outside the namespace directory allowed, for migrations). The attacker
is an ordinary writer of namespace `mine`; `other` belongs to someone else. Each attack asserts the
status, the ErrorModel type and that nothing changed on disk or in the registry; each control shows
the legitimate operation still works. Locations are sent in every spelling the catalog accepts.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cedarberg.catalog.locations import normalize
from tests.support.audit import flushed_audit_log
from tests.support.s3 import REGION, MotoS3Server, moto_s3_server
from tests.support.secure import AMBIENT_CA_VARIABLES, HTTP_TIMEOUT, SecureGateway
from tests.support.tls import TestPki

WAREHOUSES = ("lake", "plain", "mig")
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


def spellings(path: Path) -> list[str]:
    """Every way the catalog accepts to name one local place."""
    text = str(path)
    return [f"file://{text}", f"file:{text}", f"file://{text}/", text, f"file://localhost{text}"]


class Lake:
    def __init__(self, gateway: SecureGateway, base: Path) -> None:
        self.gateway = gateway
        self.base = base
        self.writer = gateway.create_key("etl-bot", ["etl"])
        self.other_writer = gateway.create_key("their-bot", ["theirs"])
        self.sessions = {key: gateway.session(gateway.token(key)) for key in (self.writer, self.other_writer)}

    def root(self, warehouse: str) -> Path:
        return self.base / warehouse

    def url(self, warehouse: str, path: str) -> str:
        return f"{self.gateway.url}/v1/{warehouse}/{path.lstrip('/')}"

    def ns(self, warehouse: str, namespace: str) -> str:
        return self.url(warehouse, f"namespaces/{self.gateway.ns_path(namespace)}")

    def as_writer(self, method: str, url: str, key: str | None = None, **kwargs: Any) -> requests.Response:
        session = self.sessions[key or self.writer]
        return session.request(method, url, timeout=HTTP_TIMEOUT, **kwargs)

    def create(
        self, warehouse: str, namespace: str, name: str, location: str | None = None, **extra: Any
    ) -> requests.Response:
        body: dict[str, Any] = {"name": name, "schema": SCHEMA, **extra}
        if location is not None:
            body["location"] = location
        key = self.writer if namespace == "mine" else self.other_writer
        return self.as_writer("POST", self.ns(warehouse, namespace) + "/tables", key, json=body)

    def table(self, warehouse: str, namespace: str, name: str) -> requests.Response:
        return self.gateway.admin.get(self.ns(warehouse, namespace) + f"/tables/{name}", timeout=HTTP_TIMEOUT)

    def commit(self, warehouse: str, name: str, updates: list[dict[str, Any]]) -> requests.Response:
        body = {"requirements": [], "updates": updates}
        return self.as_writer("POST", self.ns(warehouse, "mine") + f"/tables/{name}", json=body)

    def registry(self) -> list[tuple[Any, ...]]:
        """The object rows and roots as stored: what a refused request must leave unchanged."""
        with sqlite3.connect(self.base / "gw" / "gateway" / "catalog.db") as db:
            objects = db.execute(
                "SELECT warehouse, namespace, name, metadata_location FROM catalog_objects ORDER BY 1, 2, 3"
            ).fetchall()
            roots = db.execute("SELECT root, kind, owner FROM object_roots ORDER BY 1, 2, 3").fetchall()
            dropped = db.execute("SELECT drop_id FROM dropped_objects ORDER BY 1").fetchall()
        return [*objects, *roots, *dropped]

    def files(self) -> set[Path]:
        return {path for path in self.base.rglob("*") if path.is_file() and "gw" not in path.parts}

    def audit_records(self) -> list[dict[str, Any]]:
        return flushed_audit_log(self.base / "audit.jsonl")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[Lake]:
    base = tmp_path_factory.mktemp("confinement")
    config = {
        "default_warehouse": "lake",
        "warehouses": {
            "lake": {"location": (base / "lake").as_uri(), "drop_retention_seconds": 3600},
            "plain": {"location": (base / "plain").as_uri(), "seal_metadata_files": False},
            "mig": {"location": (base / "mig").as_uri(), "allow_locations_outside_namespace": True},
        },
        "audit": {"destination": str(base / "audit.jsonl")},
    }
    with pytest.MonkeyPatch.context() as env:
        for name in AMBIENT_CA_VARIABLES:
            env.delenv(name, raising=False)
        with SecureGateway(base / "gw", pki=session_pki, config=config) as gateway:
            for warehouse in WAREHOUSES:
                for namespace, writers in (("mine", "etl"), ("other", "theirs")):
                    answer = gateway.admin.post(
                        f"{gateway.url}/v1/{warehouse}/namespaces",
                        json={"namespace": [namespace], "properties": {"cedarberg.writers": writers}},
                        timeout=HTTP_TIMEOUT,
                    )
                    assert answer.status_code == 200, answer.text
            yield Lake(gateway, base)


def assert_refused(answer: requests.Response, status: int, error_type: str, words: str) -> None:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == error_type
    assert error["code"] == status
    assert words in error["message"], error["message"]


def location_of(answer: requests.Response) -> str:
    assert answer.status_code == 200, answer.text
    return str(answer.json()["metadata"]["location"])


def local(location: str) -> Path:
    return Path(location.removeprefix("file://"))


def object_dir(name: str) -> str:
    """A fresh object directory name (`<name>-<32 hex digits>`): where a table or view may live."""
    return f"{name}-{uuid.uuid4().hex}"


# -- section 2: create --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def theirs(lake: Lake) -> str:
    """other.victim in `lake`, with a data file of its own."""
    location = location_of(lake.create("lake", "other", "victim"))
    data = local(location) / "data" / "secret.parquet"
    data.parent.mkdir(parents=True)
    data.write_bytes(b"their data")
    return location


@pytest.mark.parametrize("spelling", range(5))
def test_create_is_refused_at_the_warehouse_root_and_at_any_namespace_directory(
    lake: Lake, theirs: str, spelling: int
) -> None:
    places = {
        "the warehouse root": lake.root("lake"),
        "another namespace's directory": lake.root("lake") / "other",
        "the namespace's own directory": lake.root("lake") / "mine",
        "above the warehouse": lake.base,
    }
    before, files = lake.registry(), lake.files()
    for _what, place in places.items():
        answer = lake.create("lake", "mine", f"t{spelling}", spellings(place)[spelling])
        assert_refused(answer, 400, "BadRequestException", "location")
        assert lake.table("lake", "mine", f"t{spelling}").status_code == 404
    assert lake.registry() == before
    assert lake.files() == files


@pytest.mark.parametrize("spelling", range(5))
def test_create_is_refused_inside_another_namespace_and_inside_another_table(
    lake: Lake, theirs: str, spelling: int
) -> None:
    before, files = lake.registry(), lake.files()
    inside_theirs = local(theirs) / "mine"
    answer = lake.create("lake", "mine", "spy", spellings(inside_theirs)[spelling])
    assert_refused(answer, 400, "BadRequestException", "outside the namespace directory")
    # The same overlap inside the writer's own namespace: another table's location, from below
    # and from above.
    own = location_of(
        lake.create("lake", "mine", f"own{spelling}", str(lake.root("lake") / "mine" / object_dir("g") / "t"))
    )
    before, files = lake.registry(), lake.files()
    for place in (local(own) / "data", local(own), local(own).parent):
        answer = lake.create("lake", "mine", f"spy{spelling}", spellings(place)[spelling])
        assert_refused(answer, 400, "BadRequestException", "overlaps the location of another table or view")
    assert lake.table("lake", "mine", f"spy{spelling}").status_code == 404
    assert lake.registry() == before
    assert lake.files() == files


def test_create_is_refused_inside_a_soft_deleted_table(lake: Lake) -> None:
    gone = location_of(lake.create("lake", "mine", "gone"))
    assert lake.as_writer("DELETE", lake.ns("lake", "mine") + "/tables/gone").status_code == 204
    before, files = lake.registry(), lake.files()
    for place in spellings(local(gone)) + spellings(local(gone) / "data"):
        answer = lake.create("lake", "mine", "squatter", place)
        assert_refused(answer, 400, "BadRequestException", "live or dropped")
    stage = lake.create("lake", "mine", "squatter", gone, **{"stage-create": True})
    assert_refused(stage, 400, "BadRequestException", "live or dropped")
    assert lake.registry() == before
    assert lake.files() == files


def test_control_create_at_the_default_and_at_an_explicit_location_in_the_own_namespace(lake: Lake) -> None:
    default = location_of(lake.create("lake", "mine", "ordinary"))
    assert local(default).parent == lake.root("lake") / "mine"
    place = object_dir("chosen")
    explicit = location_of(lake.create("lake", "mine", "chosen", f"file:{lake.root('lake')}/mine/{place}/"))
    assert explicit == f"file://{lake.root('lake')}/mine/{place}"
    staged = lake.create("lake", "mine", "staged", **{"stage-create": True})
    assert staged.status_code == 200, staged.text


def test_views_obey_the_same_rule(lake: Lake, theirs: str) -> None:
    view = {
        "name": "v",
        "schema": SCHEMA,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": 1,
            "schema-id": 0,
            "summary": {},
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
            "default-namespace": ["mine"],
        },
        "properties": {},
    }
    before = lake.registry()
    for place in (theirs, str(lake.root("lake")), str(lake.root("lake") / "other" / "v")):
        answer = lake.as_writer("POST", lake.ns("lake", "mine") + "/views", json={**view, "location": place})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["type"] == "BadRequestException"
    assert lake.registry() == before
    created = lake.as_writer("POST", lake.ns("lake", "mine") + "/views", json=view)
    assert created.status_code == 200, created.text


# -- section 2: commits -------------------------------------------------------------------------


def test_set_location_and_write_paths_are_confined(lake: Lake, theirs: str) -> None:
    start = location_of(lake.create("lake", "mine", "mover"))
    outside = [
        str(lake.root("lake")),
        str(lake.root("lake") / "other"),
        theirs,
        f"file:{local(theirs)}/data/",
        str(lake.root("lake") / "other" / "x"),
    ]
    before, files = lake.registry(), lake.files()
    for place in outside:
        moved = lake.commit("lake", "mover", [{"action": "set-location", "location": place}])
        assert_refused(moved, 400, "BadRequestException", "location")
        for key in ("write.data.path", "write.metadata.path", "write.object-storage.path"):
            props = lake.commit("lake", "mover", [{"action": "set-properties", "updates": {key: place}}])
            assert_refused(props, 400, "BadRequestException", "location")
    assert location_of(lake.table("lake", "mine", "mover")) == start
    assert lake.registry() == before
    assert lake.files() == files

    # Control: set-location and write.data.path inside the own namespace directory.
    moved_to = object_dir("moved")
    new_place = f"file:{lake.root('lake')}/mine/{moved_to}/"
    assert (
        lake.commit("lake", "mover", [{"action": "set-location", "location": new_place}]).status_code == 200
    )
    data_path = f"file://{lake.root('lake')}/mine/{object_dir('mover-data')}"
    props = lake.commit(
        "lake", "mover", [{"action": "set-properties", "updates": {"write.data.path": data_path}}]
    )
    assert props.status_code == 200, props.text
    moved = normalize(location_of(lake.table("lake", "mine", "mover")))
    assert moved == f"file://{lake.root('lake')}/mine/{moved_to}"
    # The past location stays the table's: nothing else may move in.
    assert_refused(lake.create("lake", "mine", "heir", start), 400, "BadRequestException", "overlaps")


def snapshot(snapshot_id: int, manifest_list: str) -> dict[str, Any]:
    return {
        "action": "add-snapshot",
        "snapshot": {
            "snapshot-id": snapshot_id,
            "sequence-number": 1,
            "timestamp-ms": int(time.time() * 1000),
            "manifest-list": manifest_list,
            "summary": {"operation": "append"},
            "schema-id": 0,
        },
    }


def statistics(snapshot_id: int, path: str) -> dict[str, Any]:
    return {
        "action": "set-statistics",
        "statistics": {
            "snapshot-id": snapshot_id,
            "statistics-path": path,
            "file-size-in-bytes": 10,
            "file-footer-size-in-bytes": 4,
            "blob-metadata": [],
        },
    }


def partition_statistics(snapshot_id: int, path: str) -> dict[str, Any]:
    return {
        "action": "set-partition-statistics",
        "partition-statistics": {
            "snapshot-id": snapshot_id,
            "statistics-path": path,
            "file-size-in-bytes": 10,
        },
    }


def test_commits_adding_paths_outside_the_roots_are_refused_and_purge_stays_inside(lake: Lake) -> None:
    victim = location_of(lake.create("plain", "other", "victim"))
    victim_file = local(victim) / "data" / "precious.parquet"
    victim_file.parent.mkdir(parents=True)
    victim_file.write_bytes(b"their data")
    outside_file = lake.base / "outside.txt"
    outside_file.write_text("not the catalog's")
    mine = location_of(lake.create("plain", "mine", "purged"))
    url = lake.ns("plain", "mine") + "/tables/purged"
    before = lake.registry()
    for target in (str(victim_file), f"file:{outside_file}", f"s3a://bucket{outside_file}"):
        for update in (snapshot(7, target), statistics(7, target), partition_statistics(7, target)):
            updates = (
                [update]
                if update["action"] == "add-snapshot"
                else [snapshot(7, f"{mine}/metadata/snap-7.avro"), update]
            )
            answer = lake.as_writer("POST", url, json={"requirements": [], "updates": updates})
            assert_refused(answer, 400, "BadRequestException", "outside the table's locations")
    assert lake.registry() == before

    # Control: the table's own statistics file is accepted, and purge deletes the table's own files.
    own_stats = local(mine) / "metadata" / "stats.puffin"
    own_stats.parent.mkdir(parents=True, exist_ok=True)
    own_stats.write_bytes(b"puffin")
    answer = lake.as_writer(
        "POST",
        url,
        json={
            "requirements": [],
            "updates": [snapshot(7, f"{mine}/metadata/snap-7.avro"), statistics(7, str(own_stats))],
        },
    )
    assert answer.status_code == 200, answer.text
    dropped = lake.as_writer("DELETE", url, params={"purgeRequested": "true"})
    assert dropped.status_code == 204, dropped.text
    assert not local(mine).exists()
    assert victim_file.read_bytes() == b"their data"
    assert outside_file.read_text() == "not the catalog's"


# -- section 2: the migration setting -----------------------------------------------------------


def test_migration_warehouse_allows_outside_the_namespace_but_never_overlap(lake: Lake) -> None:
    legacy = lake.root("mig") / "legacy" / "orders"
    assert location_of(lake.create("mig", "mine", "orders", f"file:{legacy}/")) == f"file://{legacy}"
    before = lake.registry()
    for place in (
        legacy / "part",
        legacy.parent,
        lake.root("mig"),
        lake.root("mig") / "other",
        lake.base / "elsewhere",
    ):
        answer = lake.create("mig", "mine", "clash", str(place))
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["type"] == "BadRequestException"
    assert lake.registry() == before


# -- issue 27 section 5: no location takes the directory of a future namespace --------------------

WRITE_PATHS = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)
VIEW_BODY = {
    "schema": SCHEMA,
    "view-version": {
        "version-id": 1,
        "timestamp-ms": 1,
        "schema-id": 0,
        "summary": {},
        "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        "default-namespace": ["mine"],
    },
    "properties": {},
}


def squatting_places(namespace_dir: Path, child: str) -> list[str]:
    """The default directory of the future namespace `<namespace>.<child>` in every spelling, and
    the places around it a writer might try instead: below it, reached by climbing, percent-encoded
    (another name to the gateway, the same one to storage that decodes), a percent-encoded look-alike
    of an object directory, and the namespace's own directory above it."""
    future = namespace_dir / child
    return [
        *spellings(future),
        f"{future}/deeper",
        f"file:{namespace_dir}/x/../{child}",
        f"{namespace_dir}/{child[0]}%{ord(child[1]):02X}{child[2:]}",
        f"{namespace_dir}/{child}%2D{uuid.uuid4().hex}",
        f"file://{namespace_dir}/",
    ]


def admin_creates_namespace(lake: Lake, warehouse: str, *levels: str) -> requests.Response:
    return lake.gateway.admin.post(
        lake.url(warehouse, "namespaces"),
        json={"namespace": list(levels), "properties": {}},
        timeout=HTTP_TIMEOUT,
    )


def test_no_root_of_a_table_or_view_can_take_a_future_child_namespaces_directory(lake: Lake) -> None:
    """Attack (issue 27 section 5): the writer of `mine` places every root a table or view has at
    `<wh>/mine/hr` (the default directory of a namespace `mine.hr` nobody created yet), in every
    spelling and through every operation; then the admin's `createNamespace mine.hr` works."""
    anchor = location_of(lake.create("lake", "mine", "anchor"))
    # For registration: a plain metadata file the writer put at the future namespace's directory,
    # naming that directory as its table's location.
    plain_future = lake.root("plain") / "mine" / "hr"
    document = lake.table("lake", "mine", "anchor").json()["metadata"]
    document.update({"location": f"file://{plain_future}", "table-uuid": str(uuid.uuid4())})
    squatter_file = plain_future / "metadata" / "00000-squat.metadata.json"
    squatter_file.parent.mkdir(parents=True)
    squatter_file.write_text(json.dumps(document))
    before, files = lake.registry(), lake.files()

    ns_url = lake.ns("lake", "mine")
    for place in squatting_places(lake.root("lake") / "mine", "hr"):
        attempts = {
            "create": lake.create("lake", "mine", "squat", place),
            "stage-create": lake.create("lake", "mine", "squat", place, **{"stage-create": True}),
            "view": lake.as_writer(
                "POST", ns_url + "/views", json={**VIEW_BODY, "name": "squat", "location": place}
            ),
            "set-location": lake.commit("lake", "anchor", [{"action": "set-location", "location": place}]),
            "transaction": lake.as_writer(
                "POST",
                lake.url("lake", "transactions/commit"),
                json={
                    "table-changes": [
                        {
                            "identifier": {"namespace": ["mine"], "name": "anchor"},
                            "requirements": [],
                            "updates": [{"action": "set-location", "location": place}],
                        }
                    ]
                },
            ),
        }
        for key in WRITE_PATHS:
            attempts[f"create with {key}"] = lake.create("lake", "mine", "squat", properties={key: place})
            attempts[f"commit of {key}"] = lake.commit(
                "lake", "anchor", [{"action": "set-properties", "updates": {key: place}}]
            )
        view_with_path = {**VIEW_BODY, "name": "squat", "properties": {"write.metadata.path": place}}
        attempts["view with write.metadata.path"] = lake.as_writer(
            "POST", ns_url + "/views", json=view_with_path
        )
        for what, answer in attempts.items():
            assert answer.status_code == 400, (place, what, answer.text)
            error = answer.json()["error"]
            assert (error["type"], error["code"]) == ("BadRequestException", 400), (place, what)
            assert "location" in error["message"], (place, what, error["message"])
    registered = lake.as_writer(
        "POST",
        lake.ns("plain", "mine") + "/register",
        json={"name": "squat", "metadata-location": str(squatter_file)},
    )
    assert_refused(registered, 400, "BadRequestException", "not inside a table or view directory")
    assert lake.registry() == before
    assert lake.files() == files
    assert location_of(lake.table("lake", "mine", "anchor")) == anchor

    # The admin's namespace creation works, and the new namespace has its default directory.
    for warehouse in ("lake", "plain"):
        created = admin_creates_namespace(lake, warehouse, "mine", "hr")
        assert created.status_code == 200, created.text
        child = lake.url(warehouse, f"namespaces/{lake.gateway.ns_path('mine', 'hr')}")
        table = lake.gateway.admin.post(
            child + "/tables", json={"name": "people", "schema": SCHEMA}, timeout=HTTP_TIMEOUT
        )
        assert local(location_of(table)).parent == lake.root(warehouse) / "mine" / "hr"


def test_namespace_names_of_the_object_directory_form_are_reserved(lake: Lake) -> None:
    """Attack: a namespace named like an object directory would have one as its default directory
    (`<wh>/mine/<table>-<uuid>`); whether a table is there or not, such a name is refused."""
    taken = local(location_of(lake.create("lake", "mine", "dated"))).name
    before = lake.registry()
    for name in (taken, f"hr-{uuid.uuid4().hex}", f"é-{uuid.uuid4().hex}"):
        answer = admin_creates_namespace(lake, "lake", "mine", name)
        assert_refused(answer, 400, "BadRequestException", "reserved")
        child = lake.url("lake", f"namespaces/{lake.gateway.ns_path('mine', name)}")
        assert lake.gateway.admin.get(child, timeout=HTTP_TIMEOUT).status_code == 404
    assert lake.registry() == before


def test_control_tables_and_views_in_object_directories_leave_every_child_namespace_free(lake: Lake) -> None:
    """Control: tables at the default place (`<wh>/mine/finance-<uuid>`) and at an explicit object
    directory, with write paths inside their own directory or in another object directory, and a
    view; the admin then creates `mine.finance` (the tables' namesake) with its default directory."""
    mine = lake.root("lake") / "mine"
    default = location_of(lake.create("lake", "mine", "finance"))
    assert local(default).parent == mine
    assert local(default).name.startswith("finance-")
    chosen = f"file:{mine}/{object_dir('finance-archive')}/"
    data_elsewhere = f"{mine}/{object_dir('finance-data')}"
    explicit = lake.create(
        "lake",
        "mine",
        "finance_archive",
        chosen,
        properties={"write.data.path": data_elsewhere, "write.metadata.path": f"{normalize(chosen)}/meta"},
    )
    assert location_of(explicit) == normalize(chosen)
    view = lake.as_writer(
        "POST", lake.ns("lake", "mine") + "/views", json={**VIEW_BODY, "name": "finance_view"}
    )
    assert view.status_code == 200, view.text
    created = admin_creates_namespace(lake, "lake", "mine", "finance")
    assert created.status_code == 200, created.text
    child = lake.url("lake", f"namespaces/{lake.gateway.ns_path('mine', 'finance')}")
    table = lake.gateway.admin.post(
        child + "/tables", json={"name": "ledger", "schema": SCHEMA}, timeout=HTTP_TIMEOUT
    )
    assert local(location_of(table)).parent == mine / "finance"


def test_migration_warehouse_admits_legacy_layouts_inside_the_namespace(lake: Lake) -> None:
    """The migration setting still admits a legacy layout (`<wh>/<namespace>/<table>`), created or
    registered, where the default warehouse refuses it."""
    legacy = lake.root("mig") / "mine" / "orders_v1"
    assert location_of(lake.create("mig", "mine", "orders_v1", str(legacy))) == f"file://{legacy}"
    document = lake.table("mig", "mine", "orders_v1").json()["metadata"]
    answers = {}
    for warehouse in ("plain", "mig"):
        place = lake.root(warehouse) / "mine" / "events"
        copy = dict(document, location=f"file://{place}", **{"table-uuid": str(uuid.uuid4())})
        metadata_file = place / "metadata" / "00000-legacy.metadata.json"
        metadata_file.parent.mkdir(parents=True)
        metadata_file.write_text(json.dumps(copy))
        answers[warehouse] = lake.as_writer(
            "POST",
            lake.ns(warehouse, "mine") + "/register",
            json={"name": "events", "metadata-location": str(metadata_file)},
        )
    assert_refused(answers["plain"], 400, "BadRequestException", "not inside a table or view directory")
    assert lake.table("plain", "mine", "events").status_code == 404
    assert location_of(answers["mig"]) == f"file://{lake.root('mig')}/mine/events"


# -- section 4: registration -----------------------------------------------------------------------


def test_registering_a_dropped_tables_parked_file_is_refused(lake: Lake) -> None:
    """Another namespace's dropped table: its parked file is refused before it is read, with the
    answer every file the writer may not read gets (issue 27 §3)."""
    location = location_of(lake.create("lake", "other", "retired"))
    assert (
        lake.as_writer("DELETE", lake.ns("lake", "other") + "/tables/retired", lake.other_writer).status_code
        == 204
    )
    [parked] = [p for p in local(location).rglob("*.metadata.json") if "cedarberg-dropped" in p.parts]
    before = lake.registry()
    for spelling in spellings(parked):
        answer = lake.as_writer(
            "POST",
            lake.ns("lake", "mine") + "/register",
            json={"name": "loot", "metadata-location": spelling},
        )
        assert_refused(answer, 400, "BadRequestException", "does not name a metadata file this namespace")
    assert lake.registry() == before
    assert lake.table("lake", "mine", "loot").status_code == 404


def test_registering_a_file_with_a_live_tables_uuid_is_refused(lake: Lake) -> None:
    source_location = location_of(lake.create("plain", "mine", "uuid-source"))
    metadata = lake.table("plain", "mine", "uuid-source").json()
    copy_dir = object_dir("copy")
    copy = dict(metadata["metadata"], location=f"file://{lake.root('plain')}/mine/{copy_dir}")
    copy_file = lake.root("plain") / "mine" / copy_dir / "metadata" / "00000-copy.metadata.json"
    copy_file.parent.mkdir(parents=True)
    copy_file.write_text(json.dumps(copy))
    before = lake.registry()
    answer = lake.as_writer(
        "POST",
        lake.ns("plain", "mine") + "/register",
        json={"name": "twin", "metadata-location": str(copy_file)},
    )
    assert_refused(answer, 409, "AlreadyExistsException", "undrop it")
    assert lake.registry() == before
    # Control: the same file with a fresh UUID registers.
    copy["table-uuid"] = str(uuid.uuid4())
    copy_file.write_text(json.dumps(copy))
    answer = lake.as_writer(
        "POST",
        lake.ns("plain", "mine") + "/register",
        json={"name": "twin", "metadata-location": str(copy_file)},
    )
    assert answer.status_code == 200, answer.text
    assert source_location != answer.json()["metadata"]["location"]


# -- section 2: vending and signing refuse tables whose roots predate the rule and break it ------


class S3Lake:
    def __init__(self, gateway: SecureGateway, s3: MotoS3Server, base: Path) -> None:
        self.gateway = gateway
        self.s3 = s3
        self.base = base
        self.key = gateway.create_key("etl-bot", ["etl"])

    def session(self) -> requests.Session:
        return self.gateway.session(self.gateway.token(self.key))

    def table_url(self, name: str, suffix: str = "") -> str:
        return self.gateway.catalog_url(f"namespaces/{self.gateway.ns_path('sales')}/tables/{name}{suffix}")

    def create(self, name: str, location: str | None = None) -> str:
        body: dict[str, Any] = {"name": name, "schema": SCHEMA}
        if location is not None:
            body["location"] = location
        answer = self.session().post(
            self.gateway.catalog_url(f"namespaces/{self.gateway.ns_path('sales')}/tables"),
            json=body,
            timeout=HTTP_TIMEOUT,
        )
        return location_of(answer)

    def credentials(self, name: str) -> requests.Response:
        return self.session().get(self.table_url(name, "/credentials"), timeout=HTTP_TIMEOUT)

    def load_vended(self, name: str) -> requests.Response:
        headers = {"X-Iceberg-Access-Delegation": "vended-credentials"}
        return self.session().get(self.table_url(name), headers=headers, timeout=HTTP_TIMEOUT)

    def sign(self, name: str, location: str) -> requests.Response:
        key = location.removeprefix(f"s3://{self.s3.bucket}/") + "/data/f.parquet"
        payload = {
            "region": REGION,
            "uri": f"{self.s3.url}/{self.s3.bucket}/{key}",
            "method": "GET",
            "headers": {},
        }
        return self.session().post(self.table_url(name, "/sign"), json=payload, timeout=HTTP_TIMEOUT)

    def forget_roots(self, location: str) -> None:
        """Make a table look like one from before `object_roots` existed (no recorded roots)."""
        with sqlite3.connect(self.base / "gw" / "gateway" / "catalog.db") as db:
            db.execute("DELETE FROM object_roots WHERE root = ?", (location.encode(),))

    def audit_denials(self, action: str) -> list[dict[str, Any]]:
        records = flushed_audit_log(self.base / "audit.jsonl")
        return [r for r in records if r.get("action") == action and r.get("decision") == "deny"]


@pytest.fixture(scope="module")
def s3_lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[S3Lake]:
    base = tmp_path_factory.mktemp("confinement-s3")
    with pytest.MonkeyPatch.context() as env, moto_s3_server() as s3:
        for name in AMBIENT_CA_VARIABLES:
            env.delenv(name, raising=False)
        config = {
            "default_warehouse": "lake",
            "warehouses": {"lake": s3.warehouse("lake", vending=True)},
            "audit": {"destination": str(base / "audit.jsonl")},
        }
        with SecureGateway(base / "gw", pki=session_pki, config=config) as gateway:
            gateway.create_namespace("sales", writers=["etl"])
            yield S3Lake(gateway, s3, base)


def test_vending_and_signing_refuse_a_table_whose_old_roots_overlap_another(s3_lake: S3Lake) -> None:
    healthy = s3_lake.create("healthy")
    assert s3_lake.credentials("healthy").status_code == 200
    assert s3_lake.sign("healthy", healthy).status_code == 200

    # Data from before the rule: `outer` was never recorded, so `inner` could be created inside it.
    outer = s3_lake.create("outer")
    s3_lake.forget_roots(outer)
    inner = s3_lake.create("inner", f"s3a://{s3_lake.s3.bucket}/{outer.split('/', 3)[3]}/inner/")
    # Until a gateway start records it, an unrecorded table gets nothing.
    assert_refused(s3_lake.credentials("outer"), 403, "ForbiddenException", "not confined")
    s3_lake.gateway.process.restart()  # the backfill records `outer` and reports the violation
    assert "breaks the location rule" in s3_lake.gateway.log_text()

    calls = s3_lake.s3.assume_role_count()
    for name, location in (("outer", outer), ("inner", inner)):
        assert_refused(s3_lake.credentials(name), 403, "ForbiddenException", "overlaps")
        assert_refused(s3_lake.load_vended(name), 403, "ForbiddenException", "overlaps")
        assert_refused(s3_lake.sign(name, location), 403, "ForbiddenException", "overlaps")
    assert s3_lake.s3.assume_role_count() == calls  # nothing was vended
    assert len(s3_lake.audit_denials("loadCredentials")) >= 4
    assert len(s3_lake.audit_denials("signRequest")) >= 2
    # Control: the healthy table is untouched by its neighbours' problem.
    assert s3_lake.credentials("healthy").status_code == 200
    assert s3_lake.sign("healthy", healthy).status_code == 200


def test_concurrent_creates_at_overlapping_places_one_wins(lake: Lake) -> None:
    from concurrent.futures import ThreadPoolExecutor

    for round_no in range(5):
        outer = lake.root("plain") / "mine" / object_dir(f"race{round_no}")
        places = [(f"a{round_no}", str(outer)), (f"b{round_no}", f"file:{outer}/inner")]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda item: lake.create("plain", "mine", *item), places))
        assert sorted(answer.status_code for answer in answers) == [200, 400], [a.text for a in answers]


def test_rename_keeps_the_location_and_its_exclusivity(lake: Lake) -> None:
    location = location_of(lake.create("lake", "mine", "travels"))
    admin = lake.gateway.admin
    renamed = admin.post(
        lake.url("lake", "tables/rename"),
        json={
            "source": {"namespace": ["mine"], "name": "travels"},
            "destination": {"namespace": ["other"], "name": "travels"},
        },
        timeout=HTTP_TIMEOUT,
    )
    assert renamed.status_code == 204, renamed.text
    url = lake.ns("lake", "other") + "/tables/travels"
    # Not refused for staying in the old namespace's directory: ordinary commits go on.
    props = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"owner": "them"}}]}
    assert admin.post(url, json=props, timeout=HTTP_TIMEOUT).status_code == 200
    assert location_of(lake.table("lake", "other", "travels")) == location
    # Its location stays its own: nothing new may move in, from either namespace.
    assert_refused(
        lake.create("lake", "mine", "intruder", f"{location}/x"), 400, "BadRequestException", "overlaps"
    )
    # A new location must lie in its new namespace's directory.
    move = {"requirements": [], "updates": [{"action": "set-location", "location": f"{location}-2"}]}
    assert_refused(admin.post(url, json=move, timeout=HTTP_TIMEOUT), 400, "BadRequestException", "outside")


def test_a_namespace_directory_never_lies_inside_a_table(lake: Lake) -> None:
    location = location_of(lake.create("lake", "mine", "host"))
    before = lake.registry()
    answer = lake.gateway.admin.post(
        lake.url("lake", "namespaces"),
        json={"namespace": ["nested"], "properties": {"location": f"file:{local(location)}/ns/"}},
        timeout=HTTP_TIMEOUT,
    )
    assert_refused(answer, 400, "BadRequestException", "lies inside the location of a table or view")
    assert lake.registry() == before
    assert lake.gateway.admin.get(lake.ns("lake", "nested"), timeout=HTTP_TIMEOUT).status_code == 404
    update = lake.gateway.admin.post(
        lake.ns("lake", "other") + "/properties",
        json={"removals": [], "updates": {"location": location}},
        timeout=HTTP_TIMEOUT,
    )
    assert_refused(update, 400, "BadRequestException", "lies inside the location of a table or view")
    assert lake.registry() == before
