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

    def gate_for(self, identifier: Identifier, operation: str) -> Any:
        """The writer's gate: the bundled policies decide each effect, as the gateway does."""
        resource = child_table(namespace_resource(WAREHOUSE, NAMESPACE.levels, [GUARDS]), identifier.name)

        async def gate(effects: Sequence[Effect]) -> None:
            for effect in effects:
                context = RequestContext.of(WRITER, "127.0.0.1", ChangeSummary.of_effect(effect))
                verdict = decide_checks(
                    self.engine, WRITER, operation, effect_checks(operation, resource, context)
                )
                if not verdict.allowed:
                    raise ForbiddenError(f"refused by the bundled policies: {sorted(effect.update_kinds)}")

        return gate


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    engine = PolicyEngine(BUNDLED_POLICY_DIR)
    engine.load()
    try:
        ctx = loop.run_until_complete(
            stack.enter_async_context(catalog_context(tmp_path_factory.mktemp("ids")))
        )
        loop.run_until_complete(NamespaceService(ctx).create(None, NAMESPACE, GUARDS, None))
        yield Lab(loop, ctx, engine)
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()


async def _allow(_effects: Sequence[Effect]) -> None:
    """The admin's gate (admins are bound by no guard)."""


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
        row = await tx.get_object(WAREHOUSE, NAMESPACE.key, identifier.name)
    assert row is not None
    return row.metadata_location, orjson.loads(await lab.ctx.sealer.open_row(row))


async def _commit(
    lab: Lab, identifier: Identifier, *lists: list[dict[str, Any]], admin: bool = False
) -> None:
    """One commit of `lists` (one: updateTable; several: a transaction touching the table each time)."""
    tables = TableService(lab.ctx)
    if len(lists) == 1:
        request = req.parse(req.CommitTableRequest, {"requirements": [], "updates": lists[0]})
        gate = _allow if admin else lab.gate_for(identifier, "updateTable")
        await tables.commit(None, identifier, request, None, gate)
        return
    changes = [
        (identifier, req.parse(req.CommitTableRequest, {"requirements": [], "updates": updates}))
        for updates in lists
    ]
    await tables.commit_transaction(
        None, changes, None, _allow if admin else lab.gate_for(identifier, "commitTransaction")
    )


async def _guarded_table(lab: Lab) -> tuple[Identifier, str]:
    """A table with history 1 <- 2 <- 3: `main` and the branch `dev` at 3, the tag `release` at 2,
    and schemas 0 (current) and 1. Returns it and its location."""
    identifier = Identifier.of(NAMESPACE, f"t{next(lab.names)}")
    create = req.parse(req.CreateTableRequest, {"name": identifier.name, "schema": _schema(0)})
    await TableService(lab.ctx).create(None, NAMESPACE, create, None, _allow)
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


def _current_schema(metadata: dict[str, Any]) -> dict[str, Any]:
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    return {key: value for key, value in schema.items() if key != "schema-id"}


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

IDS = st.sampled_from([1, 2, 3, 4])
REFS = st.sampled_from(["main", "release", "dev"])
REF_TYPES = {"main": "branch", "release": "tag", "dev": "branch"}
SNAPSHOT = st.tuples(IDS, st.none() | IDS, st.integers(-1, 2), st.sampled_from(["x", "y"]))
# Each move renders as one update, or as several for `replace` (remove an id, add it again and
# perhaps point a ref at it): reused ids are what the rule is about, so they are common here.
MOVES = st.one_of(
    st.tuples(st.just("add"), SNAPSHOT),
    st.tuples(st.just("replace"), SNAPSHOT, st.none() | REFS),
    st.tuples(st.just("remove"), st.lists(IDS, min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("set-ref"), REFS, IDS, st.sampled_from(["branch", "tag"])),
    st.tuples(st.just("remove-ref"), REFS),
    st.tuples(st.just("current-schema"), st.sampled_from([-1, 0, 1, 2])),
    st.tuples(st.just("add-schema"), st.sampled_from(["note", "other"])),
    st.tuples(st.just("remove-schemas"), st.sampled_from([0, 1])),
)
# A commit: one change list (updateTable) or two to the same table (a transaction).
COMMITS = st.lists(
    st.lists(st.lists(MOVES, min_size=1, max_size=4), min_size=1, max_size=2), min_size=1, max_size=4
)


def _render(move: tuple[Any, ...], location: str, last_sequence: int) -> list[dict[str, Any]]:
    match move:
        case ("add", (snapshot_id, parent, offset, tag)):
            snapshot = _snapshot(location, snapshot_id, parent, last_sequence + offset, tag)
            return [{"action": "add-snapshot", "snapshot": snapshot}]
        case ("replace", (snapshot_id, parent, offset, tag), ref):
            snapshot = _snapshot(location, snapshot_id, parent, last_sequence + offset, tag)
            updates = [
                {"action": "remove-snapshots", "snapshot-ids": [snapshot_id]},
                {"action": "add-snapshot", "snapshot": snapshot},
            ]
            if ref is not None:
                kind = REF_TYPES[ref]
                updates.append(
                    {"action": "set-snapshot-ref", "ref-name": ref, "snapshot-id": snapshot_id, "type": kind}
                )
            return updates
        case ("remove", ids):
            return [{"action": "remove-snapshots", "snapshot-ids": ids}]
        case ("set-ref", ref, snapshot_id, kind):
            return [{"action": "set-snapshot-ref", "ref-name": ref, "snapshot-id": snapshot_id, "type": kind}]
        case ("remove-ref", ref):
            return [{"action": "remove-snapshot-ref", "ref-name": ref}]
        case ("current-schema", schema_id):
            return [{"action": "set-current-schema", "schema-id": schema_id}]
        case ("add-schema", name):
            return [{"action": "add-schema", "schema": _schema(1, name)}]
        case ("remove-schemas", schema_id):
            return [{"action": "remove-schemas", "schema-ids": [schema_id]}]
    raise AssertionError(f"no rendering for {move}")


async def _scenario(lab: Lab, commits: list[list[list[tuple[Any, ...]]]]) -> None:
    identifier, location = await _guarded_table(lab)
    fresh = itertools.count(1000)
    for lists in commits:
        before_location, before = await _stored(lab, identifier)
        rendered = [
            [_render(u, location, before["last-sequence-number"]) for u in updates] for updates in lists
        ]
        try:
            await _commit(lab, identifier, *rendered)
        except REFUSED:
            # A refusal leaves the table as it was.
            assert (await _stored(lab, identifier))[0] == before_location
        _, after = await _stored(lab, identifier)
        for ref in PROTECTED:
            kept = _history(after, ref)
            # The ref still reads what it read; its history lost at most its oldest part.
            assert kept, f"{ref} was removed by {rendered}"
            assert kept == _history(before, ref)[: len(kept)], f"{ref} changed by {rendered}"
        assert _current_schema(after) == _current_schema(before), f"schema changed by {rendered}"
        # An ordinary append to an unprotected branch lands whatever came before it.
        dev = after.get("refs", {}).get("dev")
        snapshot_id = next(fresh)
        parent = None if dev is None else dev["snapshot-id"]
        snapshot = _snapshot(location, snapshot_id, parent, after["last-sequence-number"] + 1, "dev")
        append = [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "dev", "snapshot-id": snapshot_id, "type": "branch"},
        ]
        await _commit(lab, identifier, append)
        assert (await _stored(lab, identifier))[1]["refs"]["dev"]["snapshot-id"] == snapshot_id


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=COMMITS)
def test_no_commit_a_writer_may_make_changes_what_a_protected_ref_reads(
    lab: Lab, commits: list[list[list[tuple[Any, ...]]]]
) -> None:
    lab.run(_scenario(lab, commits))


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
        "snapshots": [base["snapshots"][0], {**base["snapshots"][1], "manifest-list": "evil"}],  # type: ignore[index]
    }
    assert _history(expired, "main") == _history(base, "main")[:1]
    assert _history(rewritten, "main") != _history(base, "main")[:2]
