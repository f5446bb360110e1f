"""`cedarberg policies ...` on the deployment: each command with the settings `serve` would use.

Every `policies` command loads the settings as `cedarberg serve` does (`gateway.cli.deployment`:
`--config`, then `CEDARBERG_*` variables, then `--data-dir` / `--store-url`; a bad setting is
serve's message and exit 2) and reads the configured policy directory (`authz.policy_dir`; the
bundled policies when nothing configures one) unless a directory is given on the command line.

`explain` decides with the deployment's live grants, as the gateway does: the namespace properties
in its registry (`gateway.web.resources.RegistryGrants`, the pipeline's and the admin explain
endpoint's grant source), with `--property` values replacing the registry's value of that key on
that namespace. Which grants, in the order `policies review` chooses its form
(`gateway.cli.review`):

- `--offline`: the `--property` grants alone (with `--data-dir` / `--store-url`: usage error, 2);
- settings named (`--config`, `--data-dir`, `--store-url`, any `CEDARBERG_*` variable) or a
  registry at the default `./.cedarberg`: that registry's. If it cannot be read (missing,
  outdated, unreachable) explain says so and exits 3: it never decides without the grants;
- neither: the `--property` grants alone, and the output says that no deployment was found.

The output ends with the policy directory and where the grants came from (the registry's URL
without its password).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from cedarberg.gateway.authz import binding
from cedarberg.gateway.authz.cli import (
    ExplainQuery,
    GrantReader,
    GrantsUnavailableError,
    ResourceSpec,
    StatedGrantReader,
    explain,
    resolve_resource,
    run_fixture_tests,
    validate,
)
from cedarberg.gateway.authz.entities import Resource
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.naming import GrantSource, StatedGrants
from cedarberg.gateway.cli.deployment import (
    OFFLINE_CONFLICT,
    deployment_found,
    describe_store,
    names_a_store,
    offline_settings,
    policy_dir,
    registry,
)
from cedarberg.gateway.config.settings import Settings

PROG = "cedarberg"


def run_policies_command(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run `policies validate|test|explain` (parsed by `gateway.authz.cli.add_policy_commands`)
    with the deployment's settings (see the module); returns the exit code. (`policies review`:
    `gateway.cli.review`.)"""
    environ = os.environ if environ is None else environ
    out = out or sys.stdout
    err = err or sys.stderr
    if args.policies_command == "explain" and args.offline and names_a_store(args):
        print(f"{PROG} policies explain: {OFFLINE_CONFLICT}", file=err)
        return 2
    settings = offline_settings(args, environ, err)
    if settings is None:
        return 2
    directory = policy_dir(args, settings)
    if args.policies_command == "validate":
        return validate(directory, out, err, binding.warehouse_locations(settings))
    if args.policies_command == "test":
        return run_fixture_tests(directory, out, err)
    return explain(directory, ExplainQuery.from_args(args), out, err, _grant_reader(args, environ, settings))


def _grant_reader(args: argparse.Namespace, environ: Mapping[str, str], settings: Settings) -> GrantReader:
    if args.offline:
        return StatedGrantReader("--offline", binding.warehouse_locations(settings))
    if not deployment_found(args, environ, settings):
        store = describe_store(settings.effective_store_url())
        why = f"no deployment found: no settings named and no registry at {store}"
        return StatedGrantReader(why, binding.warehouse_locations(settings))
    return RegistryGrantReader(settings)


@dataclass(frozen=True, slots=True)
class RegistryGrantReader:
    """The live grants of the deployment of `settings`: its registry's namespace properties."""

    settings: Settings

    @property
    def locations(self) -> Mapping[str, str]:
        return binding.warehouse_locations(self.settings)

    @property
    def description(self) -> str:
        store = describe_store(self.settings.effective_store_url())
        return f"live, from the registry at {store} (a --property value replaces the registry's)"

    async def resource(self, action: str, spec: ResourceSpec, owner: str) -> Resource:
        """The resource with the registry's grants. Raises `ResourceError` for bad input or a
        warehouse the deployment does not have, `GrantsUnavailableError` when the registry cannot
        be read."""
        from cedarberg.catalog.errors import CatalogError
        from cedarberg.gateway.web.resources import RegistryGrants
        from cedarberg.kms.errors import KmsError

        try:
            async with registry(self.settings) as services:
                warehouses = services.ctx.warehouses

                def grants_over(warehouse: str, stated: StatedGrants | None) -> GrantSource:
                    if warehouse not in warehouses:
                        known = ", ".join(sorted(warehouses))
                        raise ResourceError(f"warehouse does not exist: {warehouse} (configured: {known})")
                    return RegistryGrants(services, fresh=True, stated=stated)

                return await resolve_resource(action, spec, owner, grants_over)
        except (CatalogError, KmsError, OSError) as error:
            store = describe_store(self.settings.effective_store_url())
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            raise GrantsUnavailableError(
                f"cannot read the live grants from the registry at {store}: {reason} "
                "(--data-dir, --store-url or --config name the deployment's registry; --offline "
                "decides on the policies and --property grants alone)"
            ) from error
