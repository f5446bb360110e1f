"""`ApiKeyRecord`: what may be shown about an API key, and how a row of `api_keys` becomes one.

Apart from the key store (`key_store`, on the registry's drivers) so that reading keys without SQLAlchemy
(`key_listing`, for `cedarberg keys list`) builds exactly the same records.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cedarberg.gateway.authn.principal import PrincipalKind, key_principal_id
from cedarberg.gateway.authn.stored_values import json_value, utc

__all__ = ["ApiKeyRecord", "record_from_row", "utc"]


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """What may be shown about a key: everything except its secret and the secret's hash."""

    key_id: str
    principal: str
    kind: PrincipalKind
    groups: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    rotated_at: datetime | None
    description: str
    generation: int = 0  # rotations plus revocation so far; tokens of older generations are void
    # End of the last rotation's overlap: until then the previous secret, and gateway tokens of
    # generation - 1, still work. None (or past): no overlap.
    previous_secret_until: datetime | None = None

    @property
    def principal_id(self) -> str:
        """The namespaced id of the principal the key authenticates as (`key:<principal>`)."""
        return key_principal_id(self.principal)

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def is_active(self, now: datetime) -> bool:
        return self.revoked_at is None and not self.is_expired(now)

    def in_overlap(self, now: datetime) -> bool:
        """Whether the previous secret (and tokens of generation - 1) still work at `now`."""
        return (
            self.revoked_at is None
            and self.previous_secret_until is not None
            and now < self.previous_secret_until
        )

    @property
    def summary(self) -> str:
        """Whom the key is for, in words: `a service key for etl`, `a personal key for dana`."""
        kind = "service" if self.kind is PrincipalKind.SERVICE else "personal"
        return f"a {kind} key for {self.principal}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready view for the admin API and the CLI (ISO 8601 UTC timestamps)."""

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "id": self.key_id,
            "principal": self.principal,
            "kind": self.kind.value,
            "summary": self.summary,
            "groups": list(self.groups),
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "revoked_at": iso(self.revoked_at),
            "rotated_at": iso(self.rotated_at),
            "previous_secret_expires_at": iso(self.previous_secret_until),
            "description": self.description,
        }


def record_from_row(row: Any) -> ApiKeyRecord:
    """The record of an `api_keys` row (attributes named as the columns; timestamps as datetimes
    or their stored text, the groups as a list or its JSON text: see `stored_values`); its
    `secret_hash`, if any, is left out."""
    created_at = utc(row.created_at)
    assert created_at is not None  # NOT NULL column
    return ApiKeyRecord(
        key_id=row.id,
        principal=row.principal,
        kind=PrincipalKind(row.kind),
        groups=tuple(json_value(row.groups)),
        created_at=created_at,
        expires_at=utc(row.expires_at),
        revoked_at=utc(row.revoked_at),
        rotated_at=utc(row.rotated_at),
        description=row.description,
        generation=int(row.generation),
        previous_secret_until=utc(row.previous_secret_until),
    )
