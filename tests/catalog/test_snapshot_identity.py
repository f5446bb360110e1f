"""A snapshot id names one snapshot: the id rule and the history of protected refs, on a real
catalog (SQLite, local KEK, sealing warehouse) with the bundled policies deciding as the gate.

The writer here is an ordinary member of the namespace's writers; `main` and the tag `release`
are protected and the schema is locked, as `cedarberg.protected-refs` / `schema-locked` say.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.effects import Effect
from cedarberg.catalog.errors import (
    CommitFailedError,
    ForbiddenError,
    InvalidRequestError,
    MetadataValidationError,
)
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.tables import TableService
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz.authorizer import decide_checks, effect_checks
from cedarberg.gateway.authz.context import ChangeSummary, RequestContext
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import child_table, namespace_resource
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.catalogs import WAREHOUSE, catalog_context

NAMESPACE = Namespace.of(["finance"])
GUARDS = {
    "cedarberg.writers": "etl",
    "cedarberg.protected-refs": "main,release",
    "cedarberg.schema-locked": "true",
}
PROTECTED = ("main", "release")
WRITER = Principal("erin", PrincipalKind.USER, frozenset({"etl"}), AuthMethod.API_KEY, {})
ADMIN = Principal("ada", PrincipalKind.USER, frozenset({"admins"}), AuthMethod.API_KEY, {})
FIELD = {"id": 1, "name": "id", "type": "long", "required": False}
REFUSED = (InvalidRequestError, CommitFailedError, ForbiddenError)


def _schema(schema_id: int, *extra: str) -> dict[str, Any]:
    fields = [
        FIELD,
        *({"id": 2 + i, "name": n, "type": "string", "required": False} for i, n in enumerate(extra)),
    ]
    return {"type": "struct", "schema-id": schema_id, "fields": fields}


@dataclass
class Lab:
    """One catalog, one event loop and the bundled policies, shared by the examples: each example
    works on a table of its own."""

    loop: asyncio.AbstractEventLoop
    ctx: CatalogContext
    engine: PolicyEngine
    names: Iterator[int] = field(default_factory=itertools.count)

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def gate_for(self, identifier: Identifier, operation: str, who: Principal = WRITER) -> Any:
        """`who`'s gate: the bundled policies decide each effect, as the gateway does."""
        resource = child_table(namespace_resource(WAREHOUSE, NAMESPACE.levels, [GUARDS]), identifier.name)

        async def gate(effects: Sequence[Effect]) -> None:
            for effect in effects:
                context = RequestContext.of(who, "127.0.0.1", ChangeSummary.of_effect(effect))
                verdict = decide_checks(
                    self.engine, who, operation, effect_checks(operation, resource, context)
                )
                if not verdict.allowed:
                    raise ForbiddenError(f"refused by the bundled policies: {sorted(effect.update_kinds)}")

        return gate


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None) -> Iterator[Lab]:
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    engine = PolicyEngine(BUNDLED_POLICY_DIR)
    engine.load()
    try:
        ctx = loop.run_until_complete(
            stack.enter_async_context(catalog_context(tmp_path_factory.mktemp("ids"), url=module_store_url))
        )
        loop.run_until_complete(NamespaceService(ctx).create(None, NAMESPACE, GUARDS, None))
        yield Lab(loop, ctx, engine)
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()


def _snapshot(location: str, snapshot_id: int, parent: int | None, sequence: int, tag: str) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": 1_700_000_000_000 + sequence,
        "manifest-list": f"{location}/metadata/snap-{snapshot_id}-{tag}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    if parent is not None:
        snap["parent-snapshot-id"] = parent
    return snap


async def _stored(lab: Lab, identifier: Identifier) -> tuple[str, dict[str, Any]]:
    """The table's metadata location and metadata as stored."""
    async with lab.ctx.store.read() as tx:
        row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, identifier.name)
    assert row is not None
    return row.metadata_location, orjson.loads(await lab.ctx.sealer.open_row(row))


async def _commit(
    lab: Lab, identifier: Identifier, *lists: list[dict[str, Any]], admin: bool = False
) -> None:
    """One commit of `lists` (one: updateTable; several: a transaction touching the table each time)."""
    tables = TableService(lab.ctx)
    if len(lists) == 1:
        request = req.parse(req.CommitTableRequest, {"requirements": [], "updates": lists[0]})
        gate = lab.gate_for(identifier, "updateTable", ADMIN if admin else WRITER)
        await tables.commit(None, identifier, request, None, gate)
        return
    changes = [
        (identifier, req.parse(req.CommitTableRequest, {"requirements": [], "updates": updates}))
        for updates in lists
    ]
    await tables.commit_transaction(
        None, changes, None, lab.gate_for(identifier, "commitTransaction", ADMIN if admin else WRITER)
    )


async def _guarded_table(lab: Lab) -> tuple[Identifier, str]:
    """A table with history 1 <- 2 <- 3: `main` and the branch `dev` at 3, the tag `release` at 2,
    and schemas 0 (current) and 1. Returns it and its location."""
    identifier = Identifier.of(NAMESPACE, f"t{next(lab.names)}")
    create = req.parse(req.CreateTableRequest, {"name": identifier.name, "schema": _schema(0)})
    await TableService(lab.ctx).create(
        None, NAMESPACE, create, None, lab.gate_for(identifier, "createTable", ADMIN)
    )
    _, metadata = await _stored(lab, identifier)
    location = metadata["location"]
    seed: list[dict[str, Any]] = [
        {"action": "add-snapshot", "snapshot": _snapshot(location, 1, None, 1, "a")},
        {"action": "add-snapshot", "snapshot": _snapshot(location, 2, 1, 2, "a")},
        {"action": "add-snapshot", "snapshot": _snapshot(location, 3, 2, 3, "a")},
        {"action": "add-schema", "schema": _schema(1, "note")},
        {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 3, "type": "branch"},
        {"action": "set-snapshot-ref", "ref-name": "dev", "snapshot-id": 3, "type": "branch"},
        {"action": "set-snapshot-ref", "ref-name": "release", "snapshot-id": 2, "type": "tag"},
    ]
    await _commit(lab, identifier, seed, admin=True)
    return identifier, location


def _history(metadata: dict[str, Any], ref: str) -> list[tuple[Any, ...]]:
    """What a reader of `ref` reads, newest first: each snapshot reachable from it, by content."""
    snapshots = {snap["snapshot-id"]: snap for snap in metadata.get("snapshots", [])}
    target = metadata.get("refs", {}).get(ref)
    chain: list[tuple[Any, ...]] = []
    snapshot_id = None if target is None else target["snapshot-id"]
    while snapshot_id in snapshots and len(chain) <= len(snapshots):
        snap = snapshots[snapshot_id]
        chain.append(
            (
                snapshot_id,
                snap["manifest-list"],
                snap.get("sequence-number"),
                snap.get("schema-id"),
                orjson.dumps(snap.get("summary"), option=orjson.OPT_SORT_KEYS),
                snap["timestamp-ms"],
            )
        )
        snapshot_id = snap.get("parent-snapshot-id")
    return chain


def _schemas(metadata: dict[str, Any]) -> tuple[int, dict[int, Any]]:
    """The current schema id and every schema's fields by id."""
    schemas = {schema["schema-id"]: schema["fields"] for schema in metadata["schemas"]}
    return metadata["current-schema-id"], schemas


# -- the id rule ----------------------------------------------------------------------------------


def _replace_head(location: str) -> list[list[dict[str, Any]]]:
    """The attack: remove main's snapshot and add another under its id, in one change list."""
    return [
        [
            {"action": "remove-snapshots", "snapshot-ids": [3]},
            {"action": "add-snapshot", "snapshot": _snapshot(location, 3, 2, 4, "evil")},
            {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 3, "type": "branch"},
        ]
    ]


def _replace_ancestor(location: str) -> list[list[dict[str, Any]]]:
    return [
        [
            {"action": "remove-snapshots", "snapshot-ids": [1]},
            {"action": "add-snapshot", "snapshot": _snapshot(location, 1, None, 4, "evil")},
        ]
    ]


def _replace_across_a_transaction(location: str) -> list[list[dict[str, Any]]]:
    """The same attack split over two change lists of one transaction."""
    return [
        [{"action": "remove-snapshots", "snapshot-ids": [3]}],
        [
            {"action": "add-snapshot", "snapshot": _snapshot(location, 3, 2, 4, "evil")},
            {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 3, "type": "branch"},
        ],
    ]


def _add_remove_add(location: str) -> list[list[dict[str, Any]]]:
    """An id added earlier in the same commit, removed, then added again."""
    return [
        [
            {"action": "add-snapshot", "snapshot": _snapshot(location, 7, 3, 4, "a")},
            {"action": "remove-snapshots", "snapshot-ids": [7]},
        ],
        [{"action": "add-snapshot", "snapshot": _snapshot(location, 7, 3, 5, "b")}],
    ]


@pytest.mark.parametrize(
    ("commit", "reused"),
    [
        pytest.param(_replace_head, 3, id="main-head"),
        pytest.param(_replace_ancestor, 1, id="ancestor"),
        pytest.param(_replace_across_a_transaction, 3, id="across-a-transaction"),
        pytest.param(_add_remove_add, 7, id="added-in-the-commit"),
    ],
)
@pytest.mark.parametrize("admin", [False, True], ids=["writer", "admin"])
def test_a_snapshot_id_never_names_a_second_snapshot(lab: Lab, commit: Any, reused: int, admin: bool) -> None:
    """Attack: refused before any decision, for admins too (it is invalid metadata, not a
    privilege), in the reference's words; the table stays as it was."""
    identifier, location = lab.run(_guarded_table(lab))
    before = lab.run(_stored(lab, identifier))
    with pytest.raises(MetadataValidationError) as refused:
        lab.run(_commit(lab, identifier, *commit(location), admin=admin))
    assert str(refused.value) == f"Snapshot already exists for id: {reused}"
    assert lab.run(_stored(lab, identifier)) == before


def test_new_snapshot_ids_and_expiry_stay_the_writers(lab: Lab) -> None:
    """Control: an append to an unprotected branch, and expiring an old snapshot of main's history."""
    identifier, location = lab.run(_guarded_table(lab))
    append = [
        {"action": "add-snapshot", "snapshot": _snapshot(location, 4, 3, 4, "a")},
        {"action": "set-snapshot-ref", "ref-name": "dev", "snapshot-id": 4, "type": "branch"},
    ]
    lab.run(_commit(lab, identifier, append))
    lab.run(_commit(lab, identifier, [{"action": "remove-snapshots", "snapshot-ids": [1]}]))
    _, metadata = lab.run(_stored(lab, identifier))
    assert metadata["refs"]["dev"]["snapshot-id"] == 4
    assert metadata["refs"]["main"]["snapshot-id"] == 3
    assert {snap["snapshot-id"] for snap in metadata["snapshots"]} == {2, 3, 4}


# -- the property: protected history never changes, ordinary commits keep working ---------------

# Hypothesis tries the first of each choice most: the protected refs and the newest snapshots.
REF_TYPES = {"main": "branch", "release": "tag", "dev": "branch"}
REFS = tuple(REF_TYPES)
MOVES = ("replace", "schema", "replace", "add", "remove", "set-ref", "remove-ref", "current-schema")


Updates = list[dict[str, Any]]


def _move(
    data: st.DataObject, metadata: dict[str, Any], location: str, spent: list[int]
) -> tuple[Updates, Updates]:
    """One move drawn against the table as it is (so that most moves can apply), over the ids the
    table holds or held. A move that removes something and adds it again (`replace` for a
    snapshot, `schema` for a schema) comes in two parts: in a transaction the second part goes
    into the second change list to the same table."""
    held = sorted((snap["snapshot-id"] for snap in metadata.get("snapshots", [])), reverse=True)
    ids = st.sampled_from(sorted({*held, *spent, 1, 2, 3, 4}, reverse=True))
    sequence = metadata["last-sequence-number"] + data.draw(st.sampled_from([1, 2, 0, -1]))
    parent = data.draw(st.none() | ids)
    move = data.draw(st.sampled_from(MOVES))
    if move in {"replace", "add"}:
        snapshot_id = data.draw(st.sampled_from(held) if move == "replace" and held else ids)
        spent.append(snapshot_id)
        snapshot = _snapshot(location, snapshot_id, parent, sequence, "evil")
        add = {"action": "add-snapshot", "snapshot": snapshot}
        if move == "add":
            return [add], []
        ref = data.draw(st.sampled_from([*REFS, None]))
        repoint = [] if ref is None else [_set_ref(ref, snapshot_id, REF_TYPES[ref])]
        return [{"action": "remove-snapshots", "snapshot-ids": [snapshot_id]}], [add, *repoint]
    if move == "remove":
        removed = data.draw(st.lists(ids, min_size=1, max_size=2, unique=True))
        return [{"action": "remove-snapshots", "snapshot-ids": removed}], []
    if move == "set-ref":
        ref = data.draw(st.sampled_from(REFS))
        return [_set_ref(ref, data.draw(ids), data.draw(st.sampled_from(["branch", "tag"])))], []
    if move == "remove-ref":
        return [{"action": "remove-snapshot-ref", "ref-name": data.draw(st.sampled_from(REFS))}], []
    schema_ids = sorted((schema["schema-id"] for schema in metadata["schemas"]), reverse=True)
    if move == "current-schema":
        return [
            {"action": "set-current-schema", "schema-id": data.draw(st.sampled_from([*schema_ids, -1]))}
        ], []
    # Remove a schema and add another: a later change list numbers it from the schemas left, so
    # it may take the removed one's id.
    removed_schema = data.draw(st.sampled_from(schema_ids))
    name = data.draw(st.sampled_from(["other", "note"]))
    added = [{"action": "add-schema", "schema": _schema(removed_schema, name)}]
    if data.draw(st.booleans()):
        added.append({"action": "set-current-schema", "schema-id": -1})
    return [{"action": "remove-schemas", "schema-ids": [removed_schema]}], added


def _set_ref(ref: str, snapshot_id: int, kind: str) -> dict[str, Any]:
    return {"action": "set-snapshot-ref", "ref-name": ref, "snapshot-id": snapshot_id, "type": kind}


async def _writer_commit(
    lab: Lab, identifier: Identifier, data: st.DataObject, location: str, spent: list[int]
) -> None:
    """One drawn commit by the writer, then the property checked against the table before it."""
    before_location, before = await _stored(lab, identifier)
    moves = [_move(data, before, location, spent) for _ in range(data.draw(st.integers(1, 2)))]
    first = [update for part, _ in moves for update in part]
    second = [update for _, part in moves for update in part]
    # One change list (updateTable), or two touching the table twice (a transaction).
    lists = [first + second] if data.draw(st.booleans()) else [first, second]
    try:
        await _commit(lab, identifier, *lists)
    except REFUSED:
        assert (await _stored(lab, identifier))[0] == before_location  # left as it was
    _, after = await _stored(lab, identifier)
    for ref in PROTECTED:
        kept = _history(after, ref)
        # The ref still reads what it read; its history may only have lost its oldest part.
        assert kept, f"{ref} was removed by {lists}"
        assert kept == _history(before, ref)[: len(kept)], f"{ref} changed by {lists}"
    assert _schemas(after) == _schemas(before), f"the locked schemas changed by {lists}"


async def _scenario(lab: Lab, data: st.DataObject) -> None:
    identifier, location = await _guarded_table(lab)
    spent: list[int] = []
    for fresh in range(1000, 1000 + data.draw(st.integers(1, 5))):
        await _writer_commit(lab, identifier, data, location, spent)
        # An ordinary append to an unprotected branch lands whatever came before it.
        _, metadata = await _stored(lab, identifier)
        dev = metadata.get("refs", {}).get("dev")
        parent = None if dev is None else dev["snapshot-id"]
        snapshot = _snapshot(location, fresh, parent, metadata["last-sequence-number"] + 1, "dev")
        await _commit(
            lab,
            identifier,
            [{"action": "add-snapshot", "snapshot": snapshot}, _set_ref("dev", fresh, "branch")],
        )
        assert (await _stored(lab, identifier))[1]["refs"]["dev"]["snapshot-id"] == fresh


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_commit_a_writer_may_make_changes_what_a_protected_ref_reads(
    lab: Lab, data: st.DataObject
) -> None:
    lab.run(_scenario(lab, data))


def test_the_property_sees_a_rewritten_history() -> None:
    """The oracle of the property test tells a rewritten snapshot from an expired one."""
    base = {
        "refs": {"main": {"snapshot-id": 2}},
        "snapshots": [
            {"snapshot-id": 1, "manifest-list": "a", "timestamp-ms": 1},
            {"snapshot-id": 2, "parent-snapshot-id": 1, "manifest-list": "b", "timestamp-ms": 2},
        ],
    }
    expired = {**base, "snapshots": [{"snapshot-id": 2, "manifest-list": "b", "timestamp-ms": 2}]}
    rewritten = {
        **base,
        "snapshots": [base["snapshots"][0], {**base["snapshots"][1], "manifest-list": "evil"}],
    }
    assert _history(expired, "main") == _history(base, "main")[:1]
    assert _history(rewritten, "main") != _history(base, "main")[:2]
