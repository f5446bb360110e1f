"""The schemas of the admin API's answers, written by hand: the handlers build their answers as
plain dicts (`ApiKeyRecord.to_json`, the review's `to_json`, ...), so no model states them.

Every object is closed (`additionalProperties: false`): the tests validate each answer of a real
gateway against these (tests/gateway/test_admin_api_conformance.py), so a field added to an answer
and not here, or written here and not answered, fails there.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
_STRINGS: Schema = {"type": "array", "items": STRING}
_NULLABLE_STRING: Schema = {"type": ["string", "null"]}
_TIME: Schema = {"type": "string", "format": "date-time"}
_NULLABLE_TIME: Schema = {"type": ["string", "null"], "format": "date-time"}
_PAGE_TOKEN: Schema = {
    "type": ["string", "null"],
    "description": "pageToken of the next page; null: last page",
}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Schema], description: str = "", optional: tuple[str, ...] = ()) -> Schema:
    """A closed object: every property listed, all required but `optional`."""
    schema: Schema = {
        "type": "object",
        "required": [name for name in properties if name not in optional],
        "properties": properties,
        "additionalProperties": False,
    }
    if description:
        schema["description"] = description
    return schema


def _list_of(items: Schema) -> Schema:
    return {"type": "array", "items": items}


_API_KEY_FIELDS: dict[str, Schema] = {
    "id": {"type": "string", "description": "the key id: the part before the secret, not a secret"},
    "principal": {"type": "string", "description": "the principal's name; its id is key:<principal>"},
    "kind": {"type": "string", "enum": ["user", "service"]},
    "summary": {"type": "string", "description": "whom the key is for, in words: a service key for etl"},
    "groups": _STRINGS,
    "created_at": _TIME,
    "expires_at": _NULLABLE_TIME,
    "revoked_at": _NULLABLE_TIME,
    "rotated_at": _NULLABLE_TIME,
    "previous_secret_expires_at": {
        **_NULLABLE_TIME,
        "description": "until when the secret before the last rotation still works (null: it does not)",
    },
    "description": STRING,
}
_RESTRICTION = _object(
    {
        "policy_id": STRING,
        "columns": {"type": ["array", "null"], "items": STRING, "description": "null: every column"},
        "row_filter": {"type": ["string", "null"], "description": "null: every row"},
        "masks": {"type": "object", "additionalProperties": STRING, "description": "column: mask"},
    },
    "A column/row restriction a permit carries (policies/README.md, restrictions).",
)
_CONTEXT = _object({"auth_method": STRING, "client_address": STRING}, "The context decisions were made with.")
_ALLOWED = {"policy_ids": _STRINGS, "restrictions": _list_of(_ref("Restriction"))}
_NOT_BINDING: Schema = {
    **_list_of(_ref("RestrictionNotBinding")),
    "description": "where the restrictions of these decisions cannot bind, and what binds instead",
}

_AUDIT_FIELDS: dict[str, Schema] = {
    "time": {"type": "string", "description": "UTC with milliseconds: 2026-11-27T09:00:00.123Z"},
    "stream": {"type": "string", "const": "audit"},
    "event": {"type": "string", "enum": ["decision", "mutation", "auth_failure", "throttled"]},
    "request_id": _NULLABLE_STRING,
    "principal": _NULLABLE_STRING,
    "principal_kind": _NULLABLE_STRING,
    "auth_method": _NULLABLE_STRING,
    "actor": _NULLABLE_STRING,
    "client_address": _NULLABLE_STRING,
    "action": STRING,
    "resource": STRING,
    "decision": {"type": "string", "enum": ["allow", "deny"]},
    "policy_ids": _STRINGS,
    "policy_version": _NULLABLE_STRING,
    "outcome": {"type": ["string", "null"], "enum": ["success", "failure", "unknown", None]},
    "status": {"type": ["integer", "null"]},
    "detail": {"description": "free-form, scrubbed of secrets"},
}

SCHEMAS: dict[str, Schema] = {
    "ApiKey": _object(_API_KEY_FIELDS, "An API key's record: never its secret or the secret's hash."),
    "ApiKeyWithSecret": _object(
        {**_API_KEY_FIELDS, "key": {"type": "string", "description": "the whole key, shown this once"}},
        "An API key's record and the key itself (create and rotate only; sent with Cache-Control: no-store).",
    ),
    "ApiKeyPage": _object({"api-keys": _list_of(_ref("ApiKey")), "next-page-token": _PAGE_TOKEN}),
    "PolicySet": _object(
        {
            "version": {"type": ["string", "null"], "description": "content hash of the active set"},
            "directory": {"type": "string", "description": "the policy directory the gateway loads"},
            "files": _STRINGS,
            "sources": {"type": "object", "additionalProperties": STRING, "description": "file: text"},
            "policies": {
                "type": "object",
                "additionalProperties": STRING,
                "description": "policy id: FILE:LINE",
            },
            "refused": {
                "oneOf": [{"type": "null"}, _ref("RefusedPolicySet")],
                "description": "the last set refused since the active one was loaded (null: none)",
            },
        },
        "The active policy set and the last refused one.",
    ),
    "RefusedPolicySet": _object(
        {
            "version": {"type": "string", "description": "content hash of the refused files"},
            "at": _TIME,
            "problems": {**_STRINGS, "description": "what is wrong, each with FILE:LINE where known"},
        },
        "A policy set the gateway refused to load; the previous set stayed active.",
    ),
    "Restriction": _RESTRICTION,
    "RestrictionNotBinding": _object(
        {
            "kind": {
                "type": "string",
                "enum": ["lifted", "lifted-if-granted", "local-warehouse", "trusted-client"],
            },
            "policy_id": {**STRING, "description": "the restricted permit"},
            "lifted_by": {**_STRINGS, "description": "the unrestricted permits that lift it"},
            "principals": _STRINGS,
            "resource": STRING,
            "warehouse": _NULLABLE_STRING,
            "location": _NULLABLE_STRING,
            "binds_instead": STRING,
            "message": STRING,
        },
        "A restricted permit that cannot bind these principals here (docs/scan-restrictions.md).",
    ),
    "Explanation": _object(
        {
            "decision": {"type": "string", "enum": ["allow", "deny"]},
            "allowed": {"type": "boolean"},
            "principal": STRING,
            "action": STRING,
            "resource": STRING,
            "policy_ids": {**_STRINGS, "description": "the determining policies"},
            "policies": _list_of(_ref("PolicyLocation")),
            "errors": _STRINGS,
            "version": {"type": "string", "description": "the policy set that decided"},
            "grants_from": {"type": "string", "enum": ["request", "catalog"]},
            "restrictions": _list_of(_ref("Restriction")),
            "restrictions_not_binding": _NOT_BINDING,
            "grants": {
                **_list_of(_ref("GrantNode")),
                "description": "the grants the decision read: the warehouse's, then each namespace's "
                "down to the resource (none for the catalog and API keys)",
            },
        },
        "A decision of the active policies and why.",
    ),
    "GrantNode": _object(
        {
            "resource": {**STRING, "description": "the warehouse or namespace, as a Cedar uid"},
            "readers": {**_STRINGS, "description": "groups that may read here (cedarberg.readers)"},
            "writers": {**_STRINGS, "description": "groups that may read and write here (cedarberg.writers)"},
            "protected_refs": {
                **_STRINGS,
                "description": "refs only admins may move (cedarberg.protected-refs)",
            },
            "schema_locked": {"type": "boolean", "description": "cedarberg.schema-locked"},
        },
        "The grants in force at one node: its own properties joined with its ancestors' (a union).",
    ),
    "PolicyPreview": _object(
        {
            "valid": {"type": "boolean", "description": "the candidate set would load"},
            "current_version": STRING,
            "candidate_version": {**STRING, "description": "content hash of the candidate set"},
            "unchanged": {"type": "boolean", "description": "the candidate is the active set"},
            "files": _object({"changed": _STRINGS, "added": _STRINGS, "removed": _STRINGS}),
            "problems": {**_STRINGS, "description": "why the candidate would be refused: FILE:LINE: message"},
            "fixtures": {
                "oneOf": [{"type": "null"}, _ref("PreviewFixtures")],
                "description": "null: the candidate is refused",
            },
            "decisions": {
                "oneOf": [{"type": "null"}, _ref("PreviewDecisions")],
                "description": "null: the candidate is refused",
            },
        },
        "What a candidate policy set would do; nothing was written or activated.",
    ),
    "PreviewFixtures": _object(
        {
            "passed": {"type": "integer", "minimum": 0},
            "failed": {"type": "integer", "minimum": 0},
            "results": _list_of(
                _object(
                    {
                        "path": {**STRING, "description": "tests/ALLOW/NAME or tests/DENY/NAME"},
                        "expected": {"type": "string", "enum": ["ALLOW", "DENY"]},
                        "passed": {"type": "boolean"},
                        "message": STRING,
                        "decision": {"type": ["string", "null"], "enum": ["allow", "deny", None]},
                        "policy_ids": _STRINGS,
                    }
                )
            ),
        },
        "The fixtures run under the candidate set.",
    ),
    "PreviewDecisions": _object(
        {
            "requested": {"type": "integer", "minimum": 0},
            "complete": {"type": "boolean", "description": "false: stopped early, see stopped"},
            "stopped": _NULLABLE_STRING,
            "audit": _object(
                {
                    "source": {**_NULLABLE_STRING, "description": "the audit file read (null: stdout)"},
                    "unavailable": {**_NULLABLE_STRING, "description": "why no decisions could be read"},
                    "bytes_bound_reached": {"type": "boolean"},
                    "unreadable_lines": {"type": "integer", "minimum": 0},
                }
            ),
            "examined": {"type": "integer", "minimum": 0},
            "re_decided": {"type": "integer", "minimum": 0},
            "unchanged": {"type": "integer", "minimum": 0},
            "policies_changed": {
                "type": "integer",
                "minimum": 0,
                "description": "unchanged rulings made by other determining policies",
            },
            "allow_to_deny": {"type": "integer", "minimum": 0},
            "deny_to_allow": {"type": "integer", "minimum": 0},
            "current_differs_from_recorded": {"type": "integer", "minimum": 0},
            "not_re_decidable": {"type": "integer", "minimum": 0},
            "not_re_decidable_reasons": {
                "type": "object",
                "additionalProperties": {"type": "integer"},
                "description": "reason: count",
            },
            "flips": _list_of(_ref("DecisionFlip")),
        },
        "The newest audited decisions decided again under the current and the candidate set.",
    ),
    "DecisionFlip": _object(
        {
            "time": _NULLABLE_STRING,
            "request_id": _NULLABLE_STRING,
            "principal": _NULLABLE_STRING,
            "action": STRING,
            "resource": _NULLABLE_STRING,
            "recorded": {**_NULLABLE_STRING, "description": "the ruling the audit record holds"},
            "current": _ref("Ruling"),
            "candidate": _ref("Ruling"),
        },
        "An audited decision the candidate set would rule otherwise.",
    ),
    "Ruling": _object(
        {
            "decision": {"type": "string", "enum": ["allow", "deny"]},
            "policy_ids": {**_STRINGS, "description": "the determining policies"},
            "errors": _STRINGS,
        }
    ),
    "PolicyLocation": _object({"id": STRING, "location": {**_NULLABLE_STRING, "description": "FILE:LINE"}}),
    "ReviewContext": _CONTEXT,
    "AllowedPrincipal": _object(
        {"id": STRING, "kind": STRING, "groups": _STRINGS, "source": STRING, **_ALLOWED},
        "A principal allowed the action, where it comes from (api-key, anonymous, stated) and why.",
    ),
    "AllowedGroup": _object(
        {"group": STRING, **_ALLOWED}, "Any member of this group is allowed the action, and why."
    ),
    "UnlistedPrincipals": _object(
        {
            "principals": {"type": "string", "description": "e.g. oidc:corp/*"},
            "kind": STRING,
            "groups_claim": _NULLABLE_STRING,
            "groups": STRING,
            "bare_groups": _STRINGS,
            "privileged_groups": _STRINGS,
            "reviewed_as": STRING,
        },
        "The subjects of a configured OIDC issuer, which the gateway cannot list.",
    ),
    "ObjectAccess": _object(
        {
            "resource": STRING,
            "type": STRING,
            "name": _NULLABLE_STRING,
            "actions": _list_of(_ref("AllowedAction")),
        },
        "What the reviewed principal may do on one object.",
    ),
    "AllowedAction": _object({"action": STRING, **_ALLOWED}),
    "Condition": _object(
        {
            "policy_id": STRING,
            "effect": STRING,
            "location": _NULLABLE_STRING,
            "condition": {
                "type": "string",
                "description": "what is left of the policy for unknown principals",
            },
            "reads": _STRINGS,
            "context_dependent": {"type": "boolean"},
        },
        "A policy that applies to principals the review cannot list, under its condition.",
    ),
    "ActionReview": _object(
        {
            "action": STRING,
            "everyone": {"type": "boolean"},
            "principals": _list_of(_ref("AllowedPrincipal")),
            "groups": _list_of(_ref("AllowedGroup")),
            "members_of_no_group": {"type": "boolean"},
            "conditions": _list_of(_ref("Condition")),
            "errors": _STRINGS,
        }
    ),
    "ResourceReview": _object(
        {
            "resource": STRING,
            "type": {"type": "string", "enum": ["warehouse", "namespace", "table", "view"]},
            "version": STRING,
            "context": _ref("ReviewContext"),
            "subjects_decided": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean"},
            "actions": _list_of(_ref("ActionReview")),
            "not_enumerated": _list_of(_ref("UnlistedPrincipals")),
            "restrictions_not_binding": _NOT_BINDING,
        },
        "Who may do what on a resource.",
    ),
    "PrincipalReview": _object(
        {
            "principal": STRING,
            "kind": STRING,
            "groups": _STRINGS,
            "groups_from": {"type": "string", "enum": ["request", "api-key", "none"]},
            "version": STRING,
            "context": _ref("ReviewContext"),
            "truncated": {"type": "boolean"},
            "objects": _list_of(_ref("ObjectAccess")),
            "restrictions_not_binding": _NOT_BINDING,
        },
        "What a principal may do on a namespace and each table and view in it.",
    ),
    "Review": {"oneOf": [_ref("ResourceReview"), _ref("PrincipalReview")]},
    "DroppedObject": _object(
        {
            "drop-id": STRING,
            "kind": {"type": "string", "enum": ["table", "view"]},
            "namespace": _STRINGS,
            "name": STRING,
            "uuid": STRING,
            "dropped-at-ms": {"type": "integer"},
            "purge-after-ms": {"type": "integer"},
            "purge-attempts": {"type": "integer", "minimum": 0},
            "last-purge-error": _NULLABLE_STRING,
            "next-purge-attempt-ms": {"type": ["integer", "null"]},
        },
        "A soft-deleted table or view.",
    ),
    "DroppedPage": _object({"dropped": _list_of(_ref("DroppedObject")), "next-page-token": _PAGE_TOKEN}),
    "KmsStatus": _object(
        {
            "kek": {"type": "string", "description": "URI of the configured key-encryption key"},
            "counters": {
                "type": "object",
                "additionalProperties": {"type": "integer"},
                "description": "KMS calls by provider/op/outcome and data-key cache counters",
            },
        }
    ),
    "DirectoryUser": _object({"name": STRING, "groups": _STRINGS, "created_at": _TIME, "updated_at": _TIME}),
    "DirectoryUserPage": _object({"users": _list_of(_ref("DirectoryUser")), "next-page-token": _PAGE_TOKEN}),
    "AuditRecord": {
        "type": "object",
        "required": [*_AUDIT_FIELDS, "explain", "explain_groups_from"],
        "properties": {
            **_AUDIT_FIELDS,
            "explain": {
                "oneOf": [{"type": "null"}, _ref("ExplainRequest")],
                "description": "a decision's explainDecision body, which decides it again (else null)",
            },
            "explain_groups_from": {
                "type": ["string", "null"],
                "enum": ["record", "api-key", "directory", "anonymous", "none", None],
                "description": "where the explain body's groups come from (none: it has none)",
            },
        },
        # Records are answered as written: a later gateway version may write more fields.
        "additionalProperties": True,
        "description": "An audit record as written (docs/operations.md: What a record says) + explain.",
    },
    "AuditPage": _object(
        {
            "records": _list_of(_ref("AuditRecord")),
            "next-page-token": {
                "type": ["string", "null"],
                "description": "pageToken of the older records; null: none are left",
            },
            "follow-token": {"type": "string", "description": "after: the records written after this answer"},
        },
        "Audit records: newest first, or (with after) oldest first.",
    ),
    "OpenApiDocument": {
        "type": "object",
        "required": ["openapi", "info", "paths"],
        "properties": {"openapi": {"type": "string", "const": "3.1.0"}},
        "description": "This document.",
    },
}
