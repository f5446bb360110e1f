"""The request document of each operation that carries one, parsed once before authorization.

The pipeline parses a body into its operation's model (`gateway.web.http.parse_body`) before any
decision, so that the resources, Cedar's context and the handler all read the same typed objects;
`max_bytes` bounds a document more tightly than the application's `max_body_bytes` where the
operation needs it. The table sits beside the operation table (`gateway.authz.operations`), keyed
by the same operation ids, rather than inside it: the catalog's request models build on pyiceberg's
(`pyiceberg.table.update`, ...), which the policy engine and the offline `policies` tools must not
have to import to decide or validate a policy. The server imports both at start-up.

`check_body_table` (run when the routes are registered) refuses a body for an operation the
operation table does not know, and an operation that reads its resource or its property changes
from a body it does not declare.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pydantic import BaseModel

from cedarberg.catalog import requests as req
from cedarberg.catalog.planning.request import FetchScanTasksRequest, PlanScanRequest
from cedarberg.gateway.authz.errors import UnknownOperationError
from cedarberg.gateway.authz.operations import OPERATIONS, OperationSpec, Source


@dataclass(frozen=True, slots=True)
class Body:
    """An operation's request document: the model it is parsed into, and its own size bound
    (None: the application's)."""

    model: type[BaseModel]
    max_bytes: int | None = None


BODIES: Mapping[str, Body] = MappingProxyType(
    {
        "createNamespace": Body(req.CreateNamespaceRequest),
        "updateProperties": Body(req.UpdateNamespacePropertiesRequest),
        "createTable": Body(req.CreateTableRequest),
        "registerTable": Body(req.RegisterTableRequest),
        "updateTable": Body(req.CommitTableRequest),
        "renameTable": Body(req.RenameRequest),
        "reportMetrics": Body(req.MetricsReport, max_bytes=req.MAX_REPORT_BYTES),
        "commitTransaction": Body(req.CommitTransactionRequest),
        "planTableScan": Body(PlanScanRequest),
        "fetchScanTasks": Body(FetchScanTasksRequest),
        "createView": Body(req.CreateViewRequest),
        "registerView": Body(req.RegisterViewRequest),
        "replaceView": Body(req.CommitViewRequest),
        "renameView": Body(req.RenameRequest),
    }
)

_NAMED_BY_BODY = frozenset(
    {Source.BODY_NAMESPACE, Source.BODY_NAME, Source.BODY_IDENTIFIER, Source.BODY_TABLES}
)


def body_model(spec: OperationSpec) -> type[BaseModel]:
    """The model of `spec`'s body. Raises TypeError for an operation that declares none (a
    programming error: `check_body_table` refuses such a table at start-up)."""
    body = BODIES.get(spec.operation)
    if body is None:
        raise TypeError(f"{spec.operation} reads its body but declares no body model")
    return body.model


def check_body_table(operations: Mapping[str, OperationSpec] = OPERATIONS) -> None:
    """Raise `UnknownOperationError` naming every body whose operation has no entry in
    `operations`, and every operation named by its body (or reading its changes from it) that
    has no body here."""
    unknown = sorted(set(BODIES) - set(operations))
    undeclared = sorted(
        spec.operation
        for spec in operations.values()
        if (spec.naming.source in _NAMED_BY_BODY or spec.changes) and spec.operation not in BODIES
    )
    problems = []
    if unknown:
        problems.append(f"bodies of operations without an authorization entry: {', '.join(unknown)}")
    if undeclared:
        problems.append(f"operations read from a body they do not declare: {', '.join(undeclared)}")
    if problems:
        raise UnknownOperationError("; ".join(problems))
