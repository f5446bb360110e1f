"""What every catalog operation needs: the registry, the warehouses and the shared limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from cedarberg.catalog.commit_locks import CommitLocks
from cedarberg.catalog.errors import NoSuchWarehouseError
from cedarberg.catalog.idempotency import Idempotency
from cedarberg.catalog.load_results import LoadResultCache
from cedarberg.catalog.parsed_metadata import ParsedMetadataCache
from cedarberg.catalog.sealing import KeyPurpose, Sealer
from cedarberg.catalog.store.sql import Store


@dataclass(frozen=True, slots=True)
class Warehouse:
    name: str
    location: str  # normalised root; every table and view location must lie below it
    seal_files: bool = True  # metadata files are sealed; drop is then a soft delete
    drop_retention_seconds: int = 7 * 24 * 3600
    # Migrations only (legacy layouts): table and view locations may lie anywhere in the warehouse,
    # outside their namespace's directory or inside it but outside an object directory (never at a
    # warehouse root, a namespace directory or over another object: catalog.roots).
    allow_locations_outside_namespace: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    default_page_size: int = 100
    max_page_size: int = 1000
    max_metadata_bytes: int = 64 * 1024 * 1024
    commit_retries: int = 4


@dataclass(frozen=True, slots=True)
class CatalogContext:
    store: Store
    sealer: Sealer
    warehouses: dict[str, Warehouse]
    default_warehouse: str
    idempotency: Idempotency
    limits: Limits
    load_results: LoadResultCache = field(default_factory=lambda: LoadResultCache(max_bytes=0))
    parsed_metadata: ParsedMetadataCache = field(default_factory=ParsedMetadataCache)
    commit_locks: CommitLocks = field(default_factory=CommitLocks)

    def warehouse(self, name: str | None) -> Warehouse:
        """The named warehouse, or the default one for None. Raises NoSuchWarehouseError."""
        found = self.warehouses.get(self.default_warehouse if name is None else name)
        if found is None:
            raise NoSuchWarehouseError(f"warehouse does not exist: {name}")
        return found

    async def page_key(self) -> bytes:
        """The deployment's page-token key (shared by every instance; cached after first use).
        Raises KeyServiceUnavailableError if the KMS cannot unwrap the registry key."""
        return await self.sealer.derived_key(self.store, KeyPurpose.PAGE_TOKENS)
