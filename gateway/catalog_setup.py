"""The catalog the settings describe: the registry, the key ring and the warehouses.

Opened by the server (`gateway.web.app`, once per worker) and by the CLI commands that work on the
registry directly (`gateway.cli.catalog`, `gateway.cli.deployment`); it knows nothing of HTTP, so
a command that opens the catalog does not import the web application and its routes.
"""

from __future__ import annotations

from cedarberg.catalog import fileio
from cedarberg.catalog.context import CatalogContext, Limits, Warehouse
from cedarberg.catalog.idempotency import Idempotency
from cedarberg.catalog.load_results import LoadResultCache
from cedarberg.catalog.parsed_metadata import ParsedMetadataCache
from cedarberg.catalog.sealing import Sealer
from cedarberg.catalog.store.cache import RegistryCache
from cedarberg.catalog.store.connect import open_store
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.storage.properties import fileio_properties
from cedarberg.kms.keyring import KeyRing


async def open_catalog(settings: Settings, *, migrate: bool = True, serving: bool = False) -> CatalogContext:
    """The registry, the key ring and the warehouses, as the catalog services need them (also used
    by the CLI commands that work on the registry directly). `migrate=False` when the caller has
    made sure the schema is current (`cedarberg serve` prepares it before any worker starts).
    `serving`: a server process, whose reads use the read-path caches (`[cache]`)."""
    keyring = KeyRing.open(settings.kms, settings.effective_local_key_dir())
    cache = settings.cache
    try:
        store = await open_store(
            settings.effective_store_url(),
            migrate=migrate,
            pool_size=settings.store_pool_size,
            max_overflow=settings.store_max_overflow,
            cache=RegistryCache(cache.registry_ttl_seconds, cache.registry_max_entries) if serving else None,
        )
    except BaseException:
        await keyring.aclose()
        raise
    sealer = Sealer(keyring)
    for warehouse in settings.effective_warehouses().values():
        fileio.use_properties(warehouse.location, fileio_properties(warehouse.s3))
    return CatalogContext(
        store=store,
        sealer=sealer,
        warehouses={
            name: Warehouse(
                name,
                warehouse.location,
                warehouse.seal_metadata_files,
                warehouse.drop_retention_seconds,
                allow_locations_outside_namespace=warehouse.allow_locations_outside_namespace,
            )
            for name, warehouse in settings.effective_warehouses().items()
        },
        default_warehouse=settings.default_warehouse,
        idempotency=Idempotency(store, sealer, settings.idempotency_key_lifetime_seconds),
        limits=Limits(),
        load_results=_load_result_cache(settings, serving),
        parsed_metadata=_parsed_metadata_cache(settings, serving),
    )


def _load_result_cache(settings: Settings, serving: bool) -> LoadResultCache:
    """Unsealed metadata is kept no longer than the data key that unsealed it may be: with the
    data-key cache off (every read must reach the KMS) it is not kept at all, and its age is capped
    by the key cache's, so disabling a key in the KMS stops reads as soon as it did before."""
    keys = settings.kms.cache
    if not serving or not keys.enabled:
        return LoadResultCache(max_bytes=0)
    return LoadResultCache(
        settings.cache.load_result_max_bytes,
        min(settings.cache.load_result_max_age_seconds, keys.max_age_seconds),
    )


def _parsed_metadata_cache(settings: Settings, serving: bool) -> ParsedMetadataCache:
    """Parsed metadata is plaintext too: kept no longer than the data key that opened it may be,
    and not at all with the data-key cache off (as unsealed load results)."""
    keys = settings.kms.cache
    if not serving or not keys.enabled:
        return ParsedMetadataCache(max_bytes=0)
    return ParsedMetadataCache(settings.cache.parsed_metadata_max_bytes, keys.max_age_seconds)


async def close_catalog(ctx: CatalogContext) -> None:
    await ctx.store.close()
    await ctx.sealer.keyring.aclose()
