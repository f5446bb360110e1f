"""Idempotency-Key handling for mutations.

A successful mutation records its response in the same database transaction that makes its change
(`Recorder.record`), so a change and its record exist together or not at all: a retry after a crash
either replays the recorded response or runs the operation for the first time, never twice.
Deterministic failures (4xx) are recorded after the fact and replayed too; 5xx are never recorded,
so they can be retried.

A record is bound to the caller and the request. It is stored under a keyed hash of (caller,
Idempotency-Key), so the same key from another caller names another record: that caller's
request runs as its own and never sees the first caller's response. Beside it is a keyed hash of
the request (method, path, query, body as the gateway gives it): the same caller repeating a key
with another operation or another request is refused (IdempotencyKeyReusedError, 422), never
replayed. Both hashes use a key derived from the registry key, so every instance agrees on them
and a database reader cannot test guesses of a key or a body.

Recorded payloads are sealed under the registry's data key, bound to the record's name: a
response holds table metadata, which the registry never stores in the clear.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson

from cedarberg.catalog import errors
from cedarberg.catalog.sealing import KeyPurpose, ObjectKey, Sealer
from cedarberg.catalog.store import idempotency as idempotency_rows
from cedarberg.catalog.store.idempotency import DuplicateKeyError, IdempotencyRecord
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.server_writes import PendingRecord
from cedarberg.catalog.store.tx import StoreTx

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


def record_name(key: bytes, caller: str, idempotency_key: str) -> str:
    """The stored name of a caller's Idempotency-Key: the first 128 bits of an HMAC-SHA256 of
    both, shaped as a UUID (the column's format)."""
    # A JSON array is unambiguous whatever the caller binding contains.
    digest = hmac.new(key, b"record\x00" + orjson.dumps([caller, idempotency_key]), hashlib.sha256)
    return str(uuid.UUID(bytes=digest.digest()[:16]))


def request_hash(key: bytes, request: bytes) -> str:
    """A keyed hash of the request a record answers (hex)."""
    return hmac.new(key, b"request\x00" + request, hashlib.sha256).hexdigest()


@dataclass
class Recorder:
    """Handed to a mutation so it can record its response inside its own transaction."""

    key: str  # the record's name (see `record_name`), not the client's Idempotency-Key
    operation: str
    request_hash: str
    expired_before: float
    sealing_key: ObjectKey = field(repr=False)
    recorded: bool = field(default=False)

    def seal(self, payload: object) -> bytes:
        return Sealer.seal_document(self.sealing_key, self.key, payload)

    async def record(self, tx: StoreTx, body: Body) -> None:
        await idempotency_rows.put_idempotency(
            tx,
            self.key,
            self.outcome("ok", None if body is None else self.seal(body.decode())),
            self.expired_before,
        )
        self.recorded = True

    def pending(self, body: Body) -> PendingRecord:
        """What `record` writes, for a write that records it in its own single statement
        (catalog.store.server_writes); the caller sets `recorded` once that statement landed."""
        sealed = None if body is None else self.seal(body.decode())
        return PendingRecord(self.key, self.outcome("ok", sealed), self.expired_before)

    def outcome(self, outcome: str, sealed: bytes | None) -> IdempotencyRecord:
        """The record of a final `outcome` with its `sealed` payload, created now."""
        return IdempotencyRecord(self.operation, self.request_hash, outcome, sealed, time.time())


Mutation = Callable[[Recorder | None], Awaitable[Body]]


class Idempotency:
    def __init__(self, store: Store, sealer: Sealer, lifetime_seconds: int) -> None:
        self._store = store
        self._sealer = sealer
        self.lifetime_seconds = lifetime_seconds

    async def run(
        self, key: str | None, operation: str, mutation: Mutation, *, caller: str, request: bytes
    ) -> Body:
        """Run `mutation` once per (caller, key); replay the recorded outcome when the same caller
        repeats the key with the same request.

        `caller` is an opaque binding of who asks (the gateway's principal binding); `request`
        the request's canonical bytes. Raises InvalidRequestError for a malformed key,
        IdempotencyKeyReusedError when the caller used the key for another operation or request,
        and whatever the mutation (or a replayed final error) raises."""
        if key is None:
            return await mutation(None)
        if not _UUID.match(key):
            raise errors.InvalidRequestError("Idempotency-Key must be a UUID")
        binding_key = await self._sealer.derived_key(self._store, KeyPurpose.IDEMPOTENCY)
        name = record_name(binding_key, caller, key)
        digest = request_hash(binding_key, request)
        replayed = await self._replay(name, operation, digest)
        if replayed is not None:
            return replayed[0]
        sealing_key = await self._sealer.registry_key(self._store)
        recorder = Recorder(name, operation, digest, time.time() - self.lifetime_seconds, sealing_key)
        try:
            body = await mutation(recorder)
        except DuplicateKeyError:
            replayed = await self._replay(name, operation, digest)
            if replayed is None:
                raise errors.CommitStateUnknownError("idempotency record vanished") from None
            return replayed[0]
        except tuple(_FINAL_ERRORS.values()) as err:
            # A concurrent request with the same key may have won; its outcome is the answer.
            replayed = await self._replay(name, operation, digest)
            if replayed is not None:
                return replayed[0]
            if not await self._record_outside(
                recorder, "error", {"class": type(err).__name__, "message": str(err)}
            ):
                # It won after that look (its commit landed while this one failed on its change,
                # e.g. a retried rename finding its source gone): its outcome is still the answer.
                replayed = await self._replay(name, operation, digest)
                if replayed is not None:
                    return replayed[0]
            raise
        if not recorder.recorded:
            await self._record_outside(recorder, "ok", None if body is None else body.decode())
        return body

    async def _record_outside(self, recorder: Recorder, outcome: str, payload: object) -> bool:
        """Record `outcome` in a transaction of its own: False if a concurrent request with the
        same key recorded first (the record is then theirs)."""
        sealed = None if payload is None else recorder.seal(payload)
        try:
            async with self._store.write() as tx:
                await idempotency_rows.put_idempotency(
                    tx, recorder.key, recorder.outcome(outcome, sealed), recorder.expired_before
                )
        except DuplicateKeyError:
            return False
        return True

    async def _replay(self, key: str, operation: str, digest: str) -> tuple[Body] | None:
        """The recorded outcome as a 1-tuple (body), or None. Re-raises a recorded error; raises
        IdempotencyKeyReusedError if the record answered another operation or request."""
        async with self._store.read() as tx:
            record = await idempotency_rows.get_idempotency(
                tx, key, not_before=time.time() - self.lifetime_seconds
            )
        if record is None:
            return None
        if record.operation != operation:
            raise errors.IdempotencyKeyReusedError(
                "Idempotency-Key was already used for a different operation"
            )
        if record.request_hash is None or not hmac.compare_digest(record.request_hash, digest):
            raise errors.IdempotencyKeyReusedError("Idempotency-Key was already used for a different request")
        payload = (
            None
            if record.payload is None
            else Sealer.open_document(await self._sealer.registry_key(self._store), key, record.payload)
        )
        if record.outcome == "error" and isinstance(payload, dict):
            error_class = _FINAL_ERRORS.get(str(payload.get("class")), errors.InvalidRequestError)
            raise error_class(str(payload.get("message", "")))
        return (None if payload is None else str(payload).encode(),)
