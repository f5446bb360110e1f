"""An Idempotency-Key retry that runs while its original is still landing (catalog.idempotency):
the original's outcome is the answer, never the failure the retry met on the original's change.

The crash run found it: a rename's worker died after handing its transaction to the SQLite
registry writer; the client's retry found the source gone (the original's change), failed, and
recorded nothing because the original's record landed first: it answered 404 for a rename that
had happened. The retry now replays the record that beat its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from cedarberg.catalog.errors import AlreadyExistsError
from cedarberg.catalog.idempotency import Body, Recorder
from cedarberg.catalog.identifiers import Namespace
from cedarberg.catalog.namespaces import NamespaceService
from tests.support.catalogs import RacedStore, catalog_context

NAMESPACE = Namespace.of(["ns"])
OPERATION = "createNamespace"
CALLER = "alice"
REQUEST = b'{"namespace": ["ns"]}'


async def test_a_retry_that_fails_on_its_originals_change_replays_the_original(
    tmp_path: Path, registry_url: str
) -> None:
    """The attack on the answer: the retry looks for a record (none yet), meets the original's
    change (the name taken) and fails; the original lands with its record just before the retry
    records its failure. The client is told what the original did (200 with its body), not 409."""
    async with catalog_context(tmp_path, url=registry_url, store_class=RacedStore) as ctx:
        key = str(uuid.uuid4())
        service = NamespaceService(ctx)

        async def original(rec: Recorder | None) -> Body:
            return await service.create(None, NAMESPACE, {"owner": "alice"}, rec)

        landed: list[Body] = []

        async def original_lands() -> None:
            landed.append(await ctx.idempotency.run(key, OPERATION, original, caller=CALLER, request=REQUEST))

        async def retry(_rec: Recorder | None) -> Body:
            # What the retry meets: the original's namespace, and (the next write being the
            # retry's record of its failure) the original landing with its record first.
            assert isinstance(ctx.store, RacedStore)
            ctx.store.before_next_write = original_lands
            raise AlreadyExistsError("Namespace already exists: ns")

        answer = await ctx.idempotency.run(key, OPERATION, retry, caller=CALLER, request=REQUEST)

        assert landed
        assert answer == landed[0]
        assert answer is not None
        assert orjson.loads(answer)["namespace"] == ["ns"]
        again = await ctx.idempotency.run(key, OPERATION, retry, caller=CALLER, request=REQUEST)
        assert again == answer  # the record is the original's, replayed from now on


async def test_a_failure_with_nobody_racing_it_is_recorded_and_replayed(
    tmp_path: Path, registry_url: str
) -> None:
    """The control: a request that fails on its own (the name was taken before it) answers its
    failure and records it, so its retry answers the same failure."""
    async with catalog_context(tmp_path, url=registry_url, store_class=RacedStore) as ctx:
        service = NamespaceService(ctx)
        await service.create(None, NAMESPACE, {}, None)
        key = str(uuid.uuid4())

        async def create(rec: Recorder | None) -> Body:
            return await service.create(None, NAMESPACE, {}, rec)

        for _ in range(2):
            with pytest.raises(AlreadyExistsError, match="Namespace already exists: ns"):
                await ctx.idempotency.run(key, OPERATION, create, caller=CALLER, request=REQUEST)
