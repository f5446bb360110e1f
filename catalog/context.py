"""What every catalog operation needs: the registry, the warehouses and the shared limits.

The context names the services it carries by what its users call on them where the concrete
class sits above the operations (`IdempotentRuns`: catalog.idempotency imports the store's
one-statement writes), so that every operation module can import the context without importing
those services' dependencies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cedarberg.catalog import locations
from cedarberg.catalog.commit_locks import CommitLocks
from cedarberg.catalog.errors import InvalidRequestError, NoSuchWarehouseError
from cedarberg.catalog.load_results import LoadResultCache
from cedarberg.catalog.parsed_metadata import ParsedMetadataCache
from cedarberg.catalog.sealing import KeyPurpose, Sealer
from cedarberg.catalog.store.pool import Store

# The one answer for a warehouse that is not there, worded as the gateway's answer for one the
# caller may not see, so that the two cannot be told apart.
NO_SUCH_WAREHOUSE = "Warehouse does not exist"


class IdempotentRuns(Protocol):
    """Runs a mutation once per (caller, Idempotency-Key) and replays its recorded outcome
    (catalog.idempotency.Idempotency)."""

    @property
    def lifetime_seconds(self) -> int:
        """How long an outcome is replayed."""
        ...

    async def run(
        self,
        key: str | None,
        operation: str,
        mutation: Callable[[Any], Awaitable[bytes | None]],
        *,
        caller: str,
        request: bytes,
    ) -> bytes | None:
        """The mutation's outcome, run now or replayed (see Idempotency.run)."""
        ...


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
    max_metadata_bytes: int = 64 * 1024 * 1024
    commit_retries: int = 4


@dataclass(frozen=True, slots=True)
class CatalogContext:
    store: Store
    sealer: Sealer
    warehouses: dict[str, Warehouse]
    default_warehouse: str
    idempotency: IdempotentRuns
    limits: Limits
    load_results: LoadResultCache = field(default_factory=lambda: LoadResultCache(max_bytes=0))
    parsed_metadata: ParsedMetadataCache = field(default_factory=ParsedMetadataCache)
    commit_locks: CommitLocks = field(default_factory=CommitLocks)

    def warehouse(self, name: str | None) -> Warehouse:
        """The named warehouse, or the default one for None. Raises NoSuchWarehouseError."""
        found = self.warehouses.get(self.default_warehouse if name is None else name)
        if found is None:
            raise NoSuchWarehouseError(NO_SUCH_WAREHOUSE)
        return found

    def find_warehouse(self, named: str | None) -> Warehouse:
        """The warehouse a client names by its name or by its location (in any spelling
        `locations.normalize` accepts); the default one when it names none (None or empty).
        Names are matched exactly and first. Raises NoSuchWarehouseError for anything else.

        The one resolution of a `warehouse` value: the request is decided, audited and answered
        on the warehouse this returns, never on the value as sent."""
        if not named:
            return self.warehouse(None)
        found = self.warehouses.get(named)
        if found is not None:
            return found
        try:
            location = locations.normalize(named)
        except InvalidRequestError:
            raise NoSuchWarehouseError(NO_SUCH_WAREHOUSE) from None
        for warehouse in self.warehouses.values():
            if warehouse.location == location:
                return warehouse
        raise NoSuchWarehouseError(NO_SUCH_WAREHOUSE)

    async def page_key(self) -> bytes:
        """The deployment's page-token key (shared by every instance; cached after first use).
        Raises KeyServiceUnavailableError if the KMS cannot unwrap the registry key."""
        return await self.sealer.derived_key(self.store, KeyPurpose.PAGE_TOKENS)
