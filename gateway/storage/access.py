"""What the gateway knows of each S3 warehouse's storage: its S3 settings and, when configured, the
credential vendor and the request signer. Built once per server process from the settings."""

from __future__ import annotations

from dataclasses import dataclass

from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.config.storage import S3Settings
from cedarberg.gateway.storage.sign_scope import Endpoint
from cedarberg.gateway.storage.signing import RequestSigner, endpoint_of
from cedarberg.gateway.storage.vending import CredentialVendor


@dataclass(frozen=True, slots=True)
class WarehouseStorage:
    name: str
    location: str
    s3: S3Settings | None
    vendor: CredentialVendor | None
    signer: RequestSigner
    endpoint: Endpoint


class StorageAccess:
    def __init__(self, settings: Settings) -> None:
        self._warehouses = {
            name: WarehouseStorage(
                name,
                warehouse.location,
                warehouse.s3,
                None if warehouse.vending is None else CredentialVendor(warehouse.s3, warehouse.vending),
                RequestSigner(warehouse.s3),
                endpoint_of(warehouse.s3),
            )
            for name, warehouse in settings.effective_warehouses().items()
            if warehouse.location.startswith("s3://")
        }

    def s3_warehouse(self, name: str) -> WarehouseStorage | None:
        """The storage of warehouse `name` if it is an S3 warehouse, else None."""
        return self._warehouses.get(name)
