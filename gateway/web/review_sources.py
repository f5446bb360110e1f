"""What an access review (`gateway.authz.review`) reads from a deployment, and the review built on it:
the registry's objects and grants, the API key store's active keys, the configured anonymous
principal and OIDC issuers. One place, so that `GET /admin/v1/review` (`routes/review.py`) and
`cedarberg policies review` with settings (`gateway.cli.review`) give the same answer.

`ReviewSources` is the deployment as the review sees it: the endpoint takes it from the running
gateway, the CLI opens it from the settings. What a caller *states* (the CLI's `--subject`,
`--property`, `--table`, `--view`) adds to what the deployment gives:

- stated subjects are decided besides the deployment's principals (a stated subject with the id and
  groups of a key's principal is that principal, listed once as the key's);
- stated properties replace the registry's value of the same key on the same namespace (the
  warehouse for an empty namespace), as a "what if" on the grants; other keys stay the registry's;
- stated tables and views are reviewed besides the namespace's own (once each).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cedarberg.catalog.errors import (
    InvalidRequestError,
    NoSuchTableError,
    NoSuchViewError,
    NoSuchWarehouseError,
)
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import TABLE, VIEW
from cedarberg.catalog.store import objects as object_rows
from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.key_record import ApiKeyRecord
from cedarberg.gateway.authn.principal import (
    KEY_NAMESPACE,
    AuthMethod,
    Principal,
    PrincipalKind,
    scoped_group,
)
from cedarberg.gateway.authz import binding, naming, review
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import EntityType, Resource, parse_path
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.naming import ResourceName, StatedGrants
from cedarberg.gateway.web.resources import RegistryGrants
from cedarberg.gateway.web.services import Services

if TYPE_CHECKING:
    from cedarberg.gateway.web.security import Security

_KEY_PAGE = 1000


class ReviewInputError(ResourceError):
    """The review's input does not fit (e.g. keys of one principal that disagree on its groups)."""


@dataclass(frozen=True, slots=True)
class ReviewSources:
    """The deployment a review reads: the catalog services (registry), the API keys, the policy
    engine and the configured anonymous principal (None: off)."""

    services: Services
    keys: ApiKeyAuthenticator
    engine: PolicyEngine
    anonymous: Principal | None

    @classmethod
    def running(cls, services: Services, security: Security) -> ReviewSources:
        """The running gateway's (the admin endpoint's and the console's)."""
        return cls(services, security.api_keys, security.policies, security.anonymous)


# -- what a caller asks (the admin endpoint's query, the console's form) ------------------------------


def review_context(auth_method: str | None, client_address: str | None) -> review.ReviewContext:
    """The context the review's decisions are made with (default `api-key` from `127.0.0.1`).
    Raises InvalidRequestError for an unknown method or an address not of 1-64 characters."""
    try:
        method = AuthMethod(AuthMethod.API_KEY.value if auth_method is None else auth_method)
    except ValueError:
        raise InvalidRequestError(
            f"auth_method must be one of {', '.join(m.value for m in AuthMethod)}"
        ) from None
    address = "127.0.0.1" if client_address is None else client_address
    if not 1 <= len(address) <= 64:
        raise InvalidRequestError("client_address must be 1-64 characters")
    return review.ReviewContext(method, address)


async def reviewed_target(services: Services, path: str | None, kind_wanted: str | None) -> Resource:
    """`reviewed_resource` for a caller's `resource` (`path`) and `type` (`kind_wanted`: "table",
    "view" or None). Raises InvalidRequestError for a missing or malformed one, or the catalog's
    NoSuch* error when the object does not exist."""
    if not path:
        raise InvalidRequestError("resource is required (WAREHOUSE[/NS.NS[/NAME]])")
    if kind_wanted not in (None, "table", "view"):
        raise InvalidRequestError("type must be table or view")
    try:
        return await reviewed_resource(services, path, kind_wanted)
    except ResourceError as err:
        raise InvalidRequestError(str(err)) from None


async def resource_answer(
    sources: ReviewSources, target: Resource, actions: Sequence[str], context: review.ReviewContext
) -> dict[str, Any]:
    """The answer of `GET /admin/v1/review?resource=...`: who may do each of `actions` (all of the
    kind's if empty) on `target` (`resource_review`); the console's Access page shows the same
    document. Raises InvalidRequestError for an action not decided on the kind."""
    try:
        chosen = review.chosen_actions(target.kind, actions)
        return await resource_review(sources, target, chosen, context)
    except ResourceError as err:
        raise InvalidRequestError(str(err)) from None


# -- the registry -----------------------------------------------------------------------------------


async def reviewed_resource(
    services: Services, path: str, kind_wanted: str | None = None, stated: StatedGrants | None = None
) -> Resource:
    """The object `path` (`WAREHOUSE[/NS.NS[/NAME]]`) names, with the registry's grants (and
    `stated` properties over them). `kind_wanted` ("table", "view" or None: whichever exists) says
    what `NAME` is. Raises `ResourceError` for a malformed path, or the catalog's NoSuch* error."""
    warehouse, levels, name = parse_path(path)
    if warehouse not in services.ctx.warehouses:
        raise NoSuchWarehouseError(f"warehouse does not exist: {warehouse}")
    grants = RegistryGrants(services, fresh=False, stated=stated)
    if not levels:
        return await naming.build(ResourceName(EntityType.WAREHOUSE, warehouse), grants)
    namespace = Namespace.of(list(levels))
    await services.namespaces.exists(warehouse, namespace)  # NoSuchNamespaceError
    if name is None:
        return await naming.build(ResourceName(EntityType.NAMESPACE, warehouse, levels), grants)
    identifier = Identifier.of(namespace, name)
    kind = await _object_kind(services, warehouse, identifier, kind_wanted)
    return await naming.build(ResourceName(kind, warehouse, levels, name), grants)


async def _object_kind(
    services: Services, warehouse: str, identifier: Identifier, wanted: str | None
) -> EntityType:
    if wanted != "view":
        try:
            await services.tables.exists(warehouse, identifier)
        except NoSuchTableError:
            if wanted == "table":
                raise
        else:
            return EntityType.TABLE
    try:
        await services.views.exists(warehouse, identifier)
    except NoSuchViewError:
        if wanted == "view":
            raise
        raise NoSuchTableError(f"Table or view does not exist: {identifier}") from None
    return EntityType.VIEW


async def listing(
    services: Services, namespace: Resource, tables: Sequence[str] = (), views: Sequence[str] = ()
) -> review.Listing:
    """The namespace, its tables and views in the registry, and `tables` / `views` named besides
    them (each once); at most `review.MAX_OBJECTS` objects."""
    warehouse = namespace.warehouse or ""
    key = Namespace.of(list(namespace.namespace)).key
    found: dict[tuple[str, bool], None] = {}
    truncated = False
    async with services.ctx.store.read() as tx:
        for kind, view in ((TABLE, False), (VIEW, True)):
            room = review.MAX_OBJECTS - len(found)
            names = await object_rows.list_objects(tx, warehouse, key, kind, None, room + 1)
            truncated = truncated or len(names) > room
            found.update(((name, view), None) for name in names[:room])
    for name, view in [*((t, False) for t in tables), *((v, True) for v in views)]:
        found[(name, view)] = None
    chosen = list(found)[: review.MAX_OBJECTS]
    truncated = truncated or len(found) > review.MAX_OBJECTS
    objects = [namespace, *(services.resources.child(namespace, name, view) for name, view in chosen)]
    return review.Listing(objects, truncated)


# -- the key store, the anonymous principal, the issuers ---------------------------------------------


async def active_keys(
    keys: ApiKeyAuthenticator, principal: str | None = None
) -> tuple[list[ApiKeyRecord], bool]:
    """The active API keys (of `principal`, a key principal's name, if given), at most
    `review.MAX_SUBJECTS`, and whether there were more."""
    now = datetime.now(UTC)
    found: list[ApiKeyRecord] = []
    after: str | None = None
    while True:
        page = await keys.list_keys(principal=principal, after=after, limit=_KEY_PAGE)
        found.extend(record for record in page if record.is_active(now))
        if len(found) > review.MAX_SUBJECTS:
            return found[: review.MAX_SUBJECTS], True
        if len(page) < _KEY_PAGE:
            return found, False
        after = page[-1].key_id


def _key_principal(record: ApiKeyRecord) -> Principal:
    return Principal(record.principal_id, record.kind, frozenset(record.groups), AuthMethod.API_KEY)


def not_enumerated(services: Services) -> list[dict[str, Any]]:
    """The principals the gateway cannot list: every subject of each configured OIDC issuer, with
    what the issuer may assert as groups: always `groups` (`<alias>/<group>`), and bare only
    `bare_groups` (`*`: every unprivileged name) and `privileged_groups`."""
    return [
        {
            "principals": f"oidc:{issuer.namespace}/{issuer.principal_prefix}*",
            "kind": issuer.principal_kind.value,
            "groups_claim": issuer.groups_claim,
            "groups": scoped_group(issuer.namespace, "*"),
            "bare_groups": list(issuer.groups_allowed),
            "privileged_groups": list(issuer.privileged_groups_allowed),
            "reviewed_as": "the groups their tokens carry (group members), and the conditions",
        }
        for issuer in services.settings.oidc.issuers
    ]


# -- the reviews ------------------------------------------------------------------------------------


async def resource_review(
    sources: ReviewSources,
    target: Resource,
    actions: Sequence[str],
    context: review.ReviewContext,
    stated: Sequence[review.KnownPrincipal] = (),
) -> dict[str, Any]:
    """Who may do each of `actions` on `target` (`review.review_resource`): the active keys'
    principals, the anonymous principal, `stated` principals and a member of each group, decided;
    the residual conditions; and the issuers whose subjects cannot be listed (`not_enumerated`)."""
    engine = sources.engine
    warehouses = binding.warehouse_locations(sources.services.settings)
    records, keys_truncated = await active_keys(sources.keys)
    known = [review.KnownPrincipal(_key_principal(r), review.SubjectSource.API_KEY) for r in records]
    if sources.anonymous is not None:
        known.append(review.KnownPrincipal(sources.anonymous, review.SubjectSource.ANONYMOUS))
    known.extend(stated)

    def decide() -> dict[str, Any]:
        audience = review.known_subjects(known, review.residual_groups(engine, target, actions))
        if keys_truncated:
            audience = review.Audience(audience.subjects, truncated=True)
        locations = engine.active.locations if engine.active is not None else {}
        reviewed = review.review_resource(engine, target, actions, audience, context)
        document = reviewed.to_json(locations)
        findings = binding.resource_findings(engine, reviewed, warehouses)
        document["restrictions_not_binding"] = binding.as_json(findings)
        return document

    # Thousands of decisions: made off the event loop (the engine is thread-safe).
    document = await asyncio.to_thread(decide)
    document["not_enumerated"] = not_enumerated(sources.services)
    return document


async def reviewed_principal(
    sources: ReviewSources,
    principal_id: str,
    kind: PrincipalKind,
    groups: Sequence[str],
    context: review.ReviewContext,
) -> tuple[Principal, str]:
    """The principal to review and where its groups come from: `groups` if any, else its active
    API keys' (a `key:` principal whose keys agree), else none. Raises `ReviewInputError` when its
    keys disagree on kind or groups."""
    if groups or not principal_id.startswith(KEY_NAMESPACE):
        source = "request" if groups else "none"
        return Principal(principal_id, kind, frozenset(groups), context.auth_method), source
    records, _ = await active_keys(sources.keys, principal_id.removeprefix(KEY_NAMESPACE))
    shapes = {(r.kind, frozenset(r.groups)) for r in records}
    if len(shapes) > 1:
        raise ReviewInputError(f"the active keys of {principal_id} differ in kind or groups; name the groups")
    if not shapes:
        return Principal(principal_id, kind, frozenset(), context.auth_method), "none"
    key_kind, key_groups = shapes.pop()
    return Principal(principal_id, key_kind, key_groups, context.auth_method), "api-key"


async def principal_review(
    sources: ReviewSources,
    who: Principal,
    groups_from: str,
    objects: review.Listing,
    context: review.ReviewContext,
) -> dict[str, Any]:
    """What `who` may do on each of `objects` (`review.review_principal`), decided off the loop."""
    engine = sources.engine
    warehouses = binding.warehouse_locations(sources.services.settings)

    def decide() -> dict[str, Any]:
        reviewed = review.review_principal(engine, who, objects, context, groups_from=groups_from)
        document = reviewed.to_json()
        findings = binding.principal_findings(engine, reviewed, warehouses)
        document["restrictions_not_binding"] = binding.as_json(findings)
        return document

    return await asyncio.to_thread(decide)
