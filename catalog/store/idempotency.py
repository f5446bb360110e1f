"""Rows of `idempotency_records` (see `catalog.store.schema.idempotency_records`): the final
outcome of a request sent with an `Idempotency-Key`, kept for the key's lifetime.

A live record is never overwritten: a second insert under its key is a DuplicateKeyError (the
unique key decides between concurrent requests); only a record past its lifetime is replaced.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam as param
from sqlalchemy import delete, insert, select

from cedarberg.catalog.store.driver import IntegrityViolation
from cedarberg.catalog.store.schema import idempotency_records
from cedarberg.catalog.store.statements import Sql, values_of
from cedarberg.catalog.store.tx import StoreTx


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    operation: str
    request_hash: str | None  # None only for records written before revision 0006
    outcome: str
    payload: bytes | None
    created_at: float


class DuplicateKeyError(Exception):
    """An idempotency key was recorded by a concurrent request first."""


_idem = idempotency_records.c
_GET_IDEMPOTENCY = Sql(
    select(_idem.operation, _idem.request_hash, _idem.outcome, _idem.payload, _idem.created_at).where(
        _idem.key == param("key"), _idem.created_at >= param("not_before")
    )
)
_DELETE_EXPIRED_KEY = Sql(
    delete(idempotency_records).where(_idem.key == param("key"), _idem.created_at < param("before"))
)
_INSERT_IDEMPOTENCY = Sql(
    insert(idempotency_records).values(
        values_of(idempotency_records, "key", "operation", "request_hash", "outcome", "payload", "created_at")
    )
)
_PURGE_IDEMPOTENCY = Sql(delete(idempotency_records).where(_idem.created_at < param("before")))


async def get_idempotency(tx: StoreTx, key: str, not_before: float) -> IdempotencyRecord | None:
    """The record under `key` created at or after `not_before`, or None."""
    row = (await tx.connection.execute(_GET_IDEMPOTENCY, {"key": key, "not_before": not_before})).first()
    if row is None:
        return None
    return IdempotencyRecord(row.operation, row.request_hash, row.outcome, row.payload, row.created_at)


async def put_idempotency(tx: StoreTx, key: str, record: IdempotencyRecord, expired_before: float) -> None:
    """Record a final outcome under `key`, replacing a record created before `expired_before`.
    Raises DuplicateKeyError when a live record has the key."""
    await tx.connection.execute(_DELETE_EXPIRED_KEY, {"key": key, "before": expired_before})
    try:
        await tx.connection.execute(
            _INSERT_IDEMPOTENCY,
            {
                "key": key,
                "operation": record.operation,
                "request_hash": record.request_hash,
                "outcome": record.outcome,
                "payload": record.payload,
                "created_at": record.created_at,
            },
        )
    except IntegrityViolation:
        raise DuplicateKeyError(key) from None


async def purge_idempotency(tx: StoreTx, before: float) -> int:
    """Delete every record created before `before`; returns how many."""
    result = await tx.connection.execute(_PURGE_IDEMPOTENCY, {"before": before})
    return int(result.rowcount)
