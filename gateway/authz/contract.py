"""The contract between the schema and the gateway's code, checked whenever a policy set loads.

Policies are free, but the schema must describe what the gateway actually sends: the entities built
by `gateway.authz.entities`, the context, and one action per entry of the operation table, applying
to the resource kind the table names. A schema edit that breaks this would make every decision
fail (and so deny); the engine refuses such a set instead, keeping the last good one.
"""

from __future__ import annotations

from collections.abc import Iterator

import cedarpy
import orjson

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz.context import ChangeSummary, RequestContext
from cedarberg.gateway.authz.entities import (
    EntityUid,
    Resource,
    api_key_resource,
    catalog_resource,
    child_namespace,
    child_view,
    principal_entities,
    principal_uid,
    table_resource,
    warehouse_resource,
)
from cedarberg.gateway.authz.errors import PolicyProblem
from cedarberg.gateway.authz.loader import SCHEMA_FILE
from cedarberg.gateway.authz.operations import OPERATIONS, Scope

_SAMPLE_PROPERTIES = {
    "cedarberg.readers": "r",
    "cedarberg.writers": "w",
    "cedarberg.protected-refs": "main",
    "cedarberg.schema-locked": "true",
}


def _samples() -> dict[Scope, list[Resource]]:
    warehouse = warehouse_resource("wh", _SAMPLE_PROPERTIES)
    namespace = child_namespace(child_namespace(warehouse, "a", _SAMPLE_PROPERTIES), "b")
    table = table_resource("wh", ["a", "b"], "t", [_SAMPLE_PROPERTIES])
    return {
        Scope.CATALOG: [catalog_resource()],
        Scope.WAREHOUSE: [warehouse],
        Scope.CONTAINER: [warehouse, namespace],
        Scope.NAMESPACE: [namespace],
        Scope.TABLE: [table],
        Scope.VIEW: [child_view(namespace, "v")],
        Scope.API_KEY: [api_key_resource("k1", "alice")],
    }


def _principals() -> Iterator[Principal]:
    for kind in PrincipalKind:
        yield Principal(
            id=f"sample-{kind.value}",
            kind=kind,
            groups=frozenset({"g1", "g2"}),
            auth_method=AuthMethod.MTLS,
            attributes={"tls_subject": "CN=sample", "email": "x@example.org"},
        )


def contract_problems(schema: cedarpy.Schema, policies: cedarpy.PolicySet) -> list[PolicyProblem]:
    """Everything the gateway sends that `schema` rejects, as problems on the schema file."""
    problems: list[PolicyProblem] = []
    samples = _samples()
    entity_list: dict[str, object] = {}
    principals = list(_principals())
    for principal in principals:
        for entity in principal_entities(principal):
            entity_list[orjson.dumps(entity["uid"]).decode()] = entity
    for resources in samples.values():
        for resource in resources:
            for entity in resource.entities:
                entity_list[orjson.dumps(entity["uid"]).decode()] = entity
    try:
        entities = cedarpy.Entities.from_json_str(orjson.dumps(list(entity_list.values())).decode(), schema)
    except ValueError as err:
        return [PolicyProblem(SCHEMA_FILE, 0, f"the entities the gateway builds do not conform: {err}")]

    changes = ChangeSummary(frozenset({"add-snapshot"}), frozenset({"main"}), frozenset({"k"}), creates=True)
    contexts = [
        RequestContext.of(principals[0], "127.0.0.1", changes),
        RequestContext("api-key", "127.0.0.1"),  # no tls_subject: the optional attribute is optional
    ]
    # Every principal kind, and both context shapes (with and without the optional attribute).
    pairs = [(principals[0], contexts[0]), *((p, contexts[1]) for p in principals[1:])]
    requests = []
    for spec in OPERATIONS.values():
        if spec.action is None:
            continue
        for resource in samples[spec.scope]:
            for principal, context in pairs:
                requests.append(
                    {
                        "principal": principal_uid(principal).to_json(),
                        "action": EntityUid.action(spec.action).to_json(),
                        "resource": resource.uid.to_json(),
                        "context": context.to_cedar(),
                    }
                )
    results = cedarpy.is_authorized_batch(requests, policies, entities, schema)
    seen: set[str] = set()
    for request, result in zip(requests, results, strict=True):
        for error in result.diagnostics.errors:
            if "failed to build request" in error:
                message = f"{request['action']['id']} on {request['resource']['type']}: {error}"
                if message not in seen:
                    seen.add(message)
                    problems.append(PolicyProblem(SCHEMA_FILE, 0, message))
    return problems
