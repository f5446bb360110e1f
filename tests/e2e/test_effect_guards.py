"""Guards decide on the effect of a change, however it is spelled or sequenced.

A real gateway over HTTPS with the bundled policies and real API keys. Namespace `finance`
protects `main` and locks schemas; `scratch` and `scratch2` are plain namespaces of the same
writers. Each attack is an ordinary writer trying to reach a guarded effect another way; each
asserts the refusal (status, ErrorModel type) and that nothing changed, and beside it a control
shows the legitimate operation still works.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import TestPki

TIMEOUT = 30
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
GUARDS = {"cedarberg.protected-refs": "main", "cedarberg.schema-locked": "true"}


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


class Lake:
    """The gateway, an admin's view of it and a writer's and a reader's sessions."""

    def __init__(self, gw: SecureGateway) -> None:
        self.gw = gw
        self.admin_catalog = gw.admin_catalog()
        self.writer_key = gw.create_key("etl-bot", ["etl"])
        self.writer = gw.session(self.writer_key)
        self.reader = gw.session(gw.create_key("bi-bot", ["bi"]))

    def table_url(self, namespace: str, name: str) -> str:
        return self.gw.catalog_url(f"namespaces/{namespace}/tables/{name}")

    def table_with_history(self, namespace: str, name: str, appends: int = 3) -> list[int]:
        """A table (made by the admin) with `appends` snapshots; returns their ids, oldest first."""
        table = self.admin_catalog.create_table(f"{namespace}.{name}", SCHEMA)
        for i in range(appends):
            table.append(_rows(i))
        return [snapshot.snapshot_id for snapshot in table.refresh().snapshots()]

    def state(self, namespace: str, name: str) -> dict[str, Any]:
        """The table as the admin loads it (its metadata location and metadata)."""
        response = self.gw.admin.get(self.table_url(namespace, name), timeout=TIMEOUT)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def exists(self, namespace: str, name: str) -> bool:
        response = self.gw.admin.head(self.table_url(namespace, name), timeout=TIMEOUT)
        return response.status_code == 204

    def commit(
        self, session: requests.Session, namespace: str, name: str, *updates: dict[str, Any]
    ) -> requests.Response:
        return session.post(
            self.table_url(namespace, name),
            json={"requirements": [], "updates": list(updates)},
            timeout=TIMEOUT,
        )

    def rename(
        self, session: requests.Session, source: tuple[str, str], target: tuple[str, str]
    ) -> requests.Response:
        body = {
            "source": {"namespace": [source[0]], "name": source[1]},
            "destination": {"namespace": [target[0]], "name": target[1]},
        }
        return session.post(self.gw.catalog_url("tables/rename"), json=body, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("effects")
    with pytest.MonkeyPatch.context() as env, SecureGateway(root / "gw", pki=session_pki) as gw:
        for name in AMBIENT_CA_VARIABLES:  # pyiceberg/requests trust only the test CA
            env.delenv(name, raising=False)
        gw.create_namespace("finance", readers=["bi"], writers=["etl"], properties=GUARDS)
        gw.create_namespace("scratch", writers=["etl"])
        gw.create_namespace("scratch2", writers=["etl"])
        yield Lake(gw)


def _refused(response: requests.Response, status: int = 403, kind: str = "ForbiddenException") -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == kind
    assert response.json()["error"]["code"] == status


def _name() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


# -- 1. protected refs: every spelling and every route to the same effect ---------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param({"ref-name": "main", "snapshot-id": 0, "type": "branch"}, id="wire-names"),
        pytest.param({"ref_name": "main", "snapshot_id": 0, "type": "branch"}, id="field-names"),
        pytest.param({"ref_name": "main", "snapshot-id": 0, "type": "branch"}, id="mixed-names"),
    ],
)
def test_moving_a_protected_ref_is_refused_however_it_is_spelled(
    lake: Lake, spelling: dict[str, Any]
) -> None:
    name = _name()
    snapshots = lake.table_with_history("finance", name)
    before = lake.state("finance", name)
    update = {"action": "set-snapshot-ref", **spelling}
    update["snapshot-id" if "snapshot-id" in update else "snapshot_id"] = snapshots[0]
    _refused(lake.commit(lake.writer, "finance", name, update))
    after = lake.state("finance", name)
    assert after["metadata-location"] == before["metadata-location"]
    assert after["metadata"]["refs"]["main"]["snapshot-id"] == snapshots[-1]


def test_removing_the_snapshot_main_points_at_is_refused(lake: Lake) -> None:
    name = _name()
    snapshots = lake.table_with_history("finance", name)
    before = lake.state("finance", name)
    _refused(
        lake.commit(
            lake.writer, "finance", name, {"action": "remove-snapshots", "snapshot-ids": [snapshots[-1]]}
        )
    )
    _refused(lake.commit(lake.writer, "finance", name, {"action": "remove-snapshot-ref", "ref-name": "main"}))
    assert lake.state("finance", name)["metadata-location"] == before["metadata-location"]


def test_unprotected_refs_and_unreferenced_snapshots_stay_the_writers(lake: Lake) -> None:
    """Control: commits to other refs and expiry of snapshots no guarded ref needs."""
    name = _name()
    snapshots = lake.table_with_history("finance", name)
    branch = {"action": "set-snapshot-ref", "ref-name": "dev", "snapshot-id": snapshots[1], "type": "branch"}
    assert lake.commit(lake.writer, "finance", name, branch).status_code == 200
    expire = {"action": "remove-snapshots", "snapshot-ids": [snapshots[0]]}
    response = lake.commit(lake.writer, "finance", name, expire)
    assert response.status_code == 200, response.text
    metadata = lake.state("finance", name)["metadata"]
    assert metadata["refs"]["dev"]["snapshot-id"] == snapshots[1]
    assert metadata["refs"]["main"]["snapshot-id"] == snapshots[-1]
    assert snapshots[0] not in {s["snapshot-id"] for s in metadata["snapshots"]}


def test_a_transaction_is_written_only_if_every_effect_is_allowed(lake: Lake) -> None:
    guarded, plain = _name(), _name()
    snapshots = lake.table_with_history("finance", guarded)
    lake.table_with_history("scratch", plain, appends=1)
    before = {"finance": lake.state("finance", guarded), "scratch": lake.state("scratch", plain)}

    def change(namespace: str, name: str, *updates: dict[str, Any]) -> dict[str, Any]:
        return {
            "identifier": {"namespace": [namespace], "name": name},
            "requirements": [],
            "updates": list(updates),
        }

    allowed = change("scratch", plain, {"action": "set-properties", "updates": {"owner": "etl"}})
    moves_main = change("finance", guarded, {"action": "remove-snapshots", "snapshot-ids": [snapshots[-1]]})
    url = lake.gw.catalog_url("transactions/commit")
    response = lake.writer.post(url, json={"table-changes": [allowed, moves_main]}, timeout=TIMEOUT)
    _refused(response)
    assert lake.state("scratch", plain)["metadata-location"] == before["scratch"]["metadata-location"]
    assert lake.state("finance", guarded)["metadata-location"] == before["finance"]["metadata-location"]
    # Control: the allowed change alone lands.
    response = lake.writer.post(url, json={"table-changes": [allowed]}, timeout=TIMEOUT)
    assert response.status_code == 204, response.text
    assert lake.state("scratch", plain)["metadata"]["properties"]["owner"] == "etl"


# -- 2. schema lock ---------------------------------------------------------------------------------


def test_a_locked_schema_cannot_change_and_creating_a_table_is_not_a_change(lake: Lake) -> None:
    name = _name()
    lake.table_with_history("finance", name, appends=1)
    before = lake.state("finance", name)
    new_schema = {
        "type": "struct",
        "schema-id": 1,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 2, "name": "note", "type": "string", "required": False},
        ],
    }
    add = {"action": "add-schema", "schema": new_schema}
    _refused(
        lake.commit(lake.writer, "finance", name, add, {"action": "set-current-schema", "schema-id": -1})
    )
    assert lake.state("finance", name)["metadata-location"] == before["metadata-location"]
    # Control: a writer creates a table in the locked namespace (its first schema is no change).
    created = lake.writer.post(
        lake.gw.catalog_url("namespaces/finance/tables"),
        json={"name": _name(), "schema": {"type": "struct", "fields": new_schema["fields"]}},
        timeout=TIMEOUT,
    )
    assert created.status_code == 200, created.text


# -- 3. renames cannot launder guarded state --------------------------------------------------------


def test_a_guarded_table_cannot_be_renamed_out_to_change_it_unguarded(lake: Lake) -> None:
    name = _name()
    lake.table_with_history("finance", name)
    before = lake.state("finance", name)
    _refused(lake.rename(lake.writer, ("finance", name), ("scratch", name)))
    assert lake.state("finance", name)["metadata-location"] == before["metadata-location"]
    assert not lake.exists("scratch", name)


def test_a_table_cannot_bring_a_protected_ref_into_a_guarded_namespace(lake: Lake) -> None:
    name = _name()
    lake.table_with_history("scratch", name, appends=1)
    _refused(lake.rename(lake.writer, ("scratch", name), ("finance", name)))
    assert lake.exists("scratch", name)
    assert not lake.exists("finance", name)


def test_renames_between_unguarded_namespaces_and_within_a_guarded_one_work(lake: Lake) -> None:
    """Controls: the round trip through plain namespaces, and a rename that stays in `finance`."""
    name = _name()
    lake.table_with_history("scratch", name, appends=1)
    assert lake.rename(lake.writer, ("scratch", name), ("scratch2", name)).status_code == 204
    assert lake.rename(lake.writer, ("scratch2", name), ("scratch", name)).status_code == 204
    assert lake.exists("scratch", name)
    guarded, renamed = _name(), _name()
    lake.table_with_history("finance", guarded, appends=1)
    assert lake.rename(lake.writer, ("finance", guarded), ("finance", renamed)).status_code == 204
    assert lake.exists("finance", renamed)


def test_admins_may_move_protected_state(lake: Lake) -> None:
    """Control: the guards bind everyone but admins."""
    name = _name()
    snapshots = lake.table_with_history("finance", name)
    move = {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": snapshots[0], "type": "branch"}
    assert lake.commit(lake.gw.admin, "finance", name, move).status_code == 200
    assert lake.rename(lake.gw.admin, ("finance", name), ("scratch", name)).status_code == 204


# -- 4. one parse, before any decision ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("namespaces/finance/tables/any", {"updates": 1.5}, id="updateTable"),
        pytest.param("namespaces/finance/views/any", {"updates": 1.5}, id="replaceView"),
        pytest.param("transactions/commit", {"table-changes": [{"updates": 1.5}]}, id="transaction"),
        pytest.param("transactions/commit", {"table-changes": 1.5}, id="transaction-changes"),
        pytest.param(
            "namespaces/finance/tables/any", {"updates": [{"action": "x" * 100_000}]}, id="huge-action"
        ),
    ],
)
def test_malformed_bodies_are_a_400_before_any_decision(lake: Lake, path: str, body: dict[str, Any]) -> None:
    # The reader may not commit: a 400 (not a 403) shows the body was refused before deciding.
    _refused(
        lake.reader.post(lake.gw.catalog_url(path), json=body, timeout=TIMEOUT), 400, "BadRequestException"
    )
    _refused(
        lake.writer.post(lake.gw.catalog_url(path), json=body, timeout=TIMEOUT), 400, "BadRequestException"
    )


def _view_body(name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "schema": {"type": "struct", "schema-id": 0, "fields": fields},
        "view-version": {
            "version-id": 1,
            "schema-id": 0,
            "timestamp-ms": 1_700_000_000_000,
            "summary": {},
            "representations": [{"type": "sql", "sql": "select 1 as id", "dialect": "spark"}],
            "default-namespace": ["finance"],
        },
        "properties": {},
    }


def test_a_locked_view_schema_cannot_change_and_creating_a_view_is_not_a_change(lake: Lake) -> None:
    name = _name()
    id_field = {"id": 1, "name": "id", "type": "long", "required": False}
    views = lake.gw.catalog_url("namespaces/finance/views")
    created = lake.writer.post(views, json=_view_body(name, [id_field]), timeout=TIMEOUT)  # control
    assert created.status_code == 200, created.text
    wider = [id_field, {"id": 2, "name": "note", "type": "string", "required": False}]
    version = {**_view_body(name, wider)["view-version"], "version-id": 2, "schema-id": -1}
    replace = {
        "requirements": [],
        "updates": [
            {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": wider}},
            {"action": "add-view-version", "view-version": version},
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
    }
    _refused(lake.writer.post(f"{views}/{name}", json=replace, timeout=TIMEOUT))
    loaded = lake.gw.admin.get(f"{views}/{name}", timeout=TIMEOUT).json()
    assert loaded["metadata-location"] == created.json()["metadata-location"]
    # Control: a change that keeps the schema (a new SQL text) is the writer's.
    same_schema = {
        **version,
        "schema-id": 0,
        "representations": [{"type": "sql", "sql": "select 2 as id", "dialect": "spark"}],
    }
    kept = {
        "requirements": [],
        "updates": [
            {"action": "add-view-version", "view-version": same_schema},
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
    }
    response = lake.writer.post(f"{views}/{name}", json=kept, timeout=TIMEOUT)
    assert response.status_code == 200, response.text


# -- 5. an identifier is not an identity -------------------------------------------------------------


def _impostor(metadata: dict[str, Any], snapshot_id: int) -> dict[str, Any]:
    """Another snapshot under `snapshot_id`: same parent and schema, the writer's manifest list."""
    original = next(s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot_id)
    manifest_list = original["manifest-list"].rsplit("/", 1)[0] + "/snap-impostor.avro"
    return {
        **original,
        "manifest-list": manifest_list,
        "sequence-number": metadata["last-sequence-number"] + 1,
    }


def _main_history(metadata: dict[str, Any]) -> list[tuple[int, str]]:
    snapshots = {s["snapshot-id"]: s for s in metadata["snapshots"]}
    history, snapshot_id = [], metadata["refs"]["main"]["snapshot-id"]
    while snapshot_id in snapshots:
        history.append((snapshot_id, snapshots[snapshot_id]["manifest-list"]))
        snapshot_id = snapshots[snapshot_id].get("parent-snapshot-id")
    return history


@pytest.mark.parametrize("where", ["head", "ancestor", "across-a-transaction"])
def test_a_snapshot_of_main_cannot_be_replaced_under_its_id(lake: Lake, where: str) -> None:
    """The attack: `remove-snapshots [S]`, `add-snapshot` S with another manifest list and
    `set-snapshot-ref main -> S` leave every ref tuple and id as they were. Refused as Iceberg's
    reference refuses it (400 ValidationException), and `main` reads what it read."""
    name = _name()
    snapshots = lake.table_with_history("finance", name)
    before = lake.state("finance", name)
    target = snapshots[0] if where == "ancestor" else snapshots[-1]
    remove = {"action": "remove-snapshots", "snapshot-ids": [target]}
    add = {"action": "add-snapshot", "snapshot": _impostor(before["metadata"], target)}
    repoint = {
        "action": "set-snapshot-ref",
        "ref-name": "main",
        "snapshot-id": snapshots[-1],
        "type": "branch",
    }
    if where == "across-a-transaction":
        table = {"namespace": ["finance"], "name": name}
        changes = [
            {"identifier": table, "requirements": [], "updates": [remove]},
            {"identifier": table, "requirements": [], "updates": [add, repoint]},
        ]
        url = lake.gw.catalog_url("transactions/commit")
        response = lake.writer.post(url, json={"table-changes": changes}, timeout=TIMEOUT)
    else:
        response = lake.commit(lake.writer, "finance", name, remove, add, repoint)
    _refused(response, 400, "ValidationException")
    assert response.json()["error"]["message"] == f"Snapshot already exists for id: {target}"
    after = lake.state("finance", name)
    assert after["metadata-location"] == before["metadata-location"]
    assert _main_history(after["metadata"]) == _main_history(before["metadata"])
    assert len(_main_history(after["metadata"])) == len(snapshots)


def test_a_locked_schema_cannot_be_replaced_under_its_id_in_a_transaction(lake: Lake) -> None:
    """A transaction's first change list drops schema 1, its second adds a schema that takes id 1
    and makes it current: the ids and the current id end as they began, the schema does not."""
    name = _name()
    lake.table_with_history("finance", name, appends=1)
    fields = [{"id": 1, "name": "id", "type": "long", "required": False}]
    note = {"id": 2, "name": "note", "type": "string", "required": False}
    admin_change = lake.commit(
        lake.gw.admin,
        "finance",
        name,
        {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [*fields, note]}},
        {"action": "set-current-schema", "schema-id": -1},
    )
    assert admin_change.status_code == 200, admin_change.text
    before = lake.state("finance", name)
    secret = {"id": 3, "name": "secret", "type": "string", "required": False}
    table = {"namespace": ["finance"], "name": name}
    changes = [
        {
            "identifier": table,
            "requirements": [],
            "updates": [
                {"action": "set-current-schema", "schema-id": 0},
                {"action": "remove-schemas", "schema-ids": [1]},
            ],
        },
        {
            "identifier": table,
            "requirements": [],
            "updates": [
                {
                    "action": "add-schema",
                    "schema": {"type": "struct", "schema-id": 1, "fields": [*fields, secret]},
                },
                {"action": "set-current-schema", "schema-id": -1},
            ],
        },
    ]
    url = lake.gw.catalog_url("transactions/commit")
    _refused(lake.writer.post(url, json={"table-changes": changes}, timeout=TIMEOUT))
    after = lake.state("finance", name)
    assert after["metadata-location"] == before["metadata-location"]
    assert after["metadata"]["schemas"] == before["metadata"]["schemas"]


def test_writers_append_to_and_expire_an_unprotected_main(lake: Lake) -> None:
    """Control: where `main` is not protected, a writer's engine appends to it and expires
    snapshots no ref points at, through the same checks."""
    name = _name()
    lake.table_with_history("scratch", name, appends=1)
    table = lake.gw.catalog("etl", token=lake.writer_key).load_table(f"scratch.{name}")
    table.append(_rows(7))
    table.append(_rows(8))
    metadata = lake.state("scratch", name)["metadata"]
    history = _main_history(metadata)
    assert len(history) == 3
    oldest = history[-1][0]
    expire = lake.commit(
        lake.writer, "scratch", name, {"action": "remove-snapshots", "snapshot-ids": [oldest]}
    )
    assert expire.status_code == 200, expire.text
    after = lake.state("scratch", name)["metadata"]
    assert [s for s, _ in _main_history(after)] == [s for s, _ in history[:2]]
    assert sorted(table.refresh().scan().to_arrow().column("id").to_pylist()) == [0, 7, 8]
