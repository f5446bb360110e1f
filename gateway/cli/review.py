"""`cedarberg policies review` with the deployment's settings, or offline.

Which form runs (the review itself: `gateway.authz.review_cli`):

- `--offline`: offline, whatever registry exists (with `--data-dir` or `--store-url` it is a usage
  error: exit 2); the settings (`--config`, `CEDARBERG_*`) still choose the policy directory;
- settings named — `--config`, `--data-dir`, `--store-url` or any `CEDARBERG_*` variable — are
  loaded exactly as `cedarberg serve` loads them (`gateway.cli.deployment`: file, then variables,
  then flags) and the review reads that deployment;
- nothing named: the default settings, as `keys list` would use them (`./.cedarberg`), if their
  registry exists; else offline, as before settings existed.

With settings the review is `GET /admin/v1/review`'s, made by the same functions
(`gateway.web.review_sources`) on the same inputs: the key store's active keys, the configured
anonymous principal and OIDC issuers, the registry's objects, grants and listings, and the
configured policy directory (`--dir` reviews another one against the same deployment). The
registry is read, never created or migrated: a missing or outdated one is exit 1, as is an object
that does not exist. Nothing secret is printed (the review holds no key material).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from cedarberg.catalog.errors import CatalogError
from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.key_store import connect_key_store
from cedarberg.gateway.authn.principal import PrincipalKind
from cedarberg.gateway.authz import naming, review
from cedarberg.gateway.authz.cli import load_engine, review_offline
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import EntityType, parse_path
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.review_cli import emit, review_context, stated_subjects
from cedarberg.gateway.cli.deployment import (
    OFFLINE_CONFLICT,
    deployment_found,
    names_a_store,
    offline_settings,
    policy_dir,
    registry,
)
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.web.review_sources import (
    ReviewSources,
    listing,
    principal_review,
    resource_review,
    reviewed_principal,
    reviewed_resource,
)
from cedarberg.gateway.web.security import configured_anonymous
from cedarberg.kms.errors import KmsError

PROG = "cedarberg policies review"
FROM_DEPLOYMENT = "the deployment's (active API keys, anonymous principal) and any --subject"


def run_review_command(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run `policies review` in the form the settings choose (see the module); the exit code."""
    environ = os.environ if environ is None else environ
    out = out or sys.stdout
    err = err or sys.stderr
    if args.offline and names_a_store(args):
        print(f"{PROG}: {OFFLINE_CONFLICT}", file=err)
        return 2
    settings = offline_settings(args, environ, err)
    if settings is None:
        return 2
    directory = policy_dir(args, settings)
    if args.offline or not deployment_found(args, environ, settings):
        return review_offline(args, directory, out, err)
    engine = load_engine(directory, err)
    if engine is None:
        return 2
    try:
        document = asyncio.run(_review(settings, engine, args))
    except (ResourceError, ValueError) as error:
        print(f"{PROG}: {error}", file=err)
        return 2
    except (CatalogError, KmsError) as error:
        print(f"{PROG}: {error}", file=err)
        return 1
    except OSError as error:
        print(f"{PROG}: cannot read the deployment: {error.strerror or error}", file=err)
        return 1
    emit(document, args, out, FROM_DEPLOYMENT)
    return 0


async def _review(settings: Settings, engine: PolicyEngine, args: argparse.Namespace) -> dict[str, Any]:
    """The review of `args` on the deployment of `settings`, as the endpoint makes it."""
    context = review_context(args)
    stated = _stated_grants(args.resource, args.property)
    async with registry(settings) as services:
        key_store = connect_key_store(settings.effective_store_url())
        try:
            keys = ApiKeyAuthenticator(key_store, settings.api_keys)
            sources = ReviewSources(services, keys, engine, configured_anonymous(settings))
            kind_wanted = "view" if args.is_view else None  # else whichever exists, as the endpoint
            target = await reviewed_resource(services, args.resource, kind_wanted, stated)
            if args.principal is None:
                actions = review.chosen_actions(target.kind, args.action)
                return await resource_review(sources, target, actions, context, stated_subjects(args.subject))
            if target.kind is not EntityType.NAMESPACE:
                raise ResourceError("--principal reviews a namespace: --resource WAREHOUSE/NS")
            who, groups_from = await reviewed_principal(
                sources, args.principal, PrincipalKind(args.kind), args.group, context
            )
            objects = await listing(services, target, args.table, args.view)
            return await principal_review(sources, who, groups_from, objects, context)
        finally:
            await key_store.close()


def _stated_grants(path: str, properties: list[str]) -> naming.StatedGrants | None:
    """The `--property` grants over the registry's, or None when none is stated."""
    if not properties:
        return None
    warehouse, levels, _name = parse_path(path)
    return naming.stated_grants(warehouse, levels, properties)
