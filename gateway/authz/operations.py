"""The one table from operation (the spec's operationId, or an admin operation) to what Cedar decides.

Every route is registered with an operation id; `check_route_table` refuses any id without an entry
here, so a route cannot exist without authorization. Each entry names:

- `action`: the Cedar action checked (the same name as the operation, so policies read like the
  spec), or None for the few public operations that authenticate themselves (the token endpoint);
- `scope`: which resource the caller builds for it (see `Scope`);
- `group`: the action group it belongs to in the schema (read, write, manage, admin, operate);
- `creates`: the resource does not exist yet, so hiding it means hiding its parent;
- `lists`: for listings, the kind of entry that is filtered by visibility;
- `extra`: checks beyond the action on the resource (`Extra`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from gateway.authz.entities import EntityType
from gateway.authz.errors import UnknownOperationError


class ActionGroup(StrEnum):
    READ = "read"
    WRITE = "write"
    MANAGE = "manage"
    ADMIN = "admin"
    OPERATE = "operate"  # observing the gateway itself (metrics): no catalog data, no secrets
    PUBLIC = "public"  # not a Cedar action group: no decision at all


class Scope(StrEnum):
    """The resource an operation is decided on."""

    PUBLIC = "public"  # nothing: the operation authenticates itself
    CATALOG = "catalog"  # Catalog::"cedarberg"
    WAREHOUSE = "warehouse"
    CONTAINER = "container"  # a warehouse or a namespace (the `parent` of a namespace listing)
    NAMESPACE = "namespace"
    TABLE = "table"
    VIEW = "view"
    API_KEY = "api-key"


class Extra(StrEnum):
    """Checks an operation needs beyond its own action on its resource."""

    RENAME_TABLE = "rename-table"  # + dropTable on the source, createTable on the target
    RENAME_VIEW = "rename-view"  # + dropView on the source, createView on the target
    EACH_TABLE = "each-table"  # commitTransaction + updateTable on every table of the transaction


@dataclass(frozen=True, slots=True)
class OperationSpec:
    operation: str
    action: str | None
    scope: Scope
    group: ActionGroup
    creates: bool = False
    lists: EntityType | None = None
    extra: Extra | None = None

    @property
    def public(self) -> bool:
        return self.action is None


def _op(
    operation: str,
    scope: Scope,
    group: ActionGroup,
    *,
    creates: bool = False,
    lists: EntityType | None = None,
    extra: Extra | None = None,
) -> OperationSpec:
    action = None if scope is Scope.PUBLIC else operation
    return OperationSpec(operation, action, scope, group, creates, lists, extra)


R, W, M, A = ActionGroup.READ, ActionGroup.WRITE, ActionGroup.MANAGE, ActionGroup.ADMIN

_TABLE: tuple[OperationSpec, ...] = (
    # configuration and tokens
    _op("getConfig", Scope.WAREHOUSE, R),
    _op("getToken", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("getJwks", Scope.PUBLIC, ActionGroup.PUBLIC),
    # operations: probes are public (they say "ok" or name a failing dependency, nothing else);
    # metrics are decided by Cedar like everything else
    _op("checkHealth", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("checkReadiness", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("readMetrics", Scope.CATALOG, ActionGroup.OPERATE),
    # namespaces
    _op("listNamespaces", Scope.CONTAINER, R, lists=EntityType.NAMESPACE),
    _op("createNamespace", Scope.NAMESPACE, M, creates=True),
    _op("loadNamespaceMetadata", Scope.NAMESPACE, R),
    _op("namespaceExists", Scope.NAMESPACE, R),
    _op("dropNamespace", Scope.NAMESPACE, M),
    _op("updateProperties", Scope.NAMESPACE, M),
    # tables
    _op("listTables", Scope.NAMESPACE, R, lists=EntityType.TABLE),
    _op("createTable", Scope.TABLE, W, creates=True),
    _op("registerTable", Scope.TABLE, W, creates=True),
    _op("loadTable", Scope.TABLE, R),
    _op("tableExists", Scope.TABLE, R),
    _op("updateTable", Scope.TABLE, W),
    _op("dropTable", Scope.TABLE, W),
    _op("renameTable", Scope.TABLE, W, extra=Extra.RENAME_TABLE),
    _op("reportMetrics", Scope.TABLE, R),
    _op("commitTransaction", Scope.TABLE, W, extra=Extra.EACH_TABLE),
    _op("planTableScan", Scope.TABLE, R),
    _op("fetchPlanningResult", Scope.TABLE, R),
    _op("cancelPlanning", Scope.TABLE, R),
    _op("fetchScanTasks", Scope.TABLE, R),
    # Access to a table's files. loadCredentials and signRequest are the routes (reads); the right to
    # write the files (read-write vended credentials, signed PUT/POST/DELETE) is the extra decision
    # writeTableData, which no route carries: the data-access handlers decide it themselves.
    _op("loadCredentials", Scope.TABLE, R),
    _op("signRequest", Scope.TABLE, R),
    _op("writeTableData", Scope.TABLE, W),
    # views
    _op("listViews", Scope.NAMESPACE, R, lists=EntityType.VIEW),
    _op("createView", Scope.VIEW, W, creates=True),
    _op("registerView", Scope.VIEW, W, creates=True),
    _op("loadView", Scope.VIEW, R),
    _op("viewExists", Scope.VIEW, R),
    _op("replaceView", Scope.VIEW, W),
    _op("dropView", Scope.VIEW, W),
    _op("renameView", Scope.VIEW, W, extra=Extra.RENAME_VIEW),
    # admin API (/admin/v1/...)
    _op("createApiKey", Scope.CATALOG, A),
    _op("listApiKeys", Scope.CATALOG, A),
    _op("getApiKey", Scope.API_KEY, A),
    _op("rotateApiKey", Scope.API_KEY, A),
    _op("revokeApiKey", Scope.API_KEY, A),
    _op("showPolicies", Scope.CATALOG, A),
    _op("explainDecision", Scope.CATALOG, A),
    _op("listDroppedObjects", Scope.CATALOG, A),
    _op("undropObject", Scope.CATALOG, A),
    _op("showKms", Scope.CATALOG, A),
)

OPERATIONS: Mapping[str, OperationSpec] = MappingProxyType({spec.operation: spec for spec in _TABLE})


@dataclass(frozen=True, slots=True)
class EffectChecks:
    """The actions decided on the effect of a planned change (`catalog.effects.Effect`), for an
    object that exists before the change (`existing`) and for one the change brings into being
    (`arriving`: a create, a registration, the target of a rename across namespaces)."""

    existing: tuple[str, ...]
    arriving: tuple[str, ...]


# Operations whose changes the catalog plans and submits to the effect gate before writing. The
# request-level decision (the operation's own checks, with no effect) comes first and decides
# visibility; these decide the effect, and every one must allow.
EFFECT_CHECKS: Mapping[str, EffectChecks] = MappingProxyType(
    {
        "createTable": EffectChecks((), ("createTable",)),
        "registerTable": EffectChecks(("registerTable",), ("registerTable",)),
        "updateTable": EffectChecks(("updateTable",), ("updateTable", "createTable")),
        "commitTransaction": EffectChecks(
            ("commitTransaction", "updateTable"), ("commitTransaction", "updateTable", "createTable")
        ),
        "renameTable": EffectChecks(("renameTable", "dropTable"), ("createTable",)),
        "createView": EffectChecks((), ("createView",)),
        "registerView": EffectChecks(("registerView",), ("registerView",)),
        "replaceView": EffectChecks(("replaceView",), ("replaceView",)),
        "renameView": EffectChecks(("renameView", "dropView"), ("createView",)),
    }
)

# Actions whose resource does not exist yet: a denial hides the parent, not the resource.
CREATE_ACTIONS = frozenset({"createNamespace", "createTable", "registerTable", "createView", "registerView"})

# The action that decides whether a caller may know a resource of each kind exists.
VISIBILITY_ACTIONS: Mapping[EntityType, str] = MappingProxyType(
    {
        EntityType.WAREHOUSE: "getConfig",
        EntityType.NAMESPACE: "namespaceExists",
        EntityType.TABLE: "tableExists",
        EntityType.VIEW: "viewExists",
        EntityType.API_KEY: "getApiKey",
    }
)


def operation_spec(operation: str) -> OperationSpec:
    """The entry for `operation`; raises `UnknownOperationError` if there is none."""
    try:
        return OPERATIONS[operation]
    except KeyError:
        raise UnknownOperationError(f"operation {operation!r} has no authorization entry") from None


def check_route_table(operation_ids: Iterable[str]) -> None:
    """Raise `UnknownOperationError` naming every operation id that has no entry in the table."""
    missing = sorted({op for op in operation_ids if op not in OPERATIONS})
    if missing:
        raise UnknownOperationError(f"operations without an authorization entry: {', '.join(missing)}")


def actions() -> frozenset[str]:
    """Every Cedar action the table uses (each must be declared in the schema)."""
    return frozenset(spec.action for spec in _TABLE if spec.action is not None)
