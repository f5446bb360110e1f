"""What the admin API's document says about each operation that no code states: its summary,
query and header parameters, its success and the errors its handler answers (with what they mean
there). The answers' schemas are in `answers`.

Request bodies, path variables, error types and Cedar actions are not written here: `document`
takes them from the request models, the route table, the error table and the operation table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from cedarberg.gateway import audit_query
from cedarberg.gateway.audit import EventKind, Ruling
from cedarberg.gateway.authn.principal import AuthMethod
from cedarberg.gateway.config.preview import PolicyPreviewSettings
from cedarberg.gateway.web.routes import admin_requests, directory
from cedarberg.gateway.web.routes.openapi.answers import STRING, Schema


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    location: str  # "query" or "header"
    description: str
    schema: Schema = field(default_factory=lambda: dict(STRING))
    required: bool = False
    repeated: bool = False  # may be given several times (a list)


@dataclass(frozen=True, slots=True)
class Answer:
    """A success: its status, what it means, its body schema (a component name; None: no body)
    and the headers it always carries."""

    status: int
    description: str
    schema: str | None
    headers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OperationDoc:
    """One admin operation. `errors`: the statuses the handler itself answers, besides those of
    every admin operation (`COMMON_ERRORS`), with what they mean here."""

    tag: str
    summary: str
    description: str
    success: Answer
    errors: dict[int, str] = field(default_factory=dict)
    parameters: tuple[Parameter, ...] = ()
    body: type[BaseModel] | None = None
    body_limit: int | None = None
    body_optional: bool = False  # no body: every field takes its default


# Every admin operation may answer these (authentication, Cedar, rate limits, dependencies).
COMMON_ERRORS: dict[int, str] = {
    401: "no credential, or one that is not valid (the gateway does not say why)",
    403: "the active policies do not allow this operation to the caller",
    419: "the credential (a token) has expired",
    429: "over a rate limit; retry after Retry-After seconds",
    503: "the registry, the KMS, the audit log or the rate limiter is unavailable; nothing was changed",
}

# Headers an answer may carry, by name.
HEADERS: dict[str, Schema] = {
    "Location": {"description": "the path of the created or replaced record", "schema": STRING},
    "Cache-Control": {"description": "no-store: the answer carries a key", "schema": STRING},
    "Retry-After": {"description": "seconds to wait before retrying", "schema": STRING},
    "WWW-Authenticate": {"description": "the authentication scheme expected", "schema": STRING},
}
ERROR_HEADERS: dict[int, tuple[str, ...]] = {401: ("WWW-Authenticate",), 429: ("Retry-After",)}


def _page_size(most: int) -> Parameter:
    return Parameter(
        "pageSize", "query", "entries per page", {"type": "integer", "minimum": 1, "maximum": most}
    )


_KEY_PAGE_TOKEN = Parameter("pageToken", "query", "the next-page-token of the previous page (a key id)")
_ABSENT = "no key has this id (or it is not a key id)"
_AUTH_METHOD = Parameter(
    "auth_method",
    "query",
    "the authentication method decisions assume (default api-key)",
    {"type": "string", "enum": [method.value for method in AuthMethod]},
)
_REVIEWED = "a malformed query, or a principal reviewed on anything but a namespace"

OPERATIONS: dict[str, OperationDoc] = {
    "createApiKey": OperationDoc(
        "API keys",
        "Create an API key",
        "Issues a key for a principal `key:<principal>` with the given groups. The key is in this "
        "answer only; the gateway stores an Argon2id hash of its secret.",
        Answer(201, "the key's record and the key", "ApiKeyWithSecret", ("Location", "Cache-Control")),
        {400: "a body that is not a valid key request", 413: "a body over the limit"},
        body=admin_requests.CreateKeyRequest,
        body_limit=admin_requests.MAX_BODY_BYTES,
    ),
    "listApiKeys": OperationDoc(
        "API keys",
        "List API keys",
        "Records in key id order, one page at a time; revoked and expired keys included.",
        Answer(200, "one page of records", "ApiKeyPage"),
        {400: "a bad pageSize, pageToken or principal"},
        parameters=(
            Parameter("principal", "query", "only the keys of this principal (its name, without key:)"),
            _KEY_PAGE_TOKEN,
            _page_size(admin_requests.MAX_PAGE_SIZE),
        ),
    ),
    "getApiKey": OperationDoc(
        "API keys",
        "Show an API key",
        "The key's record.",
        Answer(200, "the record", "ApiKey"),
        {404: _ABSENT},
    ),
    "rotateApiKey": OperationDoc(
        "API keys",
        "Rotate an API key's secret",
        "Replaces the secret. Without a body (or with `overlap_seconds` 0) the old secret and the "
        "tokens issued for it stop working at once; with `overlap_seconds` they keep working that "
        "long (at most `api_keys.max_rotation_overlap_seconds`), then stop on every gateway process. "
        "Only one previous secret is kept: a second rotation ends the first one's overlap.",
        Answer(200, "the record and the new key", "ApiKeyWithSecret", ("Cache-Control",)),
        {
            400: "a body that is not a valid rotation request, or an overlap over the bound",
            404: _ABSENT,
            409: "the key is revoked",
            413: "a body over the limit",
        },
        body=admin_requests.RotateKeyRequest,
        body_limit=admin_requests.MAX_BODY_BYTES,
        body_optional=True,
    ),
    "revokeApiKey": OperationDoc(
        "API keys",
        "Revoke an API key",
        "The key and its tokens stop working. Revoking a revoked key answers its record again.",
        Answer(200, "the revoked record", "ApiKey"),
        {404: _ABSENT},
    ),
    "showPolicies": OperationDoc(
        "Policies",
        "Show the active policy set",
        "Its version, directory, files with their text, where each policy is, and the last refusal.",
        Answer(200, "the policy set", "PolicySet"),
    ),
    "explainDecision": OperationDoc(
        "Policies",
        "Explain a decision",
        "Decides a hypothetical request with the active policies and names the determining "
        "policies. Grants come from `resource.namespace_properties` if given, else from the "
        "catalog's namespaces, as the gateway would decide; `grants` lists those it read.",
        Answer(200, "the decision", "Explanation"),
        {
            400: "not a valid explain request: a bad body, an unknown action, a resource of the wrong kind",
            404: "the API key or the warehouse the resource names does not exist",
            413: "a body over the limit",
        },
        body=admin_requests.ExplainRequest,
        body_limit=admin_requests.MAX_BODY_BYTES,
    ),
    "previewPolicies": OperationDoc(
        "Policies",
        "Preview a policy change",
        "Builds a candidate set: the active set with `files` replaced or added and `removed` left "
        "out. Validates it as a reload would (its problems as FILE:LINE: message), runs the active "
        "directory's fixtures and the supplied ones under it, and decides the newest `decisions` "
        "audited decisions again under the current and the candidate set, from the Cedar request "
        "each record carries, listing every decision that would flip (allow to deny, deny to "
        "allow) with both rulings. Nothing is written and the candidate is never activated. "
        "Bounded by `[authz.preview]`: the body (`max_body_bytes`, default 2 MiB), `decisions` "
        "(`max_decisions`), the audit bytes read (`max_audit_bytes`) and the time "
        "(`timeout_seconds`; then `complete` is false).",
        Answer(200, "the validation, the fixture results and the decisions that would flip", "PolicyPreview"),
        {
            400: "not a valid preview request: a bad body, a file name that is not a policy file's, "
            "removing the schema or a file the set does not have, decisions over the bound",
            413: "a body over authz.preview.max_body_bytes",
        },
        body=admin_requests.PreviewRequest,
        body_limit=PolicyPreviewSettings.model_fields["max_body_bytes"].default,
    ),
    "reviewAccess": OperationDoc(
        "Policies",
        "Review access",
        "Without `principal`: who may do what on the resource (every API key's principal, the "
        "anonymous principal, a member of each group, and the conditions for those the gateway "
        "cannot list). With `principal`: what it may do on a namespace and on each table and view "
        "in it.",
        Answer(200, "a ResourceReview, or a PrincipalReview when principal is given", "Review"),
        {400: _REVIEWED, 404: "the warehouse, namespace, table or view does not exist"},
        parameters=(
            Parameter(
                "resource",
                "query",
                "WAREHOUSE[/NS.NS[/NAME]] (a dot inside a name as %2E, so %252E in a query)",
                required=True,
            ),
            Parameter("type", "query", "what NAME is", {"type": "string", "enum": ["table", "view"]}),
            Parameter("action", "query", "only these actions (resource review)", repeated=True),
            Parameter("principal", "query", "the principal id to review, e.g. key:erin"),
            Parameter(
                "group", "query", "the reviewed principal's groups (default: its keys')", repeated=True
            ),
            Parameter(
                "kind",
                "query",
                "the reviewed principal's kind (default user)",
                {"type": "string", "enum": ["user", "service", "anonymous"]},
            ),
            _AUTH_METHOD,
            Parameter("client_address", "query", "the client address decisions assume (default 127.0.0.1)"),
        ),
    ),
    "listDroppedObjects": OperationDoc(
        "Dropped objects",
        "List dropped tables and views",
        "Soft-deleted objects of a warehouse with their drop ids and purge state. Without "
        "pageToken and pageSize, every entry; with either, one page.",
        Answer(200, "the dropped objects", "DroppedPage"),
        {400: "a bad pageSize or pageToken", 404: "the warehouse does not exist"},
        parameters=(
            Parameter(
                "pageToken", "query", "the next-page-token of the previous page; empty: the first page"
            ),
            Parameter("pageSize", "query", "entries per page", {"type": "integer", "minimum": 1}),
        ),
    ),
    "undropObject": OperationDoc(
        "Dropped objects",
        "Restore a dropped table or view",
        "Restores the object exactly (same UUID, metadata and files) under its name.",
        Answer(200, "the restored object", "DroppedObject"),
        {
            404: "no dropped object with this id in the warehouse, or its namespace is gone",
            409: "the name is taken",
            422: "the Idempotency-Key was used for another request",
        },
        parameters=(Parameter("Idempotency-Key", "header", "makes a retry answer the first outcome"),),
    ),
    "showKms": OperationDoc(
        "KMS",
        "Show the key service",
        "The configured key-encryption key and the KMS counters of this process.",
        Answer(200, "the KEK and counters", "KmsStatus"),
    ),
    "listDirectoryUsers": OperationDoc(
        "User directory",
        "List directory users",
        "The people engines may act for, in name order, one page at a time.",
        Answer(200, "one page of users", "DirectoryUserPage"),
        {400: "a bad pageSize or pageToken"},
        parameters=(
            Parameter("pageToken", "query", "the next-page-token of the previous page"),
            _page_size(directory.MAX_PAGE_SIZE),
        ),
    ),
    "getDirectoryUser": OperationDoc(
        "User directory",
        "Show a directory user",
        "The user's groups.",
        Answer(200, "the user", "DirectoryUser"),
        {404: "the user is not in the directory"},
    ),
    "putDirectoryUser": OperationDoc(
        "User directory",
        "Create or replace a directory user",
        "Sets the user's groups; takes effect at the user's next token exchange or refresh.",
        Answer(200, "the user", "DirectoryUser", ("Location",)),
        {400: "a bad name, group or body", 413: "a body over the limit"},
        body=directory.PutUserRequest,
        body_limit=directory.MAX_BODY_BYTES,
    ),
    "deleteDirectoryUser": OperationDoc(
        "User directory",
        "Delete a directory user",
        "Engines can no longer act for the user.",
        Answer(204, "deleted", None),
        {404: "the user is not in the directory"},
    ),
    "readAuditLog": OperationDoc(
        "Audit log",
        "Read and follow the audit log",
        "The records of this gateway's audit file (`audit.destination`) and the files rotated "
        "beside it, as written, each with `explain`: for a decision, the body of explainDecision "
        "that decides it again. Without `after`: the newest records first, a page at a time "
        "(`pageToken`: the next-page-token of the page before). With `after` (a follow-token): "
        "the records written after it, oldest first, waiting up to `wait` seconds for one. Each "
        "call reads a bounded part of the files: a page may hold fewer than `pageSize` records "
        "while older ones remain; only a null next-page-token means none do. The caller's own "
        "allowed reads of the audit log are left out unless `include_own_reads` is true.",
        Answer(200, "records, and where to read on", "AuditPage"),
        {
            400: "a bad filter, bound or token (a token is the caller's own, for this gateway's file)",
            501: 'audit.destination is "stdout": this gateway cannot read its audit log back',
        },
        parameters=(
            Parameter("principal", "query", "only records of this principal id, e.g. key:analyst"),
            Parameter("action", "query", "only records of this action (an operation id), e.g. loadTable"),
            Parameter(
                "resource",
                "query",
                'only records on this resource, as records write it: Cedarberg::Table::"default/shop/orders"',
            ),
            Parameter(
                "resource_prefix", "query", "only records whose resource starts with this (not with resource)"
            ),
            Parameter(
                "decision",
                "query",
                "only allowed or denied",
                {"type": "string", "enum": [r.value for r in Ruling]},
            ),
            Parameter(
                "event",
                "query",
                "only this kind of record",
                {"type": "string", "enum": [k.value for k in EventKind]},
            ),
            Parameter(
                "since",
                "query",
                "only records from this time on (RFC 3339 with a time zone)",
                {"type": "string", "format": "date-time"},
            ),
            Parameter(
                "until",
                "query",
                "only records up to this time (RFC 3339 with a time zone)",
                {"type": "string", "format": "date-time"},
            ),
            _page_size(audit_query.MAX_PAGE_SIZE),
            Parameter(
                "pageToken", "query", "the next-page-token of the previous page: the records before it"
            ),
            Parameter("after", "query", "a follow-token: the records written after it (not with pageToken)"),
            Parameter(
                "wait",
                "query",
                "with after: seconds to wait for a record when none is there yet",
                {"type": "integer", "minimum": 0, "maximum": audit_query.MAX_WAIT_SECONDS},
            ),
            Parameter(
                "include_own_reads",
                "query",
                "also the caller's own reads of the audit log",
                {"type": "boolean"},
            ),
        ),
    ),
    "showAdminApi": OperationDoc(
        "Documentation",
        "This document",
        "The OpenAPI 3.1 document of the admin API.",
        Answer(200, "the document", "OpenApiDocument"),
    ),
}

# Path variables, by name.
PATH_VARIABLES: dict[str, str] = {
    "key_id": "the API key's id",
    "name": "the user's name",
    "warehouse": "the warehouse's name",
    "drop_id": "the drop id listDroppedObjects gave",
}
