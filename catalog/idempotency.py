"""Idempotency-Key handling for mutations.

A successful mutation records its response in the same database transaction that makes its change
(`Recorder.record`), so a change and its record exist together or not at all: a retry after a crash
either replays the recorded response or runs the operation for the first time, never twice.
Deterministic failures (4xx) are recorded after the fact and replayed too; 5xx are never recorded,
so they can be retried. A key reused for a different operation is refused.

Recorded payloads are sealed under the registry's data key, bound to the Idempotency-Key: a
response holds table metadata, which the registry never stores in the clear.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from catalog import errors
from catalog.sealing import ObjectKey, Sealer
from catalog.store.sql import DuplicateKeyError, Store, StoreTx

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

# Errors whose outcome is deterministic and therefore recorded and replayed.
_FINAL_ERRORS: dict[str, type[errors.CatalogError]] = {
    cls.__name__: cls
    for cls in (
        errors.InvalidRequestError,
        errors.LocationNotAllowedError,
        errors.UnprocessableError,
        errors.NoSuchWarehouseError,
        errors.NoSuchNamespaceError,
        errors.NoSuchTableError,
        errors.NoSuchViewError,
        errors.AlreadyExistsError,
        errors.NamespaceNotEmptyError,
        errors.CommitFailedError,
    )
}

Body = bytes | None


@dataclass
class Recorder:
    """Handed to a mutation so it can record its response inside its own transaction."""

    key: str
    operation: str
    expired_before: float
    sealing_key: ObjectKey = field(repr=False)
    recorded: bool = field(default=False)

    def seal(self, payload: object) -> bytes:
        return Sealer.seal_document(self.sealing_key, self.key, payload)

    async def record(self, tx: StoreTx, body: Body) -> None:
        await tx.put_idempotency(
            self.key,
            self.operation,
            "ok",
            None if body is None else self.seal(body.decode()),
            self.expired_before,
        )
        self.recorded = True


Mutation = Callable[[Recorder | None], Awaitable[Body]]


class Idempotency:
    def __init__(self, store: Store, sealer: Sealer, lifetime_seconds: int) -> None:
        self._store = store
        self._sealer = sealer
        self.lifetime_seconds = lifetime_seconds

    async def run(self, key: str | None, operation: str, mutation: Mutation) -> Body:
        """Run `mutation` once per key; replay the recorded outcome for a repeated key."""
        if key is None:
            return await mutation(None)
        if not _UUID.match(key):
            raise errors.InvalidRequestError("Idempotency-Key must be a UUID")
        replayed = await self._replay(key, operation)
        if replayed is not None:
            return replayed[0]
        sealing_key = await self._sealer.registry_key(self._store)
        recorder = Recorder(key, operation, time.time() - self.lifetime_seconds, sealing_key)
        try:
            body = await mutation(recorder)
        except DuplicateKeyError:
            replayed = await self._replay(key, operation)
            if replayed is None:
                raise errors.CommitStateUnknownError("idempotency record vanished") from None
            return replayed[0]
        except tuple(_FINAL_ERRORS.values()) as err:
            # A concurrent request with the same key may have won; its outcome is the answer.
            replayed = await self._replay(key, operation)
            if replayed is not None:
                return replayed[0]
            await self._record_outside(recorder, "error", {"class": type(err).__name__, "message": str(err)})
            raise
        if not recorder.recorded:
            await self._record_outside(recorder, "ok", None if body is None else body.decode())
        return body

    async def _record_outside(self, recorder: Recorder, outcome: str, payload: object) -> None:
        sealed = None if payload is None else recorder.seal(payload)
        try:
            async with self._store.write() as tx:
                await tx.put_idempotency(
                    recorder.key, recorder.operation, outcome, sealed, recorder.expired_before
                )
        except DuplicateKeyError:
            pass  # a concurrent duplicate recorded first; both outcomes describe the same operation

    async def _replay(self, key: str, operation: str) -> tuple[Body] | None:
        """The recorded outcome as a 1-tuple (body), or None. Re-raises a recorded error."""
        async with self._store.read() as tx:
            record = await tx.get_idempotency(key, not_before=time.time() - self.lifetime_seconds)
        if record is None:
            return None
        if record.operation != operation:
            raise errors.IdempotencyKeyReusedError(
                "Idempotency-Key was already used for a different operation"
            )
        payload = (
            None
            if record.payload is None
            else Sealer.open_document(await self._sealer.registry_key(self._store), key, record.payload)
        )
        if record.outcome == "error" and isinstance(payload, dict):
            error_class = _FINAL_ERRORS.get(str(payload.get("class")), errors.InvalidRequestError)
            raise error_class(str(payload.get("message", "")))
        return (None if payload is None else str(payload).encode(),)
