"""The one table from operation (the spec's operationId, or an admin operation) to what Cedar decides.

Every route is registered with an operation id; `check_route_table` refuses any id without an entry
here, so a route cannot exist without authorization. Each entry names:

- `action`: the Cedar action checked (the same name as the operation, so policies read like the
  spec), or None for the few public operations that authenticate themselves (the token endpoint);
- `scope`: which resource the caller builds for it (see `Scope`);
- `group`: the action group it belongs to in the schema (read, write, manage, admin, operate);
- `creates`: the resource does not exist yet, so hiding it means hiding its parent;
- `lists`: for listings, the kind of entry that is filtered by visibility;
- `extra`: checks beyond the action on the resource (`Extra`);
- `naming`: where a request names that resource (`Naming`: path, query or body), read by the one
  resource builder (`gateway.authz.naming.build`, fed by `gateway.web.resources`);
- `changes`: the body fields whose keys are the properties the request sets and removes (Cedar's
  context).

The request document an operation carries (its body model, parsed once before authorization) is
in the pipeline's table beside this one (`gateway.web.bodies`), keyed by the same operation ids:
the catalog's request models build on pyiceberg's, and deciding or validating policies (the
engine, the offline `policies` tools) needs this table without them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from cedarberg.gateway.authz.entities import EntityType
from cedarberg.gateway.authz.errors import UnknownOperationError


class ActionGroup(StrEnum):
    READ = "read"
    WRITE = "write"
    MANAGE = "manage"
    ADMIN = "admin"
    OPERATE = "operate"  # observing the gateway itself (metrics): no catalog data, no secrets
    # Trusting a client to enforce column/row restrictions itself (readRestrictedData): no route
    # carries it; it is decided before a restricted caller receives a table's files.
    TRUST = "trust"
    # Using the browser console (useConsole): reads nothing by itself; every page is decided again
    # on what it shows. In a group of its own, so no read or write grant implies it.
    CONSOLE = "console"
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


class Source(StrEnum):
    """Where a request names the object its operation is decided on."""

    SCOPE = "scope"  # nothing to read: the scope is the object (the catalog)
    PATH = "path"  # the path variable `field`; a table or view lies in the path's {namespace}
    QUERY = "query"  # the query parameter `field` if given, else the path's warehouse
    BODY_NAMESPACE = "body-namespace"  # the body field `field` holds the namespace's levels
    BODY_NAME = "body-name"  # the body field `field` names a new object in the path's {namespace}
    BODY_IDENTIFIER = "body-identifier"  # the body fields `field` and `target` hold identifiers
    BODY_TABLES = "body-tables"  # every table change of the body names its table (`field`)


@dataclass(frozen=True, slots=True)
class Naming:
    """How a request names an operation's resource: a `source` and the `field` read there (and a
    rename's `target`). The same description serves every reader: the pipeline reads the request
    with it; the offline tools are given the names themselves."""

    source: Source
    field: str = ""
    target: str = ""


# How an operation of each scope names its resource unless its entry says otherwise.
_NAMED_BY: Mapping[Scope, Naming] = MappingProxyType(
    {
        Scope.PUBLIC: Naming(Source.SCOPE),
        Scope.CATALOG: Naming(Source.SCOPE),
        Scope.WAREHOUSE: Naming(Source.QUERY, "warehouse"),
        Scope.CONTAINER: Naming(Source.QUERY, "parent"),
        Scope.NAMESPACE: Naming(Source.PATH, "namespace"),
        Scope.TABLE: Naming(Source.PATH, "table"),
        Scope.VIEW: Naming(Source.PATH, "view"),
        Scope.API_KEY: Naming(Source.PATH, "key_id"),
    }
)
_BY_NAME = Naming(Source.BODY_NAME, "name")
_RENAME = Naming(Source.BODY_IDENTIFIER, "source", "destination")


@dataclass(frozen=True, slots=True)
class OperationSpec:
    operation: str
    action: str | None
    scope: Scope
    group: ActionGroup
    creates: bool = False
    lists: EntityType | None = None
    extra: Extra | None = None
    naming: Naming = Naming(Source.SCOPE)
    changes: tuple[str, ...] = ()
    # A GET/HEAD whose answer derives only from registry reads made through the registry's read
    # cache, the settings and its decisions: the pipeline may record and replay it
    # (`gateway.web.replay`). Metrics, planning results and credentials are not.
    replayable: bool = False

    @property
    def public(self) -> bool:
        return self.action is None


def _op(operation: str, scope: Scope, group: ActionGroup, **options: Any) -> OperationSpec:
    """An entry; `options` are the optional fields of `OperationSpec` (`naming` defaults to the
    scope's)."""
    action = None if scope is Scope.PUBLIC else operation
    options.setdefault("naming", _NAMED_BY[scope])
    return OperationSpec(operation, action, scope, group, **options)


R, W, M, A = ActionGroup.READ, ActionGroup.WRITE, ActionGroup.MANAGE, ActionGroup.ADMIN

_TABLE: tuple[OperationSpec, ...] = (
    # configuration and tokens
    _op("getConfig", Scope.WAREHOUSE, R, replayable=True),
    _op("getToken", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("getJwks", Scope.PUBLIC, ActionGroup.PUBLIC),
    # operations: probes are public (they say "ok" or name a failing dependency, nothing else);
    # metrics are decided by Cedar like everything else
    _op("checkHealth", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("checkReadiness", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("readMetrics", Scope.CATALOG, ActionGroup.OPERATE),
    # namespaces
    _op("listNamespaces", Scope.CONTAINER, R, lists=EntityType.NAMESPACE, replayable=True),
    _op(
        "createNamespace",
        Scope.NAMESPACE,
        M,
        creates=True,
        naming=Naming(Source.BODY_NAMESPACE, "namespace"),
        changes=("properties",),
    ),
    _op("loadNamespaceMetadata", Scope.NAMESPACE, R, replayable=True),
    _op("namespaceExists", Scope.NAMESPACE, R, replayable=True),
    _op("dropNamespace", Scope.NAMESPACE, M),
    _op("updateProperties", Scope.NAMESPACE, M, changes=("updates", "removals")),
    # tables
    _op("listTables", Scope.NAMESPACE, R, lists=EntityType.TABLE, replayable=True),
    _op("createTable", Scope.TABLE, W, creates=True, naming=_BY_NAME),
    _op("registerTable", Scope.TABLE, W, creates=True, naming=_BY_NAME),
    _op("loadTable", Scope.TABLE, R, replayable=True),
    _op("tableExists", Scope.TABLE, R, replayable=True),
    _op("updateTable", Scope.TABLE, W),
    _op("dropTable", Scope.TABLE, W),
    # Unregistering hands the table out of the catalog (and, in a sealing warehouse, out of its
    # encryption): a manage action, which the default policies grant to admins only.
    _op("unregisterTable", Scope.TABLE, M),
    _op("renameTable", Scope.TABLE, W, extra=Extra.RENAME_TABLE, naming=_RENAME),
    _op("reportMetrics", Scope.TABLE, R),
    _op(
        "commitTransaction",
        Scope.TABLE,
        W,
        extra=Extra.EACH_TABLE,
        naming=Naming(Source.BODY_TABLES, "table_changes"),
    ),
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
    # A caller allowed to read only through permits carrying column/row restrictions receives the
    # files only if Cedar also trusts its client to enforce them (`gateway.web.file_access`).
    _op("readRestrictedData", Scope.TABLE, ActionGroup.TRUST),
    # views
    _op("listViews", Scope.NAMESPACE, R, lists=EntityType.VIEW, replayable=True),
    _op("createView", Scope.VIEW, W, creates=True, naming=_BY_NAME),
    _op("registerView", Scope.VIEW, W, creates=True, naming=_BY_NAME),
    _op("loadView", Scope.VIEW, R, replayable=True),
    _op("viewExists", Scope.VIEW, R, replayable=True),
    _op("replaceView", Scope.VIEW, W),
    _op("dropView", Scope.VIEW, W),
    _op("renameView", Scope.VIEW, W, extra=Extra.RENAME_VIEW, naming=_RENAME),
    # admin API (/admin/v1/...)
    _op("createApiKey", Scope.CATALOG, A),
    _op("listApiKeys", Scope.CATALOG, A),
    _op("getApiKey", Scope.API_KEY, A),
    _op("rotateApiKey", Scope.API_KEY, A),
    _op("revokeApiKey", Scope.API_KEY, A),
    _op("showPolicies", Scope.CATALOG, A),
    _op("explainDecision", Scope.CATALOG, A),
    _op("reviewAccess", Scope.CATALOG, A),
    _op("listDroppedObjects", Scope.CATALOG, A),
    _op("undropObject", Scope.CATALOG, A),
    _op("showKms", Scope.CATALOG, A),
    # the user directory: who engines may act for (delegation), and their groups
    _op("listDirectoryUsers", Scope.CATALOG, A),
    _op("getDirectoryUser", Scope.CATALOG, A),
    _op("putDirectoryUser", Scope.CATALOG, A),
    _op("deleteDirectoryUser", Scope.CATALOG, A),
    # the admin API's own OpenAPI document (GET /admin/v1/openapi.json)
    _op("showAdminApi", Scope.CATALOG, A),
    # the browser console (/console/): every page is first `useConsole` on the catalog for the
    # signed-in principal, then each object it shows is decided with the REST API's own action
    # (listNamespaces, loadTable, ...: `gateway.web.console.decisions`). Never replayable: a
    # plan's key does not hold the session cookie.
    _op("useConsole", Scope.CATALOG, ActionGroup.CONSOLE),
    # signing in and out, and the console's style sheet: they authenticate themselves (an API key
    # verified as any other, an id_token of the configured issuer, the session being ended)
    _op("consoleSignInPage", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("consoleSignInWithKey", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("consoleSignInWithIssuer", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("consoleSignInCallback", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("consoleSignOut", Scope.PUBLIC, ActionGroup.PUBLIC),
    _op("consoleAsset", Scope.PUBLIC, ActionGroup.PUBLIC),
    # `/console` without its slash: a redirect to `/console/`, which then needs a session
    _op("consoleRoot", Scope.PUBLIC, ActionGroup.PUBLIC),
    # the audit log, filtered and followed (GET /admin/v1/audit): admins and audit-readers by default
    _op("readAuditLog", Scope.CATALOG, A),
    # the change preview of a candidate policy set (POST /admin/v1/policies/preview)
    _op("previewPolicies", Scope.CATALOG, A),
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
