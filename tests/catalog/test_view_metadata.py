"""View updates applied by the catalog (pyiceberg has no server-side view logic)."""

import json

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from cedarberg.catalog import requests as req
from cedarberg.catalog import view_metadata
from cedarberg.catalog.errors import CommitFailedError, InvalidRequestError

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _version(sql: str, schema_id: int = 0) -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=schema_id,
        timestamp_ms=1,
        summary={},
        representations=[ViewRepresentation(SQLViewRepresentation(type="sql", sql=sql, dialect="spark"))],
        default_namespace=["ns"],
    )


def _wire(model: Schema | ViewVersion) -> object:
    """The model as a client sends it: JSON."""
    return json.loads(model.model_dump_json())


def _commit(
    updates: list[dict[str, object]], requirements: list[dict[str, object]] | None = None
) -> req.CommitViewRequest:
    return req.parse(req.CommitViewRequest, {"updates": updates, "requirements": requirements or []})


def test_replace_adds_schema_and_version_and_logs_the_switch() -> None:
    base = view_metadata.new_view_metadata("file:///w/v", SCHEMA, _version("select 1"), {})
    new_schema = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False)
    )
    change = _commit(
        [
            {"action": "add-schema", "schema": _wire(new_schema)},
            {
                "action": "add-view-version",
                "view-version": _wire(_version("select 2", -1)),
            },
            {"action": "set-current-view-version", "view-version-id": -1},
        ]
    )
    new = view_metadata.apply_updates(base, change.updates)
    assert new.current_version_id == 2
    assert [v.version_id for v in new.versions] == [1, 2]
    assert new.versions[1].schema_id == 1
    assert [entry.version_id for entry in new.version_log] == [1, 2]
    assert base.current_version_id == 1  # the base is untouched


def test_re_adding_an_identical_version_reuses_it() -> None:
    base = view_metadata.new_view_metadata("file:///w/v", SCHEMA, _version("select 1"), {})
    change = _commit(
        [
            {
                "action": "add-view-version",
                "view-version": json.loads(_version("select 1").model_dump_json()),
            },
            {"action": "set-current-view-version", "view-version-id": -1},
        ]
    )
    assert view_metadata.apply_updates(base, change.updates).versions == base.versions


def test_wrong_uuid_requirement_fails_the_commit() -> None:
    base = view_metadata.new_view_metadata("file:///w/v", SCHEMA, _version("select 1"), {})
    change = _commit([], [{"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}])
    with pytest.raises(CommitFailedError):
        view_metadata.validate_requirements(change.requirements, base)


@pytest.mark.parametrize(
    "update",
    [
        {"action": "set-current-view-version", "view-version-id": 7},
        {"action": "set-current-view-version", "view-version-id": -1},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "assign-uuid", "uuid": "00000000-0000-0000-0000-000000000000"},
    ],
)
def test_impossible_updates_are_refused(update: dict[str, object]) -> None:
    base = view_metadata.new_view_metadata("file:///w/v", SCHEMA, _version("select 1"), {})
    with pytest.raises(InvalidRequestError):
        view_metadata.apply_updates(base, _commit([update]).updates)
