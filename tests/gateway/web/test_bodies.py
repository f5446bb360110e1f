"""The body table (`gateway.web.bodies`) and the operation table (`gateway.authz.operations`) are
one table in two modules: an operation whose resource or property changes are read from its body
must have a body model there, so that the body is parsed before the decision; a body for an
operation the authorization table does not know is refused. The routes are registered only when
both agree (`gateway.web.app._register`).

What the pipeline does with the body (one parse before authorization, 400 with nothing decided,
413 past an operation's own bound) is tested through requests in test_pipeline.py and
test_metrics_reports.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from cedarberg.catalog import requests as req
from cedarberg.gateway.authz.errors import UnknownOperationError
from cedarberg.gateway.authz.operations import OPERATIONS, Naming, Source
from cedarberg.gateway.web.bodies import BODIES, body_model, check_body_table

_BODY_SOURCES = {Source.BODY_NAMESPACE, Source.BODY_NAME, Source.BODY_IDENTIFIER, Source.BODY_TABLES}


def test_the_tables_agree() -> None:
    """Control: the gateway's own tables pass the check, and every operation that reads its body
    finds its model."""
    check_body_table()
    reads_its_body = [
        spec for spec in OPERATIONS.values() if spec.naming.source in _BODY_SOURCES or spec.changes
    ]
    assert {spec.operation for spec in reads_its_body} >= {"createNamespace", "commitTransaction"}
    for spec in reads_its_body:
        assert issubclass(body_model(spec), BaseModel), spec.operation
    assert body_model(OPERATIONS["renameTable"]) is req.RenameRequest
    assert BODIES["reportMetrics"].max_bytes == req.MAX_REPORT_BYTES


def test_an_operation_named_by_a_body_it_does_not_declare_is_refused() -> None:
    """An operation whose resource would be read from an unparsed body cannot be registered."""
    ghost = dataclasses.replace(
        OPERATIONS["createTable"],
        operation="createGhost",
        action="createGhost",
        naming=Naming(Source.BODY_NAME, "name"),
    )
    with pytest.raises(UnknownOperationError, match="createGhost"):
        check_body_table({**OPERATIONS, "createGhost": ghost})
    with pytest.raises(TypeError, match="createGhost"):
        body_model(ghost)


def test_property_changes_read_from_an_undeclared_body_are_refused() -> None:
    changes_only = dataclasses.replace(
        OPERATIONS["dropNamespace"], operation="touchNamespace", changes=("updates",)
    )
    with pytest.raises(UnknownOperationError, match="touchNamespace"):
        check_body_table({**OPERATIONS, "touchNamespace": changes_only})


def test_a_body_for_an_operation_without_an_authorization_entry_is_refused() -> None:
    without_rename = {name: spec for name, spec in OPERATIONS.items() if name != "renameView"}
    with pytest.raises(UnknownOperationError, match="renameView"):
        check_body_table(without_rename)
